package tui

import (
	"fmt"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/workload"
)

// Over several servers the dashboard gives a row per server under the
// pool bar: its figures, or that it does not answer and why; the screen
// keeps its exact size at 160×40, 100×30 and 80×24, a narrower one drops
// the address before the figures, and past the rows it has room for, the last row says
// how many more servers there are and how many of them do not answer.
func TestServerRows(t *testing.T) {
	src := canned(false)
	one := src.snap
	one.Pool.Unused, one.Pool.Consumed = 66_604, 4_722
	two := one
	two.Pool.Unused = 66_762
	two.Blockers = []collector.Blocker{{PID: 41, App: "claimer", State: "idle in transaction", Blocks: []int32{42}}}
	two.Waiters = []collector.Waiter{{PID: 42, App: "blocked-claimer", WaitMS: 900}}
	views := []collector.ServerView{
		{Server: "s1", Addr: "app@db1:5432/pool", Reachable: true, Snapshot: &one},
		{Server: "s2", Addr: "app@db2:5432/pool", Reachable: true, Snapshot: &two},
		{Server: "s3", Addr: "app@db3:5432/pool", Error: "dial tcp 10.0.0.3:5432: connect: connection refused"},
	}
	merged := collector.MergeServers(one.Time, views)
	src.snap = merged
	for _, c := range []struct{ w, h int }{{160, 40}, {100, 30}, {80, 24}} {
		m := polled(t, src, nil, c.w, c.h)
		view := m.View()
		plain := ansi.Strip(view)
		for _, want := range []string{"s1", "unused 66,604", "s2", "unused 66,762", "s3", "does not answer", "app@db3:5432/pool",
			"s2 41 claimer", "blocked-claimer waits 900 ms", "ALERT lock_wait(s1,s2) server_unreachable(s3)"} {
			if !strings.Contains(plain, want) {
				t.Errorf("%d×%d: no %q in\n%s", c.w, c.h, want, plain)
			}
		}
		if got := lipgloss.Height(view); got != c.h {
			t.Errorf("%d×%d: the view is %d lines high", c.w, c.h, got)
		}
		for _, line := range strings.Split(view, "\n") {
			if lipgloss.Width(line) > c.w {
				t.Errorf("%d×%d: a line of %d cells: %q", c.w, c.h, lipgloss.Width(line), ansi.Strip(line))
			}
		}
		if c.w >= 100 && !strings.Contains(plain, "connection refused") {
			t.Errorf("%d columns: no error in\n%s", c.w, plain)
		}
		if c.w == 160 && !strings.Contains(plain, "s1 app@db1:5432/pool  unused 66,604") {
			t.Errorf("160 columns: no address in\n%s", plain)
		}
	}

	var many []collector.ServerView
	for i := range 9 {
		v := views[i%3]
		v.Server = fmt.Sprintf("s%d", i+1)
		many = append(many, v)
	}
	merged = collector.MergeServers(one.Time, many)
	src.snap = merged
	m := polled(t, src, nil, 80, 24)
	plain := ansi.Strip(m.View())
	if !strings.Contains(plain, "… 6 more servers, 2 of them not answering") || strings.Contains(plain, "s4  unused") {
		t.Errorf("9 servers at 80×24:\n%s", plain)
	}
}

// faultKnobs are knobs of a demo over throwaway servers: S stops a server
// and starts it again.
type faultKnobs struct {
	*fakeKnobs
	down    bool
	toggled int
}

func (k *faultKnobs) ToggleServer() (string, error) {
	k.toggled++
	k.down = !k.down
	if k.down {
		return "server s3 stopped hard", nil
	}
	return "server s3 started again", nil
}

// S stops a server and starts it again where the demo can (throwaway
// servers), says so on the banner and in the help, and does nothing
// where it cannot.
func TestStopServerKey(t *testing.T) {
	press := func(m Model) Model {
		t.Helper()
		m, msg := run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'S'}})
		if msg != nil {
			mm, _ := m.Update(msg)
			m = mm.(Model)
		}
		return m
	}
	kn := &faultKnobs{fakeKnobs: &fakeKnobs{cfg: workload.Defaults()}}
	m := polled(t, canned(true), kn, 120, 40)
	m = press(m)
	if !kn.down || !strings.Contains(ansi.Strip(m.View()), "server s3 stopped hard") {
		t.Fatalf("S did not stop the server (toggled %d):\n%s", kn.toggled, ansi.Strip(m.View()))
	}
	m = press(m)
	if kn.down || kn.toggled != 2 || !strings.Contains(ansi.Strip(m.View()), "server s3 started again") {
		t.Fatalf("a second S did not start it again (toggled %d)", kn.toggled)
	}
	m, _ = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'?'}})
	if !strings.Contains(ansi.Strip(m.View()), "S stops a server hard") {
		t.Errorf("the help does not list S:\n%s", ansi.Strip(m.View()))
	}

	plain := polled(t, canned(true), &fakeKnobs{cfg: workload.Defaults()}, 120, 40)
	plain, msg := run(t, plain, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'S'}})
	if msg != nil || plain.busy != "" {
		t.Fatalf("S on a demo that cannot stop a server: %T, busy %q", msg, plain.busy)
	}
	plain, _ = run(t, plain, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'?'}})
	if strings.Contains(ansi.Strip(plain.View()), "S stops a server hard") {
		t.Error("the help lists S where it does nothing")
	}
}
