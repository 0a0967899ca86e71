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
	acts := &fakeActions{}
	m := New(Options{Source: src, Knobs: kn, Actions: acts, Now: func() time.Time { return clock }})
	tm := teatest.NewTestModel(t, m, teatest.WithInitialTermSize(100, 30))
	wait := func(what string) {
		t.Helper()
		teatest.WaitFor(t, tm.Output(), func(b []byte) bool { return bytes.Contains(b, []byte(what)) },
			teatest.WithDuration(10*time.Second), teatest.WithCheckInterval(10*time.Millisecond))
	}
	wait("184,210 ▓ 42")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'l'}})
	wait("lease    OFF")
	// An action asks first, and runs on y.
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'X'}})
	wait("y to confirm")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'y'}})
	wait("terminated backend 4100")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'?'}})
	wait("renewal on/off")
	tm.Send(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'q'}})
	tm.WaitFinished(t, teatest.WithFinalTimeout(5*time.Second))
	final := tm.FinalModel(t).(Model)
	if final.cfg.Lease || kn.Config().Lease {
		t.Fatal("the lease knob did not reach the workload")
	}
	acts.mu.Lock()
	ended := append([]int32(nil), acts.ended...)
	acts.mu.Unlock()
	if len(ended) != 1 || ended[0] != 4100 {
		t.Fatalf("terminated %v, want backend 4100", ended)
	}
	src.mu.Lock()
	polls := src.polls
	src.mu.Unlock()
	if polls < 1 || final.polls < 1 {
		t.Fatalf("%d polls made, %d applied", polls, final.polls)
	}
}
