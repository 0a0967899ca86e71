package cli

import (
	"strings"
	"testing"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/workload"
)

// chaos, verify and bench run on a pool that migrate --partitions made: the
// scenario's invariants hold, verify audits it clean, and the claims came
// from every partition.
func TestChaosOnAPartitionedPool(t *testing.T) {
	t.Parallel()
	name := pgtest.UniqueName("pooltop_test_")
	pgtest.DropAtCleanup(t, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	pooltop(t, "migrate", "--dsn", pgtest.DSN(), "--schema", name, "--partitions", "4").must(t)
	db := []string{"--dsn", pgtest.DSN(), "--schema", name}
	r := pooltop(t, append([]string{"chaos", "--scenario", "crash-with-lease", "--duration", "2s", "--pool-size", "20000", "--json", "--partitions", "4"}, db...)...).must(t)
	s := decode[workload.Summary](t, r.stdout)
	if s.Cycles == 0 || s.Crashes == 0 || s.LostIDs != 0 || len(s.Violations) != 0 {
		t.Fatalf("summary: %+v", s)
	}
	v := pooltop(t, append([]string{"verify", "--json"}, db...)...).must(t)
	if a := decode[engine.AuditReport](t, v.stdout); len(a.Violations) != 0 || a.Total != 20000 {
		t.Fatalf("verify after chaos: %+v", a)
	}
	if parts := partitionsWith(t, name, "status <> 'UNUSED'"); parts != 4 {
		t.Fatalf("the workers claimed from %d of the 4 partitions", parts)
	}
	// bench's one-shot run on the same layout (a smoke run, not a measure).
	b := pooltop(t, append([]string{"bench", "--strategies", "skip-locked,batched", "--workers", "2", "--duration", "1s", "--warmup", "0s",
		"--pool-size", "100000", "--no-pgbench", "--batch", "10", "--json", "--partitions", "4"}, db...)...).must(t)
	if !strings.Contains(b.stdout, `"acquires_per_s"`) || !strings.Contains(b.stderr, "4 partitions") {
		t.Fatalf("bench on partitions: %s %s", b.stdout, b.stderr)
	}
}

// Bad --partitions: out of range, or on a pool of another layout: one line
// that says what, why and what to do, and a non-zero exit.
func TestPartitionsFlagRefusals(t *testing.T) {
	t.Parallel()
	plain := scratch(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"migrate", "--dsn", pgtest.DSN(), "--schema", plain, "--partitions", "4"}, "already holds an unpartitioned resource_pool"},
		{[]string{"migrate", "--dsn", pgtest.DSN(), "--schema", plain, "--partitions", "4", "--dry-run"}, "already holds an unpartitioned resource_pool"},
		{[]string{"migrate", "--dsn", pgtest.DSN(), "--schema", plain, "--partitions", "1"}, "--partitions 1: out of range"},
		{[]string{"chaos", "--dsn", pgtest.DSN(), "--schema", plain, "--partitions", "4", "--duration", "1s"}, "already holds an unpartitioned resource_pool"},
		{[]string{"bench", "--partitions", "999"}, "--partitions 999: out of range"},
		{[]string{"--partitions", "-2"}, "--partitions -2: out of range"},
	} {
		r := pooltop(t, c.args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") > 0 {
			t.Errorf("%v: exit %d %q, want one line with %q", c.args, r.code, r.stderr, c.want)
		}
	}
}

// work runs on the pool migrate --partitions made, as it finds it: its
// workers' claims reach every partition, and SIGTERM's drain (here the end
// of --duration) leaves nothing held.
func TestWorkOnAPartitionedPool(t *testing.T) {
	t.Parallel()
	name := pgtest.UniqueName("pooltop_test_")
	pgtest.DropAtCleanup(t, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	pooltop(t, "migrate", "--dsn", pgtest.DSN(), "--schema", name, "--partitions", "4").must(t)
	pooltop(t, "seed", "--dsn", pgtest.DSN(), "--schema", name, "--count", "20000").must(t)
	r := pooltop(t, "work", "--dsn", pgtest.DSN(), "--schema", name, "--workers", "4",
		"--task", "1ms", "--duration", "2s", "--name", "parts", "--json").must(t)
	if s := decode[workSummary](t, r.stdout); s.Committed == 0 || s.Held != 0 {
		t.Fatalf("work on 4 partitions: %+v", s)
	}
	if used := partitionsWith(t, name, "status = 'CONSUMED'"); used != 4 {
		t.Fatalf("work consumed ids from %d of the 4 partitions", used)
	}
	pooltop(t, "verify", "--dsn", pgtest.DSN(), "--schema", name).must(t)
}

// partitionsWith is how many partitions of the pool in schema hold a row
// where the condition holds.
func partitionsWith(t *testing.T, schema, where string) int {
	t.Helper()
	var n int
	if err := pgtest.PoolQueryRow(t.Context(), schema, "SELECT count(DISTINCT tableoid) FROM resource_pool WHERE "+where, &n); err != nil {
		t.Fatal(err)
	}
	return n
}
