package collector

import (
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/engine"
)

// The holders panel reads at most holdersRows PENDING rows, in lease order
// through the partial index on PENDING rows (the longest expired first: the
// holders an incident is about), every holdersEvery polls. Each row is a
// heap fetch of a page the workers keep changing, cold on a large pool, so
// a reading of thousands of rows made its poll many times the others (see
// docs/benchmarks.md). The first reading, at poll holdersFrom, reads
// holdersFirst rows, and each one after it twice as many up to holdersRows.
const (
	holdersRows  = 1000
	holdersFirst = 250
	holdersEvery = 10
	// holdersFrom is the first poll that reads the holders: the fourth,
	// once the poll's three sessions have come in (see
	// Collector.sessions), for the reading is a heap fetch a row.
	holdersFrom = 4
	holdersTop  = 5
)

// holderSample keeps the last reading of the top holders between polls.
type holderSample struct {
	polls int
	rows  int // rows the last reading read at most
	last  []engine.Holder
	read  int64
}

// holderQuery is one poll's reading of the holders (nil: not this poll).
type holderQuery struct {
	rows int
	got  []engine.Holder
	read int64
}

func (h *holderSample) plan(possible bool) *holderQuery {
	if !possible {
		h.last, h.read = nil, 0
		return nil
	}
	h.polls++
	if h.polls%holdersEvery != holdersFrom {
		return nil
	}
	h.rows = min(holdersRows, max(holdersFirst, 2*h.rows))
	return &holderQuery{rows: h.rows, got: []engine.Holder{}}
}

func (q *holderQuery) queue(b *pgx.Batch, table string, hasUpdated bool) {
	if q == nil {
		return
	}
	oldest := "0::float8"
	if hasUpdated {
		oldest = "coalesce(extract(epoch FROM clock_timestamp() - min(updated_at)), 0)::float8"
	}
	sql := fmt.Sprintf(`
SELECT coalesce(holder, ''), count(*), count(*) FILTER (WHERE leased_until <= clock_timestamp()), %[2]s,
       sum(count(*)) OVER ()::bigint
FROM (SELECT * FROM %[1]s WHERE status = 'PENDING' ORDER BY leased_until LIMIT %[3]d) AS p
GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT %[4]d`, table, oldest, q.rows, holdersTop)
	b.Queue(sql).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var h engine.Holder
			if err := rows.Scan(&h.Holder, &h.Pending, &h.Expired, &h.OldestS, &q.read); err != nil {
				return fmt.Errorf("holders: %w", err)
			}
			q.got = append(q.got, h)
		}
		return rows.Err()
	})
}

// absorb returns the holders to show: this poll's reading, or the last one.
func (h *holderSample) absorb(q *holderQuery) ([]engine.Holder, int64) {
	if q != nil {
		h.last, h.read = q.got, q.read
	}
	return h.last, h.read
}
