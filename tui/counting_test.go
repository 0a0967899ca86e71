package tui

import (
	"strings"
	"testing"
)

// While the counters have not read the whole pool once, the pool line says
// how far they are; once they have, and for recordings made before the
// figure existed, it says nothing.
func TestCountingProgress(t *testing.T) {
	for _, c := range []struct {
		counted *float64
		want    string
	}{{ptr(0.374), "counting 37% · "}, {ptr(1.0), ""}, {nil, ""}} {
		src := canned(false)
		src.snap.Pool.Counted = c.counted
		for _, w := range []int{100, 80} {
			view := ansiStrip(polled(t, src, nil, w, 30).View())
			got := strings.Contains(view, "counting ")
			if got != (c.want != "") || (c.want != "" && !strings.Contains(view, c.want)) {
				t.Fatalf("counted %v at %d columns: want %q on the dashboard:\n%s", c.counted, w, c.want, view)
			}
		}
	}
}

func ptr[T any](v T) *T { return &v }
