package collector

import (
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/workload"
)

// bare is a collector with no database: enough to feed record snapshots.
func bare(t *testing.T) *Collector {
	t.Helper()
	c := &Collector{series: map[string]*History{}, events: newEventLog(200), alerts: map[string]*alertState{}}
	if err := c.cfg.defaults(); err != nil {
		t.Fatal(err)
	}
	for _, s := range allSeries {
		c.series[s] = NewHistory(c.cfg.History)
	}
	return c
}

func active(s Snapshot, name string) bool {
	for _, a := range s.Alerts {
		if a.Name == name {
			return a.Active
		}
	}
	return false
}

// A lock wait hovering at the threshold raises the alert once and clears it
// only after the waits stayed under half the threshold for the hold.
func TestAlertHysteresis(t *testing.T) {
	c := bare(t)
	c.cfg.Alerts.LockWaitFor = time.Millisecond // raised at the first wait over the threshold
	t0 := time.Unix(1_700_000_000, 0)
	waits := []struct {
		ms         float64
		wantActive bool
	}{
		{10, false}, {60, true}, {45, true}, {55, true}, {40, true}, // hovering at 50 ms: stays raised
		{20, true}, {20, true}, {20, true}, {20, true}, {20, true}, {20, true}, {20, true}, {20, true}, {20, true}, {20, true},
		{20, false}, // ten seconds calm: cleared
		{30, false}, {49, false}, {51, true},
	}
	raised, cleared := 0, 0
	for i, w := range waits {
		s := Snapshot{Time: t0.Add(time.Duration(i) * time.Second), LockWaitMaxMS: w.ms}
		c.record(&s, 0)
		if got := active(s, AlertLockWait); got != w.wantActive {
			t.Fatalf("poll %d at %.0f ms: active %v, want %v", i, w.ms, got, w.wantActive)
		}
		for _, e := range s.Events {
			switch e.Kind {
			case EventAlert:
				raised++
			case EventCleared:
				cleared++
			}
		}
	}
	if raised != 2 || cleared != 1 {
		t.Fatalf("raised %d and cleared %d times, want 2 and 1", raised, cleared)
	}
}

// Count events of one kind within ten seconds merge into one line, which
// moves to the end; other kinds keep their own lines.
func TestEventsMerge(t *testing.T) {
	l := newEventLog(200)
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 6 {
		at := t0.Add(time.Duration(i) * time.Second)
		l.add(countEvent(at, EventReclaimed, 10))
		l.add(countEvent(at, EventFenced, 1000))
	}
	l.add(Event{Time: t0.Add(6 * time.Second), Kind: EventAlert, Text: "ALERT lock_wait: x"})
	l.add(countEvent(t0.Add(7*time.Second), EventReclaimed, 5))
	got := l.all()
	if len(got) != 3 {
		t.Fatalf("%d events, want 3: %+v", len(got), got)
	}
	if got[0].Kind != EventFenced || got[0].Count != 6000 || !strings.HasPrefix(got[0].Text, "6,000 zombie commits") {
		t.Fatalf("first %+v", got[0])
	}
	if got[1].Kind != EventAlert || got[2].Kind != EventReclaimed || got[2].Count != 65 || !strings.HasSuffix(got[2].Text, " in 7s") {
		t.Fatalf("then %+v, %+v", got[1], got[2])
	}
	// Past the window a new line starts.
	l.add(countEvent(t0.Add(11*time.Second), EventReclaimed, 3))
	if got := l.all(); len(got) != 4 || got[3].Count != 3 {
		t.Fatalf("after the window: %+v", got)
	}
	// The log stays bounded.
	for i := range 500 {
		l.add(Event{Time: t0, Kind: EventKnob, Text: "x"})
		_ = i
	}
	if n := len(l.all()); n != 200 {
		t.Fatalf("%d events kept, want 200", n)
	}
}

// A poll begun before a reset is not recorded; after a reset the series
// and alerts start empty.
func TestResetDropsHistory(t *testing.T) {
	c := bare(t)
	c.cfg.Alerts.LockWaitFor = time.Millisecond // raised at the first wait over the threshold
	t0 := time.Unix(1_700_000_000, 0)
	s := Snapshot{Time: t0, LockWaitMaxMS: 80}
	c.record(&s, c.startPoll())
	if !active(s, AlertLockWait) || c.series[SeriesLockWaitMax].Len() != 1 {
		t.Fatal("the first poll was not recorded")
	}
	gen := c.startPoll()
	c.Reset(true)
	late := Snapshot{Time: t0.Add(time.Second), LockWaitMaxMS: 80}
	c.record(&late, gen)
	if c.series[SeriesLockWaitMax].Len() != 0 || len(c.alerts) != 0 || !c.rebuilt {
		t.Fatalf("after reset: %d points, %d alerts, rebuilt %v", c.series[SeriesLockWaitMax].Len(), len(c.alerts), c.rebuilt)
	}
	c.unused.width = 7
	next := Snapshot{Time: t0.Add(2 * time.Second)}
	c.record(&next, c.startPoll())
	if c.unused.width != 0 || c.rebuilt || c.series[SeriesLockWaitMax].Len() != 1 || active(next, AlertLockWait) {
		t.Fatalf("the next poll: width %d rebuilt %v points %d", c.unused.width, c.rebuilt, c.series[SeriesLockWaitMax].Len())
	}
}

// The depletion alert waits for the time to empty to stay short for
// DepletionFor; an empty pool raises it at once.
func TestDepletionNeedsASustainedDrain(t *testing.T) {
	c := bare(t)
	t0 := time.Unix(1_700_000_000, 0)
	eta := 60.0
	for i, want := range []bool{false, false, false, false, false, true, true} {
		s := Snapshot{Time: t0.Add(time.Duration(i) * time.Second), Pool: Pool{Unused: 1000, Total: 2000}, DepletionETAS: &eta}
		c.record(&s, 0)
		if got := active(s, AlertDepletion); got != want {
			t.Fatalf("second %d: active %v, want %v", i, got, want)
		}
	}
	c.Reset(false)
	s := Snapshot{Time: t0.Add(time.Minute), Pool: Pool{Unused: 0, Total: 2000}}
	c.record(&s, c.startPoll())
	if !active(s, AlertDepletion) {
		t.Fatal("an empty pool did not raise the alert at once")
	}
}

// The workload's troubles (leases lost, empty claims, errors) become
// per-second series like its other counters.
func TestTroubleSeries(t *testing.T) {
	c := bare(t)
	t0 := time.Unix(1_700_000_000, 0)
	for i, w := range []workload.Snapshot{
		{LeasesLost: 10, EmptyPool: 0, Errors: map[string]int64{"timeout": 1}},
		{LeasesLost: 14, EmptyPool: 50, Errors: map[string]int64{"timeout": 3, "connection": 2}},
	} {
		s := Snapshot{Time: t0.Add(time.Duration(i) * 2 * time.Second), Workload: &w}
		c.record(&s, 0)
	}
	for name, want := range map[string]float64{SeriesLeasesLostPerS: 2, SeriesEmptyPerS: 25, SeriesErrorsPerS: 2} {
		p, ok := c.series[name].Last()
		if !ok || p.V != want {
			t.Errorf("%s: %v, want %v", name, p.V, want)
		}
	}
}

// lock_wait is raised when waits over the threshold recur (3 of the last
// 5 polls), or at once for one wait of LockWaitFor; a wait of 100 ms at a
// poll or two (a saturated server) raises nothing.
func TestLockWaitMustRecur(t *testing.T) {
	c := bare(t)
	t0 := time.Unix(1_700_000_000, 0)
	for i, w := range []struct {
		ms         float64
		wantActive bool
	}{
		{104, false}, {66, false}, {0, false}, {0, false}, {0, false}, {0, false}, // brief waits
		{112, false}, {19, false}, {90, false}, {120, true}, // blocking claims: short waits, again and again
		{0, true},
	} {
		s := Snapshot{Time: t0.Add(time.Duration(i) * time.Second), LockWaitMaxMS: w.ms}
		c.record(&s, 0)
		if got := active(s, AlertLockWait); got != w.wantActive {
			t.Fatalf("poll %d at %.0f ms: active %v, want %v", i, w.ms, got, w.wantActive)
		}
	}
	c.Reset(false)
	s := Snapshot{Time: t0.Add(time.Minute), LockWaitMaxMS: 3500} // one wait of 3.5 s
	c.record(&s, c.startPoll())
	if !active(s, AlertLockWait) {
		t.Fatal("a single wait of 3.5 s did not raise lock_wait")
	}
}
