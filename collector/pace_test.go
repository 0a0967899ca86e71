package collector

import "testing"

// The pace doubles while cheap until it is slow once, then grows by its
// step and halves when slow, within its bounds; a step of 0 always
// doubles; a back-off divides it and counts as slow.
func TestPace(t *testing.T) {
	p := pace{n: 4, lo: 2, hi: 64, step: 3}
	steps := []struct {
		ms   float64
		want int64
	}{{0.5, 8}, {0.5, 16}, {1.5, 16}, {2.5, 8}, {0.5, 11}, {0.5, 14}, {9, 7}, {9, 3}, {9, 2}, {9, 2}, {0.5, 5}}
	for i, s := range steps {
		p.adjust(s.ms, 1)
		if p.n != s.want {
			t.Fatalf("step %d (%.1f ms against 1): pace %d, want %d", i, s.ms, p.n, s.want)
		}
	}
	for range 30 {
		p.adjust(0.5, 1)
	}
	if p.n != 64 {
		t.Fatalf("after 30 cheap polls: %d, want the top, 64", p.n)
	}
	w := pace{n: 16, lo: 2, hi: 1024}
	w.adjust(9, 1)
	w.adjust(0.5, 1)
	if w.n != 16 {
		t.Fatalf("a step of 0 after a slow poll: %d, want 16 (doubled)", w.n)
	}
	w.backOff(4)
	if w.n != 4 || !w.slowed {
		t.Fatalf("back-off by 4: %d (slowed %v), want 4", w.n, w.slowed)
	}
	w.backOff(4)
	if w.n != 2 {
		t.Fatalf("back-off below the floor: %d, want 2", w.n)
	}
}

// A pace with a ceiling grows at most to what the last poll's cost says
// fits in the budget, and above the budget shrinks to it at once (a plain
// pace waits for twice the budget, then halves).
func TestPaceCeiling(t *testing.T) {
	p := pace{n: 100, lo: 10, hi: 10_000, ceiling: true}
	steps := []struct {
		ms   float64
		want int64
	}{
		{2, 200},   // cheap: doubles (fits 500)
		{7, 285},   // would double to 400; fits 285
		{10, 285},  // at the budget: holds
		{19, 150},  // above it, under twice it: to what fits
		{100, 15},  // far above: what fits, not a half
		{1000, 10}, // never below lo
	}
	for i, s := range steps {
		p.adjust(s.ms, 10)
		if p.n != s.want {
			t.Fatalf("step %d (%.0f ms against 10): pace %d, want %d", i, s.ms, p.n, s.want)
		}
	}
}
