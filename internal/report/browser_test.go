package report

import (
	"bytes"
	"context"
	"encoding/json"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// chromium finds the headless browser the test opens the page in:
// Debian's chromium, which .ci/run installs.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium: the report's browser test needs it (apt-get install chromium; .ci/run installs it)")
	return ""
}

// The page of a day of snapshots, opened in headless Chromium from a file
// (no network), runs with no script error, draws every chart, and its
// lock wait chart holds the 9,876 ms of the one snapshot that had it.
func TestThePageInABrowser(t *testing.T) {
	t.Parallel()
	bin := chromium(t)
	r, page := rendered(t, nil, day(86_400, 43_210), Options{Title: "browser test"})
	file := filepath.Join(t.TempDir(), "report.html")
	if err := os.WriteFile(file, []byte(page), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
		"--user-data-dir="+t.TempDir(), "--virtual-time-budget=10000", "--dump-dom", "file://"+file)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium: %v\n%s", err, stderr.String())
	}
	if m := regexp.MustCompile(`data-errors="([^"]*)"`).FindSubmatch(dom); m != nil {
		t.Fatalf("script errors on the page: %s", m[1])
	}
	m := regexp.MustCompile(`data-charts="(\d+)"`).FindSubmatch(dom)
	if m == nil || string(m[1]) == "0" {
		t.Fatalf("no chart drawn (data-charts %q)", m)
	}
	d := regexp.MustCompile(`(?s)<pre id="drawn" hidden="">(.*?)</pre>`).FindSubmatch(dom)
	if d == nil {
		t.Fatal("the page did not say what it drew")
	}
	var drawn []struct {
		Title  string
		Series []struct {
			Name string
			Max  *float64
		}
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(string(d[1]))), &drawn); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range drawn {
		for _, s := range c.Series {
			if s.Name == "longest lock wait (ms)" && s.Max != nil && *s.Max == 9876 {
				found = true
			}
		}
	}
	if !found {
		t.Fatalf("the lock wait chart does not hold the peak of 9876 ms: %+v", drawn)
	}
	if len(drawn) != len(r.charts)-countEmpty(r) {
		t.Errorf("%d charts drawn, want %d", len(drawn), len(r.charts)-countEmpty(r))
	}
}

// countEmpty counts the charts with no value at all (left off the page).
func countEmpty(r *Report) int {
	n := 0
	for _, c := range r.charts {
		empty := true
		for _, s := range c.Series {
			if hasValue(s.V) {
				empty = false
			}
		}
		if empty {
			n++
		}
	}
	return n
}
