package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/workload"
)

// emptyDB creates a database of its own on the test server and returns its URL.
func emptyDB(t *testing.T) string { return pgtest.Database(t, "srv_") }

// TestCommandsOnAPoolOverSeveralServers sets up a pool over two databases
// (each standing for a server), seeds it, claims and commits by hand,
// verifies it, adds a third server, and checks that every list that is not
// the pool's is refused with one line before anything is written.
func TestCommandsOnAPoolOverSeveralServers(t *testing.T) {
	t.Parallel()
	a, b, c := emptyDB(t), emptyDB(t), emptyDB(t)
	two := []string{"--dsn", a, "--dsn", b}

	m := decode[map[string]any](t, pooltop(t, append([]string{"migrate", "--json"}, two...)...).must(t).stdout)
	servers := m["servers"].([]any)
	if len(servers) != 2 || servers[0].(map[string]any)["server"] != "s1" || servers[1].(map[string]any)["server"] != "s2" {
		t.Fatalf("migrate over two servers: %v", m)
	}
	seeded := decode[map[string]any](t, pooltop(t, append([]string{"seed", "--count", "1000", "--json"}, two...)...).must(t).stdout)
	per := seeded["servers"].(map[string]any)
	if seeded["inserted"].(float64) != 1000 || per["s1"].(float64) < 300 || per["s2"].(float64) < 300 {
		t.Fatalf("seed over two servers: %v", seeded)
	}

	ls := decode[[]engine.Lease](t, pooltop(t, append([]string{"lease", "acquire", "--holder", "h", "--ttl", "1m", "--n", "3", "--json"}, two...)...).must(t).stdout)
	if len(ls) == 0 || ls[0].Server == "" {
		t.Fatalf("lease acquire names no server: %+v", ls)
	}
	l := ls[0]
	id, tok := itoa(l.ID), itoa(l.Token)
	if r := pooltop(t, append([]string{"lease", "commit", "--id", id, "--token", tok, "--request-id", "r1"}, two...)...); r.code != exitUsage || !strings.Contains(r.stderr, "--server is required") {
		t.Fatalf("commit without --server: exit %d, %s", r.code, r.stderr)
	}
	pooltop(t, append([]string{"lease", "commit", "--server", l.Server, "--id", id, "--token", tok, "--request-id", "r1"}, two...)...).must(t)
	if r := pooltop(t, append([]string{"lease", "commit", "--server", l.Server, "--id", id, "--token", tok, "--request-id", "r2"}, two...)...); r.code != exitLeaseLost {
		t.Fatalf("a second commit of one lease: exit %d, %s", r.code, r.stderr)
	}
	v := decode[map[string]any](t, pooltop(t, append([]string{"verify", "--json"}, two...)...).must(t).stdout)
	if v["total"].(float64) != 1000 || v["consumed"].(float64) != 1 || len(v["servers"].([]any)) != 2 {
		t.Fatalf("verify over two servers: %v", v)
	}

	// watch over both and a server that is down: a row each, the down one shown as such.
	down := "postgres://nobody:pw@127.0.0.1:1/none"
	w := decode[collector.Snapshot](t, pooltop(t, "watch", "--headless", "--json", "--count", "1", "--dsn", a, "--dsn", b, "--dsn", down).must(t).stdout)
	if len(w.Servers) != 3 || !w.Servers[0].Reachable || w.Servers[0].Server != "s1" || w.Servers[2].Reachable ||
		w.Pool.Consumed != 1 || w.Pool.Unused+w.Pool.Pending != 999 || len(w.Alerts) == 0 || w.Alerts[0].Name != "server_unreachable" {
		t.Fatalf("watch over two servers and one down: %+v", w)
	}
	if strings.Contains(pooltop(t, "watch", "--headless", "--count", "1", "--dsn", a, "--dsn", down).stdout, ":pw@") {
		t.Fatal("watch printed a password")
	}

	// doctor checks each server under its name; one that does not answer
	// fails the run after the others are checked.
	doc := pooltop(t, "doctor", "--dsn", a, "--dsn", b, "--dsn", down)
	if doc.code != exitError || !strings.Contains(doc.stdout, "== s1 ") || !strings.Contains(doc.stdout, "== s2 ") ||
		!strings.Contains(doc.stdout, "== #3 ") || !strings.Contains(doc.stdout, "not checked: connect to") ||
		!strings.Contains(doc.stdout, "unused_index") || strings.Contains(doc.stdout+doc.stderr, ":pw@") || strings.Count(doc.stderr, "\n") != 1 {
		t.Fatalf("doctor over two and one down: exit %d\n%s\n%s", doc.code, doc.stdout, doc.stderr)
	}
	docs := decode[[]map[string]any](t, pooltop(t, "doctor", "--json", "--dsn", a, "--dsn", b).stdout)
	if len(docs) != 2 || docs[1]["server"] != "s2" || len(docs[1]["checks"].([]any)) < 5 {
		t.Fatalf("doctor --json over two: %v", docs)
	}

	// Recorded over both and the down one, it replays with its rows; the
	// metrics carry each server's figures under its name.
	file := filepath.Join(t.TempDir(), "servers.ndjson")
	bg := start(t, "watch", "--headless", "--json", "--interval", "60s", "--listen", "127.0.0.1:0", "--record", file, "--dsn", a, "--dsn", b, "--dsn", down)
	url := bg.metricsAt(t)
	pgtest.Eventually(t, "the first snapshot", 30*time.Second, func() bool { return strings.Contains(bg.stdout.String(), "\n") })
	fams := scrape(t, url)
	w = decode[collector.Snapshot](t, strings.TrimSpace(bg.stdout.String()))
	for _, sv := range w.Servers[:2] {
		if v, _, ok := value(fams, "pooltop_pool_ids", "server="+sv.Server, "state=unused"); !ok || v != float64(sv.Snapshot.Pool.Unused) {
			t.Errorf("pooltop_pool_ids{server=%s,state=unused} = %v (%v), want %d", sv.Server, v, ok, sv.Snapshot.Pool.Unused)
		}
		if v, _, ok := value(fams, "pooltop_server_up", "server="+sv.Server); !ok || v != 1 {
			t.Errorf("pooltop_server_up{server=%s} = %v (%v)", sv.Server, v, ok)
		}
	}
	if v, _, ok := value(fams, "pooltop_server_up", "server="+w.Servers[2].Server); !ok || v != 0 {
		t.Errorf("the down server: pooltop_server_up %v (%v)", v, ok)
	}
	if code := bg.stop(); code != exitOK {
		t.Fatalf("watch exit %d: %s", code, bg.stderr.String())
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(":pw@")) {
		t.Fatal("the recording holds a password")
	}
	rep := pooltop(t, "replay", file, "--headless").must(t).stdout
	if !strings.Contains(rep, "  s1 ") || !strings.Contains(rep, "  s2 ") || !strings.Contains(rep, "does not answer") {
		t.Fatalf("the replay of a watch over servers printed:\n%s", rep)
	}

	// A list that is not the pool's changes nothing.
	single := emptyDB(t)
	pooltop(t, "migrate", "--dsn", single).must(t)
	for name, args := range map[string][]string{
		"a server left out":           {"verify", "--dsn", a},
		"one server left out":         {"seed", "--count", "5", "--dsn", a, "--dsn", c},
		"a server of another pool":    {"verify", "--dsn", a, "--dsn", b, "--dsn", single},
		"a server given twice":        {"verify", "--dsn", a, "--dsn", a},
		"faults over two":             {"chaos", "--faults", "kill", "--dsn", a, "--dsn", b},
		"actions over two":            {"watch", "--allow-actions", "--dsn", a, "--dsn", b},
		"migrate leaving one out":     {"migrate", "--dsn", a, "--dsn", c},
		"one server seeded by itself": {"seed", "--count", "5", "--dsn", b},
	} {
		r := pooltop(t, args...)
		if r.code == 0 || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || r.stderr == "" {
			t.Errorf("%s: exit %d, stderr %q: want a non-zero exit and one line", name, r.code, r.stderr)
		}
	}

	// A third server joins: the others keep their names, new ids go to all three.
	file = filepath.Join(t.TempDir(), "servers")
	if err := os.WriteFile(file, []byte("# the pool\n"+c+"\n"+a+"\n"+b+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	m = decode[map[string]any](t, pooltop(t, "migrate", "--json", "--dsn-file", file).must(t).stdout)
	if s := m["servers"].([]any)[0].(map[string]any); s["server"] != "s3" || s["joined"] != true || s["servers"].(float64) != 3 {
		t.Fatalf("a third server joins: %v", m)
	}
	seeded = decode[map[string]any](t, pooltop(t, "seed", "--count", "900", "--json", "--dsn-file", file).must(t).stdout)
	if per := seeded["servers"].(map[string]any); per["s3"].(float64) < 200 || per["s1"].(float64) < 200 {
		t.Fatalf("seed over three servers: %v", seeded)
	}
	v = decode[map[string]any](t, pooltop(t, "verify", "--json", "--dsn-file", file).must(t).stdout)
	if v["total"].(float64) != 1900 || len(v["violations"].([]any)) != 0 {
		t.Fatalf("verify over three servers: %v", v)
	}
	if r := pooltop(t, "verify", "--dsn", a, "--dsn", b); r.code != exitUsage || !strings.Contains(r.stderr, "s3 missing") {
		t.Fatalf("verify without the third server: exit %d, %s", r.code, r.stderr)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestWorkGoesOnWhileAServerIsStoppedHard runs `pooltop work` over two real
// servers and stops one with an immediate shutdown mid-run: claims go on at
// the other, the stopped one takes claims again once it is back, its
// leases are reclaimed by the process's reaper, and verify over both finds
// no double finalization, no id lost and no lease left past a short grace.
func TestWorkGoesOnWhileAServerIsStoppedHard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgembed.Start(ctx, pgembed.Options{})
	if err != nil {
		t.Fatalf("start a second server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	a, b := emptyDB(t), srv.DSN()
	pooltop(t, "migrate", "--dsn", a, "--dsn", b).must(t)
	pooltop(t, "seed", "--count", "20000", "--dsn", a, "--dsn", b).must(t)
	consumed := func(dsn string) int64 {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return -1
		}
		defer conn.Close(ctx)
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM resource_pool WHERE status = 'CONSUMED'").Scan(&n); err != nil {
			return -1
		}
		return n
	}
	done := make(chan result, 1)
	go func() {
		done <- pooltop(t, "work", "--dsn", a, "--dsn", b, "--duration", "15s", "--workers", "4", "--ttl", "1s",
			"--scenario", "crash-with-lease", "--name", "w", "--json")
	}()
	pgtest.Eventually(t, "commits on the second server", 30*time.Second, func() bool { return consumed(b) > 50 })
	if err := srv.Halt(); err != nil {
		t.Fatal(err)
	}
	onA := consumed(a)
	pgtest.Eventually(t, "commits going on at the first server", 30*time.Second, func() bool { return consumed(a) > onA+200 })
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	onB := consumed(b)
	pgtest.Eventually(t, "commits on the second server again", 30*time.Second, func() bool { return consumed(b) > onB+50 })
	r := <-done
	if r.code != 0 {
		t.Fatalf("work over two servers, one stopped hard: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	v := decode[map[string]any](t, pooltop(t, "verify", "--json", "--grace", "3s", "--dsn", a, "--dsn", b).stdout)
	if len(v["violations"].([]any)) != 0 || v["total"].(float64) != 20000 || v["double_finalizations"].(float64) != 0 {
		t.Fatalf("verify after the stop: %v", v)
	}
}

// TestChaosStopsAServerHard runs chaos over two throwaway servers with
// one stopped by an immediate shutdown for the middle of the run (two,
// not more: the tests of other packages run beside it on two cores).
func TestChaosStopsAServerHard(t *testing.T) {
	t.Parallel()
	r := pooltop(t, "chaos", "--servers", "2", "--scenario", "crash-with-lease", "--duration", "6s", "--pool-size", "30000", "--json")
	if r.code != 0 {
		t.Fatalf("chaos --servers 2: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	s := decode[workload.ServerStopSummary](t, r.stdout)
	if len(s.Violations) != 0 || s.DoubleFinalizations != 0 || s.LostIDs != 0 || s.CommittedWhileDown == 0 ||
		s.ReclaimedAfterS < 0 || s.Crashes == 0 || len(s.Servers) != 2 || s.Audit.Total != 30000 {
		t.Fatalf("chaos over two servers, one stopped: %+v", s)
	}
	// On servers of yours: over a pool in the scratch schema of each, none
	// stopped, every server audited.
	a, b := emptyDB(t), emptyDB(t)
	r = pooltop(t, "chaos", "--dsn", a, "--dsn", b, "--scenario", "crash-with-lease", "--duration", "3s", "--pool-size", "20000", "--json")
	if r.code != 0 {
		t.Fatalf("chaos --dsn a --dsn b: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	s = decode[workload.ServerStopSummary](t, r.stdout)
	if len(s.Violations) != 0 || s.StoppedServer != "" || s.Crashes == 0 || len(s.Servers) != 2 || s.Audit.Total != 20000 ||
		s.Servers[0].Consumed == 0 || s.Servers[1].Consumed == 0 {
		t.Fatalf("chaos over two servers of yours: %+v", s)
	}
	if r := pooltop(t, "chaos", "--servers", "1"); r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("chaos --servers 1: exit %d, %q", r.code, r.stderr)
	}
}

// TestBenchOverServers compares pools over one and two throwaway servers.
func TestBenchOverServers(t *testing.T) {
	t.Parallel()
	r := pooltop(t, "bench", "--servers", "1,2", "--strategies", "skip-locked", "--workers", "4", "--duration", "1s", "--warmup", "300ms", "--pool-size", "5000", "--json")
	if r.code != 0 {
		t.Fatalf("bench --servers 1,2: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	rows := decode[[]serversBenchRow](t, r.stdout)
	if len(rows) != 2 {
		t.Fatalf("bench --servers 1,2: %d rows, want 2: %s", len(rows), r.stdout)
	}
	for i, row := range rows {
		sum := 0.0
		for _, s := range row.Share {
			sum += s
		}
		if row.Servers != i+1 || len(row.ServerCPU) != i+1 || len(row.Share) != i+1 || row.CyclesPerS <= 0 || sum < 0.99 || sum > 1.01 {
			t.Fatalf("row %d: %+v", i, row)
		}
		for _, c := range row.ServerCPU {
			if c <= 0 {
				t.Fatalf("row %d: a server with no CPU in the window: %+v", i, row)
			}
		}
	}
	if r := pooltop(t, "bench", "--servers", "0"); r.code != exitUsage {
		t.Fatalf("bench --servers 0: exit %d, %q", r.code, r.stderr)
	}

	// On servers of yours: a pool over them in the scratch schema, run
	// twice (the second empties the first's pool), the pool you keep in
	// public left as it was.
	a, b := emptyDB(t), emptyDB(t)
	pooltop(t, "migrate", "--dsn", a, "--dsn", b).must(t)
	pooltop(t, "seed", "--count", "100", "--dsn", a, "--dsn", b).must(t)
	for range 2 {
		r = pooltop(t, "bench", "--dsn", a, "--dsn", b, "--strategies", "skip-locked", "--workers", "4", "--duration", "2s", "--warmup", "300ms", "--pool-size", "5000", "--json")
		if r.code != 0 {
			t.Fatalf("bench --dsn a --dsn b: exit %d: %s%s", r.code, r.stdout, r.stderr)
		}
		rows = decode[[]serversBenchRow](t, r.stdout)
		if len(rows) != 1 || rows[0].Servers != 2 || len(rows[0].Share) != 2 || rows[0].CyclesPerS <= 0 {
			t.Fatalf("bench over two servers of yours: %s", r.stdout)
		}
	}
	v := decode[map[string]any](t, pooltop(t, "verify", "--json", "--dsn", a, "--dsn", b).must(t).stdout)
	if v["total"].(float64) != 100 || v["consumed"].(float64) != 0 {
		t.Fatalf("the pool in public after bench over its servers: %v", v)
	}
	if r := pooltop(t, "bench", "--servers", "2", "--dsn", a, "--dsn", b); r.code != exitUsage {
		t.Fatalf("bench --servers with --dsn: exit %d, %q", r.code, r.stderr)
	}
}

// The demo runs over several servers: on throwaway ones (--servers) and on
// a pool pooltop made over the servers --dsn names. Its workload claims on
// every server, the snapshots carry a row per server and the workload's
// figures, and the pool's invariants hold on every server afterwards.
func TestDemoOverServers(t *testing.T) {
	t.Parallel()
	// demo runs the demo headless and returns its recorded snapshots.
	demo := func(t *testing.T, args ...string) string {
		t.Helper()
		file := filepath.Join(t.TempDir(), "demo.ndjson")
		r := pooltop(t, append(args, "--headless", "--count", "16", "--interval", "250ms", "--record", file)...)
		if r.code != exitOK {
			t.Fatalf("demo %v: exit %d: %s", args, r.code, r.stderr)
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		_, rest, _ := strings.Cut(string(raw), "\n") // after the header
		return rest
	}
	sawAll := func(t *testing.T, out string, n int) {
		t.Helper()
		var last collector.Snapshot
		consumed := map[string]bool{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			last = decode[collector.Snapshot](t, line)
			for _, v := range last.Servers {
				if v.Reachable && v.Snapshot.Pool.Consumed > 0 {
					consumed[v.Server] = true
				}
			}
		}
		if len(last.Servers) != n || last.Workload == nil || last.Workload.Committed == 0 || len(consumed) != n {
			t.Fatalf("the demo over %d servers: last snapshot %d servers, workload %+v; servers with ids consumed %v", n, len(last.Servers), last.Workload, consumed)
		}
	}
	sawAll(t, demo(t, "--servers", "2", "--pool-size", "4000"), 2)

	a, b := emptyDB(t), emptyDB(t)
	pooltop(t, "migrate", "--dsn", a, "--dsn", b).must(t)
	pooltop(t, "seed", "--count", "3000", "--dsn", a, "--dsn", b).must(t)
	sawAll(t, demo(t, "--dsn", a, "--dsn", b), 2)
	if v := pooltop(t, "verify", "--dsn", a, "--dsn", b); v.code != exitOK {
		t.Fatalf("verify after the demo: exit %d: %s%s", v.code, v.stdout, v.stderr)
	}

	for name, args := range map[string][]string{
		"one server":              {"--servers", "1"},
		"throwaway and --dsn":     {"--servers", "2", "--dsn", a},
		"a new partitioned pool":  {"--dsn", a, "--dsn", b, "--partitions", "4"},
		"one server of the pool":  {"--dsn", a, "--headless", "--count", "1"},
		"a server of no pool yet": {"--dsn", a, "--dsn", emptyDB(t), "--headless", "--count", "1"},
	} {
		if r := pooltop(t, args...); r.code == exitOK || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Errorf("%s: exit %d, stderr %q: want a non-zero exit and one line", name, r.code, r.stderr)
		}
	}
}
