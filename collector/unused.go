package collector

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/engine"
)

// unusedCounter keeps an exact count of UNUSED ids without ever counting the
// whole pool in one statement (on ten million rows that takes seconds and
// slows the workers). The id range is cut into fixed chunks of about a
// thousand ids. Each poll counts, in one statement, the ids from the lowest
// UNUSED id to the end of its chunk (where SKIP LOCKED claims in id order take
// their ids, and where reclaimed ids return), the chunks the head may reach
// by the next poll if they were never counted, and a run of chunks swept down
// from the top, as many as the poll's time allows. Chunks below the
// lowest UNUSED id hold none by definition. The sum is exact for chunks
// counted this poll; the others are as old as their last count, and the
// figure is marked estimated while any is.
type unusedCounter struct {
	width  int64 // ids per chunk; 0 until the first poll saw the id range
	counts chunks
	cursor int64 // next chunk of the sweep, which runs down from the top
	moved  int64 // chunks the head moved at the last poll
	head   int64 // chunk of the lowest UNUSED id at the last poll
	top    int64 // chunk of the highest id at the last poll
	topID  int64 // the highest id at the last poll
	// ahead is the last chunk above the head that the lookahead has
	// counted, aheadOK whether there is one: the chunks from the head to it
	// hold their counts from then (claims take ids at the head, and the
	// sweep finds ids returned elsewhere), so the next lookahead counts
	// only the chunks past it.
	ahead   int64
	aheadOK bool
	per     pace // chunks swept per poll
	polled  bool // a poll has counted before: deltas are meaningful
	// floor is an id below which no UNUSED id can be, from the previous
	// poll (see queue), and anchored when the lowest UNUSED id was last
	// looked for from the start of the index.
	floor    *int64
	anchored time.Time
	reanchor time.Duration // default reanchor
	// A look from the start of the index is a seek by windows of ids
	// (sqlUnusedSeek) while the UNUSED session has not read the index's head in
	// one statement since it started (warm): the first read of each page
	// costs a new backend tens of microseconds, and claims leave thousands
	// of pages of dead entries at the head between vacuums. seek is the
	// one under way (nil: none); meanwhile the poll counts from the last
	// floor (headID, the lowest UNUSED id the last poll found), and before
	// any floor is known it counts nothing and shows est.
	// seeks: looks so (the pool's counter; a partition's counter looks
	// in one statement)
	seeks bool
	// guessed: head is the table's lowest id, not a found head (the first
	// seek had not found it); the find is then no move of the head
	guessed   bool
	seek      *seekState
	seekN     int64         // ids in the first window of the next seek statement
	seekTime  time.Duration // a seek statement's budget (0: seekBudget)
	warm      bool
	session   uint32 // the UNUSED session's backend (0: unknown)
	headID    int64
	headKnown bool
	freed     bool  // ids were returned below the floor since the last look from the start
	est       int64 // UNUSED as the statistics have it (-1: unknown)
	last      unusedFigures
	// front is the chunk where claims take their ids when that is not the
	// head's: while claims pass over free ids (starvation), the lowest
	// UNUSED id stays put and claims move on above it, and the lookahead
	// from the head would not follow them (-1: claims take the head's).
	// frontMoved is how many chunks it moved at the last poll.
	front      int64
	frontMoved int64
	frontOK    bool
}

// setFront tells the counter the lowest free id that claims have not
// passed over (see passOver), or none (ok false): claims take theirs
// from there, and the next poll counts ahead of it as it does ahead of
// the head.
func (u *unusedCounter) setFront(id int64, ok bool) {
	if !ok || u.width == 0 {
		u.frontOK = false
		return
	}
	k := id / u.width
	u.frontMoved = 1
	if u.frontOK {
		u.frontMoved = max(k-u.front, u.front-k, 1)
	}
	u.front, u.frontOK = k, true
}

// lowerFloor adjusts the floor for the next poll from the PENDING figures:
// ids are returned to the pool from PENDING rows, so the floor is at most the
// lowest id of a live lease; when PENDING rows elsewhere were freed (by the
// reaper, or by hand), the next poll looks from the start of the index.
// When the live leases are too many to know the lowest (valid false), the
// floor stays this poll's lowest UNUSED id: an id a holder releases below
// it is found by the look from the start every reanchor (each look walks
// every entry claims left dead at the head since the last vacuum, so it
// comes no more often than that).
func (u *unusedCounter) lowerFloor(low *int64, valid, freed bool) {
	switch {
	case freed:
		u.floor, u.freed = nil, true
		if u.seek != nil && !u.seek.freed {
			u.seek = nil // ids may have returned below its windows: start again
		}
	case valid && u.floor != nil && low != nil && *low < *u.floor:
		f := *low
		u.floor = &f
	}
}

// reanchor is how often the lowest UNUSED id is looked for from the start of
// the index all the same, to see ids returned below the floor by hand.
const reanchor = 30 * time.Second

const (
	minChunk  = 1024
	maxChunks = 16384 // the id range is cut into at most about this many chunks
	maxSweep  = 256   // chunks swept per poll when polls are cheap
)

// seekState is a look for the lowest UNUSED id under way.
type seekState struct {
	from  int64 // no UNUSED id below it, as the windows so far found
	freed bool  // begun after ids were returned: the figures are estimates until it ends
	whole bool  // begun by this statement (see warm)
	polls int   // statements it has taken
}

const (
	seekFirst    = 16 * minChunk        // ids in a seek's first window
	seekBudget   = 5 * time.Millisecond // a seek statement's time, after which it opens no further window
	warmLookMS   = 10.0                 // a look from the start slower than this (ms) seeks next time
	maxSeekWidth = math.MaxInt64 / 4
	// maxSeekPolls: a seek that has not ended in this many polls (claims
	// move the head away faster than it reads) reads the rest at once.
	maxSeekPolls = 10
)

// init learns the id range before the first poll, so that the first poll
// already counts the right chunks: the lowest UNUSED id by a seek from the
// start of the index, and the highest id. When the seek runs out of time
// first (many dead entries at the head of the index), the first polls go
// on with it and count nothing until it finds the lowest UNUSED id.
func (u *unusedCounter) init(ctx context.Context, c *Collector, q engine.DBTX) error {
	u.seekN = max(u.seekN, seekFirst)
	uq := &unusedQuery{seek: true, seekOnly: true, seekFrom: math.MinInt64, floor: math.MinInt64, tail: -1, aheadFrom: math.MinInt64, above: math.MinInt64, got: map[int64]int64{}}
	rows, err := q.Query(ctx, uq.sql(c.t.qualified), uq.args(0, u.seekN, u.seekTime)...)
	if err != nil {
		return err
	}
	err = uq.scan(rows)
	r := uq.sought
	if err != nil || uq.top == nil || r.hi == nil || r.base == nil {
		return err
	}
	top := *uq.top
	head := *r.base
	if r.m != nil {
		head = *r.m
	}
	u.width = max(minChunk, (top-min(head, top)+1)/maxChunks+1)
	u.head, u.top, u.topID = head/u.width, top/u.width, top
	u.paceSeek(r)
	if r.m != nil || *r.hi >= *r.bound {
		// Found (or none at all): the first poll looks for the lowest
		// UNUSED id from it, as any poll from the last one's.
		f := *r.hi
		if r.m != nil {
			f = *r.m
		}
		u.floor, u.anchored, u.warm = &f, time.Now(), true
		return nil
	}
	u.seek = &seekState{from: *r.hi}
	u.guessed = true
	u.est = -1
	return q.QueryRow(ctx, sqlUnusedEstimate, c.t.leaves).Scan(&u.est)
}

// seekResult is what the seek found: the end of its last window (ids
// below it, from where it began, hold no UNUSED id unless m), that
// window's width, the lowest UNUSED id if found, the bound it stopped at,
// the table's lowest id (when it began at the start), and its time on
// the server.
type seekResult struct {
	hi, n, m, bound, base *int64
	t0, t1                *time.Time
}

// sqlUnusedEstimate is the UNUSED rows as the statistics have them: the
// entries of the partial indexes on UNUSED rows (-1: never counted).
const sqlUnusedEstimate = `
SELECT coalesce(sum(c.reltuples) FILTER (WHERE c.reltuples >= 0), -1)::bigint
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = ANY($1::oid[]) AND pg_get_expr(i.indpred, i.indrelid) LIKE '%''UNUSED''%'`

// unusedQuery is one poll's plan of the UNUSED statement, and its results.
type unusedQuery struct {
	lo, hi int64 // the sweep: chunks [lo, hi)
	look   int64 // chunks above the head counted ahead of it …
	// … from this chunk on, unless the head moved below head0 (the
	// chunks up to aheadFrom hold counts from the lookahead before)
	aheadFrom, head0 int64
	above            int64 // the tail is counted only if the top is past this id
	floor            int64 // the lowest UNUSED id is looked for from here
	tail             int64 // chunks from this one up to the top are counted (-1: none)
	// results
	head, top *int64
	got       map[int64]int64
	swept     map[int64]int64 // the sweep's counts, read by a statement of their own
	// the chunks [flo, fhi) ahead of the claims' front (see front), and
	// their counts
	flo, fhi int64
	fronted  map[int64]int64
	el       time.Duration // the statements' time on the server, which paces the sweep
	sweepEl  time.Duration
	// the seek's window this poll: from seekFrom up to seekTo at most
	// (seek false: none); seekOnly: no floor is known yet, and the poll
	// counts nothing else
	seek, seekOnly   bool
	skip             bool // nothing is sent: the figures are the statistics' (see Collector.stage)
	seekFrom, seekTo int64
	sought           seekResult
}

// lookFrom is the first chunk the lookahead counted, hc the head's chunk.
func (q *unusedQuery) lookFrom(hc int64) int64 {
	if q.aheadFrom != math.MinInt64 && hc >= q.head0 {
		return max(hc+1, q.aheadFrom)
	}
	return hc + 1
}

// unusedFigures are UNUSED's figures from one poll.
type unusedFigures struct {
	unused    int64
	ageS      float64
	estimated bool
	delta     int64 // change since the previous poll, from chunks counted in both
	haveDelta bool
	covered   float64 // share of the id range counted at least once (1: all of it)
}

// plan decides what the next poll counts.
//
// The lowest UNUSED id is looked for from a floor: the index scan from the
// start would walk every dead entry that claims leave at the head of the
// partial index until vacuum removes them (up to 2% of the table between
// autovacuums: milliseconds on ten million rows). Ids return to the pool
// only from PENDING rows, and the lease protocol never makes a CONSUMED id
// UNUSED again; so the next poll starts from the lower of this poll's lowest
// UNUSED id and the lowest id of a live lease (see lowerFloor), and from the
// start whenever PENDING rows elsewhere were freed, and every 30 s, which
// catches ids returned to the pool by hand.
func (u *unusedCounter) plan(now time.Time) *unusedQuery {
	if u.per.n == 0 {
		u.per = pace{n: 8, lo: 1, hi: maxSweep, step: 1}
	}
	q := &unusedQuery{floor: math.MinInt64, tail: -1, aheadFrom: math.MinInt64, above: math.MinInt64}
	cursor := u.cursor
	// The lookahead: the chunks the head may enter before the next poll,
	// counted now (ahead of the head as this poll finds it), so that the
	// next poll knows their previous counts: the change in UNUSED is
	// computed from each chunk's previous count, and a chunk the head
	// crossed without a count of it would hide the ids taken from it (a
	// fast head under a producer that keeps up would read as a pool that
	// grows). Twice the chunks the head moved last time, and one more.
	// The sweep: chunks [lo, hi), running down from the top to the head,
	// then again from the top, so that the whole range is counted however
	// fast the head moves.
	if u.width > 0 && u.top > u.head {
		q.look = min(2*u.moved+1, maxSweep)
		if u.aheadOK {
			q.aheadFrom, q.head0 = u.ahead+1, u.head
		}
		if u.cursor <= u.head || u.cursor > u.top {
			u.cursor = u.top
		}
		q.lo, q.hi = max(u.cursor-u.per.n+1, u.head+1), u.cursor+1
		u.cursor = q.lo - 1
	}
	// Ahead of the claims' front: it is the last poll's (the window that
	// finds it is read with this poll's counts), so the chunks cover the
	// claims of this interval and of the next, with one more to spare:
	// three times its last move, and two chunks.
	if u.frontOK && u.width > 0 && u.front > u.head {
		q.flo = u.front
		q.fhi = min(u.front+3*u.frontMoved+2, u.top+1, u.front+maxSweep)
	}
	if u.reanchor == 0 {
		u.reanchor = reanchor
	}
	switch {
	case u.seek == nil && u.floor != nil && now.Sub(u.anchored) < u.reanchor && !knockout.floor:
		q.floor = *u.floor
	case u.seek == nil && (u.warm || !u.seeks): // one look from the start
		u.anchored, u.freed = now, false
	default:
		if u.seek == nil {
			// A seek begins with a small window: the last one's rate was
			// over pages this session may have read, and these it may not.
			u.seek = &seekState{from: math.MinInt64, freed: u.freed, whole: true}
			u.seekN = seekFirst
		}
		q.seek, q.seekFrom = true, u.seek.from
		if u.seek.polls++; u.seek.polls > maxSeekPolls {
			u.seekN = maxSeekWidth
		}
		switch {
		case u.floor != nil:
			q.floor = *u.floor
		case u.headKnown:
			q.floor = u.headID
		default:
			q.seekOnly = true
		}
		if !q.seekOnly {
			q.seekTo = q.floor
		} else {
			// Nothing but the seek is sent: no chunk is swept this poll
			// (absorb takes a planned chunk without a count for empty).
			u.cursor, q.lo, q.hi, q.flo, q.fhi = cursor, 0, 0, 0, 0
		}
	}
	// The tail: the chunks from the previous top to the new one, counted in
	// the poll they appear, so that ids a producer adds are counted as they
	// come (otherwise the burn would miss them and page for a pool that
	// grows); only when the top moved, for ids are added above it (and
	// the sweep finds any added below it).
	if u.polled && u.width > 0 {
		q.tail, q.above = u.top, u.topID
	}
	return q
}

// queue adds the counting statements to the batches. In one snapshot, on
// b, it finds the id range (lowest UNUSED id, highest id), counts the head
// chunk from the lowest UNUSED id, then the lookahead and the tail, each
// chunk by a range scan of the partial index (a GROUP BY over one scan
// would size a hash table for thousands of groups at every execution: a
// millisecond). The three lists of chunks feed one count: on a
// partitioned pool each subquery on the pool starts a scan of every
// partition.
//
// The sweep's chunks go on sb (the PENDING count's session, or b), by a
// statement of their own: they lie above the head's chunk at the last
// poll, where no claim takes an id before the head reaches them, so a
// snapshot of their own counts them as well, and the statement on b is
// shorter by them (on a pool of 8 partitions each chunk is 8 descents of
// the index). A swept chunk the head has reached since is counted from
// the head on b, and that count is the one kept.
func (q *unusedQuery) queue(b, sb *pgx.Batch, table string, width, seekN int64, seekTime time.Duration) {
	q.got, q.swept, q.fronted = map[int64]int64{}, map[int64]int64{}, map[int64]int64{}
	if q.skip {
		return
	}
	b.Queue(q.sql(table), q.args(width, seekN, seekTime)...).Query(q.scan)
	if q.seekOnly {
		return
	}
	if width > 0 && q.flo < q.fhi {
		queueChunks(b, table, width, q.flo, q.fhi, "ahead of the claims", q.fronted, &q.el)
	}
	if width > 0 && q.lo < q.hi {
		queueChunks(sb, table, width, q.lo, q.hi, "sweep", q.swept, &q.sweepEl)
	}
}

// sql is the UNUSED statement on table: with the seek's windows if the
// poll seeks.
func (q *unusedQuery) sql(table string) string {
	if q.seek {
		return fmt.Sprintf(sqlUnusedSeek, table, "(SELECT v FROM fl)")
	}
	return fmt.Sprintf(sqlUnused, table, "$2::bigint")
}

// args are sqlUnused's arguments for chunks width ids wide, and a seek's
// first window seekN ids wide, its budget seekTime (0: seekBudget).
func (q *unusedQuery) args(width, seekN int64, seekTime time.Duration) []any {
	var from, hi0, to, floor *int64
	if q.seek {
		from = &q.seekFrom
		// From the start, the first window ends at the table's lowest id
		// plus seekN; before any floor, the seek runs up to the highest id.
		if q.seekFrom != math.MinInt64 {
			v := q.seekFrom + seekN
			hi0 = &v
		}
		if !q.seekOnly {
			to = &q.seekTo
		}
	}
	if !q.seekOnly {
		floor = &q.floor
	}
	args := []any{width, floor, q.look, q.tail, int64(maxSweep), q.above, q.head0, q.aheadFrom}
	if !q.seek {
		return args
	}
	return append(args, from, hi0, to, seekN, cmp.Or(seekTime, seekBudget), int64(maxSeekWidth))
}

// scan reads sqlUnused's rows into q.
func (q *unusedQuery) scan(rows pgx.Rows) error {
	r := &q.sought
	for rows.Next() {
		var k, n *int64
		var t0, t1 time.Time
		if err := rows.Scan(&q.head, &q.top, &k, &n, &t0, &t1, &r.hi, &r.n, &r.m, &r.bound, &r.base, &r.t0, &r.t1); err != nil {
			return fmt.Errorf("unused ids: %w", err)
		}
		if k != nil && n != nil {
			q.got[*k] = *n
		}
		q.el = max(q.el, t1.Sub(t0))
	}
	return rows.Err()
}

// queueChunks counts the UNUSED ids of chunks [lo, hi) (sqlSweep) into
// counts, and keeps in el the longest the statement took on the server.
func queueChunks(b *pgx.Batch, table string, width, lo, hi int64, what string, counts map[int64]int64, el *time.Duration) {
	b.Queue(fmt.Sprintf(sqlSweep, table), width, lo, hi).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var k, n int64
			var t0, t1 time.Time
			if err := rows.Scan(&k, &n, &t0, &t1); err != nil {
				return fmt.Errorf("unused ids: %s: %w", what, err)
			}
			counts[k] = n
			*el = max(*el, t1.Sub(t0))
		}
		return rows.Err()
	})
}

// backOff: the poll failed; the next one sweeps half as many chunks.
func (u *unusedCounter) backOff() { u.per.backOff(2) }

// sqlUnused counts UNUSED ids by chunk: $1 chunk width, $2 the floor of
// the head's search, $3 the lookahead (from chunk $8 on unless the head's
// chunk is below $7), from $4 (-1: none) up to the top at most $5 chunks of
// the tail, if the top is past id $6.
//
// The head is looked for in the floor's chunk first, by the scan that
// counts that chunk (no UNUSED id lies between the floor and the head, so
// its count from the floor is the head chunk's count); only if the chunk
// holds none does a second scan look above it (coalesce reads its
// subquery only then). The head moves a few hundred ids a poll under
// claims, mostly within one chunk: one scan of the index instead of two,
// on a partitioned pool one descent of every partition instead of two.
//
// With $9 (not NULL), it first seeks the lowest UNUSED id in [$9, $11) by
// windows of ids: the first ends at $10 (NULL: the table's lowest id plus
// $12), each next one twice as wide, until one holds an UNUSED id, the
// windows reach $11 (NULL: past the highest id), or, at the rate of the
// windows so far, the next would end past $13 of the statement's time. An id
// found is the floor; otherwise the floor is $2 (NULL: none, and nothing
// is counted). The seek's cost is the entries it reads, those claims left
// dead among them: it grows with its windows, not with the pool.
const (
	// sqlUnused is the UNUSED statement without a seek (8 arguments).
	sqlUnused = "\nWITH " + sqlUnusedCount + `
SELECT h.head, h.top, c.k,
       coalesce(c.n, (SELECT count(*) FROM %[1]s WHERE status = 'UNUSED' AND id >= c.lo AND id < c.hi)),
       h.t0, clock_timestamp(), NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::bigint, NULL::timestamptz, NULL::timestamptz
FROM h ` + sqlUnusedChunks
	// sqlUnusedSeek is the UNUSED statement after a seek (14 arguments):
	// a statement of its own, so that the plain one (and a partition's)
	// is not planned with the seek's subqueries.
	sqlUnusedSeek = "\nWITH RECURSIVE " + sqlSeekWindows + `, fl AS MATERIALIZED (
    SELECT coalesce((SELECT s.m FROM s), $2::bigint) AS v
), ` + sqlUnusedCount + `
SELECT h.head, h.top, c.k,
       coalesce(c.n, (SELECT count(*) FROM %[1]s WHERE status = 'UNUSED' AND id >= c.lo AND id < c.hi)),
       h.t0, clock_timestamp(), s.hi, s.n, s.m, s.bound, s.base, s.t0, s.t1
FROM h LEFT JOIN s ON true ` + sqlUnusedChunks
	sqlSeekWindows = `b AS MATERIALIZED (
    SELECT coalesce($10::bigint, (SELECT min(id) FROM %[1]s) + $12::bigint) AS hi0,
           coalesce($11::bigint, (SELECT max(id) FROM %[1]s) + 1) AS bound, clock_timestamp() AS t0
    WHERE $9::bigint IS NOT NULL
), w(hi, n, m) AS (
    SELECT least(b.hi0, b.bound), $12::bigint,
           (SELECT min(id) FROM %[1]s WHERE status = 'UNUSED' AND id >= $9::bigint AND id < least(b.hi0, b.bound))
    FROM b
  UNION ALL
    SELECT least(w.hi + 2 * w.n, b.bound), 2 * w.n,
           (SELECT min(id) FROM %[1]s WHERE status = 'UNUSED' AND id >= w.hi AND id < least(w.hi + 2 * w.n, b.bound))
    FROM w, b
    WHERE w.m IS NULL AND w.hi < b.bound AND w.n < $14::bigint
      -- the next window only if, at the rate so far, it ends within the budget
      AND extract(epoch FROM clock_timestamp() - b.t0) * (w.hi - b.hi0 + $12::bigint + 2 * w.n)
          < extract(epoch FROM $13::interval) * greatest(w.hi - b.hi0 + $12::bigint, 1)
), s AS MATERIALIZED (
    SELECT w.hi, w.n, w.m, b.bound, b.hi0 - $12::bigint AS base, b.t0, clock_timestamp() AS t1
    FROM w, b ORDER BY w.hi DESC NULLS LAST LIMIT 1
)`
	// sqlUnusedCount: %[2]s is the floor.
	sqlUnusedCount = `f AS MATERIALIZED (
    SELECT clock_timestamp() AS t0, min(id) AS m, count(*) AS n FROM %[1]s
    WHERE status = 'UNUSED' AND id >= %[2]s AND id < (%[2]s / nullif($1::bigint, 0) + 1) * $1::bigint
), h AS MATERIALIZED (
    SELECT f.t0, f.n AS fn, f.m IS NOT NULL AS found,
           coalesce(f.m, (SELECT min(id) FROM %[1]s WHERE status = 'UNUSED'
                          AND id >= coalesce((%[2]s / nullif($1::bigint, 0) + 1) * $1::bigint, %[2]s))) AS head,
           (SELECT max(id) FROM %[1]s) AS top
    FROM f
)`
	sqlUnusedChunks = `LEFT JOIN LATERAL (
    SELECT h.head / $1::bigint AS k, h.head AS lo, (h.head / $1::bigint + 1) * $1::bigint AS hi, CASE WHEN h.found THEN h.fn END AS n
    WHERE $1::bigint > 0 AND h.head IS NOT NULL
    UNION ALL
    SELECT g.k, g.k * $1::bigint, (g.k + 1) * $1::bigint, NULL
    FROM generate_series(CASE WHEN h.head / $1::bigint >= $7::bigint THEN greatest(h.head / $1::bigint + 1, $8::bigint)
                              ELSE h.head / $1::bigint + 1 END, h.head / $1::bigint + $3::bigint) AS g(k)
    WHERE $1::bigint > 0
    UNION ALL
    SELECT g.k, greatest(g.k * $1::bigint, h.head), (g.k + 1) * $1::bigint, NULL
    FROM generate_series(greatest($4::bigint, h.head / $1::bigint + 1), least(h.top / $1::bigint, $4::bigint + $5::bigint)) AS g(k)
    WHERE $1::bigint > 0 AND $4::bigint >= 0 AND h.head IS NOT NULL AND h.top > $6::bigint
) AS c ON true`
)

// sqlSweep counts the UNUSED ids of chunks [$2, $3), $1 ids wide.
const sqlSweep = `
SELECT g.k, (SELECT count(*) FROM %[1]s WHERE status = 'UNUSED' AND id >= g.k * $1::bigint AND id < (g.k + 1) * $1::bigint),
       statement_timestamp(), clock_timestamp()
FROM generate_series($2::bigint, $3::bigint - 1) AS g(k)`

// absorb takes the counts of q and returns the figures. It is pure: tests
// drive it without PostgreSQL. budget paces the sweep; limit (the rows the
// statistics say hold UNUSED ids, 0 for unknown) caps the estimate of
// chunks never counted.
func (u *unusedCounter) absorb(q *unusedQuery, now time.Time, budget time.Duration, limit int64) unusedFigures {
	for _, counted := range []map[int64]int64{q.fronted, q.swept} {
		for k, n := range counted {
			if _, ok := q.got[k]; !ok { // a chunk the head reached: the count from the head's snapshot
				q.got[k] = n
			}
		}
	}
	q.el += q.sweepEl
	if q.seek {
		u.endSeek(q, now)
	}
	if q.skip || q.seekOnly && q.head == nil && u.seek != nil {
		// No floor yet: this poll keeps the last figures, or the
		// statistics' before any.
		f := u.last
		if !u.polled {
			f = unusedFigures{unused: limit}
			if u.est >= 0 && (limit <= 0 || u.est < limit) {
				f.unused = u.est
			}
		}
		f.estimated, f.haveDelta, f.delta = true, false, 0
		return f
	}
	u.floor = nil
	if q.head != nil {
		f := *q.head
		u.floor = &f // lowered or dropped by lowerFloor once PENDING is counted
	}
	var f unusedFigures
	if q.head == nil || q.top == nil {
		f.delta, f.haveDelta = -u.counts.sum(), u.polled
		u.counts, u.width, u.polled, u.aheadOK, u.headKnown = chunks{}, 0, true, false, false
		u.per.adjust(millis(q.el), millis(budget))
		u.last = f
		return f
	}
	head, top := *q.head, *q.top
	u.headID, u.headKnown = head, true
	if !q.seek && q.floor == math.MinInt64 && millis(q.el) > warmLookMS {
		u.warm = false // the head of the index costs this session again: seek next time
	}
	if u.width > 0 && (top-head)/u.width > 4*maxChunks {
		// The id range outgrew the chunks it was cut into (ids added far
		// above the top): cut it again, and count it afresh.
		u.width, u.counts, u.polled, u.cursor, u.aheadOK = 0, chunks{}, false, 0, false
		q.got, q.lo, q.hi, q.look = map[int64]int64{}, 0, 0, 0
	}
	if u.width == 0 {
		u.width = max(minChunk, (top-head+1)/maxChunks+1)
	}
	got := q.got
	// Swept and looked-ahead chunks the range scans found no UNUSED id in
	// hold none.
	hc := head / u.width
	for k := max(q.lo, hc+1); k < q.hi; k++ {
		if _, ok := got[k]; !ok {
			got[k] = 0
		}
	}
	from := q.lookFrom(hc)
	for k := from; k <= hc+q.look; k++ {
		if _, ok := got[k]; !ok {
			got[k] = 0
		}
	}
	// The change since the previous poll, from what was counted: chunks
	// recounted now, new chunks above the old top, and chunks that fell
	// below the lowest UNUSED id (all their ids were taken). Chunks of the
	// first sweep, never counted before, add nothing.
	prevTop := u.top
	for k, n := range got {
		if old, ok := u.counts.get(k); ok {
			f.delta += n - old
		} else if u.polled && k > prevTop {
			f.delta += n // ids added above the old top (a refill)
		}
		u.counts.set(k, n, now)
	}
	h, t := head/u.width, top/u.width
	// A head that moved down (ids returned below it) left chunks between the
	// two heads uncounted: the next poll looks ahead over them too.
	u.moved = max(h-u.head, u.head-h)
	if u.guessed {
		// A seek's find jumps over the dead head of the index: no claim
		// moved the head, and a lookahead of twice the jump would count up
		// to maxSweep chunks at the next poll (on a partitioned pool each
		// a scan of every partition).
		u.moved, u.guessed = 0, false
	}
	if q.look > 0 {
		// Chunks past the window keep the counts of earlier lookaheads;
		// but a window counted from the head's next chunk on (the head
		// moved down, or nothing was skipped) may lie below chunks that
		// were dropped under the old head and never counted since.
		if from == hc+1 {
			u.ahead = hc + q.look
		} else {
			u.ahead = max(u.ahead, hc+q.look)
		}
		u.aheadOK = true
	}
	u.head, u.top, u.topID = h, t, top
	f.delta -= u.counts.keep(h, t) // the ids of chunks below the head were taken
	f.haveDelta = u.polled
	u.polled = true
	// span is how many ids of chunk k lie in [head, top].
	span := func(k int64) int64 { return min((k+1)*u.width, top+1) - max(k*u.width, head) }
	var sum, seenSpan, seenSum, missingSpan int64
	oldest := now
	missing := false
	for k := h; k <= t; k++ {
		n, ok := u.counts.get(k)
		if !ok {
			missing, missingSpan = true, missingSpan+span(k)
			continue
		}
		sum += n
		if k != h {
			seenSpan, seenSum = seenSpan+span(k), seenSum+n
		}
		if at := u.counts.at(k); at.Before(oldest) {
			oldest = at
		}
	}
	if missing { // not swept once yet: chunks not counted are taken as dense as those that were
		density := 1.0
		if seenSpan > 0 {
			density = float64(seenSum) / float64(seenSpan)
		}
		sum += int64(density * float64(missingSpan))
		if limit > 0 { // never more than the statistics say the table holds
			sum = min(sum, limit)
		}
	}
	f.unused, f.ageS = sum, now.Sub(oldest).Seconds()
	f.estimated = missing || oldest.Before(now)
	f.covered = 1
	if all := top + 1 - head; missing && all > 0 {
		f.covered = 1 - float64(missingSpan)/float64(all)
	}
	if u.seek != nil && u.seek.freed {
		f.estimated = true // ids returned below the floor may not be counted yet
	}
	// Sweep more chunks per poll when polls are cheap, fewer when not.
	u.per.adjust(millis(q.el), millis(budget))
	u.last = f
	return f
}

// endSeek takes the seek's result: it ends the seek when the seek found
// the lowest UNUSED id (from which this poll counted) or reached its bound
// (none below the floor); otherwise the next poll goes on from where this
// one stopped.
func (u *unusedCounter) endSeek(q *unusedQuery, now time.Time) {
	r := q.sought
	if u.seek == nil || r.hi == nil || r.n == nil {
		u.seek = nil // an empty table: nothing to look for
		return
	}
	u.paceSeek(r)
	if r.m == nil && (r.bound == nil || *r.hi < *r.bound) {
		u.seek.from, u.seek.whole = *r.hi, false
		return
	}
	u.anchored, u.freed, u.warm = now, false, u.seek.whole
	u.seek = nil
}

// paceSeek sizes the next seek statement's first window: as many ids as
// r's statement read in its budget, at its rate.
func (u *unusedCounter) paceSeek(r seekResult) {
	u.seekN = max(minChunk, min(*r.n, maxSeekWidth))
	if r.t0 == nil || r.t1 == nil || r.base == nil {
		return
	}
	if read, el := *r.hi-*r.base, r.t1.Sub(*r.t0); el > 0 && read > 0 {
		u.seekN = max(minChunk, min(int64(float64(read)*float64(cmp.Or(u.seekTime, seekBudget))/float64(el)), maxSeekWidth))
	}
}

// onSession tells the counter which backend runs its statements this
// poll: a new one has not read the head of the index yet.
func (u *unusedCounter) onSession(pid uint32) {
	if pid == 0 || pid == u.session {
		return
	}
	if u.session != 0 {
		u.warm = false
	}
	u.session = pid
}

// chunks holds the last count of each chunk and when it was taken, in
// arrays indexed from the lowest chunk kept: the counter reads every chunk
// of the id range at every poll (ten thousand on ten million ids), which
// in a map cost more than the rest of the plan.
type chunks struct {
	base int64   // the chunk at index 0
	n    []int64 // -1: not counted
	when []time.Time
}

// get returns chunk k's count, if it has one.
func (c *chunks) get(k int64) (int64, bool) {
	i := k - c.base
	if i < 0 || i >= int64(len(c.n)) || c.n[i] < 0 {
		return 0, false
	}
	return c.n[i], true
}

// at is when chunk k, which has a count, was counted.
func (c *chunks) at(k int64) time.Time { return c.when[k-c.base] }

// set records chunk k's count n, taken at t.
func (c *chunks) set(k, n int64, t time.Time) {
	if len(c.n) == 0 {
		c.base = k
	}
	if k < c.base { // grow down
		grow := c.base - k
		c.n = append(make([]int64, grow, grow+int64(len(c.n))), c.n...)
		c.when = append(make([]time.Time, grow, grow+int64(len(c.when))), c.when...)
		for i := range grow {
			c.n[i] = -1
		}
		c.base = k
	}
	for k-c.base >= int64(len(c.n)) {
		c.n, c.when = append(c.n, -1), append(c.when, time.Time{})
	}
	c.n[k-c.base], c.when[k-c.base] = n, t
}

// keep drops the chunks outside [lo, hi] and returns the sum of the counts
// dropped below lo.
func (c *chunks) keep(lo, hi int64) int64 {
	var below int64
	for i, n := range c.n {
		if k := c.base + int64(i); n >= 0 && (k < lo || k > hi) {
			if k < lo {
				below += n
			}
			c.n[i] = -1
		}
	}
	// Release the part below lo once it is most of the arrays.
	if cut := lo - c.base; cut > 0 && cut <= int64(len(c.n)) && 2*cut >= int64(len(c.n)) {
		c.n, c.when = append([]int64(nil), c.n[cut:]...), append([]time.Time(nil), c.when[cut:]...)
		c.base = lo
	}
	return below
}

// sum is the sum of every count held.
func (c *chunks) sum() int64 {
	var s int64
	for _, n := range c.n {
		s += max(n, 0)
	}
	return s
}
