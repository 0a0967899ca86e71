package tui

import (
	"cmp"
	"slices"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/pooltop-dev/pooltop/collector"
)

// The orders of the blocking tree, in the order o steps through them.
var sessionOrders = []string{"most waiters", "longest wait", "pid"}

// blockers are the snapshot's blockers as the panel shows them: those
// whose application name, or a waiter's, contains the filter, in the
// chosen order.
// waiterKey names a waiter: its server (in a watch over several, where
// two servers may have the same pid) and its pid.
type waiterKey struct {
	server string
	pid    int32
}

// waitersOf are a snapshot's waiters by server and pid.
func waitersOf(s *collector.Snapshot) map[waiterKey]collector.Waiter {
	out := make(map[waiterKey]collector.Waiter, len(s.Waiters))
	for _, w := range s.Waiters {
		out[waiterKey{w.Server, w.PID}] = w
	}
	return out
}

func (m Model) blockers() []collector.Blocker {
	s := m.snap
	if s == nil {
		return nil
	}
	waits := waitersOf(s)
	longest := func(b collector.Blocker) float64 {
		var ms float64
		for _, pid := range b.Blocks {
			ms = max(ms, waits[waiterKey{b.Server, pid}].WaitMS)
		}
		return ms
	}
	var out []collector.Blocker
	for _, b := range s.Blockers {
		keep := m.filter == "" || strings.Contains(b.App, m.filter) || b.Server == m.filter
		for _, pid := range b.Blocks {
			keep = keep || strings.Contains(waits[waiterKey{b.Server, pid}].App, m.filter)
		}
		if keep {
			out = append(out, b)
		}
	}
	slices.SortStableFunc(out, func(a, b collector.Blocker) int {
		switch sessionOrders[m.order] {
		case "longest wait":
			return cmp.Compare(longest(b), longest(a))
		case "pid":
			return cmp.Compare(a.PID, b.PID)
		}
		return len(b.Blocks) - len(a.Blocks)
	})
	return out
}

// sessionKey handles o (the order) and / (the filter: type the name, Enter
// or Esc ends, an empty filter shows all).
func (m Model) sessionKey(msg tea.KeyMsg) (Model, bool) {
	if m.filtering {
		switch msg.Type {
		case tea.KeyEnter, tea.KeyEsc:
			m.filtering = false
		case tea.KeyBackspace:
			if r := []rune(m.filter); len(r) > 0 {
				m.filter = string(r[:len(r)-1])
			}
		case tea.KeyRunes, tea.KeySpace:
			m.filter += string(msg.Runes)
		}
		return m, true
	}
	switch {
	case key.Matches(msg, m.keys.Order):
		m.order = (m.order + 1) % len(sessionOrders)
		return m, true
	case key.Matches(msg, m.keys.Filter):
		m.filtering, m.filter = true, ""
		return m, true
	}
	return m, false
}

// locksTitle names the panel with its order and filter.
func (m Model) locksTitle() string {
	t := "who blocks whom"
	if m.order != 0 {
		t += " · by " + sessionOrders[m.order]
	}
	if m.filter != "" || m.filtering {
		t += " · app ~ " + sanitize(m.filter)
		if m.filtering {
			t += "▏"
		}
	}
	return t
}
