package tui

import (
	"bytes"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"

	"github.com/pooltop-dev/pooltop/collector"
)

// recording is five minutes of one poll a second, a lock wait alert
// raised from 12:02:00 to 12:03:00.
func recording(t *testing.T) *collector.Replay {
	t.Helper()
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var rec collector.Recording
	for i := range 300 {
		raised := i >= 120 && i < 180
		wait := 5.0
		if raised {
			wait = 250
		}
		rec.Snapshots = append(rec.Snapshots, collector.Snapshot{
			Time:          t0.Add(time.Duration(i) * time.Second),
			Pool:          collector.Pool{Unused: int64(50_000 - 100*i), Pending: 7, Consumed: int64(100 * i), Total: 50_007, Estimated: []string{}},
			LockWaitMaxMS: wait, DeadTuples: int64(10 * i), Waiters: []collector.Waiter{}, Blockers: []collector.Blocker{}, BurnPerS: 100,
			Alerts: []collector.Alert{{Name: collector.AlertLockWait, Active: raised, Message: "longest lock wait"}},
		})
	}
	rec.Header = &collector.RecordingHeader{Format: 1, Mode: "watch", IntervalS: 1, Source: (&fakeSource{}).Info()}
	r, err := collector.NewReplay(rec, collector.DefaultHistory)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// The replay on the dashboard: it plays, pauses, changes speed, steps,
// jumps a minute, goes to a time typed in, to the start and the end; the
// header says REPLAY with the recorded time, alerts show as they were,
// and the window key switches the charts' span.
func TestReplayProgram(t *testing.T) {
	rp := recording(t)
	m := New(Options{Source: rp, Replay: rp, Mode: "replay", Interval: time.Second, Now: func() time.Time { return clock }})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(140, 40))
	wait := func(what string, and ...string) {
		t.Helper()
		defer func() {
			if t.Failed() {
				tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune("q")})
				f := tm.FinalModel(t, teatest.WithFinalTimeout(time.Second)).(Model)
				t.Logf("waiting for %q, the header is %q", what, f.viewHeader(140))
			}
		}()
		teatest.WaitFor(t, tm.Output(), func(b []byte) bool {
			for _, w := range append(and, what) {
				if !bytes.Contains(b, []byte(w)) {
					return false
				}
			}
			return true
		}, teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(5*time.Millisecond))
	}
	key := func(k tea.KeyMsg) { tm.Send(k) }
	runes := func(s string) { key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}) }

	wait("REPLAY 2026-12-01 12:00:00", "playing 1x")
	key(tea.KeyMsg{Type: tea.KeySpace, Runes: []rune{' '}})
	runes(">")
	runes(">")
	key(tea.KeyMsg{Type: tea.KeyHome}) // it may have played for a moment: back to the start
	wait("paused 4x │ 1/300")
	runes("]")
	wait("REPLAY 2026-12-01 12:01:00")
	runes("]")
	runes("]")
	wait("REPLAY 2026-12-01 12:03:00")
	key(tea.KeyMsg{Type: tea.KeyLeft})
	wait("REPLAY 2026-12-01 12:02:59", "ALERT lock_wait") // raised at that time of the recording
	key(tea.KeyMsg{Type: tea.KeyEnd})
	wait("300/300")
	key(tea.KeyMsg{Type: tea.KeyHome})
	wait("1/300")
	runes("g")
	wait("go to (HH:MM:SS")
	runes("12:04:10")
	key(tea.KeyMsg{Type: tea.KeyEnter})
	wait("REPLAY 2026-12-01 12:04:10")
	runes("g")
	runes("noon")
	key(tea.KeyMsg{Type: tea.KeyEnter})
	wait(`"noon": give HH:MM:SS`)
	for _, w := range []string{"charts 1m", "charts 15m", "charts 1h"} {
		runes("h")
		wait(w)
	}
	// Played on at 64x, it reaches the end and stops there.
	for range 4 {
		runes(">")
	}
	key(tea.KeyMsg{Type: tea.KeySpace, Runes: []rune{' '}})
	wait("playing 64x")
	wait("paused 64x │ 300/300")
	runes("q")
	tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
	final := tm.FinalModel(t).(Model)
	if final.replay.index != 299 || final.snap == nil || !final.snap.Time.Equal(time.Date(2026, 12, 1, 12, 4, 59, 0, time.UTC)) {
		t.Fatalf("final head #%d at %v", final.replay.index, final.snap)
	}
	if final.window != 3 || !strings.Contains(final.View(), "charts 1h") {
		t.Fatalf("window %d", final.window)
	}
}

// The window key steps the live charts too, and an hour of points draws
// in the chart's width: the view does not depend on how many there are.
func TestWindowKeyAndDownsample(t *testing.T) {
	now := time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC)
	var ps []collector.Point
	for i := range 14_400 { // an hour at 0.25 s
		ps = append(ps, collector.Point{T: now.Add(-time.Hour + time.Duration(i)*250*time.Millisecond), V: float64(i % 100)})
	}
	ps[7000].V = 1e6 // a spike survives
	got := downsample(ps, now.Add(-time.Hour), now, 80)
	if len(got) > 80 {
		t.Fatalf("%d points for 80 columns", len(got))
	}
	peak := 0.0
	for _, p := range got {
		peak = max(peak, p.V)
	}
	if peak != 1e6 {
		t.Fatalf("the spike became %v", peak)
	}
	if few := downsample(ps[:50], now.Add(-time.Hour), now, 80); len(few) != 50 {
		t.Fatalf("50 points became %d", len(few))
	}
	m := New(Options{Source: canned(false), Now: func() time.Time { return clock }})
	for _, want := range []time.Duration{time.Minute, 15 * time.Minute, time.Hour, 0} {
		mm, _ := m.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'h'}})
		m = mm.(Model)
		if chartWindows[m.window] != want {
			t.Fatalf("window %v, want %v", chartWindows[m.window], want)
		}
	}
}
