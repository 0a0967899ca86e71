package collector

import "testing"

func i64(v int64) *int64 { return &v }

// A pass reads the id range a slice a poll; until it ends the total is
// the rows counted so far with the rest of the range taken as dense; from
// its end on, the count plus the statistics' inserts less deletes. The
// correction at the pass's end is a shift, not consumption; a statistics
// reset starts the estimate again.
func TestTotalCounterPass(t *testing.T) {
	var c totalCounter
	q := c.plan()
	if q.after != nil {
		t.Fatalf("a first pass starts from the lowest id, got after %d", *q.after)
	}
	// ids 1..1000 with every tenth missing: 900 rows. First slice (0, 400].
	q.lo, q.hi, q.rows, q.top, q.insDel, q.haveStat = i64(0), i64(400), 360, i64(1000), 5000, true
	f := c.absorb(q, 0, 777)
	if !f.estimated || f.total != 360+int64(0.9*600) {
		t.Fatalf("first slice: %+v", f)
	}
	q = c.plan()
	if q.after == nil || *q.after != 400 {
		t.Fatalf("the second slice starts after 400, got %v", q.after)
	}
	q.lo, q.hi, q.rows, q.top, q.insDel, q.haveStat = i64(400), i64(1200), 540, i64(1000), 5000, true
	f = c.absorb(q, 0, 777)
	if f.estimated || f.total != 900 || f.shift != 0 {
		t.Fatalf("the pass's end: %+v", f)
	}
	// 50 rows inserted, 20 deleted since, as the statistics say; the next
	// pass starts again from the lowest id.
	q = c.plan()
	if q.after != nil {
		t.Fatalf("a new pass starts from the lowest id")
	}
	q.lo, q.hi, q.rows, q.top, q.insDel, q.haveStat = i64(0), i64(100), 90, i64(1030), 5030, true
	if f = c.absorb(q, 0, 777); f.estimated || f.total != 930 || f.shift != 0 {
		t.Fatalf("after inserts and deletes: %+v", f)
	}
	// The statistics reset: the figure is estimated again, from the pass.
	q = c.plan()
	q.lo, q.hi, q.rows, q.top, q.insDel, q.haveStat = i64(100), i64(200), 90, i64(1030), 0, true
	if f = c.absorb(q, 0, 0); !f.estimated || f.total != 180+int64(0.9*830) {
		t.Fatalf("after a statistics reset: %+v", f)
	}
	// The pass ends with 920 rows (10 deleted since it read their range):
	// the total moves by that correction, a shift.
	q = c.plan()
	q.lo, q.hi, q.rows, q.top, q.insDel, q.haveStat = i64(200), i64(1100), 740, i64(1030), 3, true
	if f = c.absorb(q, 0, 0); f.estimated || f.total != 920 || f.shift != 920-(180+int64(0.9*830))-3 {
		t.Fatalf("the second pass's end: %+v", f)
	}
	// An empty pool.
	q = c.plan()
	q.lo, q.hi, q.top, q.rows, q.insDel, q.haveStat = nil, nil, nil, 0, 3, true
	if f = c.absorb(q, 0, 0); f.total != 0 || f.estimated {
		t.Fatalf("empty pool: %+v", f)
	}
}
