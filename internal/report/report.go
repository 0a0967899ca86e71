// Package report turns a recording of pooltop's snapshots into one
// self-contained HTML page for a postmortem: charts of the pool on one
// shared time axis (drawn by uPlot, inlined with its licence, so the page
// needs no network), the alert timeline with each alert's runbook line,
// the events, and a summary of the window.
package report

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/catalogue"
	"github.com/pooltop-dev/pooltop/internal/termtext"
)

// MaxPoints is the most points a series is drawn with: past it, the
// snapshots are cut into MaxPoints/2 buckets and each bucket keeps its
// lowest and its highest value, in time order, so that a peak of one
// snapshot in a day of them still shows.
const MaxPoints = 2000

// Options are what the page is made of besides the recording.
type Options struct {
	Title    string
	From, To time.Time // the window (zero: the recording's ends)
}

// Report is a recording read for the page: the figures of each snapshot in
// the window, its alerts and events.
type Report struct {
	Title    string
	Source   collector.Info
	Mode     string
	From, To time.Time
	// Snapshots is how many snapshots the window holds.
	Snapshots int
	charts    []*chart
	byName    map[string]*series
	Alerts    []AlertSpan
	Events    []collector.Event
	Peaks     []Peak
	// Emptiest is the shortest time to empty in the window (nil: the pool
	// was not draining at any snapshot), and EmptiestAt when.
	Emptiest   *float64
	EmptiestAt time.Time
	// Added is the ids added to the pool in the window (refills: the rise
	// of its rows from snapshot to snapshot).
	Added    int64
	Consumed int64 // ids consumed in the window (CONSUMED at its end less at its start)
	Doubles  int64 // double finalizations the workload counted (demo recordings)
	Fenced   int64 // commits the fence rejected with a stale token (demo recordings)
	Servers  []string
}

// AlertSpan is an alert from when it was raised to when it cleared (To
// zero: still raised at the end of the window).
type AlertSpan struct {
	Name, Server, Message, Runbook string
	From, To                       time.Time
}

// Peak is a figure's highest value in the window and when it was reached;
// Text is the value as the dashboard writes it, rounded, with its unit.
type Peak struct {
	Name  string
	Value float64
	Unit  string
	Text  string
	At    time.Time
}

// peakText writes a peak's value rounded, in the dashboard's way: a rate
// compactly (0.6, 12, 3.4k), a count with thousands separators, a time in
// milliseconds to a tenth below 100 ms and whole above.
func peakText(v float64, unit string) string {
	switch unit {
	case "ids/s":
		return termtext.Rate(v) + " ids/s"
	case "ms":
		if v < 100 {
			return strconv.FormatFloat(v, 'f', 1, 64) + " ms"
		}
		return termtext.Count(int64(math.Round(v))) + " ms"
	case "":
		return termtext.Count(int64(math.Round(v)))
	}
	return termtext.Count(int64(math.Round(v))) + " " + unit
}

// chart is one chart of the page: its series share a y axis.
type chart struct {
	Title  string
	Unit   string
	Series []*series
}

// series is one line: a value per snapshot (NaN where it was not recorded).
type series struct {
	Name string
	V    []float64
}

// New reads the snapshots of a recording (in any order: they are sorted
// by time) for the page. It fails when the window holds no snapshot.
func New(header *collector.RecordingHeader, snaps []collector.Snapshot, o Options) (*Report, error) {
	sort.SliceStable(snaps, func(i, j int) bool { return snaps[i].Time.Before(snaps[j].Time) })
	var in []collector.Snapshot
	for _, s := range snaps {
		if (!o.From.IsZero() && s.Time.Before(o.From)) || (!o.To.IsZero() && s.Time.After(o.To)) {
			continue
		}
		in = append(in, s)
	}
	if len(in) == 0 {
		if len(snaps) == 0 {
			return nil, fmt.Errorf("the recording holds no snapshot")
		}
		return nil, fmt.Errorf("no snapshot between %s and %s: the recording runs from %s to %s",
			stamp(o.From), stamp(o.To), stamp(snaps[0].Time), stamp(snaps[len(snaps)-1].Time))
	}
	r := &Report{Title: o.Title, From: in[0].Time, To: in[len(in)-1].Time, Snapshots: len(in), byName: map[string]*series{}}
	if header != nil {
		r.Source, r.Mode = header.Source, header.Mode
	}
	if r.Title == "" {
		r.Title = "pooltop report: " + r.From.Format("2006-01-02 15:04") + " to " + r.To.Format("15:04 MST")
	}
	r.build(in)
	return r, nil
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "the end"
	}
	return t.Format(time.RFC3339)
}

// define lays out the charts; each series is then filled per snapshot.
func (r *Report) define(title, unit string, names ...string) {
	c := &chart{Title: title, Unit: unit}
	for _, n := range names {
		s := &series{Name: n}
		c.Series = append(c.Series, s)
		r.byName[n] = s
	}
	r.charts = append(r.charts, c)
}

func (r *Report) build(in []collector.Snapshot) {
	r.define("Pool by state", "ids", "unused", "pending", "expired", "consumed")
	// Burn is the net decline of UNUSED: while ids are added faster than
	// they are taken it is negative, and that is a refill, drawn on a
	// chart of its own (a seeding of 100,000 ids would otherwise set the
	// burn chart's scale and flatten every other point of it).
	r.define("Burn rate", "ids/s", "burn")
	r.define("Refills", "ids/s", "ids added")
	r.define("Time to empty", etaUnit(in).name, "time to empty")
	r.define("Lock waits", "", "lock waiters", "longest lock wait (ms)")
	r.define("Dead tuples", "", "dead tuples", "autovacuum runs")
	r.define("Claim latency", "ms", "claim p50", "claim p99")
	r.define("Fencing", "", "stale-token rejections", "double finalizations")
	r.define("Leaks and the reaper", "ids", "stuck", "expired past a reaper interval", "leaked")
	r.define("Fleet", "processes", "alive", "gone")
	partitions, servers := map[string]bool{}, map[string]bool{}
	for _, s := range in {
		for _, p := range s.Partitions {
			partitions[p.Name] = true
		}
		for _, v := range s.Servers {
			servers[v.Server] = true
		}
	}
	if len(partitions) > 0 {
		r.define("Partitions: UNUSED", "ids", sortedKeys(partitions, "partition ")...)
	}
	if len(servers) > 0 {
		r.Servers = sortedKeys(servers, "")
		r.define("Servers: UNUSED", "ids", sortedKeys(servers, "server ")...)
	}
	r.byName["time"] = &series{Name: "time"}
	eta := etaUnit(in)
	for i := range in {
		var prev *collector.Snapshot
		if i > 0 {
			prev = &in[i-1]
		}
		r.add(&in[i], prev, eta)
	}
	if added := r.byName["ids added"].V; !slices.ContainsFunc(added, func(v float64) bool { return v > 0 }) {
		for i := range added {
			added[i] = math.NaN() // nothing was added: no chart of refills
		}
	}
	r.summarize(in)
}

func sortedKeys(m map[string]bool, prefix string) []string {
	var out []string
	for k := range m {
		out = append(out, prefix+k)
	}
	sort.Strings(out)
	return out
}

// timeUnit is a unit the dashboard writes times to empty in, and its
// length in seconds.
type timeUnit struct {
	name string
	s    float64
}

// etaUnit is the unit the time-to-empty chart is drawn in: the dashboard's
// (s, min, h, d) for the longest time to empty of the window, so that the
// axis reads 69 d, not 6,000,000 s.
func etaUnit(in []collector.Snapshot) timeUnit {
	longest := 0.0
	for _, s := range in {
		if s.DepletionETAS != nil {
			longest = max(longest, *s.DepletionETAS)
		}
	}
	switch {
	case longest >= 48*3600:
		return timeUnit{"d", 86400}
	case longest >= 3600:
		return timeUnit{"h", 3600}
	case longest >= 60:
		return timeUnit{"min", 60}
	}
	return timeUnit{"s", 1}
}

// add appends one snapshot's figures, NaN for those it does not hold;
// prev is the snapshot before it (nil for the first).
func (r *Report) add(s, prev *collector.Snapshot, eta timeUnit) {
	nan := math.NaN()
	set := map[string]float64{
		"time":   float64(s.Time.UnixMilli()),
		"unused": float64(s.Pool.Unused), "pending": float64(s.Pool.Pending), "expired": float64(s.Pool.Expired), "consumed": float64(s.Pool.Consumed),
		"burn": max(s.BurnPerS, 0), "ids added": nan, "time to empty": nan,
		"lock waiters": float64(s.LockWaiters), "longest lock wait (ms)": s.LockWaitMaxMS,
		"dead tuples": float64(s.DeadTuples), "autovacuum runs": float64(s.AutovacuumCount),
		"claim p50": nan, "claim p99": nan, "stale-token rejections": nan, "double finalizations": nan,
		"stuck": float64(s.Pool.Stuck), "expired past a reaper interval": float64(s.Pool.ExpiredOld), "leaked": nan,
		"alive": nan, "gone": nan,
	}
	if s.DepletionETAS != nil {
		set["time to empty"] = *s.DepletionETAS / eta.s
	}
	if prev != nil {
		if dt := s.Time.Sub(prev.Time).Seconds(); dt > 0 {
			set["ids added"] = float64(max(s.Pool.Total-prev.Pool.Total, 0)) / dt
		}
	}
	if w := s.Workload; w != nil {
		set["claim p50"], set["claim p99"] = w.RecentAcquireLatency.P50, w.RecentAcquireLatency.P99
		set["stale-token rejections"], set["double finalizations"] = float64(w.FencedRejections), float64(w.DoubleFinalizations)
		set["leaked"] = float64(w.Leaked)
	}
	if s.Fleet != nil {
		alive, gone := 0, 0
		for _, p := range s.Fleet {
			switch p.State {
			case collector.ProcessAlive:
				alive++
			case collector.ProcessGone:
				gone++
			}
		}
		set["alive"], set["gone"] = float64(alive), float64(gone)
	}
	for _, p := range s.Partitions {
		set["partition "+p.Name] = float64(p.Unused)
	}
	for _, v := range s.Servers {
		if v.Reachable && v.Snapshot != nil {
			set["server "+v.Server] = float64(v.Snapshot.Pool.Unused)
		}
	}
	for name, ser := range r.byName {
		v, ok := set[name]
		if !ok {
			v = nan
		}
		ser.V = append(ser.V, v)
	}
}

// summarize finds the peaks, the alert spans, the events and the totals.
func (r *Report) summarize(in []collector.Snapshot) {
	times := r.byName["time"].V
	for _, p := range []struct{ name, unit string }{
		{"burn", "ids/s"}, {"pending", "ids"}, {"expired", "ids"}, {"lock waiters", ""}, {"longest lock wait (ms)", "ms"},
		{"dead tuples", ""}, {"claim p99", "ms"}, {"stuck", "ids"}, {"expired past a reaper interval", "ids"}, {"leaked", "ids"},
	} {
		best, at := math.Inf(-1), -1
		for i, v := range r.byName[p.name].V {
			if !math.IsNaN(v) && v > best {
				best, at = v, i
			}
		}
		if at >= 0 && best > 0 {
			r.Peaks = append(r.Peaks, Peak{Name: p.name, Value: best, Unit: p.unit, Text: peakText(best, p.unit), At: time.UnixMilli(int64(times[at]))})
		}
	}
	first, last := in[0], in[len(in)-1]
	r.Consumed = last.Pool.Consumed - first.Pool.Consumed
	for i, s := range in {
		if i > 0 {
			r.Added += max(s.Pool.Total-in[i-1].Pool.Total, 0)
		}
		if e := s.DepletionETAS; e != nil && (r.Emptiest == nil || *e < *r.Emptiest) {
			v := *e
			r.Emptiest, r.EmptiestAt = &v, s.Time
		}
	}
	for _, s := range in {
		if w := s.Workload; w != nil {
			r.Doubles, r.Fenced = max(r.Doubles, w.DoubleFinalizations), max(r.Fenced, w.FencedRejections)
		}
		r.Events = append(r.Events, s.Events...)
	}
	runbooks := map[string]string{}
	for _, a := range catalogue.Alerts(collector.AlertConfig{}) {
		runbooks[a.Name] = fmt.Sprintf("Look first at %s. Do: %s.", a.Runbook.First, a.Runbook.Do)
	}
	open := map[string]*AlertSpan{}
	for _, s := range in {
		up := map[string]bool{}
		for _, a := range s.Alerts {
			if !a.Active {
				continue
			}
			key := a.Name + "\x00" + a.Server
			up[key] = true
			if open[key] == nil {
				open[key] = &AlertSpan{Name: a.Name, Server: a.Server, Message: a.Message, Runbook: runbooks[a.Name], From: s.Time}
			}
		}
		for key, span := range open {
			if !up[key] {
				span.To = s.Time
				r.Alerts = append(r.Alerts, *span)
				delete(open, key)
			}
		}
	}
	for _, span := range open {
		r.Alerts = append(r.Alerts, *span)
	}
	sort.SliceStable(r.Alerts, func(i, j int) bool { return r.Alerts[i].From.Before(r.Alerts[j].From) })
}

// Downsample picks at most limit of n snapshots to draw series vs with:
// the snapshots are cut into buckets of equal count, and each bucket keeps
// its first snapshot and those where each series is at its lowest and its
// highest, in time order, so that no peak is lost. It returns the indexes
// kept (all of them when n ≤ limit).
func Downsample(n, limit int, vs ...[]float64) []int {
	if n <= limit {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	buckets := max(1, limit/(1+2*len(vs)))
	var keep []int
	for b := 0; b < buckets; b++ {
		lo, hi := b*n/buckets, (b+1)*n/buckets
		if lo >= hi {
			continue
		}
		marks := map[int]bool{lo: true}
		for _, v := range vs {
			iMin, iMax := -1, -1
			for i := lo; i < hi; i++ {
				if math.IsNaN(v[i]) {
					continue
				}
				if iMin < 0 || v[i] < v[iMin] {
					iMin = i
				}
				if iMax < 0 || v[i] > v[iMax] {
					iMax = i
				}
			}
			if iMin >= 0 {
				marks[iMin], marks[iMax] = true, true
			}
		}
		idx := make([]int, 0, len(marks))
		for i := range marks {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		keep = append(keep, idx...)
	}
	return keep
}
