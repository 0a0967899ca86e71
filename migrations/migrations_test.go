package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// handBuiltPool is a resource_pool built by hand with the basic columns:
// no holder, no PENDING index, no marker.
const handBuiltPool = `
CREATE TABLE resource_pool (
    id            BIGSERIAL PRIMARY KEY,
    identifier    VARCHAR(255) UNIQUE NOT NULL,
    status        VARCHAR(20) DEFAULT 'UNUSED',
    leased_until  TIMESTAMP WITH TIME ZONE,
    lease_token   BIGINT DEFAULT 0,
    updated_at    TIMESTAMP WITH TIME ZONE DEFAULT NOW()
);
CREATE INDEX idx_pool_free ON resource_pool (id) WHERE status = 'UNUSED';
INSERT INTO resource_pool (identifier) SELECT 'r' || g FROM generate_series(1, 2000) g;
UPDATE resource_pool SET status = 'PENDING', lease_token = 3 WHERE id = 2;`

func config(t *testing.T) *pgx.ConnConfig {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// fingerprint sums up everything a schema holds: its relations, their
// columns and indexes, the rows of the pool, and the table's settings.
func fingerprint(t *testing.T, conn *pgx.Conn, schema string) string {
	t.Helper()
	var s string
	err := conn.QueryRow(context.Background(), `
SELECT coalesce((SELECT string_agg(c.relname || ':' || c.relkind::text || ':' || coalesce(array_to_string(c.reloptions, ','), ''), ' ' ORDER BY c.relname)
        FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1), '')
    || '|' || coalesce((SELECT string_agg(attname, ',' ORDER BY attname) FROM pg_attribute
        WHERE attrelid = to_regclass(quote_ident($1) || '.resource_pool') AND attnum > 0 AND NOT attisdropped), '')`, schema).Scan(&s)
	if err != nil {
		t.Fatal(err)
	}
	var rows string
	if err := conn.QueryRow(context.Background(), "SELECT coalesce(md5(string_agg(r::text, ',' ORDER BY id)), '') FROM resource_pool r").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	return s + "|" + rows
}

// A hand-built pool is not touched without permission,
// not even by a dry run, and is adopted in place with it: its rows keep
// their state, an equivalent index is not duplicated, and the schema is
// marked as adopted (not created).
func TestForeignPoolIsAdoptedOnlyWhenAllowed(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	conn := pgtest.Conn(t, schema)
	if _, err := conn.Exec(ctx, handBuiltPool); err != nil {
		t.Fatal(err)
	}
	before := fingerprint(t, conn, schema)

	_, err := migrations.Apply(ctx, config(t), schema, migrations.Options{})
	if !errors.Is(err, migrations.ErrForeignPool) || !strings.Contains(err.Error(), "--allow-writes") || !strings.Contains(err.Error(), "--dry-run") {
		t.Fatalf("apply without permission: %v", err)
	}
	if after := fingerprint(t, conn, schema); after != before {
		t.Fatalf("a refused migration changed the schema:\n%s\n%s", before, after)
	}

	plan, err := migrations.Apply(ctx, config(t), schema, migrations.Options{Adopt: true, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(plan.Statements, "\n")
	if !plan.Adopted || !strings.Contains(all, "CREATE INDEX CONCURRENTLY IF NOT EXISTS \"idx_resource_pending_expiry\"") ||
		strings.Contains(all, "CONCURRENTLY IF NOT EXISTS \"idx_resource_unused\"") || !strings.Contains(all, "CREATE TABLE IF NOT EXISTS business_ledger") {
		t.Fatalf("dry run: adopted %v, statements:\n%s", plan.Adopted, all)
	}
	if after := fingerprint(t, conn, schema); after != before {
		t.Fatalf("a dry run changed the schema:\n%s\n%s", before, after)
	}

	for i := 0; i < 2; i++ { // the second run is a no-op
		res, err := migrations.Apply(ctx, config(t), schema, migrations.Options{Adopt: true})
		if err != nil || res.Version != 2 || res.Adopted != (i == 0) {
			t.Fatalf("apply #%d: %+v, %v", i+1, res, err)
		}
	}
	var status string
	var token int64
	var holder *string
	if err := conn.QueryRow(ctx, "SELECT status, lease_token, holder FROM resource_pool WHERE id = 2").Scan(&status, &token, &holder); err != nil {
		t.Fatal(err)
	}
	if status != "PENDING" || token != 3 || holder != nil {
		t.Fatalf("row changed by the upgrade: %s %d %v", status, token, holder)
	}
	var unused, pending int
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE indexdef LIKE '%''UNUSED''%'), count(*) FILTER (WHERE indexname = 'idx_resource_pending_expiry')
		FROM pg_indexes WHERE schemaname = $1`, schema).Scan(&unused, &pending); err != nil {
		t.Fatal(err)
	}
	if unused != 1 || pending != 1 {
		t.Fatalf("%d indexes on UNUSED rows (want the table's own, once), %d on PENDING rows", unused, pending)
	}
	st := inspect(t, conn, schema)
	if st.Origin != migrations.OriginAdopted || st.PendingIndex == "" {
		t.Fatalf("after adoption: %+v", st)
	}
}

func inspect(t *testing.T, conn *pgx.Conn, schema string) *migrations.State {
	t.Helper()
	st, err := migrations.Inspect(context.Background(), conn, schema)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// Adopting a pool that holds rows builds its indexes CONCURRENTLY: while the
// build waits for a transaction that is still writing to the pool, other
// sessions still write to it (a plain CREATE INDEX would queue them all
// behind its lock).
func TestAdoptionNeverBlocksWriters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := pgtest.Schema(t)
	conn := pgtest.Conn(t, schema)
	if _, err := conn.Exec(ctx, handBuiltPool); err != nil {
		t.Fatal(err)
	}
	// An application transaction in flight: it holds a row lock on the pool.
	tx := pgtest.PeerTx(t, ctx, schema) // committed below
	if _, err := tx.Exec(ctx, "UPDATE resource_pool SET status = 'PENDING', updated_at = now() WHERE id = 10"); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := migrations.Apply(ctx, config(t), schema, migrations.Options{Adopt: true})
		done <- err
	}()
	// Wait until the index build waits for the application's transaction.
	pgtest.Eventually(t, "the index build waiting for the open transaction", 20*time.Second, func() bool {
		var waiting bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE query LIKE 'CREATE INDEX%' AND wait_event_type = 'Lock')`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return true
		}
		select {
		case err := <-done:
			t.Fatalf("migration ended before waiting for the open transaction: %v", err)
		default:
		}
		return false
	})
	// Another worker claims and writes meanwhile, without waiting.
	worker := pgtest.Conn(t, schema)
	if _, err := worker.Exec(ctx, "SET lock_timeout = '1s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Exec(ctx, "UPDATE resource_pool SET status = 'PENDING', updated_at = now() WHERE id = 11"); err != nil {
		t.Fatalf("a worker's claim waited behind the index build: %v", err)
	}
	if _, err := worker.Exec(ctx, "INSERT INTO resource_pool (identifier) VALUES ('fresh')"); err != nil {
		t.Fatalf("a producer's insert waited behind the index build: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := inspect(t, conn, schema); st.PendingIndex == "" || len(st.Invalid) > 0 {
		t.Fatalf("after adoption: %+v", st)
	}
}

// What cannot be adopted is refused before anything is written, naming the
// column; missing lease columns are added.
func TestAdoptionChecksTheColumns(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		table, want string
	}{
		{`CREATE TABLE resource_pool (id bigint PRIMARY KEY, identifier text, status integer)`, "column status is integer"},
		{`CREATE TABLE resource_pool (id bigint PRIMARY KEY, identifier text, status text, leased_until text)`, "column leased_until is text"},
		{`CREATE TABLE resource_pool (id bigint PRIMARY KEY, status text)`, "no identifier column"},
		{`CREATE TABLE resource_pool (id bigint, identifier text, status text)`, "id has no unique index"},
	}
	for _, c := range cases {
		schema := pgtest.Schema(t)
		conn := pgtest.Conn(t, schema)
		if _, err := conn.Exec(ctx, c.table); err != nil {
			t.Fatal(err)
		}
		before := fingerprint(t, conn, schema)
		_, err := migrations.Apply(ctx, config(t), schema, migrations.Options{Adopt: true})
		if !errors.Is(err, migrations.ErrIncompatible) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.table, err, c.want)
		}
		if after := fingerprint(t, conn, schema); after != before {
			t.Errorf("%s: a refused adoption changed the schema", c.table)
		}
	}
	// Only id, identifier and status: the lease columns are added.
	schema := pgtest.Schema(t)
	conn := pgtest.Conn(t, schema)
	if _, err := conn.Exec(ctx, `CREATE TABLE resource_pool (id bigserial PRIMARY KEY, identifier text UNIQUE NOT NULL, status text DEFAULT 'UNUSED');
		INSERT INTO resource_pool (identifier) VALUES ('a'), ('b')`); err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, config(t), schema, migrations.Options{Adopt: true}); err != nil {
		t.Fatal(err)
	}
	var token int64
	if err := conn.QueryRow(ctx, "SELECT lease_token FROM resource_pool WHERE identifier = 'b' AND leased_until IS NULL AND updated_at IS NOT NULL").Scan(&token); err != nil || token != 0 {
		t.Fatalf("lease columns after adoption: token %d, %v", token, err)
	}
}

// A hash-partitioned hand-built pool is adopted with its
// indexes built concurrently on every partition and attached to the parent.
func TestAdoptPartitionedPool(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	conn := pgtest.Conn(t, schema)
	_, err := conn.Exec(ctx, `
CREATE TABLE resource_pool (id bigint PRIMARY KEY, identifier text NOT NULL, status text NOT NULL DEFAULT 'UNUSED',
    leased_until timestamptz, lease_token bigint NOT NULL DEFAULT 0, updated_at timestamptz DEFAULT now()) PARTITION BY HASH (id);
CREATE TABLE resource_pool_0 PARTITION OF resource_pool FOR VALUES WITH (MODULUS 4, REMAINDER 0);
CREATE TABLE resource_pool_1 PARTITION OF resource_pool FOR VALUES WITH (MODULUS 4, REMAINDER 1);
CREATE TABLE resource_pool_2 PARTITION OF resource_pool FOR VALUES WITH (MODULUS 4, REMAINDER 2);
CREATE TABLE resource_pool_3 PARTITION OF resource_pool FOR VALUES WITH (MODULUS 4, REMAINDER 3);
INSERT INTO resource_pool (id, identifier) SELECT g, 'r' || g FROM generate_series(1, 1000) g;`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, config(t), schema, migrations.Options{Adopt: true}); err != nil {
		t.Fatal(err)
	}
	st := inspect(t, conn, schema)
	if !st.Partitioned || len(st.Partitions) != 4 || st.UnusedIndex != migrations.UnusedIndex || st.PendingIndex != migrations.PendingIndex {
		t.Fatalf("after adoption: %+v", st)
	}
	var perPartition int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND tablename LIKE 'resource_pool_%' AND indexdef LIKE '%WHERE%'`, schema).Scan(&perPartition); err != nil || perPartition != 8 {
		t.Fatalf("%d partial indexes on the partitions, want 8 (%v)", perPartition, err)
	}
}

// Schema names that need quoting work, twice; they are not folded or
// taken for keywords.
func TestSchemaNamesThatNeedQuotes(t *testing.T) {
	ctx := context.Background()
	conn := pgtest.Conn(t, "public")
	for _, name := range []string{"MyPool", "select"} {
		name := name + "_" + strings.ToLower(strings.ReplaceAll(t.Name(), "Test", ""))[:6]
		t.Cleanup(func() {
			_, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
		})
		for i := 0; i < 2; i++ {
			res, err := migrations.Apply(ctx, config(t), name, migrations.Options{})
			if err != nil || res.Version != 2 {
				t.Fatalf("schema %q, run %d: %+v %v", name, i+1, res, err)
			}
		}
		if st := inspect(t, conn, name); st.Origin != migrations.OriginCreated || !st.Pool {
			t.Fatalf("schema %q: %+v", name, st)
		}
	}
}

// The per-table autovacuum settings of a queue-like table are in place.
func TestAutovacuumSettings(t *testing.T) {
	schema := pgtest.MigratedSchema(t)
	conn := pgtest.Conn(t, schema)
	var opts []string
	if err := conn.QueryRow(context.Background(), "SELECT reloptions FROM pg_class WHERE oid = 'resource_pool'::regclass").Scan(&opts); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"autovacuum_vacuum_scale_factor=0.02": false, "autovacuum_vacuum_cost_delay=0": false}
	for _, o := range opts {
		if _, ok := want[o]; ok {
			want[o] = true
		}
	}
	for o, found := range want {
		if !found {
			t.Errorf("reloption %s missing from %v", o, opts)
		}
	}
}
