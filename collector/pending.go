package collector

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// pendingCounter counts PENDING rows through the partial index on
// leased_until WHERE status = 'PENDING', exactly and without counting them
// all at every poll: during a leak a pool holds a million PENDING rows, and
// reading them all each second would cost the server more than the workers.
//
// The index's key space is cut at a boundary, top, that follows the clock a
// little behind it:
//
//   - the live region, leases that expire at or after top (the leases in
//     flight and the ones that just expired), is counted at every poll: it
//     is where claims, renewals and commits happen;
//   - leases without an expiry (claimed with no lease) are counted at every
//     poll too, with their age, since nothing ever frees them;
//   - below top, the expired leases are cut into slices of a few thousand
//     entries, found by walking the index from the last boundary. They
//     change only when the reaper (from the oldest, so the first slice is
//     recounted at every poll) or a person frees them; the others are
//     recounted in turn, as many entries a poll as the pace allows.
//
// Every slice lies below top, so every lease in one has expired, and for
// longer than the reaper's interval. Expired for longer than the stuck
// threshold is the sum of the slices below that age plus one count of the
// slice that straddles it, made at every poll.
//
// Regions larger than the per-poll cap are counted every few polls instead
// of every poll; their figures in between are marked estimated, with their
// age.
type pendingCounter struct {
	width  int       // entries per new slice, and the walk of one discovery step
	per    int64     // entries recounted per poll in turn (the pace, adapted)
	top    time.Time // zero until the first poll
	slices []pslice  // contiguous, ascending; the first starts at -infinity
	edge   *time.Time
	cursor int
	live   pregion
	none   pregion // PENDING without a lease
	// skew is the server's clock minus ours, from the last poll: slices are
	// cut on the server's clock.
	skew time.Duration
}

// pslice is the PENDING rows whose lease expires in [lo, hi); lo nil is
// -infinity. n is their count at time at.
type pslice struct {
	lo   *time.Time
	hi   time.Time
	n    int64
	at   time.Time
	seen bool // counted at least once
}

// pregion is a region counted as a whole: the live leases, or the rows
// without a lease.
type pregion struct {
	n, expired, expiredOld, stuck int64
	oldest                        *time.Time // oldest updated_at (no lease) or lease expiry (live)
	low                           *int64     // lowest id (live region), for the UNUSED head's floor
	at                            time.Time
	wait                          int // polls until the next count, when the region is large
	counted                       bool
	sampled                       bool // stuck and oldest come from part of the region
}

// Defaults of the PENDING counter.
const (
	sliceWidth  = 4096    // entries per slice
	regionCap   = 50_000  // a region larger than this is counted every n/regionCap polls
	lowCap      = 64      // the lowest id of the live leases is read while there are at most this many
	noneSample  = 256     // rows without a lease read from the table per poll, for their age
	minPending  = 2048    // entries recounted per poll, at least …
	maxPending  = 262_144 // … and at most
	liveMargin  = time.Second
	initPending = 16_384
)

// pendingQuery is the plan of one poll's PENDING statements, and their results.
type pendingQuery struct {
	top        time.Time // the live region's lower bound this poll
	countLive  bool
	countNone  bool
	discover   bool
	walk       int64      // entries the discovery walk reads at most
	from, upto *time.Time // the discovery walk: [from, upto)
	recount    []int      // indexes of the slices recounted
	straddle   int        // slice holding now - stuck (-1: none); recounted and split
	stuckAt    time.Time  // the stuck boundary on the server's clock

	// results
	walked     int64       // entries the walk read (walk+1: it stopped before upto)
	walkStuck  int64       // of which expired before stuckAt
	first      *time.Time  // the walk's first key
	bounds     []time.Time // first key of each slice after the first, from the walk
	ranks      []int64     // position (from 1) of each bound's first entry in the walk
	counts     []int64
	split      int64 // entries of the straddling slice expired before stuckAt
	live, none pregion
	minLease   *time.Time // the earliest lease expiry of any PENDING row
	serverNow  time.Time
	rotMS      float64 // server time of the walk and the recounts
}

// plan decides what the next poll counts. now is our clock; expiredAfter and
// stuckAfter are the alert thresholds.
func (p *pendingCounter) plan(now time.Time, expiredAfter, stuckAfter time.Duration) *pendingQuery {
	if p.width == 0 {
		p.width, p.per = sliceWidth, initPending
	}
	server := now.Add(p.skew)
	q := &pendingQuery{straddle: -1, stuckAt: server.Add(-stuckAfter), walk: p.per}
	// The live region starts a little more than the reaper interval ago, so
	// that whatever lies below it has expired for longer than that.
	want := server.Add(-max(expiredAfter, time.Second) - liveMargin)
	q.countLive = p.live.wait <= 0 || !p.live.counted
	q.countNone = p.none.wait <= 0 || !p.none.counted
	q.top = p.top
	if q.top.IsZero() || (q.countLive && want.After(p.top)) {
		q.top = want // the band [p.top, want) leaves the live region: it is walked below
	}
	// Walk the index from the edge of the slices up to the live region.
	if p.edge == nil || p.edge.Before(q.top) {
		q.discover, q.from, q.upto = true, p.edge, &q.top
	}
	// The first slice (the reaper works from the oldest lease), the one
	// straddling the stuck boundary, slices never counted exactly, then the
	// others in turn.
	var budget int64
	add := func(i int) {
		for _, j := range q.recount {
			if j == i {
				return
			}
		}
		q.recount = append(q.recount, i)
		budget += p.slices[i].n
	}
	if len(p.slices) > 0 {
		add(0)
		for i, s := range p.slices {
			if (s.lo == nil || !s.lo.After(q.stuckAt)) && s.hi.After(q.stuckAt) {
				q.straddle = i
				add(i)
			}
			if !s.seen {
				add(i)
			}
		}
		for k := 0; k < len(p.slices) && budget < p.per; k++ {
			p.cursor = (p.cursor + 1) % len(p.slices)
			add(p.cursor)
		}
	}
	return q
}

// queue adds the statements to the batch. table is the quoted pool table;
// hasUpdated says whether it has updated_at (the age of rows without a lease).
func (q *pendingQuery) queue(b *pgx.Batch, table string, hasUpdated bool, expiredAfter, stuckAfter time.Duration, slices []pslice) {
	los := make([]pgtype.Timestamptz, len(q.recount))
	his := make([]time.Time, len(q.recount))
	for i, k := range q.recount {
		los[i] = lowerBound(slices[k].lo)
		his[i] = slices[k].hi
	}
	var slo pgtype.Timestamptz
	if q.straddle >= 0 {
		slo = lowerBound(slices[q.straddle].lo)
	}
	updated := "updated_at"
	if !hasUpdated {
		updated = "NULL::timestamptz"
	}
	upto := q.top
	if q.upto != nil {
		upto = *q.upto
	}
	// The walk reads the index in key order from the edge and returns the
	// key at every sliceWidth-th entry with the position of its first entry:
	// consecutive positions give each new slice its exact count, ties included.
	b.Queue(fmt.Sprintf(`
WITH w AS MATERIALIZED (
    SELECT leased_until AS k, row_number() OVER (ORDER BY leased_until) AS rn
    FROM (SELECT leased_until FROM %[1]s WHERE status = 'PENDING' AND $1::boolean
          AND leased_until >= $2::timestamptz AND leased_until < $3::timestamptz ORDER BY leased_until LIMIT $4::bigint) AS s
), b AS (
    SELECT k, min(rn) AS r FROM w WHERE k IN (SELECT k FROM w WHERE rn > 1 AND rn %% $5::bigint = 1) GROUP BY k HAVING min(rn) > 1
)
SELECT clock_timestamp(), (SELECT count(*) FROM w), (SELECT count(*) FROM w WHERE k < $6::timestamptz), (SELECT k FROM w WHERE rn = 1),
       ARRAY(SELECT k FROM b ORDER BY k), ARRAY(SELECT r FROM b ORDER BY k), clock_timestamp()`, table),
		q.discover, lowerBound(q.from), upto, q.walk+1, sliceWidth, q.stuckAt).QueryRow(func(row pgx.Row) error {
		var t0, t1 time.Time
		var bounds []pgtype.Timestamptz
		var first pgtype.Timestamptz
		if err := row.Scan(&t0, &q.walked, &q.walkStuck, &first, &bounds, &q.ranks, &t1); err != nil {
			return fmt.Errorf("pending ids: walk: %w", err)
		}
		q.first = finite(first)
		for _, b := range bounds {
			q.bounds = append(q.bounds, *finite(b))
		}
		q.rotMS += float64(t1.Sub(t0).Microseconds()) / 1000
		return nil
	})
	b.Queue(fmt.Sprintf(`
SELECT now(), (SELECT min(leased_until) FROM %[1]s WHERE status = 'PENDING'),
       (SELECT row(count(*), count(*) FILTER (WHERE leased_until < now()),
                   count(*) FILTER (WHERE leased_until < now() - $1::bigint * interval '1 microsecond'),
                   count(*) FILTER (WHERE leased_until < now() - $2::bigint * interval '1 microsecond'),
                   min(leased_until),
                   (SELECT min(id) FROM (SELECT id FROM %[1]s WHERE status = 'PENDING' AND $3::boolean
                                         AND leased_until >= $4::timestamptz ORDER BY leased_until LIMIT %[3]d) AS l))
        FROM %[1]s WHERE status = 'PENDING' AND $3::boolean AND leased_until >= $4::timestamptz),
       (SELECT row((SELECT count(*) FROM %[1]s WHERE status = 'PENDING' AND $5::boolean AND leased_until IS NULL),
                   count(*), count(*) FILTER (WHERE u < now() - $2::bigint * interval '1 microsecond'), min(u))
        FROM (SELECT %[2]s AS u FROM %[1]s WHERE status = 'PENDING' AND $5::boolean AND leased_until IS NULL
              ORDER BY leased_until LIMIT %[4]d) AS x),
       clock_timestamp(),
       ARRAY(SELECT (SELECT count(*) FROM %[1]s WHERE status = 'PENDING' AND leased_until >= s.lo AND leased_until < s.hi)
             FROM unnest($6::timestamptz[], $7::timestamptz[]) WITH ORDINALITY AS s(lo, hi, i) ORDER BY s.i),
       (SELECT count(*) FROM %[1]s WHERE status = 'PENDING' AND $8::boolean
              AND leased_until >= $9::timestamptz AND leased_until < now() - $2::bigint * interval '1 microsecond'),
       clock_timestamp()`, table, updated, lowCap+1, noneSample),
		expiredAfter.Microseconds(), stuckAfter.Microseconds(), q.countLive, q.top, q.countNone, los, his, q.straddle >= 0, slo).QueryRow(func(row pgx.Row) error {
		var t1, t2 time.Time
		var live liveRow
		var none noneRow
		var minLease pgtype.Timestamptz
		if err := row.Scan(&q.serverNow, &minLease, &live, &none, &t1, &q.counts, &q.split, &t2); err != nil {
			return fmt.Errorf("pending ids: %w", err)
		}
		q.live = live.region()
		q.none = none.region()
		q.minLease = finite(minLease)
		q.rotMS += float64(t2.Sub(t1).Microseconds()) / 1000
		return nil
	})
}

// farFuture stands for +infinity where a key must be a time.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

func lowerBound(t *time.Time) pgtype.Timestamptz {
	if t == nil {
		return pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
	}
	return pgtype.Timestamptz{Time: *t, Valid: true}
}

// liveRow and noneRow scan the composite values of the two regions; lease
// times may be infinite, which time.Time cannot hold.
type liveRow struct {
	n, expired, expiredOld, stuck int64
	oldest                        pgtype.Timestamptz
	low                           *int64
}

func (r *liveRow) ScanIndex(i int) any {
	return []any{&r.n, &r.expired, &r.expiredOld, &r.stuck, &r.oldest, &r.low}[i]
}

func (r liveRow) region() pregion {
	return pregion{n: r.n, expired: r.expired, expiredOld: r.expiredOld, stuck: r.stuck, oldest: finite(r.oldest), low: r.low, counted: true}
}

type noneRow struct {
	n, sampled, stuck int64
	oldest            pgtype.Timestamptz
}

func (r *noneRow) ScanIndex(i int) any { return []any{&r.n, &r.sampled, &r.stuck, &r.oldest}[i] }

// region: the count is exact (read from the index alone); how many are
// stuck and the oldest are read from the table for at most noneSample rows,
// and scaled up when there are more.
func (r noneRow) region() pregion {
	g := pregion{n: r.n, stuck: r.stuck, oldest: finite(r.oldest), counted: true}
	if r.n > r.sampled && r.sampled > 0 {
		g.stuck = int64(float64(r.stuck) * float64(r.n) / float64(r.sampled))
		g.sampled = true
	}
	return g
}

// finite returns the time, nil for NULL; -infinity is the zero time (older
// than anything), +infinity far in the future.
func finite(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	switch t.InfinityModifier {
	case pgtype.NegativeInfinity:
		v = time.Time{}
	case pgtype.Infinity:
		v = farFuture
	}
	return &v
}

// pendingFigures are the PENDING counts of one poll.
type pendingFigures struct {
	pending, expired, expiredOld, stuck int64
	// oldest is when the longest-waiting PENDING row nothing frees began to
	// wait: its lease expired, or, without a lease, it last changed.
	oldest    *time.Time
	low       *int64 // lowest id of a live lease
	lowKnown  bool   // low was read (the live leases were counted, and few)
	estimated bool
	ageS      float64
	freed     bool // a slice or the rows without a lease lost rows since their last count
}

// absorb takes the results of q into the counter and returns the figures.
// It is pure: tests drive it without PostgreSQL.
func (p *pendingCounter) absorb(q *pendingQuery, now time.Time, countBudget time.Duration) pendingFigures {
	var f pendingFigures
	if !q.serverNow.IsZero() {
		p.skew = q.serverNow.Sub(now)
	}
	at := now
	// Recounted slices (before the discovery appends new ones).
	for i, k := range q.recount {
		if i >= len(q.counts) || k >= len(p.slices) {
			break
		}
		s := &p.slices[k]
		if s.seen && q.counts[i] < s.n {
			f.freed = true
		}
		s.n, s.at, s.seen = q.counts[i], at, true
	}
	stuckSlices := int64(0)
	for k, s := range p.slices {
		if k == q.straddle {
			break
		}
		if !s.hi.After(q.stuckAt) {
			stuckSlices += s.n
		}
	}
	if q.straddle >= 0 {
		stuckSlices += q.split
	}
	// The walk: new slices [from, b1), [b1, b2), …, and up to upto when it
	// got there; otherwise the next walk starts again at the last bound.
	if q.discover {
		before := int64(0)
		for _, s := range p.slices {
			before += s.n
		}
		lo, rank := q.from, int64(1)
		for i, b := range q.bounds {
			b := b
			p.slices = append(p.slices, pslice{lo: lo, hi: b, n: q.ranks[i] - rank, at: at, seen: true})
			lo, rank = &b, q.ranks[i]
		}
		switch {
		case q.walked <= q.walk: // the walk got to the live region
			p.slices = append(p.slices, pslice{lo: lo, hi: q.top, n: q.walked - rank + 1, at: at, seen: true})
			e := q.top
			p.edge = &e
		case len(q.bounds) > 0:
			p.edge = lo // the last bound's run may go on past the walk: walked again
		case q.first != nil:
			// One key's run fills the whole walk: take the run as a slice,
			// counted exactly at the next poll.
			hi := q.first.Add(time.Microsecond)
			p.slices = append(p.slices, pslice{lo: lo, hi: hi, n: q.walk, at: at})
			p.edge = &hi
		}
		// The walk ran in key order: its entries expired before the stuck
		// boundary come first, and are in the new slices as far as they go.
		var added int64
		for _, s := range p.slices {
			added += s.n
		}
		stuckSlices += min(q.walkStuck, added-before)
	}
	if q.countLive {
		p.top = q.top
		p.live = q.live
		p.live.at = at
		p.live.wait = int(q.live.n / regionCap)
		f.low, f.lowKnown = q.live.low, q.live.n <= lowCap
	} else {
		p.live.wait--
	}
	if q.countNone {
		p.none = q.none
		p.none.at = at
		p.none.wait = int(q.none.n / regionCap)
		if p.none.counted && q.none.n < p.none.n {
			f.freed = true
		}
	} else {
		p.none.wait--
	}
	p.merge()
	// The figures.
	var below int64
	oldest := at
	exact := p.edge != nil && !p.edge.Before(p.top)
	for _, s := range p.slices {
		below += s.n
		if !s.seen {
			exact = false
		}
		if s.at.Before(oldest) {
			oldest = s.at
		}
	}
	for _, r := range []pregion{p.live, p.none} {
		if r.at.Before(oldest) {
			oldest = r.at
		}
	}
	f.pending = below + p.live.n + p.none.n
	f.expired = below + p.live.expired
	f.expiredOld = below + p.live.expiredOld
	f.stuck = stuckSlices + p.live.stuck + p.none.stuck
	f.oldest = p.none.oldest
	if m := q.minLease; m != nil && m.Before(q.serverNow) && (f.oldest == nil || m.Before(*f.oldest)) {
		f.oldest = m
	}
	f.ageS = at.Sub(oldest).Seconds()
	f.estimated = !exact || oldest.Before(at) || p.none.sampled
	// Pace: recount more entries a poll while the work is cheap.
	budget := float64(countBudget.Microseconds()) / 1000
	switch {
	case q.rotMS < budget && p.per < maxPending:
		p.per *= 2
	case q.rotMS > 2*budget && p.per > minPending:
		p.per /= 2
	}
	return f
}

// merge joins neighbouring slices that have shrunk (the reaper empties them
// from the oldest), so that their number stays near PENDING / sliceWidth.
func (p *pendingCounter) merge() {
	if len(p.slices) < 2 {
		return
	}
	out := p.slices[:1]
	for _, s := range p.slices[1:] {
		last := &out[len(out)-1]
		if last.seen && s.seen && last.n+s.n <= sliceWidth/2 {
			last.hi, last.n = s.hi, last.n+s.n
			if s.at.Before(last.at) {
				last.at = s.at
			}
			continue
		}
		out = append(out, s)
	}
	p.slices = out
	if p.cursor >= len(p.slices) {
		p.cursor = 0
	}
}

// ScanNull: the regions' rows are never NULL (an aggregate over no rows is a row of zeros).
func (r *liveRow) ScanNull() error { return nil }

// ScanNull: see liveRow.
func (r *noneRow) ScanNull() error { return nil }
