package collector

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// totalCounter keeps the pool's exact number of rows, from which CONSUMED
// is what UNUSED and PENDING leave. The live-tuple count of the statistics
// will not do: every VACUUM and ANALYZE sets it anew from the pages it
// read and extrapolates the rest, and on a pool that has lived through a
// few loads it drifts, which puts CONSUMED off for good. A pool's rows change only by INSERT and DELETE (a
// claim, a commit and a reap are UPDATEs), and the statistics count those
// exactly, cumulatively (n_tup_ins, n_tup_del): so the rows are counted
// once, through the index on id, by a pass that reads a range of ids a
// poll in the time it is allowed, and from the end of the pass on the
// total is that count plus the inserts less the deletes since. Passes
// follow one another slowly, each one a check of the last: a statistics
// reset, an aborted insert (counted as an insert all the same) or rows
// changed in the part of the range a pass had already read are mended by
// the next.
type totalCounter struct {
	after  *int64 // the pass has counted the ids up to this one; nil: a pass starts
	sum    int64  // rows the pass has counted so far
	span   int64  // ids the pass has read so far (from the lowest)
	per    pace   // ids a poll
	exact  bool   // a pass has ended and the statistics have not been reset since
	anchor int64  // rows at the end of the last pass …
	mark   int64  // … and the inserts less the deletes of the statistics then
	passes int
	// the previous poll's total and statistics, for the shift
	polled, statOK   bool
	last, lastInsDel int64
}

// First pass: ids a poll, from minTotalIDs up to maxTotalIDs (ten million
// ids of an interleaved pool are a pass of about 2 s of the server's time
// when the visibility map is unset, 0.75 s when it is set: 176 and 75 ns
// an id, by EXPLAIN ANALYZE on 8 partitions).
const (
	minTotalIDs = 1024
	maxTotalIDs = 1 << 22
)

// totalQuery is one poll's slice of the pass, and its results.
type totalQuery struct {
	after    *int64
	n        int64
	lo, hi   *int64 // the range read: (lo, hi]
	rows     int64
	top      *int64 // the highest id, from the UNUSED statement
	el       time.Duration
	insDel   int64 // the statistics' inserts less deletes, from the server statement
	haveStat bool
}

// plan decides the range of ids this poll counts.
func (t *totalCounter) plan() *totalQuery {
	if t.per.n == 0 {
		t.per = pace{n: 4 * minTotalIDs, lo: minTotalIDs, hi: maxTotalIDs, step: minTotalIDs / 2, slowed: true}
	}
	return &totalQuery{after: t.after, n: t.per.n}
}

// sqlTotal counts the rows of ids ($1, $1 + $2], from the lowest id less
// one when $1 is null. (The highest id, where the pass ends, is the UNUSED
// statement's: on 8 partitions each max(id) is 8 descents of an index.)
const sqlTotal = `
WITH r AS (SELECT coalesce($1::bigint, (SELECT min(id) FROM %[1]s) - 1) AS lo)
SELECT r.lo, r.lo + $2::bigint, (SELECT count(*) FROM %[1]s WHERE id > r.lo AND id <= r.lo + $2::bigint),
       statement_timestamp(), clock_timestamp()
FROM r`

func (q *totalQuery) queue(b *pgx.Batch, table string) {
	b.Queue(fmt.Sprintf(sqlTotal, table), q.after, q.n).QueryRow(func(row pgx.Row) error {
		var t0, t1 time.Time
		if err := row.Scan(&q.lo, &q.hi, &q.rows, &t0, &t1); err != nil {
			return fmt.Errorf("total rows: %w", err)
		}
		q.el = t1.Sub(t0)
		return nil
	})
}

// backOff: the poll failed; the next one reads fewer ids.
func (t *totalCounter) backOff() { t.per.backOff(2) }

// totalFigures are the pool's rows from one poll.
type totalFigures struct {
	total     int64
	estimated bool
	// shift is the part of the change since the last poll that is a
	// correction (a pass that ended, an estimate refined) and not rows
	// inserted or deleted: CONSUMED's rate leaves it out.
	shift int64
}

// The pass takes a share of the poll's count budget: a half for the first
// (during which the rows not yet read are taken as dense as those read),
// an eighth for the passes that check it; at the full budget it made the
// poll slower.
const (
	totalShareFirst = 2
	totalShareLater = 8
)

// absorb takes the slice of q and returns the total. live is the
// statistics' live-tuple count, the estimate until the first pass has
// ended. countBudget is the poll's (Config.CountBudget), of which the pass
// takes its share.
func (t *totalCounter) absorb(q *totalQuery, countBudget time.Duration, live int64) totalFigures {
	share := int64(totalShareLater)
	if t.passes == 0 {
		share = totalShareFirst
	}
	t.per.adjust(millis(q.el), millis(countBudget/time.Duration(share)))
	if q.haveStat && t.exact && q.insDel < t.mark {
		t.exact = false // the statistics were reset: the figure is the next pass's
	}
	if q.lo != nil && q.hi != nil {
		t.sum += q.rows
		t.span += *q.hi - *q.lo
		h := *q.hi
		t.after = &h
	}
	if q.lo == nil || q.top == nil || (q.hi != nil && *q.hi >= *q.top) { // the pass has ended (or the pool is empty)
		t.anchor, t.mark, t.exact = t.sum, q.insDel, q.haveStat
		t.after, t.sum, t.span = nil, 0, 0
		t.passes++
		if t.passes == 1 {
			// From now on a slow check of the figure, a step at a time.
			t.per = pace{n: max(minTotalIDs, t.per.n/4), lo: minTotalIDs, hi: maxTotalIDs, step: minTotalIDs / 4, slowed: true}
		}
	}
	var f totalFigures
	switch {
	case t.exact:
		f.total = t.anchor + q.insDel - t.mark
	case t.after != nil && t.span > 0 && q.top != nil:
		// A pass under way: the ids above it taken as dense as those below.
		rest := float64(*q.top - *t.after)
		f.total, f.estimated = t.sum+int64(float64(t.sum)/float64(t.span)*rest), true
	default:
		f.total, f.estimated = live, true
	}
	f.total = max(f.total, 0)
	if t.polled && q.haveStat && t.statOK {
		f.shift = (f.total - t.last) - (q.insDel - t.lastInsDel)
	}
	t.polled, t.last, t.lastInsDel, t.statOK = true, f.total, q.insDel, q.haveStat
	return f
}

// rowEstimate is the pool's rows before they are counted: an estimate at
// start that counts no row twice (sqlRowsEstimate), followed by the
// statistics' inserts less deletes since.
type rowEstimate struct {
	base, mark int64 // the rows at start, and the inserts less deletes then
	last       int64 // the figure at the last poll
	ok         bool  // base was read for this pool (else the live-tuple count stands)
}

// sqlRowsEstimate is the rows of $1 (the table, or its partitions) at
// start: for each relation, the lower of its live-tuple count and the
// planner's estimate (its rows per page at its last VACUUM or ANALYZE
// times its pages now), or the live-tuple count alone where the catalog
// has no density yet (never vacuumed nor analyzed, or empty then). A
// live-tuple count of 0 beside a density is no count (the statistics
// were reset, or before PostgreSQL 15 the statistics process has not
// applied the inserts yet), and the planner's estimate stands. With it,
// the statistics' inserts less deletes, which rowEstimate follows.
//
// Each alone can be far off. The live-tuple count is set anew by every
// VACUUM and ANALYZE, and the inserts a backend reports after it (a
// backend sends its counts between queries, at most once a second, or
// when it exits) are added to it once more: rows inserted and analyzed in
// one session read twice until the next VACUUM or ANALYZE. The planner's
// estimate counts each row once, but the pages claims and commits fill
// with dead versions count as rows too (a 20,000-row pool read as 22,405
// after five seconds of work). The lower of the two is rough, never a row
// counted twice.
const sqlRowsEstimate = `
SELECT coalesce(sum(CASE WHEN c.relpages > 0 AND c.reltuples >= 0
                         THEN least(nullif(pg_stat_get_live_tuples(c.oid), 0),
                                    c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8))
                         ELSE pg_stat_get_live_tuples(c.oid) END), 0)::bigint,
       coalesce(sum(pg_stat_get_tuples_inserted(c.oid) - pg_stat_get_tuples_deleted(c.oid)), 0)::bigint
FROM pg_class c WHERE c.oid = ANY($1::oid[])`

// at is the estimate at a poll whose statistics read insDel (haveStat) and
// live live tuples: live itself when no estimate was read at start, and
// never more than live (when it is not 0): inserts made before start that
// the statistics learn of only after it (sent late, or applied late by
// the statistics process before PostgreSQL 15) are in the live-tuple
// count once but in insDel as if they were new.
func (e *rowEstimate) at(insDel int64, haveStat bool, live int64) int64 {
	if !e.ok {
		return live
	}
	if haveStat {
		if insDel < e.mark { // the statistics were reset: go on from the last figure
			e.base, e.mark = e.last, insDel
		}
		e.last = max(0, e.base+insDel-e.mark)
	}
	if live > 0 {
		return min(e.last, live)
	}
	return e.last
}
