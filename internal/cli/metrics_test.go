package cli

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/bytesize"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// background runs one command line in-process until stop is called, with
// stdout and stderr readable while it runs.
type background struct {
	stdout, stderr *signalWriter
	cancel         context.CancelFunc
	done           chan int
}

func start(t *testing.T, args ...string) *background {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	b := &background{stdout: &signalWriter{seen: make(chan struct{})}, stderr: &signalWriter{seen: make(chan struct{})}, cancel: cancel, done: make(chan int, 1)}
	go func() { b.done <- run(ctx, args, b.stdout, b.stderr) }()
	t.Cleanup(func() { b.stop() })
	return b
}

// stop interrupts the command (Ctrl-C) and returns its exit code.
func (b *background) stop() int {
	b.cancel()
	code, ok := <-b.done
	if ok {
		close(b.done)
	} else {
		code = exitOK
	}
	return code
}

var metricsURL = regexp.MustCompile(`metrics at (http://\S+/metrics)`)

// metricsAt waits for the command to say where it serves its metrics.
func (b *background) metricsAt(t *testing.T) string {
	t.Helper()
	var url string
	pgtest.Eventually(t, "the metrics address on stderr", 30*time.Second, func() bool {
		m := metricsURL.FindStringSubmatch(b.stderr.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	return url
}

// scrape reads /metrics and parses it as Prometheus does.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value is the value of the metric of family name whose labels are
// labels ("k=v"), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, dto.MetricType, bool) {
	f, ok := fams[name]
	if !ok {
		return 0, 0, false
	}
	for _, m := range f.GetMetric() {
		var have []string
		for _, l := range m.GetLabel() {
			have = append(have, l.GetName()+"="+l.GetValue())
		}
		if strings.Join(have, ",") != strings.Join(labels, ",") {
			continue
		}
		switch f.GetType() {
		case dto.MetricType_GAUGE:
			return m.GetGauge().GetValue(), f.GetType(), true
		case dto.MetricType_COUNTER:
			return m.GetCounter().GetValue(), f.GetType(), true
		case dto.MetricType_HISTOGRAM:
			return float64(m.GetHistogram().GetSampleCount()), f.GetType(), true
		}
	}
	return 0, f.GetType(), false
}

// /metrics of a running watch carries the figures of the poll whose
// snapshot it printed, under the documented names, types and base units.
func TestMetricsOfWatchMatchItsSnapshot(t *testing.T) {
	t.Parallel()
	db := migrated(t, 40)
	pooltop(t, append([]string{"lease", "acquire", "--holder", "h", "--ttl", "1h", "--n", "3"}, db...)...).must(t)
	// One poll, then a minute's wait: every scrape meanwhile sees that poll.
	b := start(t, append([]string{"watch", "--headless", "--json", "--interval", "60s", "--listen", "127.0.0.1:0"}, db...)...)
	url := b.metricsAt(t)
	pgtest.Eventually(t, "the first snapshot", 30*time.Second, func() bool { return strings.Contains(b.stdout.String(), "\n") })
	s := decode[collector.Snapshot](t, strings.TrimSpace(b.stdout.String()))
	fams := scrape(t, url)

	gauges := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pooltop_pool_ids", []string{"state=unused"}, float64(s.Pool.Unused)},
		{"pooltop_pool_ids", []string{"state=pending"}, float64(s.Pool.Pending)},
		{"pooltop_pool_ids", []string{"state=expired"}, float64(s.Pool.Expired)},
		{"pooltop_pool_ids", []string{"state=consumed"}, float64(s.Pool.Consumed)},
		{"pooltop_lock_waiters", nil, float64(s.LockWaiters)},
		{"pooltop_lock_wait_max_seconds", nil, s.LockWaitMaxMS / 1000},
		{"pooltop_lwlock_waiters", nil, float64(s.LWLockWaits)},
		{"pooltop_dead_tuples", nil, float64(s.DeadTuples)},
		{"pooltop_live_tuples", nil, float64(s.LiveTuples)},
		{"pooltop_burn_ids_per_second", nil, s.BurnPerS},
		{"pooltop_connections", nil, float64(s.Connections)},
		{"pooltop_last_poll_timestamp_seconds", nil, float64(s.Time.UnixNano()) / 1e9},
	}
	if len(s.Alerts) == 0 {
		t.Fatal("the snapshot has no alert rules")
	}
	for _, a := range s.Alerts {
		want := 0.0
		if a.Active {
			want = 1
		}
		gauges = append(gauges, struct {
			name   string
			labels []string
			want   float64
		}{"pooltop_alert_active", []string{"alert=" + a.Name}, want})
	}
	for _, g := range gauges {
		v, typ, ok := value(fams, g.name, g.labels...)
		if !ok || typ != dto.MetricType_GAUGE || math.Abs(v-g.want) > 1e-6*math.Max(1, math.Abs(g.want)) {
			t.Errorf("%s%v = %v (%v, present %v), want a gauge of %v", g.name, g.labels, v, typ, ok, g.want)
		}
	}
	if s.Pool.Pending != 3 {
		t.Errorf("pending %d, want the 3 ids leased", s.Pool.Pending)
	}
	// Not draining: the ETA is null in the snapshot and absent here.
	if _, _, ok := value(fams, "pooltop_depletion_eta_seconds"); ok != (s.DepletionETAS != nil) {
		t.Errorf("pooltop_depletion_eta_seconds present %v, snapshot ETA %v", ok, s.DepletionETAS)
	}
	h := fams["pooltop_poll_duration_seconds"]
	if h == nil || h.GetType() != dto.MetricType_HISTOGRAM || h.GetMetric()[0].GetHistogram().GetSampleCount() != 1 ||
		math.Abs(h.GetMetric()[0].GetHistogram().GetSampleSum()-s.PollMS/1000) > 1e-9 {
		t.Errorf("pooltop_poll_duration_seconds: %v, want a histogram of the one poll of %v ms", h, s.PollMS)
	}
	if v, typ, ok := value(fams, "pooltop_polls_total"); !ok || typ != dto.MetricType_COUNTER || v != 1 {
		t.Errorf("pooltop_polls_total %v %v %v, want a counter at 1", v, typ, ok)
	}
	for name := range fams {
		if strings.HasPrefix(name, "pooltop_workload_") {
			t.Errorf("%s in watch mode, where no workload runs", name)
		}
	}
	// A second scrape polled nothing.
	scrape(t, url)
	if n := strings.Count(b.stdout.String(), "\n"); n != 1 {
		t.Errorf("%d snapshots after two scrapes, want the 1 poll", n)
	}
	if code := b.stop(); code != exitOK {
		t.Fatalf("watch exit %d: %s", code, b.stderr.String())
	}
}

// An address in use is one line and exit 1 before anything starts; an
// address that is not one is a usage error naming the flag.
func TestListenAddressTakenOrInvalid(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	db := []string{"--dsn", pgtest.DSN()}
	for _, args := range [][]string{
		append([]string{"watch", "--headless", "--count", "1", "--listen", fmt.Sprint(port)}, db...),
		append([]string{"--headless", "--count", "1", "--listen", fmt.Sprintf(":%d", port)}, db...),
	} {
		r := pooltop(t, args...)
		want := fmt.Sprintf("--listen 127.0.0.1:%d: the address is already in use", port)
		if r.code != exitError || !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 || r.stdout != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 1 and %q", args, r.code, r.stdout, r.stderr, want)
		}
	}
	for _, bad := range []string{"localhost", "99999", "host:port", "1.2.3.4:-1"} {
		r := pooltop(t, append([]string{"watch", "--headless", "--count", "1", "--listen", bad}, db...)...)
		if r.code != exitUsage || !strings.Contains(r.stderr, "--listen") {
			t.Errorf("--listen %s: exit %d, stderr %q; want a usage error", bad, r.code, r.stderr)
		}
	}
}

func TestListenAddr(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"9187": "127.0.0.1:9187", ":9187": "127.0.0.1:9187", "0.0.0.0:9187": "0.0.0.0:9187",
		"[::1]:9187": "[::1]:9187", "localhost:0": "localhost:0", "0": "127.0.0.1:0",
	} {
		if got, err := listenAddr(in); err != nil || got != want {
			t.Errorf("listenAddr(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// The demo serves its workload's counters as _total counters, at the
// values of the snapshot it recorded from the same poll.
func TestDemoMetricsCarryTheWorkloadCounters(t *testing.T) {
	t.Parallel()
	schema := scratch(t)
	file := filepath.Join(t.TempDir(), "demo.ndjson")
	b := start(t, "--dsn", pgtest.DSN(), "--schema", schema, "--headless", "--interval", "60s", "--pool-size", "2000",
		"--listen", "127.0.0.1:0", "--record", file)
	url := b.metricsAt(t)
	pgtest.Eventually(t, "the first poll", 30*time.Second, func() bool { return strings.Contains(b.stdout.String(), "\n") })
	fams := scrape(t, url)
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ls := lines(raw)
	if len(ls) != 2 {
		t.Fatalf("recording of %d lines, want the header and one snapshot", len(ls))
	}
	s := decode[collector.Snapshot](t, string(ls[1]))
	if s.Workload == nil {
		t.Fatal("the demo's snapshot has no workload")
	}
	w := s.Workload
	for name, want := range map[string]int64{
		"pooltop_workload_acquires_total": w.Acquired, "pooltop_workload_commits_total": w.Committed,
		"pooltop_workload_fenced_rejections_total": w.FencedRejections, "pooltop_workload_double_finalizations_total": w.DoubleFinalizations,
		"pooltop_workload_crashes_total": w.Crashes, "pooltop_workload_reclaimed_total": w.Reclaimed, "pooltop_workload_cycles_total": w.Cycles,
		"pooltop_workload_reaper_held_total": w.ReaperHeld,
	} {
		if v, typ, ok := value(fams, name); !ok || typ != dto.MetricType_COUNTER || v != float64(want) {
			t.Errorf("%s = %v (%v, present %v), want a counter at %d", name, v, typ, ok, want)
		}
	}
	if v, typ, ok := value(fams, "pooltop_workload_reaper_max_lag_seconds"); !ok || typ != dto.MetricType_GAUGE || v != w.ReaperMaxLag.Seconds() {
		t.Errorf("pooltop_workload_reaper_max_lag_seconds = %v (%v, present %v), want a gauge at %v", v, typ, ok, w.ReaperMaxLag.Seconds())
	}
	if v, _, ok := value(fams, "pooltop_pool_ids", "state=unused"); !ok || v != float64(s.Pool.Unused) {
		t.Errorf("unused %v, recorded %d", v, s.Pool.Unused)
	}
	if code := b.stop(); code != exitOK {
		t.Fatalf("demo exit %d: %s", code, b.stderr.String())
	}
}

func TestByteSize(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"4096": 4096, "500KiB": 500 << 10, "64MiB": 64 << 20, "1g": 1 << 30, "2 MB": 2 << 20} {
		var b bytesize.Size
		if err := b.Set(in); err != nil || int64(b) != want {
			t.Errorf("%q: %d, %v; want %d", in, b, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "-1MiB", "1.5MiB", "99999999999GiB"} {
		var b bytesize.Size
		if err := b.Set(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	if s := bytesize.Size(64 << 20).String(); s != "64MiB" {
		t.Errorf("64 MiB prints as %s", s)
	}
}
