package tui

import (
	"strings"
	"testing"

	"github.com/pooltop-dev/pooltop/collector"
)

// The fleet line sums the live processes and their cycles, names each gone
// one with the leases it still holds (as counted in the pool, or until
// counted as its last heartbeat said), and counts the stopped.
func TestFleetLine(t *testing.T) {
	src := canned(false)
	src.snap.Waiters, src.snap.Blockers = nil, nil
	src.snap.Fleet = []collector.Process{
		{Name: "api-1", State: collector.ProcessAlive, Alive: true, CyclesPS: 1200.4, Workers: 8},
		{Name: "api-2", State: collector.ProcessAlive, Alive: true, CyclesPS: 800, Workers: 8},
		{Name: "api-3", State: collector.ProcessGone, LastSeenS: 12, Held: 7},
		{Name: "api-4", State: collector.ProcessStopped},
		{Name: "api-5", State: collector.ProcessGone, LastSeenS: 30, Held: 3, HeldCounted: true},
		{Name: "api-6", State: collector.ProcessGone, LastSeenS: 60, HeldCounted: true},
	}
	m := polled(t, src, nil, 200, 40)
	view := ansiStrip(m.View())
	for _, want := range []string{"fleet: 2 alive 2,000 cycles/s", "3 gone: api-3 12s ago, held 7 at its last beat; api-5 30s ago, still holds 3", "1 stopped"} {
		if !strings.Contains(view, want) {
			t.Fatalf("no %q on the dashboard:\n%s", want, view)
		}
	}
	if got := goneHeld(src.snap.Fleet[5]); got != "holds nothing now" {
		t.Fatalf("a gone process counted at 0: %q", got)
	}
	if got := goneHeld(collector.Process{Held: 5000, HeldCounted: true, HeldAtLeast: true}); got != "still holds ≥5,000" {
		t.Fatalf("a count from a full sample: %q", got)
	}
	src.snap.Fleet = nil
	if view := ansiStrip(polled(t, src, nil, 120, 40).View()); strings.Contains(view, "fleet:") {
		t.Fatal("a fleet line without a fleet")
	}
}
