package tui

import (
	"fmt"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
)

// Actions are what the dashboard may do to the database from the screen:
// nil unless pooltop was started with --allow-actions (the demo always
// has them: the pool is its own). Each runs in a command, never on the UI
// goroutine, and the implementation writes what it did to the event log.
type Actions interface {
	// Cancel cancels the running query of backend pid.
	Cancel(pid int32) error
	// Terminate ends backend pid's session.
	Terminate(pid int32) error
	// ReleaseExpired frees the expired leases of a holder, raising their
	// tokens, and returns how many.
	ReleaseExpired(holder string) (int64, error)
}

// target is what the cursor can stand on: a session (a blocker, or the
// xmin holder) or a holder of PENDING rows.
type target struct {
	pid    int32  // a session, or 0
	holder string // a holder, when pid is 0
	label  string
}

// targets lists what the cursor can stand on, in screen order.
func (m Model) targets() []target {
	s := m.snap
	if s == nil {
		return nil
	}
	var out []target
	for _, b := range s.Blockers {
		out = append(out, blockerTarget(b))
	}
	if x := s.Xmin; x != nil && x.Age > 1000 {
		out = append(out, xminTarget(*x))
	}
	for _, h := range s.Holders {
		if h.Holder != "" && h.Expired > 0 {
			out = append(out, holderTarget(h))
		}
	}
	return out
}

func blockerTarget(b collector.Blocker) target {
	return target{pid: b.PID, label: fmt.Sprintf("backend %d (%s, %s)", b.PID, sanitize(b.App), sanitize(b.State))}
}

func xminTarget(x collector.XminHolder) target {
	return target{pid: x.PID, label: fmt.Sprintf("backend %d (%s, %s), the xmin holder", x.PID, sanitize(x.App), sanitize(x.State))}
}

func holderTarget(h engine.Holder) target {
	return target{holder: h.Holder, label: fmt.Sprintf("holder %s (%d expired leases)", sanitize(h.Holder), h.Expired)}
}

// selected is the target under the cursor, if any.
func (m Model) selected() (target, bool) {
	ts := m.targets()
	if len(ts) == 0 {
		return target{}, false
	}
	return ts[min(m.cursor, len(ts)-1)], true
}

// pendingAction is an action waiting for its confirmation.
type pendingAction struct {
	what string // shown in the prompt
	run  func() (string, error)
}

// actionMsg reports an action's outcome.
type actionMsg struct {
	done string
	err  error
}

// actionKey handles the cursor and action keys; ok is false for keys that
// are not about actions.
func (m Model) actionKey(msg tea.KeyMsg) (Model, tea.Cmd, bool) {
	k := m.keys
	if m.confirm != nil {
		p := m.confirm
		m.confirm = nil
		if msg.String() != "y" {
			m.notice = "cancelled: " + p.what
			return m, nil, true
		}
		m.notice = "running: " + p.what
		return m, func() tea.Msg { done, err := p.run(); return actionMsg{done, err} }, true
	}
	switch {
	case key.Matches(msg, k.Up):
		m.cursor = max(m.cursor-1, 0)
		return m, nil, true
	case key.Matches(msg, k.Down):
		m.cursor = min(m.cursor+1, max(len(m.targets())-1, 0))
		return m, nil, true
	case key.Matches(msg, k.Soft), key.Matches(msg, k.Hard):
	default:
		return m, nil, false
	}
	if m.opts.Actions == nil {
		m.notice = "actions are off: start pooltop watch with --allow-actions to cancel, terminate or release from here"
		return m, nil, true
	}
	t, ok := m.selected()
	if !ok {
		m.notice = "nothing to act on: no blocker, xmin holder or holder with expired leases"
		return m, nil, true
	}
	a := m.opts.Actions
	hard := key.Matches(msg, k.Hard)
	switch {
	case t.pid != 0 && hard:
		m.confirm = &pendingAction{what: "terminate " + t.label, run: func() (string, error) {
			return fmt.Sprintf("terminated backend %d", t.pid), a.Terminate(t.pid)
		}}
	case t.pid != 0:
		m.confirm = &pendingAction{what: "cancel the query of " + t.label, run: func() (string, error) {
			return fmt.Sprintf("cancelled the query of backend %d", t.pid), a.Cancel(t.pid)
		}}
	default:
		m.confirm = &pendingAction{what: "release the expired leases of " + t.label, run: func() (string, error) {
			n, err := a.ReleaseExpired(t.holder)
			return fmt.Sprintf("released %d expired leases of %s", n, sanitize(t.holder)), err
		}}
	}
	return m, nil, true
}
