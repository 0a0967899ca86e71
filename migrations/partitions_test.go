package migrations_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
)

// migrate --partitions N creates the pool hash-partitioned on id: same name,
// N partitions, the partial indexes and the autovacuum settings on each, the
// ledger's foreign key to it, the marker; running it again changes nothing.
func TestPartitionedPoolIsCreated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	cfg := config(t)
	o := migrations.Options{Partitions: 4}
	if _, err := migrations.Apply(ctx, cfg, schema, o); err != nil {
		t.Fatal(err)
	}
	conn := pgtest.Conn(t, schema)
	st, err := migrations.Inspect(ctx, conn, schema)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Partitioned || len(st.Partitions) != 4 || st.Origin != migrations.OriginCreated || st.Version == 0 {
		t.Fatalf("state %+v: want a pool pooltop created, in 4 partitions, migrated", st)
	}
	if st.UnusedIndex != migrations.UnusedIndex || st.PendingIndex != migrations.PendingIndex || !st.UniqueID {
		t.Fatalf("indexes: unused %q, pending %q, unique id %v", st.UnusedIndex, st.PendingIndex, st.UniqueID)
	}
	var strategy string
	var leafIndexes, tuned, fks int
	err = conn.QueryRow(ctx, `
SELECT (SELECT partstrat::text FROM pg_partitioned_table WHERE partrelid = 'resource_pool'::regclass),
       (SELECT count(*) FROM pg_partition_tree('resource_pool'::regclass) t JOIN pg_index i ON i.indrelid = t.relid
        WHERE t.isleaf AND i.indisvalid AND i.indpred IS NOT NULL),
       (SELECT count(*) FROM pg_partition_tree('resource_pool'::regclass) t JOIN pg_class c ON c.oid = t.relid
        WHERE t.isleaf AND 'autovacuum_vacuum_scale_factor=0.02' = ANY (c.reloptions)),
       (SELECT count(*) FROM pg_constraint WHERE contype = 'f' AND conrelid = 'business_ledger'::regclass
        AND confrelid = 'resource_pool'::regclass)`).Scan(&strategy, &leafIndexes, &tuned, &fks)
	if err != nil {
		t.Fatal(err)
	}
	if strategy != "h" || leafIndexes != 8 || tuned != 4 || fks != 1 {
		t.Fatalf("strategy %q (want h), %d partial indexes on the partitions (want 8), %d partitions tuned for autovacuum (want 4), %d foreign keys from the ledger (want 1)",
			strategy, leafIndexes, tuned, fks)
	}
	before := fingerprint(t, conn, schema)
	for _, again := range []migrations.Options{o, {}} { // with the same --partitions, and without
		res, err := migrations.Apply(ctx, cfg, schema, again)
		if err != nil {
			t.Fatalf("migrate again with %+v: %v", again, err)
		}
		if len(res.Statements) != 0 {
			t.Fatalf("migrate again with %+v planned %v", again, res.Statements)
		}
	}
	if after := fingerprint(t, conn, schema); after != before {
		t.Fatalf("a second migrate changed the schema:\n%s\n%s", before, after)
	}
}

// --dry-run --partitions prints the partitioned CREATE TABLE and every
// partition before the embedded migrations, and creates nothing.
func TestPartitionedDryRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.UniqueName("t_dry_partitions_")
	res, err := migrations.Apply(ctx, config(t), schema, migrations.Options{Partitions: 3, DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(res.Statements, "\n")
	for _, want := range []string{
		"PARTITION BY HASH (id)",
		"UNIQUE (identifier, id)",
		`"resource_pool_p0" PARTITION OF`, `"resource_pool_p2" PARTITION OF`,
		"FOR VALUES WITH (MODULUS 3, REMAINDER 2)",
		"-- migration 1 (00001_pool.sql)",
	} {
		if !strings.Contains(all, want) {
			t.Errorf("dry run lacks %q:\n%s", want, all)
		}
	}
	if strings.Contains(all, "resource_pool_p3") {
		t.Errorf("dry run of 3 partitions names a fourth:\n%s", all)
	}
	if strings.Index(all, "PARTITION BY HASH") > strings.Index(all, "-- migration 1") {
		t.Error("the partitioned table must be created before the embedded migrations run")
	}
	var exists bool
	if err := pgtest.PoolQueryRow(ctx, "public", "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '"+schema+"')", &exists); err != nil {
		t.Fatal(err)
	}
	if exists {
		t.Fatal("the dry run created the schema")
	}
}

// --partitions is refused, with the reason and what to do, on a schema that
// holds an unpartitioned pool, on one partitioned otherwise, and out of
// range; nothing is written.
func TestPartitionsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg := config(t)
	plain := pgtest.MigratedSchema(t)
	parted := pgtest.PartitionedSchema(t, 2)
	for _, c := range []struct {
		schema string
		n      int
		want   string
	}{
		{plain, 4, "already holds an unpartitioned resource_pool"},
		{parted, 4, "in 2 partitions, not 4"},
		{pgtest.UniqueName("t_range_"), 1, "out of range"},
		{pgtest.UniqueName("t_range_"), migrations.MaxPartitions + 1, "out of range"},
	} {
		for _, dry := range []bool{false, true} {
			var before string
			if c.n > 1 && c.n <= migrations.MaxPartitions {
				before = fingerprint(t, pgtest.Conn(t, c.schema), c.schema)
			}
			_, err := migrations.Apply(ctx, cfg, c.schema, migrations.Options{Partitions: c.n, DryRun: dry})
			if !errors.Is(err, migrations.ErrPartitions) || !strings.Contains(err.Error(), c.want) || strings.Count(err.Error(), "\n") > 0 {
				t.Fatalf("--partitions %d on %s (dry run %v): %v, want one line with %q", c.n, c.schema, dry, err, c.want)
			}
			if before != "" {
				if after := fingerprint(t, pgtest.Conn(t, c.schema), c.schema); after != before {
					t.Fatalf("a refused migrate changed %s", c.schema)
				}
			}
		}
	}
}

// The ids a partitioned pool hands out through the parent spread over the
// partitions, and the ledger's foreign key holds on it.
func TestPartitionedPoolTakesRowsAndEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.PartitionedSchema(t, 4)
	conn := pgtest.Conn(t, schema)
	if _, err := conn.Exec(ctx, "INSERT INTO resource_pool (identifier) SELECT 'r' || g FROM generate_series(1, 100) g"); err != nil {
		t.Fatal(err)
	}
	var parts int
	if err := conn.QueryRow(ctx, "SELECT count(DISTINCT tableoid) FROM resource_pool").Scan(&parts); err != nil {
		t.Fatal(err)
	}
	if parts != 4 {
		t.Fatalf("100 ids landed in %d partitions, want 4", parts)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO business_ledger (resource_id, lease_token, request_id) VALUES (1000, 1, 'x')"); err == nil {
		t.Fatal("the ledger took an effect for an id the pool does not have")
	}
}
