package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
)

func citusConfig(t *testing.T) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.CitusDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func citusConn(t *testing.T, schema string) *pgx.Conn {
	t.Helper()
	cfg := citusConfig(t)
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// On a Citus coordinator migrate distributes the pool and the ledger by
// shard in CitusShards colocated shards, spread over both workers, with
// one value of the shard column per shard recorded in pooltop_meta, and
// the lease operations as distributed functions. A second run changes
// nothing, and the dry run shows the Citus calls.
func TestMigrateOnCitus(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.CitusSchema(t)
	dry, err := migrations.Apply(ctx, citusConfig(t), schema, migrations.Options{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	plan := strings.Join(dry.Statements, "\n")
	for _, want := range []string{"create_distributed_table", "colocate_with", "create_distributed_function", "force_delegation"} {
		if !strings.Contains(plan, want) {
			t.Fatalf("the dry run does not show %s:\n%s", want, plan)
		}
	}
	for range 2 {
		if _, err := migrations.Apply(ctx, citusConfig(t), schema, migrations.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	conn := citusConn(t, schema)
	var shards, nodes, colocations int
	var column string
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_dist_shard WHERE logicalrelid = 'resource_pool'::regclass)::int,
       (SELECT count(DISTINCT nodename || nodeport) FROM pg_dist_shard_placement p JOIN pg_dist_shard s USING (shardid) WHERE s.logicalrelid = 'resource_pool'::regclass)::int,
       (SELECT count(DISTINCT colocationid) FROM pg_dist_partition WHERE logicalrelid IN ('resource_pool'::regclass, 'business_ledger'::regclass))::int,
       (SELECT column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition WHERE logicalrelid = 'business_ledger'::regclass)`).Scan(&shards, &nodes, &colocations, &column); err != nil {
		t.Fatal(err)
	}
	if shards != migrations.CitusShards || nodes != 2 || colocations != 1 || column != "shard" {
		t.Fatalf("resource_pool in %d shards on %d nodes, %d colocation groups, ledger by %q; want %d shards on 2 nodes, the ledger colocated by shard",
			shards, nodes, colocations, column, migrations.CitusShards)
	}
	var values string
	if err := conn.QueryRow(ctx, `SELECT value FROM pooltop_meta WHERE key = 'citus_shards'`).Scan(&values); err != nil {
		t.Fatal(err)
	}
	var distinct int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT get_shard_id_for_distribution_column('resource_pool', v::int)) FROM unnest(string_to_array($1, ',')) AS v`, values).Scan(&distinct); err != nil {
		t.Fatal(err)
	}
	if distinct != migrations.CitusShards {
		t.Fatalf("the shard values %s fall in %d shards; want one in each of %d", values, distinct, migrations.CitusShards)
	}
	var functions int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_dist_object o JOIN pg_proc p ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
		WHERE p.pronamespace = $1::regnamespace AND o.distribution_argument_index IS NOT NULL AND o.force_delegation`, pgx.Identifier{schema}.Sanitize()).Scan(&functions); err != nil {
		t.Fatal(err)
	}
	if functions != 5 {
		t.Fatalf("%d functions delegated with the pool; want 5 (claim, commit, renew, release, reap)", functions)
	}
	st, err := migrations.Inspect(ctx, conn, schema)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Marked() || st.Distribution != "shard" || st.UnusedIndex == "" || st.PendingIndex == "" {
		t.Fatalf("after migrate: origin %q, distributed by %q, UNUSED index %q, PENDING index %q", st.Origin, st.Distribution, st.UnusedIndex, st.PendingIndex)
	}
}

// An identifier is unique in the whole cluster: its shard is derived from
// it, so a row that names another shard is refused, and so is the same
// identifier a second time.
func TestCitusIdentifierIsUniqueAcrossTheCluster(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.CitusSchema(t)
	if _, err := migrations.Apply(ctx, citusConfig(t), schema, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	conn := citusConn(t, schema)
	var values string
	if err := conn.QueryRow(ctx, `SELECT value FROM pooltop_meta WHERE key = 'citus_shards'`).Scan(&values); err != nil {
		t.Fatal(err)
	}
	a := strings.Split(values, ",")
	var slot int
	if err := conn.QueryRow(ctx, `SELECT (hashtext('x') & 2147483647) % 32`).Scan(&slot); err != nil {
		t.Fatal(err)
	}
	// Identifier x in shard value v, its id in x's slot.
	insert := func(v string) error {
		_, err := conn.Exec(ctx, `INSERT INTO resource_pool (shard, id, identifier) VALUES ($1::int, 7 * 32 + $2::int, 'x')`, v, slot)
		return err
	}
	var pgErr *pgconn.PgError
	if err := insert(a[(slot+1)%32]); !errors.As(err, &pgErr) || pgErr.Code != "23514" {
		t.Fatalf("a row in another shard than its identifier's: %v; want a check violation", err)
	}
	if err := insert(a[slot]); err != nil {
		t.Fatal(err)
	}
	if err := insert(a[slot]); !errors.As(err, &pgErr) || pgErr.Code != "23505" {
		t.Fatalf("the same identifier twice: %v; want a unique violation", err)
	}
}

// What cannot hold the pool gets one clear line: a pool distributed by
// another column, partitions asked for on Citus, and a worker node.
func TestMigrateOnCitusRefuses(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.CitusSchema(t)
	conn := citusConn(t, schema)
	for _, sql := range []string{
		`CREATE TABLE resource_pool (id bigint PRIMARY KEY, identifier text NOT NULL, status text NOT NULL DEFAULT 'UNUSED', leased_until timestamptz, lease_token bigint NOT NULL DEFAULT 0, updated_at timestamptz DEFAULT now(), holder text)`,
		`SELECT create_distributed_table('resource_pool', 'id')`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	_, err := migrations.Apply(ctx, citusConfig(t), schema, migrations.Options{Adopt: true})
	if !errors.Is(err, migrations.ErrCitus) || !strings.Contains(err.Error(), "distributed by column id") {
		t.Fatalf("a pool distributed by id: %v", err)
	}
	_, err = migrations.Apply(ctx, citusConfig(t), pgtest.CitusSchema(t), migrations.Options{Partitions: 4})
	if !errors.Is(err, migrations.ErrCitus) || !strings.Contains(err.Error(), "--partitions") {
		t.Fatalf("--partitions on Citus: %v", err)
	}
	wcfg, err := pgx.ParseConfig(pgtest.CitusCluster(t).Workers[0].DSN())
	if err != nil {
		t.Fatal(err)
	}
	_, err = migrations.Apply(ctx, wcfg, "w_"+schema, migrations.Options{})
	if !errors.Is(err, migrations.ErrCitus) || !strings.Contains(err.Error(), "worker node") {
		t.Fatalf("migrate on a worker: %v", err)
	}
}
