package collector

import "time"

// Point is one sample of a series.
type Point struct {
	T time.Time
	V float64
}

// Ring is a fixed-capacity time series: the newest Cap points, in order.
// Memory stays flat however long the collector runs.
type Ring struct {
	buf  []Point
	next int
	full bool
}

// NewRing returns an empty ring of capacity n (at least 1).
func NewRing(n int) *Ring { return &Ring{buf: make([]Point, max(n, 1))} }

// Add appends a point, dropping the oldest when full.
func (r *Ring) Add(p Point) {
	r.buf[r.next] = p
	r.next++
	if r.next == len(r.buf) {
		r.next, r.full = 0, true
	}
}

// Len is the number of points held.
func (r *Ring) Len() int {
	if r.full {
		return len(r.buf)
	}
	return r.next
}

// Points copies the points out, oldest first.
func (r *Ring) Points() []Point {
	out := make([]Point, 0, r.Len())
	if r.full {
		out = append(out, r.buf[r.next:]...)
	}
	return append(out, r.buf[:r.next]...)
}

// Last returns the newest point.
func (r *Ring) Last() (Point, bool) {
	if r.Len() == 0 {
		return Point{}, false
	}
	i := r.next - 1
	if i < 0 {
		i = len(r.buf) - 1
	}
	return r.buf[i], true
}

// History is a series kept at two resolutions, so that charts can show the
// last hour at any poll interval in bounded memory: the newest points as
// polled (a Ring of Fine points), and before them one point per
// CoarseStep, the largest value of that step (a spike stays visible when
// an hour is drawn in eighty columns), for CoarseSpan.
type History struct {
	fine, coarse *Ring
	step         time.Duration
	cur          Point // the coarse step being filled
	curStart     time.Time
	have         bool
}

// Coarse resolution of a History: a point per five seconds, for an hour.
const (
	CoarseStep = 5 * time.Second
	CoarseSpan = time.Hour
)

// NewHistory returns an empty history keeping fine points at full resolution.
func NewHistory(fine int) *History {
	return &History{fine: NewRing(fine), coarse: NewRing(int(CoarseSpan / CoarseStep)), step: CoarseStep}
}

// Add appends a point.
func (h *History) Add(p Point) {
	h.fine.Add(p)
	start := p.T.Truncate(h.step)
	switch {
	case !h.have:
		h.cur, h.curStart, h.have = p, start, true
	case start.Equal(h.curStart):
		h.cur.T, h.cur.V = p.T, max(h.cur.V, p.V)
	default:
		h.coarse.Add(h.cur)
		h.cur, h.curStart = p, start
	}
}

// Len is the number of points at full resolution.
func (h *History) Len() int { return h.fine.Len() }

// Last returns the newest point.
func (h *History) Last() (Point, bool) { return h.fine.Last() }

// Points copies the points out, oldest first: the coarse ones older than
// the oldest fine one, then the fine ones.
func (h *History) Points() []Point {
	fine := h.fine.Points()
	if len(fine) == 0 {
		return fine
	}
	oldest := fine[0].T
	coarse := h.coarse.Points()
	n := 0
	for n < len(coarse) && coarse[n].T.Before(oldest) {
		n++
	}
	if n == 0 {
		return fine
	}
	return append(coarse[:n:n], fine...)
}

// Series names, the keys of Collector.Series.
const (
	SeriesUnused        = "unused"
	SeriesPending       = "pending"
	SeriesExpired       = "expired"
	SeriesConsumed      = "consumed"
	SeriesLockWaiters   = "lock_waiters"
	SeriesLockWaitMax   = "lock_wait_max_ms"
	SeriesLWLockWaits   = "lwlock_waits"
	SeriesDeadTuples    = "dead_tuples"
	SeriesDeadRatio     = "dead_ratio"
	SeriesBurn          = "burn_per_s"
	SeriesETA           = "depletion_eta_s"
	SeriesAcquires      = "acquires_per_s"
	SeriesCommits       = "commits_per_s"
	SeriesAcquireP99    = "acquire_p99_ms"
	SeriesFenced        = "fenced_per_s"
	SeriesDouble        = "double_finalizations"
	SeriesLeaked        = "leaked"
	SeriesPollMS        = "poll_ms"
	SeriesConsumedPerS  = "consumed_per_s"
	SeriesDoublePerS    = "double_finalizations_per_s"
	SeriesConflictsPerS = "conflicts_per_s"
	SeriesClaimsPerS    = "claim_statements_per_s"
	SeriesClaimMeanMS   = "claim_mean_ms"
	// The workload's troubles, per second: renewals refused because the
	// lease was gone, claims that found the pool empty, failed statements.
	SeriesLeasesLostPerS = "leases_lost_per_s"
	SeriesEmptyPerS      = "empty_claims_per_s"
	SeriesErrorsPerS     = "errors_per_s"
)

var allSeries = []string{SeriesUnused, SeriesPending, SeriesExpired, SeriesConsumed, SeriesLockWaiters, SeriesLockWaitMax, SeriesLWLockWaits,
	SeriesDeadTuples, SeriesDeadRatio, SeriesBurn, SeriesETA, SeriesAcquires, SeriesCommits, SeriesAcquireP99,
	SeriesFenced, SeriesDouble, SeriesLeaked, SeriesPollMS, SeriesConsumedPerS, SeriesDoublePerS, SeriesConflictsPerS, SeriesClaimsPerS, SeriesClaimMeanMS,
	SeriesLeasesLostPerS, SeriesEmptyPerS, SeriesErrorsPerS}
