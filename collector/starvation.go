package collector

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// passOver finds starvation (seed 001 §6.3: SKIP LOCKED gives up FIFO
// order, so some free ids are skipped again and again): free ids that
// claims pass over while they take newer ones. It needs nothing but the id
// and the status, so it works on any pool the collector can count.
//
// Each poll reads the first starvationWindow free ids (the lowest UNUSED
// ids, through the partial index, from the UNUSED counter's floor). Between
// two polls, a free id x of the previous window that is still free has been
// passed over when an id above it left UNUSED meanwhile: an id of the
// previous window that is gone, or, when the window was full, more ids
// gone from the count of UNUSED than from the window (ids past it). Claims
// in id order take x first, so in a healthy pool nothing is passed over
// for longer than one claim in flight.
//
// For each passed-over id it keeps the claims that passed it (newer ids
// taken while it stayed free) and the time it has been passed over: the
// time of the poll intervals in which claims passed it, so that an idle
// pool does not age it. An interval in which claims took ids but none
// above x ends its run.
type passOver struct {
	prev   []windowID // the window at the last poll, ascending
	prevAt time.Time
	polled bool
	ids    map[int64]*passed
}

// windowID is a free id of the window and the table that holds it: on a
// partitioned pool claims keep id order only within a partition (each
// claim picks a partition at random), so an id is judged against the
// ids of its own partition.
type windowID struct {
	id   int64
	part uint32
}

// passed is what passOver keeps about one passed-over free id.
type passed struct {
	by        int64         // claims of newer ids while it stayed free
	passedFor time.Duration // time of the intervals in which claims passed it
	intervals int           // poll intervals in which claims passed it
}

// starvationWindow is how many of the lowest free ids each poll reads.
const starvationWindow = 256

// passQuery is one poll's read of the window.
type passQuery struct{ ids []windowID }

// queue reads the lowest free ids from floor on (MinInt64: from the start).
func (p *passOver) queue(b *pgx.Batch, table string, floor int64) *passQuery {
	q := &passQuery{}
	b.Queue(fmt.Sprintf(sqlStarvationWindow, table), floor, starvationWindow).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var w windowID
			if err := rows.Scan(&w.id, &w.part); err != nil {
				return fmt.Errorf("starvation window: %w", err)
			}
			q.ids = append(q.ids, w)
		}
		return rows.Err()
	})
	return q
}

// sqlStarvationWindow reads the lowest free ids, $2 of them, from id $1,
// with the table (partition) that holds each.
const sqlStarvationWindow = `SELECT id, tableoid::bigint FROM %s WHERE status = 'UNUSED' AND id >= $1::bigint ORDER BY id LIMIT $2`

// starvationFigures are the starvation figures of one poll.
type starvationFigures struct {
	known bool  // false at the first poll: there is nothing to compare with
	ids   int64 // free ids passed over at two polls or more
	full  bool  // every id of the window is: ids is a lower bound
	// the oldest of them: the time claims have passed it, and how many
	oldest time.Duration
	by     int64
}

// absorb compares the window with the last one. fell is how many ids the
// count of UNUSED lost since the last poll (from the chunks counted at
// both; 0 when unknown or when it grew).
func (p *passOver) absorb(q *passQuery, now time.Time, fell int64) starvationFigures {
	if q == nil { // no window this poll
		return starvationFigures{}
	}
	cur := q.ids
	if !p.polled {
		p.prev, p.prevAt, p.polled, p.ids = cur, now, true, map[int64]*passed{}
		return starvationFigures{}
	}
	interval := now.Sub(p.prevAt)
	still := make(map[int64]bool, len(cur))
	for _, w := range cur {
		still[w.id] = true
	}
	// The ids of the last window that left UNUSED, ascending, by table.
	gone := map[uint32][]int64{}
	parts := map[uint32]bool{}
	left := 0
	for _, w := range p.prev {
		parts[w.part] = true
		if !still[w.id] {
			gone[w.part] = append(gone[w.part], w.id)
			left++
		}
	}
	// Ids past the last window that left, which only a full window can
	// tell: on one table, those the count of UNUSED lost beyond the
	// window's; on partitions, where claims in id order always take a
	// partition's lowest ids (in the window), all it lost when the window
	// lost none.
	past := int64(0)
	switch {
	case len(p.prev) < starvationWindow:
	case len(parts) <= 1:
		past = max(0, fell-int64(left))
	case left == 0:
		past = fell
	}
	for _, w := range p.prev {
		if !still[w.id] {
			continue
		}
		g := gone[w.part]
		above := int64(len(g)-atMost(g, w.id)) + past
		switch {
		case above > 0:
			e := p.ids[w.id]
			if e == nil {
				e = &passed{}
				p.ids[w.id] = e
			}
			e.by += above
			e.passedFor += interval
			e.intervals++
		case len(g) > 0:
			delete(p.ids, w.id) // claims went on in its table, and took none above it
		}
	}
	for id := range p.ids {
		if !still[id] {
			delete(p.ids, id) // taken at last, or out of the window
		}
	}
	p.prev, p.prevAt = cur, now
	f := starvationFigures{known: true}
	oldest := int64(math.MaxInt64)
	for id, e := range p.ids {
		if e.intervals < 2 {
			continue // one interval: a claim still in flight when the poll read
		}
		f.ids++
		if e.passedFor > f.oldest || (e.passedFor == f.oldest && id < oldest) {
			f.oldest, f.by, oldest = e.passedFor, e.by, id
		}
	}
	f.full = len(cur) == starvationWindow && f.ids == int64(len(cur))
	return f
}

// atMost is the number of ids in the ascending list ids that are at most x.
func atMost(ids []int64, x int64) int {
	n, found := slices.BinarySearch(ids, x)
	if found {
		n++
	}
	return n
}

// StarvationClaims is how many newer claims must have passed a free id
// before the starvation alert is raised: on a quiet pool, a free id held
// for a few seconds while a handful of claims go by is not worth a ticket.
const StarvationClaims = 100

// front is the lowest free id of the window that claims have not passed
// over, where they take their ids while they pass over lower ones; past
// the window when they passed over all of it. ok is false when nothing is
// passed over: claims take the lowest free ids.
func (p *passOver) front() (id int64, ok bool) {
	if len(p.ids) == 0 || len(p.prev) == 0 {
		return 0, false
	}
	for _, w := range p.prev {
		if p.ids[w.id] == nil {
			return w.id, true
		}
	}
	return p.prev[len(p.prev)-1].id + 1, true
}
