package pgembed_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/internal/pgembed"
)

// startCitus starts a coordinator and two workers. Where Citus is not
// installed the test is skipped, unless POOLTOP_REQUIRE_CITUS (which
// .ci/run sets after building Citus) or CI is set: there a missing Citus
// fails.
func startCitus(t *testing.T) *pgembed.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c, err := pgembed.StartCitus(ctx, pgembed.Options{}, 2)
	if errors.Is(err, pgembed.ErrNoCitus) && os.Getenv("POOLTOP_REQUIRE_CITUS") == "" && os.Getenv("CI") == "" {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatalf("StartCitus: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// A cluster started by StartCitus has both workers in its metadata, spreads
// a distributed table's shards over them, and routes a statement on one
// value of the distribution column to one shard.
func TestCitusClusterSpreadsAndRoutes(t *testing.T) {
	c := startCitus(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var workers int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM citus_get_active_worker_nodes()").Scan(&workers); err != nil {
		t.Fatal(err)
	}
	if workers != 2 {
		t.Fatalf("%d active workers, want 2", workers)
	}
	for _, sql := range []string{
		"CREATE TABLE spread (k int, v text)",
		"SELECT create_distributed_table('spread', 'k', shard_count => 8)",
		"INSERT INTO spread SELECT g, 'v' FROM generate_series(1, 100) g",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var nodes, rows int
	if err := conn.QueryRow(ctx, `SELECT count(DISTINCT nodeport) FROM pg_dist_shard_placement p
		JOIN pg_dist_shard s USING (shardid) WHERE s.logicalrelid = 'spread'::regclass`).Scan(&nodes); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM spread").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if nodes != 2 || rows != 100 {
		t.Fatalf("shards on %d nodes, %d rows; want 2 nodes, 100 rows", nodes, rows)
	}
	plan, err := conn.Query(ctx, "EXPLAIN (COSTS OFF) UPDATE spread SET v = 'w' WHERE k = 7")
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(plan, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if text := strings.Join(lines, "\n"); !strings.Contains(text, "Task Count: 1") {
		t.Fatalf("an update on one k is not routed to one shard:\n%s", text)
	}
}
