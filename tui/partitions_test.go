package tui

import (
	"strings"
	"testing"

	"github.com/charmbracelet/lipgloss"

	"github.com/pooltop-dev/pooltop/collector"
)

// On a partitioned pool the dashboard gives one line of UNUSED per
// partition under the pool bar, named by what tells the partitions apart,
// estimates marked; the screen keeps its exact size, and a narrow one cuts
// the line with an ellipsis.
func TestPartitionsLine(t *testing.T) {
	src := canned(false)
	src.snap.Partitions = []collector.PartitionUnused{
		{Name: "resource_pool_p0", Unused: 46_001}, {Name: "resource_pool_p1", Unused: 45_870, Estimated: true},
		{Name: "resource_pool_p2", Unused: 46_210}, {Name: "resource_pool_p3", Unused: 46_129},
	}
	src.snap.LWLockWaits, src.snap.LWLockWaitEvent = 3, "BufferContent"
	for _, c := range []struct {
		w, h int
		want string
	}{
		{200, 60, "partitions: p0 46,001 · p1 ~45,870 · p2 46,210 · p3 46,129"},
		{80, 24, "partitions: p0 46,001 · p1 ~45,870 · p2 46,210 · p3 46,129"},
	} {
		m := polled(t, src, nil, c.w, c.h)
		view := m.View()
		if !strings.Contains(view, c.want) {
			t.Errorf("%d×%d: no %q in\n%s", c.w, c.h, c.want, view)
		}
		if got := lipgloss.Height(view); got != c.h {
			t.Errorf("%d×%d: the view is %d lines high", c.w, c.h, got)
		}
	}
	m := polled(t, src, nil, 200, 60)
	m.snap.Partitions = append(m.snap.Partitions, m.snap.Partitions...)
	m.snap.Partitions = append(m.snap.Partitions, m.snap.Partitions...)
	m.snap.Partitions = append(m.snap.Partitions, m.snap.Partitions...)
	line := m.viewPartitions(80)
	if lipgloss.Width(line) != 80 || !strings.Contains(line, "…") {
		t.Errorf("32 partitions in 80 columns: %q", line)
	}
	if !strings.Contains(m.View(), "LWLock waiters") {
		t.Error("no LWLock chart")
	}
}
