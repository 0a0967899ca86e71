package collector

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ClaimStats are the claim statements' figures from pg_stat_statements
// (statements on the pool that lock with SKIP LOCKED), between two
// readings: how many ran per second and their mean time, and the longest
// one since the statistics were last reset.
type ClaimStats struct {
	CallsPerS float64 `json:"calls_per_s"`
	MeanMS    float64 `json:"mean_ms"`
	MaxMS     float64 `json:"max_ms"`
}

// statementsEvery: pg_stat_statements is read every this many polls (it
// reads the query texts, which cost more than the counts); the rates are
// over the time between two readings.
const statementsEvery = 5

// sqlClaimStatements sums the claims' counters (calls, total and longest
// time), and counts the calls of statements on the pool that lock without
// SKIP LOCKED (claims that queue: the doctor's finding). The query text is
// only readable to the statement's own role and to pg_read_all_stats
// (pg_monitor): other roles' statements count as none.
const sqlClaimStatements = `
SELECT coalesce(sum(calls) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), 0)::bigint,
       coalesce(sum(total_exec_time) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), 0)::float8,
       coalesce(max(max_exec_time) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), 0)::float8,
       coalesce(sum(calls) FILTER (WHERE query ILIKE '%FOR UPDATE%' AND query NOT ILIKE '%SKIP LOCKED%'), 0)::bigint
FROM pg_stat_statements WHERE query ILIKE '%resource_pool%'`

// claimReader keeps the previous reading between polls.
type claimReader struct {
	available bool // pg_stat_statements is there and readable
	polls     int
	at        time.Time
	calls     int64
	total     float64
	have      bool
	last      *ClaimStats
}

// probe finds whether pg_stat_statements can be read here.
func (r *claimReader) probe(ctx context.Context, pool *pgxpool.Pool) {
	var n, l int64
	var t, m float64
	r.available = pool.QueryRow(ctx, sqlClaimStatements).Scan(&n, &t, &m, &l) == nil
}

// claimQuery is one poll's reading (nil: not this poll).
type claimQuery struct {
	calls, locking int64
	total, max     float64
}

func (r *claimReader) plan() *claimQuery {
	if !r.available {
		return nil
	}
	r.polls++
	if (r.polls-1)%statementsEvery != 0 {
		return nil
	}
	return &claimQuery{}
}

func (q *claimQuery) queue(b *pgx.Batch) {
	if q == nil {
		return
	}
	b.Queue(sqlClaimStatements).QueryRow(func(row pgx.Row) error { return row.Scan(&q.calls, &q.total, &q.max, &q.locking) })
}

// absorb turns two readings into rates; it returns the newest figures.
func (r *claimReader) absorb(q *claimQuery, now time.Time) *ClaimStats {
	if q == nil {
		return r.last
	}
	if r.have && q.calls >= r.calls && now.After(r.at) {
		dc := q.calls - r.calls
		st := &ClaimStats{CallsPerS: float64(dc) / now.Sub(r.at).Seconds(), MaxMS: q.max}
		if dc > 0 {
			st.MeanMS = (q.total - r.total) / float64(dc)
		}
		r.last = st
	}
	r.at, r.calls, r.total, r.have = now, q.calls, q.total, true
	return r.last
}
