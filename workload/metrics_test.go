package workload

import (
	"errors"
	"io"
	"testing"
	"time"
)

// The recent claim latency covers the last five seconds only: after a slow
// spell, p99 falls back as soon as the slow claims are older than that,
// while the all-time p99 keeps them.
func TestRecentLatencyForgets(t *testing.T) {
	s := newShard()
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 100 {
		s.observeAt(&s.acquire, 100*time.Millisecond, t0.Add(time.Duration(i)*10*time.Millisecond))
	}
	recentP99 := func(now time.Time) float64 {
		tt := newTotals()
		s.mu.Lock()
		s.rotate(now)
		tt.recent.Merge(s.recent.Merge())
		s.mu.Unlock()
		return latency(tt.recent).P99
	}
	if p := recentP99(t0.Add(2 * time.Second)); p < 99 {
		t.Fatalf("recent p99 during the slow spell: %.1f ms", p)
	}
	for i := range 100 {
		s.observeAt(&s.acquire, time.Millisecond, t0.Add(6*time.Second+time.Duration(i)*10*time.Millisecond))
	}
	if p := recentP99(t0.Add(7 * time.Second)); p > 2 {
		t.Fatalf("recent p99 five seconds after the slow spell: %.1f ms, want about 1", p)
	}
	if p := latency(s.acquire).P99; p < 99 {
		t.Fatalf("all-time p99 forgot the slow spell: %.1f ms", p)
	}
	// A shard quiet for longer than the window holds nothing recent.
	if n := func() int64 {
		tt := newTotals()
		s.rotate(t0.Add(time.Minute))
		tt.recent.Merge(s.recent.Merge())
		return tt.recent.TotalCount()
	}(); n != 0 {
		t.Fatalf("%d recent claims a minute later", n)
	}
}

// A worker that cannot reach the server waits twice as long at each failed
// claim, up to a second, with jitter; any other failure waits 10 ms and
// starts the backoff over.
func TestBackoffWhileTheServerIsAway(t *testing.T) {
	wk := newWorker(&Workload{runID: "t"}, 1, 1)
	want := 10 * time.Millisecond
	for i := 0; i < 12; i++ {
		d := wk.backoff(io.EOF)
		if d < want/2 || d > want {
			t.Fatalf("failure %d: waited %v, want between %v and %v", i+1, d, want/2, want)
		}
		want = min(2*want, time.Second)
	}
	if d := wk.backoff(errors.New("syntax")); d != 10*time.Millisecond {
		t.Fatalf("another error: %v", d)
	}
	if d := wk.backoff(io.EOF); d > 10*time.Millisecond {
		t.Fatalf("after a reset the backoff starts over: %v", d)
	}
}
