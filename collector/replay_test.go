package collector

import (
	"bytes"
	"encoding/json"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/workload"
)

// synthetic is poll i of a demo that drains and makes lock waits now
// and then, taken through the collector's record step as live.
func synthetic(c *Collector, t0 time.Time, i int, every time.Duration) Snapshot {
	s := Snapshot{Time: t0.Add(time.Duration(i) * every), Pool: Pool{Unused: int64(100_000 - 10*i), Pending: int64(i % 40), Total: 100_000, Estimated: []string{}},
		LockWaitMaxMS: float64((i * 37) % 120), DeadTuples: int64(i % 5000), Waiters: []Waiter{}, Blockers: []Blocker{}, Alerts: []Alert{},
		Workload: &workload.Snapshot{Acquired: int64(12 * i), Committed: int64(11 * i), FencedRejections: int64(i / 3), Errors: map[string]int64{"timeout": int64(i / 10)}}}
	s.Pool.unusedDelta, s.Pool.haveDelta = -10, i > 0
	c.record(&s, c.gen)
	return s
}

// A replay charts a recording as the live collector charted the polls:
// the same series (rates from the workload counters included), events and
// alerts, at the end and after seeking back and forth.
func TestReplayChartsAsLive(t *testing.T) {
	c := bare(t)
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var file bytes.Buffer
	for i := range 300 {
		s := synthetic(c, t0, i, time.Second)
		line, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		file.Write(append(line, '\n'))
	}
	var rec Recording
	if err := ReadRecording(&rec, &file, "test"); err != nil {
		t.Fatal(err)
	}
	r, err := NewReplay(rec, c.cfg.History)
	if err != nil {
		t.Fatal(err)
	}
	same := func(when string) {
		t.Helper()
		for _, name := range allSeries {
			live, back := c.Series(name), r.Series(name)
			if len(live) != len(back) {
				t.Fatalf("%s: series %s has %d points replayed, %d live", when, name, len(back), len(live))
			}
			for i := range live {
				if !live[i].T.Equal(back[i].T) || math.Abs(live[i].V-back[i].V) > 1e-9 {
					t.Fatalf("%s: series %s point %d replayed %v, live %v", when, name, i, back[i], live[i])
				}
			}
		}
		if len(r.Events()) != len(c.Events()) {
			t.Fatalf("%s: %d events replayed, %d live", when, len(r.Events()), len(c.Events()))
		}
	}
	r.Seek(t0.Add(time.Hour)) // past the end: the last snapshot
	same("at the end")
	if at, i := r.Head(); i != 299 || !at.Equal(t0.Add(299*time.Second)) {
		t.Fatalf("head %v #%d", at, i)
	}
	r.Seek(t0.Add(90*time.Second + 500*time.Millisecond))
	if _, i := r.Head(); i != 90 || len(r.Series(SeriesUnused)) != 91 {
		t.Fatalf("after a seek to 1m30.5s: head #%d, %d points", i, len(r.Series(SeriesUnused)))
	}
	r.Step(-100)
	if _, i := r.Head(); i != 0 {
		t.Fatalf("stepped before the start: head #%d", i)
	}
	r.Step(299)
	same("stepped to the end")
	s, _ := r.Poll(t.Context())
	if !s.Time.Equal(t0.Add(299*time.Second)) || len(s.Alerts) == 0 {
		t.Fatalf("poll at the end: %v, %d alerts", s.Time, len(s.Alerts))
	}
}

// An hour at the fastest poll interval (0.25 s, 14,400 polls) keeps every
// series bounded: the heap the collector holds afterwards is what it
// holds after fifteen minutes, and a few megabytes.
func TestHistoryMemoryBounded(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	empty := heap()
	c := bare(t) // its histories are allocated in full from the start
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	base := heap()
	var quarter uint64
	for i := range 14_400 {
		synthetic(c, t0, i, 250*time.Millisecond)
		if i == 3600 {
			quarter = heap()
		}
	}
	end := heap()
	grown := int64(end) - int64(base)
	t.Logf("heap: %d KiB without a collector, %d KiB with its empty histories, %d KiB after 15 min, %d KiB after 1 h of 0.25 s polls (%d series)",
		empty>>10, base>>10, quarter>>10, end>>10, len(allSeries))
	if grown > 8<<20 {
		t.Fatalf("the heap grew by %d KiB over an hour of polls", grown>>10)
	}
	if end > quarter+(1<<20) {
		t.Fatalf("the heap grew from %d to %d KiB between 15 min and 1 h", quarter>>10, end>>10)
	}
	ps := c.Series(SeriesUnused)
	if span := ps[len(ps)-1].T.Sub(ps[0].T); span < 59*time.Minute || len(ps) > DefaultHistory+int(CoarseSpan/CoarseStep) {
		t.Fatalf("the series spans %v in %d points, want an hour in at most %d", span, len(ps), DefaultHistory+int(CoarseSpan/CoarseStep))
	}
}
