package tui

import (
	"bytes"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/exp/teatest"

	"github.com/pooltop-dev/pooltop/workload"
)

// The whole program: it polls, draws, takes a knob key, and quits.
func TestProgramFlow(t *testing.T) {
	kn := &fakeKnobs{cfg: workload.Defaults()}
	src := canned(true)
	m := New(Options{Source: src, Knobs: kn, Now: func() time.Time { return clock }})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(100, 30))
	wait := func(what string) {
		t.Helper()
		teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte(what)) },
			teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
	}
	wait("184,210 ▓ 42")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'l'}})
	wait("lease    OFF")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'?'}})
	wait("renewal on/off")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'q'}})
	tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
	final := tm.FinalModel(t).(Model)
	if final.cfg.Lease || kn.Config().Lease {
		t.Fatal("the lease knob did not reach the workload")
	}
	src.mu.Lock()
	polls := src.polls
	src.mu.Unlock()
	if polls < 1 || final.polls < 1 {
		t.Fatalf("%d polls made, %d applied", polls, final.polls)
	}
}
