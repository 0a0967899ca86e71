package collector

import (
	"fmt"
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
		q.size, q.got = ranges*censusPages, map[int64]censusRange{}
		for _, k := range q.ks {
			q.got[k] = censusRange{pending: truth(k)}
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
	if q.ks[0] != cursor || !f.estimated {
		t.Fatalf("the poll that sees the growth reads on from the cursor %d (got %v) and scales: %+v", cursor, q.ks, f)
	}
	cursor = c.cursor
	for _, want := range [][]int64{{10, 11, 12}, {13, 14, 15}, {16, 17, 18}, {19, cursor, cursor + 1}} {
		q, f = read(20)
		if fmt.Sprint(q.ks) != fmt.Sprint(want) {
			t.Fatalf("read %v, want the ranges never read first, then the pass: %v", q.ks, want)
		}
	}
	if f.pending != 100 || f.estimated {
		t.Fatalf("with every range read: %+v, want 100 exact", f)
	}
	if q, _ = read(20); q.ks[0] != cursor+2 {
		t.Fatalf("the pass goes on at %d, got %v", cursor+2, q.ks)
	}
	// A table that grows by a range at every poll: each poll reads the new
	// one, and the pass goes on with the rest of the pace.
	for ranges := int64(21); ranges < 30; ranges++ {
		before := c.cursor
		q, _ = read(ranges)
		// (a poll learns the table's size with its counts: the next reads the new range)
		if (ranges > 21 && q.ks[0] != ranges-2) || c.cursor == before {
			t.Fatalf("table of %d ranges: read %v, cursor %d after %d: the new range first, then the pass", ranges, q.ks, c.cursor, before)
		}
	}
}

// A table that grows during the first pass: its new ranges are read before
// the rest of the pass, which the figures scale from the ranges read so far.
func TestCensusReadsGrowthBeforeTheFirstPassEnds(t *testing.T) {
	now := time.Now()
	c := census{byTID: true}
	var f pendingFigures
	read := func(ranges int64) *censusQuery {
		q := c.plan()
		q.size, q.got = ranges*censusPages, map[int64]censusRange{}
		for _, k := range q.ks {
			if k < 10 { // 10 PENDING rows in each range of the first 10, none in the new ones
				q.got[k] = censusRange{pending: 10, expired: 5}
			} else {
				q.got[k] = censusRange{}
			}
		}
		f = c.absorb(q, now, time.Millisecond)
		c.per = pace{n: 3, lo: 3, hi: 3, step: 1}
		return q
	}
	read(10) // learns the size: 10 ranges
	read(10) // ranges 1..3
	read(20) // 4..6; the table has grown to 20
	q := read(20)
	if fmt.Sprint(q.ks) != "[10 11 12]" {
		t.Fatalf("read %v, want the ranges the table grew by, [10 11 12], before the rest of the first pass", q.ks)
	}
	// Ranges 7..9 not read yet hold what 0..6 do, ranges 13..19 what 10..12
	// do (scaled over all that was read: 70 × 20/10 = 140).
	if f.pending != 100 || f.expired != 50 || !f.estimated {
		t.Fatalf("figures with ranges 0..6 and 10..12 read: %+v, want 100 pending, 50 expired, estimated", f)
	}
	for _, want := range []string{"[13 14 15]", "[16 17 18]", "[19 7 8]", "[9 0 1]"} {
		if q = read(20); fmt.Sprint(q.ks) != want {
			t.Fatalf("read %v, want %s", q.ks, want)
		}
	}
}

// A range of pages is read in every partition: on a partitioned table it
// spans fewer pages, so that a range holds about as many rows as on a table
// that is not (on 8 partitions of a 1 M-row leak, ranges of 32 pages cost
// each poll 6 ms of the server's time, the pace's floor of one range).
// Ranges of ids (before PostgreSQL 14) hold their ids whatever the
// partitions.
func TestACensusRangeHoldsAsManyPagesOnPartitions(t *testing.T) {
	for _, tc := range []struct {
		byTID bool
		parts int64
		want  int64
	}{
		{true, 0, censusPages},
		{true, 1, censusPages},
		{true, 8, censusPages / 8},
		{true, 64, 1},
		{false, 8, censusIDs},
	} {
		c := census{byTID: tc.byTID, parts: tc.parts}
		c.plan()
		if c.width != tc.want {
			t.Errorf("byTID %v, %d partitions: ranges of %d, want %d", tc.byTID, tc.parts, c.width, tc.want)
		}
	}
}
