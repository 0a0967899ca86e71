package collector

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/pooltop-dev/pooltop/engine"
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

// statementsEvery: pg_stat_statements is read every this many polls; the
// rates are over the time between two readings.
const statementsEvery = 5

// statementsLearnEvery: how often the reading looks at the query texts for
// the claim statements (new ones appear when an application deploys).
// Between, it reads the counters of the statements it found by their
// queryid, without the texts: pg_stat_statements keeps them in a file that
// every reading of the query column reads whole (up to 5,000 statements
// on a production server).
const statementsLearnEvery = 30 * time.Second

// sqlClaimStatements sums the claims' counters (calls, total and longest
// time), and counts the calls of statements on the pool that lock without
// SKIP LOCKED (claims that queue: the doctor's finding); it returns the
// queryids of both kinds. $1 is the pattern of the pool table's name
// (claimPattern). The query text is only readable to the
// statement's own role and to pg_read_all_stats (pg_monitor): other roles'
// statements count as none.
const sqlClaimStatements = `
SELECT coalesce(sum(calls) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), 0)::bigint,
       coalesce(sum(total_exec_time) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), 0)::float8,
       coalesce(max(max_exec_time) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), 0)::float8,
       coalesce(sum(calls) FILTER (WHERE query ILIKE '%FOR UPDATE%' AND query NOT ILIKE '%SKIP LOCKED%'), 0)::bigint,
       coalesce(array_agg(DISTINCT queryid) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), '{}'),
       coalesce(array_agg(DISTINCT queryid) FILTER (WHERE query ILIKE '%FOR UPDATE%' AND query NOT ILIKE '%SKIP LOCKED%'), '{}')
FROM pg_stat_statements WHERE query ILIKE $1`

// sqlClaimCounters is the same sums over the statements found before, by
// queryid, without reading the texts.
const sqlClaimCounters = `
SELECT coalesce(sum(calls) FILTER (WHERE queryid = ANY($1::bigint[])), 0)::bigint,
       coalesce(sum(total_exec_time) FILTER (WHERE queryid = ANY($1::bigint[])), 0)::float8,
       coalesce(max(max_exec_time) FILTER (WHERE queryid = ANY($1::bigint[])), 0)::float8,
       coalesce(sum(calls) FILTER (WHERE queryid = ANY($2::bigint[])), 0)::bigint
FROM pg_stat_statements(false) WHERE queryid = ANY($1::bigint[] || $2::bigint[])`

// claimReader keeps the previous reading between polls.
type claimReader struct {
	available bool // pg_stat_statements is there and readable
	version   int  // server_version_num (the view's columns changed in 13)
	polls     int
	at        time.Time
	calls     int64
	total     float64
	have      bool
	last      *ClaimStats
	// the claim statements (SKIP LOCKED) and the locking ones, by queryid,
	// as last found in the texts, and when
	skip, lock []int64
	learned    time.Time
	learnEvery time.Duration // default statementsLearnEvery
	pattern    string        // claimPattern of the pool table
}

// claimPattern is the ILIKE pattern of statements that name the pool
// table (its name, LIKE's wildcards escaped).
func claimPattern(table string) string {
	return "%" + strings.NewReplacer(`\`, `\\`, "%", `\%`, "_", `\_`).Replace(table) + "%"
}

// probe finds whether pg_stat_statements can be read here; table is the
// pool table's name, which the claim statements name.
func (r *claimReader) probe(ctx context.Context, pool *engine.Pool, table string, version int) {
	r.pattern, r.version = claimPattern(table), version
	r.available = pool.QueryRow(ctx, statementsSQL(sqlClaimStatements, version), r.pattern).Scan(nil, nil, nil, nil, nil, nil) == nil
}

// statementsSQL is sql for the server's version of pg_stat_statements:
// before PostgreSQL 13 its times are total_time and max_time.
func statementsSQL(sql string, version int) string {
	if version >= 130000 {
		return sql
	}
	return strings.NewReplacer("total_exec_time", "total_time", "max_exec_time", "max_time").Replace(sql)
}

// claimQuery is one poll's reading (nil: not this poll).
type claimQuery struct {
	learn          bool // from the texts (else by the queryids known)
	calls, locking int64
	total, max     float64
	skip, lock     []int64
	pattern        string
	version        int // server_version_num
}

func (r *claimReader) plan(now time.Time) *claimQuery {
	if !r.available {
		return nil
	}
	// From the second poll: the first has a new backend's plans to make
	// and the rate needs two readings.
	r.polls++
	if r.polls < 2 || (r.polls-2)%statementsEvery != 0 {
		return nil
	}
	every := r.learnEvery
	if every == 0 {
		every = statementsLearnEvery
	}
	// While none is known (a watcher started before the workload's first
	// claim), the texts are read at every reading.
	learn := len(r.skip)+len(r.lock) == 0 || now.Sub(r.learned) >= every
	return &claimQuery{learn: learn, skip: r.skip, lock: r.lock, pattern: r.pattern, version: r.version}
}

func (q *claimQuery) queue(b *pgx.Batch) {
	if q == nil {
		return
	}
	if q.learn {
		b.Queue(statementsSQL(sqlClaimStatements, q.version), q.pattern).QueryRow(func(row pgx.Row) error {
			return row.Scan(&q.calls, &q.total, &q.max, &q.locking, &q.skip, &q.lock)
		})
		return
	}
	b.Queue(statementsSQL(sqlClaimCounters, q.version), q.skip, q.lock).QueryRow(func(row pgx.Row) error { return row.Scan(&q.calls, &q.total, &q.max, &q.locking) })
}

// absorb turns two readings into rates; it returns the newest figures.
func (r *claimReader) absorb(q *claimQuery, now time.Time) *ClaimStats {
	if q == nil {
		return r.last
	}
	if q.learn {
		// Statements found or gone since the last reading change the sums
		// by their whole history: this reading starts the rates afresh.
		if !slices.Equal(q.skip, r.skip) || !slices.Equal(q.lock, r.lock) {
			r.have = false
		}
		r.skip, r.lock, r.learned = q.skip, q.lock, now
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
