package report

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/workload"
)

// day makes n snapshots a second apart: a pool draining slowly, a lock
// wait of 9,876 ms at one snapshot only (spike), a lock_wait alert up for
// ten minutes from an hour in, and a demo workload's counters.
func day(n, spike int) []collector.Snapshot {
	start := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	out := make([]collector.Snapshot, n)
	for i := range out {
		s := collector.Snapshot{Time: start.Add(time.Duration(i) * time.Second)}
		s.Pool = collector.Pool{Unused: int64(1_000_000 - i), Pending: int64(10 + i%7), Consumed: int64(i)}
		s.BurnPerS, s.LockWaiters, s.LockWaitMaxMS = 1, i%3, float64(i%50)
		if i == spike {
			s.LockWaitMaxMS = 9876
		}
		s.Workload = &workload.Snapshot{FencedRejections: int64(i / 1000), DoubleFinalizations: 0}
		s.Alerts = []collector.Alert{{Name: collector.AlertLockWait, Active: i >= 3600 && i < 4200, Message: "longest lock wait over 50 ms"}}
		out[i] = s
	}
	return out
}

// A day of 1 s polls: the page stays within its budget, the lock wait of
// one snapshot is the peak and is drawn, the alert's ten minutes are one
// span with its runbook line, and the page says it was downsampled.
func TestADayOfSnapshots(t *testing.T) {
	const n, spike = 86_400, 43_210
	r, page := rendered(t, &collector.RecordingHeader{Mode: "watch", Source: collector.Info{Host: "db:5432", Database: "pool", User: "oncall", Table: "public.resource_pool"}},
		day(n, spike), Options{})
	const budget = 1 << 20 // 1 MiB for a day, uPlot included
	if len(page) > budget {
		t.Errorf("a day's page is %d bytes, over the budget of %d", len(page), budget)
	}
	t.Logf("a day of 1 s snapshots: %d bytes", len(page))
	if len(r.Peaks) == 0 {
		t.Fatal("no peaks")
	}
	var wait *Peak
	for i := range r.Peaks {
		if r.Peaks[i].Name == "longest lock wait (ms)" {
			wait = &r.Peaks[i]
		}
	}
	if wait == nil || wait.Value != 9876 || !wait.At.Equal(time.Date(2026, 12, 5, 12, 0, 10, 0, time.UTC)) {
		t.Fatalf("lock wait peak %+v, want 9876 ms at 12:00:10", wait)
	}
	if !strings.Contains(page, ",9876,") {
		t.Error("the one-snapshot spike of 9876 ms is not among the points drawn")
	}
	if len(r.Alerts) != 1 || r.Alerts[0].To.Sub(r.Alerts[0].From) != 10*time.Minute || !strings.Contains(r.Alerts[0].Runbook, "Look first at") {
		t.Fatalf("alerts %+v, want lock_wait up for 10 minutes with its runbook", r.Alerts)
	}
	for _, want := range []string{"oncall@db:5432/pool", "86,400 snapshots", "no peak is lost", "lock_wait", "10m0s", "stale-token rejections</th><td>86<"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page has no %q", want)
		}
	}
	if strings.Contains(page, "http://") || strings.Contains(page, "https://") && !strings.Contains(page, "https://github.com/leeoniya/uPlot") {
		t.Error("the page refers to the network")
	}
}

// The window: --from and --to keep the snapshots between them, and a
// window with none is an error that says where the recording runs.
func TestWindow(t *testing.T) {
	snaps := day(600, 300)
	from, to := snaps[100].Time, snaps[199].Time
	r, err := New(nil, snaps, Options{From: from, To: to, Title: "t"})
	if err != nil || r.Snapshots != 100 || !r.From.Equal(from) || !r.To.Equal(to) {
		t.Fatalf("window: %v snapshots from %v to %v (%v)", r.Snapshots, r.From, r.To, err)
	}
	_, err = New(nil, snaps, Options{From: snaps[599].Time.Add(time.Hour)})
	if err == nil || !strings.Contains(err.Error(), "no snapshot between") || !strings.Contains(err.Error(), "the recording runs from") {
		t.Fatalf("an empty window: %v", err)
	}
}

// Downsampling keeps every bucket's extremes, in time order, within the
// limit, and everything when there are few points.
func TestDownsampleKeepsPeaks(t *testing.T) {
	v := make([]float64, 100_000)
	for i := range v {
		v[i] = math.Sin(float64(i) / 1000)
	}
	v[77_777], v[12_345] = 50, -50
	keep := Downsample(len(v), 2000, v)
	if len(keep) > 2000 {
		t.Fatalf("%d points kept, over 2000", len(keep))
	}
	seen := map[int]bool{}
	for i, k := range keep {
		if i > 0 && k <= keep[i-1] {
			t.Fatalf("not in time order at %d", i)
		}
		seen[k] = true
	}
	if !seen[77_777] || !seen[12_345] {
		t.Fatal("a peak was dropped")
	}
	if got := Downsample(10, 2000, v[:10]); len(got) != 10 {
		t.Fatalf("10 points: kept %d", len(got))
	}
}

// --svg: a file per chart with values, each an SVG document named after
// its chart, with a gap where a series was not recorded.
func TestSVGPerChart(t *testing.T) {
	snaps := day(3600, 1800)
	for i := 1000; i < 1100; i++ {
		snaps[i].Workload = nil // a stretch without the workload's figures
	}
	r, err := New(nil, snaps, Options{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	files, err := r.WriteSVG(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(r.charts)-countEmpty(r) {
		t.Fatalf("%d files for %d charts with values", len(files), len(r.charts)-countEmpty(r))
	}
	want := map[string]bool{"pool-by-state.svg": false, "lock-waits.svg": false, "fencing.svg": false}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b[:min(len(b), 400)], []byte("<svg")) {
			t.Errorf("%s is not an SVG document: %.80q", f, b)
		}
		if _, ok := want[filepath.Base(f)]; ok {
			want[filepath.Base(f)] = true
		}
	}
	for name, seen := range want {
		if !seen {
			t.Errorf("no %s among %v", name, files)
		}
	}
}

// The report on the other shapes pooltop records: a partitioned pool has
// a chart of each partition's UNUSED, a watch over several servers one of
// each server's (a server that did not answer leaves a gap), and their
// peaks come from the sums.
func TestPartitionedAndServersShapes(t *testing.T) {
	snaps := day(600, 300)
	for i := range snaps {
		s := &snaps[i]
		s.Partitions = []collector.PartitionUnused{{Name: "resource_pool_p0", Unused: int64(500 - i/2)}, {Name: "resource_pool_p1", Unused: int64(480 - i/3)}}
		one := collector.Snapshot{Pool: collector.Pool{Unused: int64(700 - i)}}
		s.Servers = []collector.ServerView{{Server: "s1", Reachable: true, Snapshot: &one}, {Server: "s2", Reachable: i%100 != 0, Snapshot: &one}}
	}
	r, page := rendered(t, nil, snaps, Options{})
	for _, want := range []string{`"Partitions: UNUSED"`, `"partition resource_pool_p0"`, `"Servers: UNUSED"`, `"server s2"`, "servers</th><td>s1, s2"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page has no %s", want)
		}
	}
	gaps := 0
	for _, v := range r.byName["server s2"].V {
		if math.IsNaN(v) {
			gaps++
		}
	}
	if gaps != 6 {
		t.Errorf("server s2 has %d gaps, want the 6 polls it did not answer", gaps)
	}
}

// rendered is the report of snaps and its page, failing t on an error.
func rendered(t *testing.T, h *collector.RecordingHeader, snaps []collector.Snapshot, opts Options) (*Report, string) {
	t.Helper()
	r, err := New(h, snaps, opts)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteHTML(&b); err != nil {
		t.Fatal(err)
	}
	return r, b.String()
}

// demo is a 40 s demo recording as a new user makes one: the pool is
// seeded while the dashboard starts (20,000 ids, then 60,000 and 120,000
// more a second apart, which the collector reads as a net burn of minus
// 60,000 and 90,000 ids/s), then drains slowly, 0.575498 ids/s at most,
// with six million seconds to empty at the shortest.
func demo() []collector.Snapshot {
	start := time.Date(2026, 12, 5, 14, 0, 0, 0, time.UTC)
	out := make([]collector.Snapshot, 40)
	total := []int64{20_000, 80_000, 200_000}
	for i := range out {
		s := collector.Snapshot{Time: start.Add(time.Duration(i) * time.Second)}
		s.Pool.Total = total[min(i, 2)]
		s.Pool.Unused = s.Pool.Total - int64(max(i-2, 0))
		s.Pool.Consumed = int64(max(i-2, 0))
		switch {
		case i == 1:
			s.BurnPerS = -60_000
		case i == 2:
			s.BurnPerS = -90_000
		case i > 2:
			s.BurnPerS = 0.575498 - 0.001*float64(i-3)
			eta := 6_000_000 + 1000*float64(i-3)
			s.DepletionETAS = &eta
		}
		out[i] = s
	}
	return out
}

// A refill is drawn as a refill, on a chart of its own, and does not set
// the burn chart's scale; the summary counts the ids added; the peak burn
// and the time to empty are written rounded, in the dashboard's units.
func TestRefillsAndFiguresAsTheDashboardWritesThem(t *testing.T) {
	r, page := rendered(t, nil, demo(), Options{})
	burn := r.byName["burn"].V
	if lo, hi := slices.Min(burn), slices.Max(burn); lo < 0 || hi != 0.575498 {
		t.Errorf("the burn chart spans %v to %v, want 0 to the peak burn 0.575498 (no refill drawn as burn)", lo, hi)
	}
	if added := r.byName["ids added"].V; slices.Max(added[1:]) != 120_000 {
		t.Errorf("refills drawn %v, want the 120,000 ids added at 14:00:02", added)
	}
	if r.Added != 180_000 {
		t.Errorf("ids added %d, want 180,000", r.Added)
	}
	var burnPeak *Peak
	for i := range r.Peaks {
		if r.Peaks[i].Name == "burn" {
			burnPeak = &r.Peaks[i]
		}
	}
	if burnPeak == nil || burnPeak.Text != "0.6 ids/s" || !burnPeak.At.Equal(time.Date(2026, 12, 5, 14, 0, 3, 0, time.UTC)) {
		t.Errorf("peak burn %+v, want 0.6 ids/s at 14:00:03", burnPeak)
	}
	for _, want := range []string{`"title":"Refills"`, `"title":"Time to empty","unit":"d"`, `data-peak="burn">0.6 ids/s<`,
		"ids added (refills)</th><td>180,000<", "shortest time to empty</th><td>69d at 14:00:03<"} {
		if !strings.Contains(page, want) {
			t.Errorf("the page has no %s", want)
		}
	}
	for _, unwanted := range []string{"0.575498 ids/s", "6e+06", "6000000", "-60000", "-90000"} {
		if strings.Contains(page, unwanted) {
			t.Errorf("the page holds %s: a raw figure", unwanted)
		}
	}
}
