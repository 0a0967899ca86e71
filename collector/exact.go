package collector

import (
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// exactRows: a pool of at most this many rows (by the last poll's total) is
// counted exactly at every poll, in one scan, besides the counters (which
// still run: the burn and the deltas come from them). The scan costs a few
// milliseconds at most (docs/benchmarks.md), which a poll a second can
// afford, and the figures then carry no ~. Larger pools are counted by
// parts (see docs/counting.md).
const exactRows = 10_000

// exactQuery counts a small pool whole.
type exactQuery struct {
	ok                                                          bool
	total, unused, pending, expired, expiredOld, stuck, noLease int64
}

// queueExact adds the whole count to b when the pool is small and has the
// lease column (without it the counters' figures stand).
func (c *Collector) queueExact(b *pgx.Batch, lastTotal int64) *exactQuery {
	if lastTotal <= 0 || lastTotal > exactRows || !c.t.hasLeased {
		return nil
	}
	q := &exactQuery{}
	stuck := "NULL::bigint"
	if c.t.hasUpdated {
		stuck = `count(*) FILTER (WHERE status = 'PENDING' AND (leased_until < now() - $2::bigint * interval '1 microsecond'
			OR (leased_until IS NULL AND updated_at < now() - $2::bigint * interval '1 microsecond')))`
	}
	sql := fmt.Sprintf(`SELECT count(*), count(*) FILTER (WHERE status = 'UNUSED'), count(*) FILTER (WHERE status = 'PENDING'),
		count(*) FILTER (WHERE status = 'PENDING' AND leased_until < now()),
		count(*) FILTER (WHERE status = 'PENDING' AND leased_until < now() - $1::bigint * interval '1 microsecond'),
		count(*) FILTER (WHERE status = 'PENDING' AND leased_until IS NULL), %s
		FROM %s`, stuck, c.t.qualified)
	b.Queue(sql, c.cfg.Alerts.ExpiredAfter.Microseconds(), c.cfg.StuckAfter.Microseconds()).QueryRow(func(row pgx.Row) error {
		var st *int64
		if err := row.Scan(&q.total, &q.unused, &q.pending, &q.expired, &q.expiredOld, &q.noLease, &st); err != nil {
			return fmt.Errorf("exact count: %w", err)
		}
		q.stuck, q.ok = -1, true
		if st != nil {
			q.stuck = *st
		}
		return nil
	})
	return q
}

// absorbExact puts the whole count in place of the counters' figures; the
// figures it counted are exact at this poll.
func absorbExact(q *exactQuery, p *Pool) {
	if q == nil || !q.ok {
		return
	}
	p.Total, p.Unused, p.Pending, p.Expired, p.ExpiredOld = q.total, q.unused, q.pending, q.expired, q.expiredOld
	p.Consumed = max(0, q.total-q.unused-q.pending)
	noLease := q.noLease
	p.NoLease = &noLease
	exact := []string{"unused", "pending", "expired", "consumed"}
	if q.stuck >= 0 {
		p.Stuck = q.stuck
		exact = append(exact, "stuck")
	}
	p.Estimated = slices.DeleteFunc(p.Estimated, func(s string) bool { return slices.Contains(exact, s) })
	p.UnusedAgeS = 0
	if !slices.Contains(p.Estimated, "stuck") {
		p.PendingAgeS = 0
	}
}
