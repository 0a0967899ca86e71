package collector

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// census counts PENDING rows on a pool that has no partial index on them
// (a hand-built pool often has only the one on UNUSED rows): the only
// way to find them is to read the table. It reads the table a range of pages
// at a time, as many ranges a poll as the pace allows, and keeps each
// range's counts; the figures are the sums, as old as the oldest range, and
// marked estimated with that age. On a small table the whole table is read
// at every poll and the figures are exact. From PostgreSQL 14 on a range is
// read by a TID range scan (pages in order, no index); before, by id ranges
// through the primary key.
type census struct {
	byTID bool
	// leaseless: count only the PENDING rows without a lease (and which
	// of them are stuck, and the oldest updated_at) — the pending counter's
	// count of them when there are too many to count from the index at
	// every poll.
	leaseless bool
	// parts is how many partitions the table has (1 unpartitioned): a
	// range of pages is read in each of them.
	parts  int64
	width  int64 // pages (TID) or ids per range
	ranges int64 // ranges in the table at the last poll
	counts map[int64]censusRange
	read   int64 // ranges [0, read) have all been read
	size0  int64 // ranges at the first poll: those above were added since
	grown  int64 // ranges [size0, grown) have all been read
	cursor int64
	per    pace // ranges read per poll, adapted to the server time it costs
}

// censusRange is what one range of the table held when it was read.
type censusRange struct {
	pending, expired, expiredOld, stuck int64
	oldest                              *time.Time
	at                                  time.Time
}

const (
	censusPages   = 32   // pages per range (about 2,500 rows of a pool table)
	censusIDs     = 2048 // ids per range, before PostgreSQL 14
	censusMaxPer  = 1024
	censusInitPer = 4
)

// censusQuery is one poll's plan and results.
type censusQuery struct {
	ks    []int64 // the ranges read
	got   map[int64]censusRange
	rotMS float64
	size  int64 // pages (TID) or the highest id, read in the same statement
}

func (c *census) plan() *censusQuery {
	if c.counts == nil {
		c.counts, c.per = map[int64]censusRange{}, pace{n: censusInitPer, lo: 1, hi: censusMaxPer, step: 1}
		c.width = censusIDs
		if c.byTID {
			// A range of pages holds as many rows on a partitioned table
			// as on one that is not: its pages are read in every partition.
			c.width = max(1, censusPages/max(c.parts, 1))
		}
	}
	if c.ranges <= 0 {
		return &censusQuery{ks: []int64{0}}
	}
	// Ranges never read go first, those the table grew by since the first
	// poll before the rest of the first pass. Until a range is read the
	// figures scale the others' counts to it, and the pages a load has just
	// added hold the rows it moved, not the pool's mix, and scaled from the
	// others they put the figures 2% off. What the pace leaves goes on with
	// the pass from its cursor (at 0 through the first pass), so that a
	// table that grows at every poll does not stop it.
	q := &censusQuery{}
	c.unread(q, c.grown, c.ranges)
	c.unread(q, c.read, c.size0)
	for left := min(c.per.n-int64(len(q.ks)), c.read); left > 0; left-- {
		if c.cursor >= c.read {
			c.cursor = 0
		}
		q.ks = append(q.ks, c.cursor)
		c.cursor++
	}
	return q
}

// unread adds to q the ranges in [lo, hi) never read, up to the pace.
func (c *census) unread(q *censusQuery, lo, hi int64) {
	for k := lo; k < hi && int64(len(q.ks)) < c.per.n; k++ {
		if _, ok := c.counts[k]; !ok {
			q.ks = append(q.ks, k)
		}
	}
}

// queue adds the census statement to the batch. oids are the relations whose
// size decides the number of ranges (the table, or its partitions).
func (q *censusQuery) queue(b *pgx.Batch, c *census, table string, oids []uint32, hasLeased, hasUpdated bool, expiredAfter, stuckAfter time.Duration) {
	leased, updated := "leased_until", "updated_at"
	if !hasLeased {
		leased = "NULL::timestamptz"
	}
	if !hasUpdated {
		updated = "NULL::timestamptz"
	}
	pred := "ctid >= format('(%s,0)', g.k * $1::bigint)::tid AND ctid < format('(%s,0)', (g.k + 1) * $1::bigint)::tid"
	size := "(SELECT max(pg_relation_size(o)) / current_setting('block_size')::bigint FROM unnest($5::oid[]) AS o)"
	if !c.byTID {
		pred = "id >= g.k * $1::bigint AND id < (g.k + 1) * $1::bigint"
		// ($5, the leaves, only referenced: every argument needs a parameter.)
		size = fmt.Sprintf("(SELECT coalesce(max(id), 0) + 1 FROM %s WHERE $5::oid[] IS NOT NULL)", table)
	}
	// A row nothing frees: a lease expired longer ago than the stuck
	// threshold, or no lease and unchanged for that long.
	counts := `count(*) FILTER (WHERE status = 'PENDING') AS pending,
               count(*) FILTER (WHERE status = 'PENDING' AND %[1]s < now()) AS expired,
               count(*) FILTER (WHERE status = 'PENDING' AND %[1]s < now() - $3::bigint * interval '1 microsecond') AS expired_old,
               count(*) FILTER (WHERE status = 'PENDING' AND (%[1]s < now() - $4::bigint * interval '1 microsecond'
                                OR (%[1]s IS NULL AND %[2]s < now() - $4::bigint * interval '1 microsecond'))) AS stuck,
               min(CASE WHEN %[1]s IS NULL THEN %[2]s ELSE %[1]s END) FILTER (WHERE status = 'PENDING' AND (%[1]s IS NULL OR %[1]s < now())) AS oldest`
	if c.leaseless {
		counts = `count(*) FILTER (WHERE status = 'PENDING' AND %[1]s IS NULL) AS pending, 0::bigint AS expired, 0::bigint AS expired_old,
               count(*) FILTER (WHERE status = 'PENDING' AND %[1]s IS NULL AND %[2]s < now() - $4::bigint * interval '1 microsecond') AS stuck,
               min(%[2]s) FILTER (WHERE status = 'PENDING' AND %[1]s IS NULL AND $3::bigint IS NOT NULL) AS oldest`
		// ($3, the reaper's interval, is only referenced: a parameter
		// the text never names has no type.)
	}
	sql := fmt.Sprintf(`
SELECT clock_timestamp(), %[3]s, ARRAY(SELECT row(g.k, r.pending, r.expired, r.expired_old, r.stuck, r.oldest)
    FROM unnest($2::bigint[]) AS g(k) CROSS JOIN LATERAL (
        SELECT `+fmt.Sprintf(counts, leased, updated)+`
        FROM %[1]s WHERE %[2]s) AS r ORDER BY g.k),
       clock_timestamp()`, table, pred, size)
	b.Queue(sql, c.width, q.ks, expiredAfter.Microseconds(), stuckAfter.Microseconds(), oids).QueryRow(func(row pgx.Row) error {
		var t0, t1 time.Time
		var rows []censusRow
		if err := row.Scan(&t0, &q.size, &rows, &t1); err != nil {
			return fmt.Errorf("pending ids (table scan): %w", err)
		}
		q.got = map[int64]censusRange{}
		for _, r := range rows {
			q.got[r.k] = censusRange{pending: r.pending, expired: r.expired, expiredOld: r.expiredOld, stuck: r.stuck, oldest: finite(r.oldest)}
		}
		q.rotMS = float64(t1.Sub(t0).Microseconds()) / 1000
		return nil
	})
}

type censusRow struct {
	k, pending, expired, expiredOld, stuck int64
	oldest                                 pgtype.Timestamptz
}

func (r *censusRow) ScanIndex(i int) any {
	return []any{&r.k, &r.pending, &r.expired, &r.expiredOld, &r.stuck, &r.oldest}[i]
}

// absorb keeps the ranges read and returns the figures; ranges never read
// yet are taken to hold as many PENDING rows as those read, range for range
// (every range spans as many pages, or ids before PostgreSQL 14).
func (c *census) absorb(q *censusQuery, now time.Time, countBudget time.Duration) pendingFigures {
	var f pendingFigures
	for k, r := range q.got {
		if was, ok := c.counts[k]; ok && r.pending < was.pending {
			f.freed = true // a range lost PENDING rows since its last read
		}
		r.at = now
		c.counts[k] = r
	}
	c.ranges = (q.size + c.width - 1) / c.width
	for k := range c.counts {
		if k >= c.ranges {
			delete(c.counts, k)
		}
	}
	if c.size0 == 0 {
		c.size0 = c.ranges // the first poll's size
	}
	c.size0 = min(c.size0, c.ranges)
	c.read, c.grown = min(c.read, c.ranges), max(min(c.grown, c.ranges), c.size0)
	for c.read < c.ranges && c.counted(c.read) {
		c.read++
	}
	for c.grown < c.ranges && c.counted(c.grown) {
		c.grown++
	}
	oldest := now
	// The sums and the ranges read, of the table as it was at the first
	// poll (0) and of what it grew by (1).
	var sum [2]censusRange
	var n [2]int64
	for k, r := range c.counts {
		i := 0
		if k >= c.size0 {
			i = 1
		}
		sum[i].pending += r.pending
		sum[i].expired += r.expired
		sum[i].expiredOld += r.expiredOld
		sum[i].stuck += r.stuck
		n[i]++
		if r.oldest != nil && (f.oldest == nil || r.oldest.Before(*f.oldest)) {
			t := *r.oldest
			f.oldest = &t
		}
		if r.at.Before(oldest) {
			oldest = r.at
		}
	}
	// Ranges not read yet hold what those read in the same part of the
	// table do: the pages a load added hold the rows it moved, not the
	// pool's mix (scaled from the first part's, they took the expired
	// figure 13% low). The new part
	// takes the first's mix only while none of it has been read.
	size, read := [2]int64{c.size0, c.ranges - c.size0}, sum
	for i := range sum {
		from := i
		if n[i] == 0 {
			from = 1 - i
		}
		missing := size[i] - n[i]
		if missing <= 0 || n[from] == 0 {
			continue
		}
		scale := float64(missing) / float64(n[from])
		sum[i].pending += int64(float64(read[from].pending) * scale)
		sum[i].expired += int64(float64(read[from].expired) * scale)
		sum[i].expiredOld += int64(float64(read[from].expiredOld) * scale)
		sum[i].stuck += int64(float64(read[from].stuck) * scale)
		f.estimated = true
	}
	f.pending = sum[0].pending + sum[1].pending
	f.expired = sum[0].expired + sum[1].expired
	f.expiredOld = sum[0].expiredOld + sum[1].expiredOld
	f.stuck = sum[0].stuck + sum[1].stuck
	f.ageS = now.Sub(oldest).Seconds()
	f.estimated = f.estimated || oldest.Before(now)
	f.covered = c.covered()
	budget := millis(countBudget)
	c.per.adjust(q.rotMS, budget)
	return f
}

// covered is the share of the table's ranges read at least once.
func (c *census) covered() float64 {
	if c.ranges <= 0 {
		return 0
	}
	return float64(min(int64(len(c.counts)), c.ranges)) / float64(c.ranges)
}

// whole: every range of the table has been read.
func (c *census) whole() bool { return c.ranges > 0 && c.read >= c.ranges }

// counted: range k has been read.
func (c *census) counted(k int64) bool {
	_, ok := c.counts[k]
	return ok
}

// backOff: the poll failed; the next one reads half as many ranges.
func (c *census) backOff() { c.per.backOff(2) }

// ScanNull: a range's row is never NULL.
func (r *censusRow) ScanNull() error { return nil }
