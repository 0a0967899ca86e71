package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/catalogue"
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
	for _, b := range m.blockers() {
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

// doctorSource is a Source that can check the pool (the collector can).
type doctorSource interface {
	Doctor(ctx context.Context, s collector.Snapshot) ([]collector.Check, error)
}

// doctorMsg carries the doctor's findings.
type doctorMsg struct {
	checks []collector.Check
	err    error
}

// doctorCmd runs the doctor in a command on the snapshot shown, if the
// source has a doctor and a poll is in.
func doctorCmd(src Source, snap *collector.Snapshot) tea.Cmd {
	d, ok := src.(doctorSource)
	if !ok || snap == nil {
		return nil
	}
	s := *snap
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		checks, err := d.Doctor(ctx, s)
		return doctorMsg{checks, err}
	}
}

// doctorLine is the doctor's verdict in one line: the failing and warning
// checks by name.
func (m Model) doctorLine() string {
	if m.doctor == nil {
		return ""
	}
	var fail, warn []string
	for _, c := range m.doctor {
		switch c.Status {
		case collector.CheckFail:
			fail = append(fail, c.Check)
		case collector.CheckWarn:
			warn = append(warn, c.Check)
		}
	}
	switch {
	case len(fail) > 0:
		return fmt.Sprintf("doctor: FAIL %s%s (D: details)", strings.Join(fail, " "), prefixed(" · warn ", warn))
	case len(warn) > 0:
		return fmt.Sprintf("doctor: warn %s (D: details)", strings.Join(warn, " "))
	}
	return "doctor: every check ok"
}

func prefixed(p string, list []string) string {
	if len(list) == 0 {
		return ""
	}
	return p + strings.Join(list, " ")
}

// doctorView is the doctor's findings in full, for the help area.
func (m Model) doctorView(width, maxLines int) string {
	if m.doctor == nil {
		return "doctor: checking…"
	}
	var lines []string
	for _, c := range m.doctor {
		line := fmt.Sprintf("%-4s %-16s %s", strings.ToUpper(c.Status), c.Check, sanitize(c.Evidence))
		if c.Remedy != "" {
			line += " → " + sanitize(c.Remedy)
		}
		lines = append(lines, truncate(line, width))
	}
	if len(lines) > maxLines {
		lines = append(lines[:max(maxLines-1, 0)], fmt.Sprintf("… %d more: pooltop doctor prints them all", len(lines)-maxLines+1))
	}
	return strings.Join(lines, "\n")
}

// runbookView is the runbook of each raised alert, from the catalogue, for
// the help area: what it means, what to look at, what to do, and with what.
func (m Model) runbookView(width, maxLines int) string {
	specs := map[string]catalogue.Alert{}
	for _, s := range catalogue.Alerts(collector.AlertConfig{}) {
		specs[s.Name] = s
	}
	var lines []string
	if m.snap != nil {
		for _, a := range m.snap.Alerts {
			s, ok := specs[a.Name]
			if !a.Active || !ok {
				continue
			}
			lines = append(lines,
				truncate(fmt.Sprintf("%s (%s): %s", a.Name, s.Severity, s.Meaning), width),
				truncate("  look at: "+s.Runbook.First, width),
				truncate("  do: "+s.Runbook.Do, width),
				truncate("  pooltop: "+s.Runbook.Tools, width))
		}
	}
	if len(lines) == 0 {
		return truncate("no alert raised · pooltop alerts prints every runbook · m hides this", width)
	}
	if len(lines) > maxLines {
		lines = append(lines[:max(maxLines-1, 0)], truncate("… pooltop alerts prints every runbook in full", width))
	}
	return strings.Join(lines, "\n")
}
