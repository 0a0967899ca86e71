package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// emptyDB is a database of the test's own, with nothing in it.
func emptyDB(t *testing.T) string { return pgtest.Database(t, "srv_") }

// Several pools, each on its server, in one view: watch (a row each, the
// one down shown as such, the metrics and the recording per pool), doctor
// (each checked alone) and verify (each audited alone). No password is
// printed, not even a piece of one with an unescaped @; a pool given twice
// gets one line.
func TestSeveralPoolsInOneView(t *testing.T) {
	t.Parallel()
	a, b := emptyDB(t), emptyDB(t)
	for i, dsn := range []string{a, b} {
		pooltop(t, "migrate", "--dsn", dsn).must(t)
		pooltop(t, "seed", "--count", []string{"1000", "500"}[i], "--dsn", dsn).must(t)
	}
	pooltop(t, "lease", "acquire", "--holder", "h", "--ttl", "1m", "--n", "3", "--dsn", a).must(t)
	down := "postgres://nobody:se@cr@t@127.0.0.1:1/none"

	w := decode[collector.Snapshot](t, pooltop(t, "watch", "--headless", "--json", "--count", "1", "--dsn", a, "--dsn", b, "--dsn", down).must(t).stdout)
	if len(w.Servers) != 3 || !w.Servers[0].Reachable || w.Servers[0].Server != "#1" || w.Servers[2].Reachable ||
		w.Pool.Total != 1500 || w.Pool.Pending != 3 || !hasAlertNamed(w, "server_unreachable") {
		t.Fatalf("watch over two pools and one down: %+v", w)
	}
	out := pooltop(t, "watch", "--headless", "--count", "1", "--dsn", a, "--dsn", down)
	if strings.Contains(out.stdout+out.stderr, "cr@t") || strings.Contains(out.stdout+out.stderr, "se@") {
		t.Fatalf("watch printed a piece of the password:\n%s%s", out.stdout, out.stderr)
	}

	doc := pooltop(t, "doctor", "--dsn", a, "--dsn", b, "--dsn", down)
	if doc.code != exitError || !strings.Contains(doc.stdout, "== #1 ") || !strings.Contains(doc.stdout, "== #2 ") ||
		!strings.Contains(doc.stdout, "== #3 ") || !strings.Contains(doc.stdout, "unused_index") || strings.Contains(doc.stdout+doc.stderr, "cr@t") {
		t.Fatalf("doctor over two pools and one down: exit %d\n%s\n%s", doc.code, doc.stdout, doc.stderr)
	}

	v := decode[map[string]any](t, pooltop(t, "verify", "--json", "--dsn", a, "--dsn", b).must(t).stdout)
	pools := v["pools"].([]any)
	if len(pools) != 2 || pools[0].(map[string]any)["report"].(map[string]any)["total"].(float64) != 1000 ||
		pools[1].(map[string]any)["report"].(map[string]any)["total"].(float64) != 500 {
		t.Fatalf("verify of two pools: %v", v)
	}
	if r := pooltop(t, "verify", "--dsn", a, "--dsn", down); r.code != exitError || !strings.Contains(r.stdout, "#2") || strings.Contains(r.stdout+r.stderr, "cr@t") {
		t.Fatalf("verify with a pool down: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	// Recorded, it replays with a row per pool; the metrics carry each
	// pool's figures under its name.
	file := filepath.Join(t.TempDir(), "pools.ndjson")
	bg := start(t, "watch", "--headless", "--json", "--interval", "60s", "--listen", "127.0.0.1:0", "--record", file, "--dsn", a, "--dsn", b, "--dsn", down)
	url := bg.metricsAt(t)
	pgtest.Eventually(t, "the first snapshot", 30*time.Second, func() bool { return strings.Contains(bg.stdout.String(), "\n") })
	fams := scrape(t, url)
	if v, _, ok := value(fams, "pooltop_server_up", "server=#1"); !ok || v != 1 {
		t.Errorf("pooltop_server_up{server=#1} = %v (%v)", v, ok)
	}
	if v, _, ok := value(fams, "pooltop_server_up", "server=#3"); !ok || v != 0 {
		t.Errorf("the pool down: pooltop_server_up %v (%v)", v, ok)
	}
	if code := bg.stop(); code != exitOK {
		t.Fatalf("watch exit %d: %s", code, bg.stderr.String())
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte("cr@t")) {
		t.Fatal("the recording holds a piece of a password")
	}
	if rep := pooltop(t, "replay", file, "--headless").must(t).stdout; !strings.Contains(rep, "  #1 ") || !strings.Contains(rep, "does not answer") {
		t.Fatalf("the replay of a watch over pools printed:\n%s", rep)
	}

	if r := pooltop(t, "watch", "--dsn", a, "--dsn", a); r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "twice") {
		t.Fatalf("a pool given twice: exit %d: %s", r.code, r.stderr)
	}
}

// The commands that write to a pool take one: given several --dsn (or
// --dsn-file), or --servers, each says in one line how to scale out with
// Citus, and writes nothing.
func TestSeveralServersAreRefusedForWrites(t *testing.T) {
	t.Parallel()
	a, b := emptyDB(t), emptyDB(t)
	file := filepath.Join(t.TempDir(), "dsns")
	if err := os.WriteFile(file, []byte(a+"\n"+b+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"migrate", "--dsn", a, "--dsn", b},
		{"migrate", "--dsn-file", file},
		{"seed", "--count", "10", "--dsn", a, "--dsn", b},
		{"lease", "acquire", "--holder", "h", "--ttl", "1m", "--dsn", a, "--dsn", b},
		{"work", "--dsn", a, "--dsn", b},
		{"bench", "--dsn", a, "--dsn", b},
		{"chaos", "--dsn", a, "--dsn", b},
		{"--dsn", a, "--dsn", b, "--headless"},
	} {
		if r := pooltop(t, args...); r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "Citus") {
			t.Errorf("%v: exit %d, stderr %q: want one line about Citus", args, r.code, r.stderr)
		}
	}
	for _, args := range [][]string{{"--servers", "2"}, {"bench", "--servers", "1,2"}, {"chaos", "--servers", "2"}} {
		if r := pooltop(t, args...); r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "citus") {
			t.Errorf("%v: exit %d, stderr %q: want one line about --citus", args, r.code, r.stderr)
		}
	}
	if v := pooltop(t, "verify", "--dsn", a); v.code == exitOK {
		t.Fatalf("verify found a pool in a database nothing was written to: %s", v.stdout)
	}
}

func hasAlertNamed(s collector.Snapshot, name string) bool {
	for _, a := range s.Alerts {
		if a.Name == name && a.Active {
			return true
		}
	}
	return false
}
