package tui

import (
	"errors"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/x/ansi"
)

// O writes the report of what has been recorded and shows its path, or
// why it could not; without a way to write one, O does nothing.
func TestReportKey(t *testing.T) {
	calls := 0
	var fail error
	o := Options{Source: canned(false), Mode: "watch", Now: func() time.Time { return clock }, Report: func() (string, error) {
		calls++
		return "/tmp/pool.html", fail
	}}
	m := New(o)
	mm, _ := m.Update(tea.WindowSizeMsg{Width: 100, Height: 30})
	m = mm.(Model)
	press := func() {
		t.Helper()
		var msg tea.Msg
		m, msg = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'O'}})
		if msg != nil {
			mm, _ := m.Update(msg)
			m = mm.(Model)
		}
	}
	press()
	if calls != 1 || !strings.Contains(ansi.Strip(m.View()), "report written: /tmp/pool.html") {
		t.Fatalf("O: %d calls, view:\n%s", calls, ansi.Strip(m.View()))
	}
	fail = errors.New("nothing is recorded: start with --record FILE")
	press()
	if !strings.Contains(ansi.Strip(m.View()), "report failed: nothing is recorded") {
		t.Fatalf("a failed report is not shown:\n%s", ansi.Strip(m.View()))
	}

	plain := newTestModel(canned(false), nil, 100, 30)
	if _, cmd := plain.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'O'}}); cmd != nil {
		t.Fatal("O without a report to write returned a command")
	}
}
