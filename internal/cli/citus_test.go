package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/workload"
)

// The commands on a pool Citus distributes, through its coordinator, as a
// user runs them: migrate, seed, a lease claimed, committed, refused at a
// stale token and shown, two work processes at once, then verify, doctor
// and watch.
func TestCommandsOnCitus(t *testing.T) {
	t.Parallel()
	dsn := pgtest.CitusDSN(t)
	schema := pgtest.CitusSchema(t)
	on := []string{"--dsn", dsn, "--schema", schema}
	cmd := func(args ...string) result { return pooltop(t, append(args, on...)...) }
	cmd("migrate").must(t)
	cmd("seed", "--count", "5000").must(t)
	leases := decode[[]engine.Lease](t, cmd("lease", "acquire", "--n", "2", "--holder", "me", "--ttl", "1m", "--json").must(t).stdout)
	if len(leases) != 2 {
		t.Fatalf("claimed %d leases, want 2", len(leases))
	}
	l := leases[0]
	cmd("lease", "commit", "--id", fmt.Sprint(l.ID), "--token", fmt.Sprint(l.Token), "--request-id", "r1", "--holder", "me").must(t)
	if r := cmd("lease", "commit", "--id", fmt.Sprint(leases[1].ID), "--token", "0", "--request-id", "r2"); r.code != exitStaleToken {
		t.Fatalf("a commit at a stale token: exit %d: %s", r.code, r.stderr)
	}
	if show := cmd("lease", "show", "--id", fmt.Sprint(l.ID)).must(t).stdout; !strings.Contains(show, "CONSUMED") || !strings.Contains(show, "effects       1") {
		t.Fatalf("lease show of the committed id:\n%s", show)
	}
	var wg sync.WaitGroup
	work := make([]result, 2)
	for i := range work {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := []string{"work", "--duration", "3s", "--name", fmt.Sprint("w", i)}
			if i == 1 {
				args = append(args, "--to-nodes") // one process through the coordinator, one straight to the nodes
			}
			work[i] = cmd(args...)
		}()
	}
	wg.Wait()
	for i, r := range work {
		if r.code != exitOK || !strings.Contains(r.stdout+r.stderr, " 0 errors") {
			t.Fatalf("work %d on Citus: exit %d: %s%s", i, r.code, r.stdout, r.stderr)
		}
	}
	cmd("lease", "release", "--id", fmt.Sprint(leases[1].ID), "--token", fmt.Sprint(leases[1].Token)).must(t)
	if v := cmd("verify"); v.code != exitOK || !strings.Contains(v.stdout, "every invariant holds") {
		t.Fatalf("verify after work on Citus: exit %d: %s%s", v.code, v.stdout, v.stderr)
	}
	if r := pooltop(t, "work", "--dsn", pgtest.DSN(), "--schema", pgtest.MigratedSchema(t), "--duration", "1s", "--to-nodes"); r.code != exitUsage || !strings.Contains(r.stderr, "not on Citus") {
		t.Fatalf("work --to-nodes on one server: exit %d: %s", r.code, r.stderr)
	}
	if d := pooltop(t, "doctor", "--dsn", dsn, "--table", schema+".resource_pool"); !strings.Contains(d.stdout, "citus_delegation") || strings.Contains(d.stdout, "FAIL") {
		t.Fatalf("doctor on Citus: exit %d: %s%s", d.code, d.stdout, d.stderr)
	}
	out := pooltop(t, "watch", "--dsn", dsn, "--table", schema+".resource_pool", "--headless", "--json", "--count", "1").must(t).stdout
	s := decode[collector.Snapshot](t, strings.TrimSpace(out))
	if s.Pool.Total != 5000 || s.Pool.Consumed == 0 || len(s.Servers) != 2 {
		t.Fatalf("watch on Citus: total %d, consumed %d, %d node rows; want 5000 ids, some consumed, 2 nodes", s.Pool.Total, s.Pool.Consumed, len(s.Servers))
	}
}

// pooltop --citus runs the demo on a throwaway cluster: the workload
// commits on both nodes' shards. With --dsn or --servers it is refused in
// one line.
func TestDemoOnCitus(t *testing.T) {
	t.Parallel()
	pgtest.CitusDSN(t) // skips where Citus is not installed, as the other Citus tests
	file := filepath.Join(t.TempDir(), "demo.ndjson")
	r := pooltop(t, "--citus", "--pool-size", "4000", "--headless", "--count", "12", "--interval", "250ms", "--record", file)
	if r.code != exitOK {
		t.Fatalf("pooltop --citus: exit %d: %s", r.code, r.stderr)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(raw), "\n")
	lines := strings.Split(strings.TrimSpace(rest), "\n")
	last := decode[collector.Snapshot](t, lines[len(lines)-1])
	consumed := 0
	for _, v := range last.Servers {
		if v.Reachable && v.Snapshot.Pool.Consumed > 0 {
			consumed++
		}
	}
	if len(last.Servers) != 2 || last.Workload == nil || last.Workload.Committed == 0 || consumed != 2 {
		t.Fatalf("the demo on Citus: %d node rows, workload %+v, %d nodes with ids consumed", len(last.Servers), last.Workload, consumed)
	}
	for _, args := range [][]string{{"--citus", "--servers", "2"}, {"--citus", "--dsn", pgtest.DSN()}, {"--citus", "--partitions", "4"}} {
		if r := pooltop(t, args...); r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%v: exit %d, stderr %q: want a usage error in one line", args, r.code, r.stderr)
		}
	}
}

// bench --citus measures a throwaway server and a throwaway Citus cluster
// one after the other: a figure for each, with the CPU of every node.
func TestBenchCitus(t *testing.T) {
	t.Parallel()
	pgtest.CitusDSN(t) // skips where Citus is not installed, as the other Citus tests
	r := pooltop(t, "bench", "--citus", "--strategies", "skip-locked,blocking", "--workers", "2", "--warmup", "200ms", "--duration", "1s", "--pool-size", "20000", "--json").must(t)
	rows := decode[[]citusBenchRow](t, r.stdout)
	if len(rows) != 3 || rows[0].Engine != "postgresql" || rows[1].Engine != "citus" || rows[2].Engine != "citus-to-nodes" {
		t.Fatalf("rows %+v; want one on PostgreSQL and two on Citus (through the coordinator, to the nodes), skip-locked only", rows)
	}
	for _, row := range rows {
		if row.Strategy != "skip-locked" || row.CyclesPerS <= 0 || row.ServerCPUPerCycleUS <= 0 || len(row.ServerCPU) != len(row.Nodes) {
			t.Fatalf("%s: %+v", row.Engine, row)
		}
	}
	if len(rows[1].Nodes) != 3 || len(rows[2].Nodes) != 3 {
		t.Fatalf("Citus nodes %v; want the coordinator and two workers", rows[1].Nodes)
	}
	if r := pooltop(t, "bench", "--citus", "--strategies", "blocking"); r.code != exitUsage {
		t.Fatalf("bench --citus with the blocking strategy only: exit %d: %s", r.code, r.stderr)
	}
}

// chaos --citus runs a scenario on a throwaway Citus cluster and audits it;
// a story the Citus layout does not offer is refused in one line.
func TestChaosCitus(t *testing.T) {
	t.Parallel()
	pgtest.CitusDSN(t) // skips where Citus is not installed, as the other Citus tests
	r := pooltop(t, "chaos", "--citus", "--scenario", "crash-with-lease", "--duration", "3s", "--pool-size", "20000", "--json").must(t)
	s := decode[workload.Summary](t, r.stdout)
	if !s.OK() || s.Crashes == 0 || s.LostIDs != 0 || s.Reclaimed < s.Crashes || s.Committed == 0 {
		t.Fatalf("chaos --citus crash-with-lease: %+v", s)
	}
	for _, sc := range []string{"pause-no-fencing", "blocking-contention", "transfer", "vacuum-off"} {
		if r := pooltop(t, "chaos", "--citus", "--scenario", sc); r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("chaos --citus --scenario %s: exit %d, stderr %q: want a usage error in one line", sc, r.code, r.stderr)
		}
	}
}
