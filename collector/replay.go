package collector

import (
	"context"
	"errors"
	"sort"
	"sync"
	"time"
)

// Replay is a recording as the dashboard's source: Poll returns the
// snapshot at the play head, and Series and Events are what the live
// collector had at that moment (the same points, through addPoints; the
// events the snapshots carry), so panels and alerts read as they did live.
// The play head moves with Seek and Step; safe for use from any goroutine.
type Replay struct {
	snaps   []Snapshot
	info    Info
	history int

	mu     sync.Mutex
	head   int
	built  int // the series and events hold snaps[from:built]
	series map[string]*History
	events *eventLog
}

// NewReplay makes a replay of rec, the play head on its first snapshot;
// history is the points kept as recorded, as Config.History.
func NewReplay(rec Recording, history int) (*Replay, error) {
	if len(rec.Snapshots) == 0 {
		return nil, errors.New("the recording holds no snapshot")
	}
	// In time order, whatever order the files were given in (FILE FILE.1).
	snaps := append([]Snapshot(nil), rec.Snapshots...)
	sort.SliceStable(snaps, func(i, j int) bool { return snaps[i].Time.Before(snaps[j].Time) })
	r := &Replay{snaps: snaps, history: max(history, 1)}
	if rec.Header != nil {
		r.info = rec.Header.Source
	}
	r.rebuild(0)
	return r, nil
}

// rebuild makes the series and events of a play head at i from scratch:
// from the last hour before it, all a history can hold.
func (r *Replay) rebuild(i int) {
	r.series = map[string]*History{}
	for _, name := range allSeries {
		r.series[name] = NewHistory(r.history)
	}
	r.events = newEventLog(200)
	t := r.snaps[i].Time.Add(-CoarseSpan)
	from := sort.Search(i, func(k int) bool { return !r.snaps[k].Time.Before(t) })
	r.built = from
	r.advance(i)
}

// advance adds the snapshots after the last one added, up to i.
func (r *Replay) advance(i int) {
	for ; r.built <= i; r.built++ {
		s := &r.snaps[r.built]
		var prev *raw
		if r.built > 0 {
			prev = rawOf(&r.snaps[r.built-1])
			if s.Time.Sub(prev.at) > time.Minute+MaxInterval {
				prev = nil // a gap between two runs: no rate across it
			}
		}
		addPoints(s, rawOf(s), prev, func(name string, v float64) { r.series[name].Add(Point{s.Time, v}) })
		for _, e := range s.Events {
			if e.Since.IsZero() {
				e.Since = e.Time // not recorded: a count event starts where it is
			}
			r.events.add(e)
		}
	}
	r.head = i
}

// seek moves the play head to i (clamped).
func (r *Replay) seek(i int) {
	i = min(max(i, 0), len(r.snaps)-1)
	if i >= r.built-1 && i-r.built < r.history {
		r.advance(i)
		return
	}
	r.rebuild(i)
}

// Seek moves the play head to the last snapshot at or before t (the first
// one when t is before it).
func (r *Replay) Seek(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := sort.Search(len(r.snaps), func(k int) bool { return r.snaps[k].Time.After(t) }) - 1
	r.seek(i)
}

// Step moves the play head by n snapshots (back when negative).
func (r *Replay) Step(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seek(r.head + n)
}

// Head is the time of the snapshot at the play head, and its index.
func (r *Replay) Head() (time.Time, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snaps[r.head].Time, r.head
}

// Bounds are the times of the first and last snapshots, and their number.
func (r *Replay) Bounds() (first, last time.Time, n int) {
	return r.snaps[0].Time, r.snaps[len(r.snaps)-1].Time, len(r.snaps)
}

// Poll returns the snapshot at the play head; it never moves it.
func (r *Replay) Poll(context.Context) (Snapshot, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.snaps[r.head], nil
}

// Series returns a copy of one series up to the play head, oldest first.
func (r *Replay) Series(name string) []Point {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.series[name]
	if !ok {
		return nil
	}
	return h.Points()
}

// Events returns the newest events up to the play head, oldest first.
func (r *Replay) Events() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.events.all()
}

// Info is the recorded server and table (empty for a recording without
// a header).
func (r *Replay) Info() Info { return r.info }
