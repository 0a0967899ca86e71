package collector

import (
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// exactRows: a pool of at most this many rows (by the last poll's count)
// is counted exactly at every poll, in one scan, besides the counters
// (which still run: the burn and the deltas come from them). The scan of
// 20,000 rows costs the server 3-5 ms of CPU warm and 5-7 ms on a new
// backend, plain or in 8 partitions (docs/benchmarks.md), which a poll a
// second can afford, and the figures then carry no ~. Larger pools are
// counted by parts (see docs/counting.md).
const exactRows = 20_000

// exactPages bounds the first poll's whole count, before the rows were
// ever counted: the pool is counted whole when the estimate of its rows
// (rowEstimate) is at most exactRows and a quarter (the statistics are
// estimates too: VACUUM's skips pages it knows, and a 20,000-row pool
// under claims can read a few dozen more), and its table, all partitions
// together, at most this many pages by its files at start. A scan costs
// its pages, and a small pool's pages that claims and commits filled with
// dead versions hold few rows: 400 pages cost 5-8 ms warm, 7-11 ms on a
// new backend. From then on the count of the last poll decides.
const exactPages = 400

// exactQuery counts a small pool whole, and the UNUSED ids of each of its
// partitions (by relation: the table itself when it has none, or the
// parent of more than MaxPartitionCounts).
type exactQuery struct {
	ok                                                          bool
	total, unused, pending, expired, expiredOld, stuck, noLease int64
	parts                                                       map[uint32]int64
}

// exactSmall says whether this poll counts the pool whole: by the last
// poll's rows once they were ever counted, and before that by the
// estimate of the rows and the size of the table at start.
func (c *Collector) exactSmall() bool {
	if c.rowsCounted {
		return c.lastTotal <= exactRows
	}
	return c.t.tablePages <= exactPages && (!c.rows.ok || c.rows.last <= exactRows+exactRows/4)
}

// queueExact adds the whole count to b when the pool is small and has the
// lease column (without it the counters' figures stand).
func (c *Collector) queueExact(b *pgx.Batch) *exactQuery {
	if !c.exactSmall() || !c.t.hasLeased {
		return nil
	}
	q := &exactQuery{stuck: -1, parts: map[uint32]int64{}}
	sql, args := c.exactStatement()
	b.Queue(sql, args...).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var rel uint32
			var total, unused, pending, expired, expiredOld, noLease int64
			var st *int64
			if err := rows.Scan(&rel, &total, &unused, &pending, &expired, &expiredOld, &noLease, &st); err != nil {
				return fmt.Errorf("exact count: %w", err)
			}
			q.total, q.unused, q.pending, q.expired, q.expiredOld, q.noLease = q.total+total, q.unused+unused, q.pending+pending,
				q.expired+expired, q.expiredOld+expiredOld, q.noLease+noLease
			if st != nil {
				q.stuck = max(q.stuck, 0) + *st
			}
			q.parts[rel] = unused
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("exact count: %w", err)
		}
		q.ok = true
		return nil
	})
	return q
}

// exactStatement is the whole count: per relation (each partition, or
// the table), its rows, UNUSED, PENDING, expired, expired past the reaper
// interval, without a lease, and stuck (NULL without updated_at). The
// partitions are counted by one aggregate each, joined by UNION ALL: a
// GROUP BY tableoid over the pool cost half as much again as one
// aggregate (5.3-7.7 ms of CPU against 3.3-4.6 on 20,000 rows), the
// branches a sixth. Past MaxPartitionCounts partitions, whose counts the
// collector does not show, one aggregate counts the pool.
func (c *Collector) exactStatement() (string, []any) {
	stuck := "NULL::bigint"
	if c.t.hasUpdated {
		stuck = `count(*) FILTER (WHERE status = 'PENDING' AND (leased_until < now() - $2::bigint * interval '1 microsecond'
			OR (leased_until IS NULL AND updated_at < now() - $2::bigint * interval '1 microsecond')))`
	}
	agg := fmt.Sprintf(`count(*), count(*) FILTER (WHERE status = 'UNUSED'), count(*) FILTER (WHERE status = 'PENDING'),
		count(*) FILTER (WHERE status = 'PENDING' AND leased_until < now()),
		count(*) FILTER (WHERE status = 'PENDING' AND leased_until < now() - $1::bigint * interval '1 microsecond'),
		count(*) FILTER (WHERE status = 'PENDING' AND leased_until IS NULL), %s`, stuck)
	args := []any{c.cfg.Alerts.ExpiredAfter.Microseconds(), c.cfg.StuckAfter.Microseconds()}
	if !c.t.partitioned || len(c.t.leaves) > MaxPartitionCounts {
		return fmt.Sprintf("SELECT %d::oid, %s FROM %s", c.t.oid, agg, c.t.qualified), args
	}
	branches := make([]string, len(c.t.leaves))
	for i, leaf := range c.t.leaves {
		branches[i] = fmt.Sprintf("SELECT %d::oid, %s FROM %s", leaf, agg, c.t.leafQuoted[i])
	}
	return strings.Join(branches, "\nUNION ALL\n"), args
}

// absorbExact puts the whole count in place of the counters' figures; the
// figures it counted are exact at this poll, and so is each partition's
// UNUSED (leaves and names are the target's partitions, in the order of
// parts).
func absorbExact(q *exactQuery, p *Pool, parts []PartitionUnused, leaves []uint32, names []string) {
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
	counted := 1.0
	p.Counted = &counted
	for i := range parts {
		if i < len(leaves) && i < len(names) && parts[i].Name == names[i] {
			parts[i].Unused, parts[i].Estimated = q.parts[leaves[i]], false
		}
	}
}
