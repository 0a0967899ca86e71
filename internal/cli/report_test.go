package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// report turns a recording of watch into one page; bad input is one line
// and exit 2, a last line cut short is left out with a warning, and no
// password reaches the page.
func TestReportOfARecording(t *testing.T) {
	t.Parallel()
	db := migrated(t, 50)
	schema := db[3]
	dsn, pw := dsnWithPassword(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "watch.ndjson")
	pooltop(t, "watch", "--dsn", dsn, "--schema", schema, "--headless", "--count", "4", "--interval", "250ms", "--record", file).must(t)

	out := filepath.Join(dir, "incident.html")
	r := pooltop(t, "report", file, "-o", out, "--title", "Pool test incident", "--svg", filepath.Join(dir, "charts"))
	if r.code != exitOK || !strings.Contains(r.stdout, "4 snapshots") || !strings.Contains(r.stdout, "charts as SVG") {
		t.Fatalf("report: exit %d, %s%s", r.code, r.stdout, r.stderr)
	}
	page, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"<title>Pool test incident</title>", schema + ".resource_pool", "Pool by state", "new uPlot("} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the page has no %q", want)
		}
	}
	if strings.Contains(string(page), pw) {
		t.Fatal("the page holds the password")
	}
	if _, err := os.Stat(filepath.Join(dir, "charts", "pool-by-state.svg")); err != nil {
		t.Fatalf("--svg: %v", err)
	}

	// The dashboard's key O: the recording so far (no FILE.1 yet), beside it.
	path, err := reportOf(file+".1", file)()
	if err != nil || path != filepath.Join(dir, "watch.html") {
		t.Fatalf("the key's report: %q, %v", path, err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatal(err)
	}
	if _, err := reportOf()(); err == nil || !strings.Contains(err.Error(), "--record") {
		t.Fatalf("the key without a recording: %v", err)
	}

	// A last line cut short (pooltop killed mid-write): left out, with a warning.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.ndjson")
	if err := os.WriteFile(cut, append(raw, []byte(`{"time":"2026-12-05T10:00:00Z","pool":{"unu`)...), 0o600); err != nil {
		t.Fatal(err)
	}
	r = pooltop(t, "report", cut, "-o", filepath.Join(dir, "cut.html"))
	if r.code != exitOK || !strings.Contains(r.stderr, "cut short") || !strings.Contains(r.stdout, "4 snapshots") {
		t.Fatalf("a cut last line: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}

	// Two pools in one report.
	other := filepath.Join(dir, "other.ndjson")
	pooltop(t, append([]string{"watch", "--headless", "--count", "1", "--record", other}, migrated(t, 5)...)...).must(t)
	notRecording := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(notRecording, []byte("the pool ran dry at 14:03\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for name, args := range map[string][]string{
		"two pools":          {"report", file, other, "-o", filepath.Join(dir, "two.html")},
		"not a recording":    {"report", notRecording, "-o", filepath.Join(dir, "notes.html")},
		"an empty window":    {"report", file, "--from", "1999-01-01T00:00:00Z", "--to", "1999-01-02T00:00:00Z"},
		"a time that is not": {"report", file, "--from", "noon"},
		"no file":            {"report"},
		"a file missing":     {"report", filepath.Join(dir, "none.ndjson")},
		"-o the recording":   {"report", file, "-o", file},
	} {
		r := pooltop(t, args...)
		if r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || r.stderr == "" {
			t.Errorf("%s: exit %d, stderr %q: want exit 2 and one line", name, r.code, r.stderr)
		}
	}
}
