package collector

import (
	"testing"
	"time"
)

// window is a read of the window: ids in table 1, ascending.
func window(ids ...int64) *passQuery {
	q := &passQuery{}
	for _, id := range ids {
		q.ids = append(q.ids, windowID{id: id, part: 1})
	}
	return q
}

// span is the ids lo..hi.
func span(lo, hi int64) []int64 {
	var ids []int64
	for id := lo; id <= hi; id++ {
		ids = append(ids, id)
	}
	return ids
}

func TestPassOverCountsIdsClaimsSkip(t *testing.T) {
	var p passOver
	t0 := time.Unix(1000, 0)
	if f := p.absorb(window(span(1, 10)...), t0, 0); f.known {
		t.Fatalf("first poll: %+v, want unknown (nothing to compare with)", f)
	}
	// Ids 1 and 2 are held (FOR SHARE); claims take 3..6, then 7..10.
	f := p.absorb(window(append([]int64{1, 2}, span(7, 12)...)...), t0.Add(time.Second), 4)
	if !f.known || f.ids != 0 {
		t.Fatalf("after one interval: %+v, want known, 0 (one interval may be a claim in flight)", f)
	}
	f = p.absorb(window(1, 2, 11, 12, 13), t0.Add(2*time.Second), 4)
	if f.ids != 2 || f.oldest != 2*time.Second || f.by != 8 || f.full {
		t.Fatalf("after two intervals: %+v, want 2 ids passed over for 2s by 8 claims", f)
	}
	// An idle interval (no claim) does not age them.
	f = p.absorb(window(1, 2, 11, 12, 13), t0.Add(10*time.Second), 0)
	if f.ids != 2 || f.oldest != 2*time.Second {
		t.Fatalf("idle interval: %+v, want still 2 for 2s", f)
	}
	// The lock goes: claims take 1, 2 and 11; nothing is passed over.
	f = p.absorb(window(12, 13), t0.Add(11*time.Second), 3)
	if f.ids != 0 || f.oldest != 0 {
		t.Fatalf("after the lock went: %+v, want 0", f)
	}
}

func TestPassOverHealthyClaimsInOrder(t *testing.T) {
	var p passOver
	t0 := time.Unix(1000, 0)
	p.absorb(window(span(1, 256)...), t0, 0)
	for i := int64(1); i <= 20; i++ {
		// 100 claims an interval in id order; 1 id (the lowest) is a claim
		// in flight at each poll, taken by the next.
		lo := 1 + 100*i
		f := p.absorb(window(span(lo, lo+255)...), t0.Add(time.Duration(i)*time.Second), 100)
		if f.ids != 0 {
			t.Fatalf("interval %d: %+v, want nothing passed over", i, f)
		}
	}
}

func TestPassOverFullWindowClaimedPast(t *testing.T) {
	var p passOver
	t0 := time.Unix(1000, 0)
	ids := span(1, starvationWindow)
	p.absorb(window(ids...), t0, 0)
	// Claims in another order take ids past the window: the whole window
	// stays free while UNUSED falls by 500.
	p.absorb(window(ids...), t0.Add(time.Second), 500)
	f := p.absorb(window(ids...), t0.Add(2*time.Second), 500)
	if f.ids != starvationWindow || !f.full || f.by != 1000 {
		t.Fatalf("%+v, want the full window passed over (a lower bound) by 1000 claims", f)
	}
	// The same on partitions: the window lost none, the count fell.
	var q passOver
	part := func() *passQuery {
		w := &passQuery{}
		for _, id := range ids {
			w.ids = append(w.ids, windowID{id: id, part: uint32(id % 4)})
		}
		return w
	}
	q.absorb(part(), t0, 0)
	q.absorb(part(), t0.Add(time.Second), 300)
	if f := q.absorb(part(), t0.Add(2*time.Second), 300); f.ids != starvationWindow {
		t.Fatalf("partitions: %+v, want the full window passed over", f)
	}
}

// On partitions, claims keep id order only within each: an id of one
// partition is not passed over by newer ids taken in another.
func TestPassOverJudgesEachPartitionApart(t *testing.T) {
	var p passOver
	t0 := time.Unix(1000, 0)
	read := func(ids ...int64) *passQuery {
		w := &passQuery{}
		for _, id := range ids {
			w.ids = append(w.ids, windowID{id: id, part: uint32(id % 2)})
		}
		return w
	}
	p.absorb(read(span(1, 40)...), t0, 0)
	// Partition 0 (even ids) takes 2..20 while partition 1 takes 1 and 3:
	// odd ids below 20 stay free, passed by even ids only.
	var cur []int64
	for id := int64(5); id <= 40; id++ {
		if id%2 == 1 || id > 20 {
			cur = append(cur, id)
		}
	}
	p.absorb(read(cur...), t0.Add(time.Second), 12)
	// Then partition 0 takes 22..30, partition 1 takes 5 and 7.
	cur = cur[:0]
	for id := int64(9); id <= 44; id++ {
		if id%2 == 1 || id > 30 {
			cur = append(cur, id)
		}
	}
	f := p.absorb(read(cur...), t0.Add(2*time.Second), 7)
	for id := range p.ids {
		if id%2 == 1 && p.ids[id].intervals >= 2 {
			t.Fatalf("odd id %d judged passed over by even claims: %+v", id, f)
		}
	}
	if f.ids != 0 {
		t.Fatalf("%+v, want nothing passed over", f)
	}
}

// The starvation alert needs both the time and the claims, and clears once
// nothing is passed over for the hold; without the figure (the first
// poll) there is no rule.
func TestStarvationAlert(t *testing.T) {
	c := bare(t)
	t0 := time.Unix(1_700_000_000, 0)
	polls := []struct {
		ids  int64
		secs float64
		by   int64
		want bool
	}{
		{1, 12, 40, false},  // long, but few claims went by: a quiet pool
		{5, 9, 5000, false}, // many claims, not yet for the threshold
		{5, 10, 5000, true}, // both
		{3, 30, 9000, true}, // still passed over
		{0, 0, 0, true},     // none left: held for the hold …
		{0, 0, 0, true},     //
		{0, 0, 0, false},    // … then cleared
		{2, 40, 100, true},  // again
	}
	for i, p := range polls {
		s := Snapshot{Time: t0.Add(time.Duration(i) * 5 * time.Second)}
		ids, secs := p.ids, p.secs
		s.Pool.PassedOver, s.Pool.PassedOverS, s.Pool.PassedOverBy = &ids, &secs, p.by
		c.record(&s, 0)
		if got := active(s, AlertStarvation); got != p.want {
			t.Fatalf("poll %d (%+v): starvation active %v, want %v", i, p, got, p.want)
		}
	}
	s := Snapshot{Time: t0.Add(time.Minute)}
	c.record(&s, 0)
	for _, a := range s.Alerts {
		if a.Name == AlertStarvation {
			t.Fatalf("no figure, yet alert %+v", a)
		}
	}
}
