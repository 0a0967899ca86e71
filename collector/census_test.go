package collector

import (
	"testing"
	"time"
)

// The census reads the ranges the table grew by before it goes on with its
// pass: until it does, the figures scale the ranges it read to the new ones,
// and a load's new pages hold its moved rows, not the pool's PENDING ones.
// The cursor of the pass stays where it was.
func TestCensusReadsNewRangesFirst(t *testing.T) {
	now := time.Now()
	truth := func(k int64) int64 { // 10 PENDING rows in each of the first 10 ranges, none after
		if k < 10 {
			return 10
		}
		return 0
	}
	c := census{byTID: true}
	read := func(ranges int64) (*censusQuery, pendingFigures) {
		q := c.plan()
		q.size, q.got = ranges*censusPages, map[int64]crange{}
		for k := q.lo; k < q.hi; k++ {
			q.got[k] = crange{pending: truth(k)}
		}
		f := c.absorb(q, now, time.Millisecond)
		c.per = pace{n: 3, lo: 3, hi: 3, step: 1} // three ranges a poll
		return q, f
	}
	read(10)
	var f pendingFigures
	for int64(len(c.counts)) < c.ranges {
		_, f = read(10)
	}
	if f.pending != 100 || f.estimated {
		t.Fatalf("after the first pass: %+v, want 100 exact", f)
	}
	read(10) // the pass goes on from range 0: cursor 3
	cursor := c.cursor
	// The table doubles: ranges 10..19 hold no PENDING row.
	q, f := read(20)
	if q.lo != cursor || !f.estimated {
		t.Fatalf("the poll that sees the growth reads on from the cursor %d (got %d) and scales: %+v", cursor, q.lo, f)
	}
	for _, lo := range []int64{10, 13, 16, 19} {
		q, f = read(20)
		if q.lo != lo {
			t.Fatalf("next read starts at range %d, want the first never read, %d", q.lo, lo)
		}
	}
	if f.pending != 100 || f.estimated {
		t.Fatalf("with every range read: %+v, want 100 exact", f)
	}
	if c.cursor != cursor+3 {
		t.Fatalf("the cursor moved to %d while new ranges were read, want %d", c.cursor, cursor+3)
	}
	if q, _ = read(20); q.lo != cursor+3 {
		t.Fatalf("the pass goes on at %d, got %d", cursor+3, q.lo)
	}
}
