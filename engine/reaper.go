package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/pooltop-dev/pooltop/internal/startstop"
)

// LeaseReapParams are the inputs of LeaseReap.
type LeaseReapParams struct {
	Batch int           // at most this many rows per statement, 1..MaxBatch
	Grace time.Duration // reclaim only leases expired for longer than this
	// Now replaces the database clock for the expiry test; tests use it to
	// hit boundaries exactly. Nil means clock_timestamp().
	Now *time.Time
}

// ReapResult is what one reap statement reclaimed.
type ReapResult struct {
	Reclaimed int           `json:"reclaimed"`
	IDs       []int64       `json:"-"`
	MaxLag    time.Duration `json:"-"` // longest time a reclaimed lease had been expired
}

// The reaper returns expired leases to the pool in short batches, skipping
// rows a worker has locked (a commit or renew in flight wins; the next pass
// sees the row again), re-checking the expiry in the UPDATE itself, and
// bumping the token so the old holder is fenced out. The batch size is
// written into the LIMIT for the plan's sake, as in the claim. A lease that
// expires at -infinity is reaped like any other (its lag is unknown); a row
// whose token cannot be raised any more is left for a person (verify names it).
const sqlReap = `
WITH expired AS MATERIALIZED (
    SELECT id, leased_until FROM resource_pool
    WHERE status = 'PENDING' AND lease_token < 9223372036854775807
      AND leased_until < coalesce($1::timestamptz, clock_timestamp()) - $2::bigint * interval '1 microsecond'
    ORDER BY leased_until
    LIMIT %d
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE resource_pool AS r
SET status = 'UNUSED', holder = NULL, leased_until = NULL,
    lease_token = r.lease_token + 1, updated_at = clock_timestamp()
FROM expired
WHERE r.id = expired.id AND r.status = 'PENDING'
  AND r.leased_until < coalesce($1::timestamptz, clock_timestamp()) - $2::bigint * interval '1 microsecond'
RETURNING r.id, CASE WHEN isfinite(expired.leased_until)
                     THEN (extract(epoch FROM coalesce($1::timestamptz, clock_timestamp()) - expired.leased_until) * 1e6)::bigint END`

// LeaseReap reclaims up to Batch expired leases in one short statement.
func (e *Engine) LeaseReap(ctx context.Context, p *LeaseReapParams) (ReapResult, error) {
	op := e.begin("reap", 0, 0, "", "")
	res, err := e.reap(ctx, p)
	if op != nil && err == nil {
		for _, id := range res.IDs {
			one := *op
			one.ID = id
			e.end(&one, 0, nil)
		}
	}
	return res, err
}

func (e *Engine) reap(ctx context.Context, p *LeaseReapParams) (ReapResult, error) {
	if p.Batch <= 0 || p.Batch > MaxBatch {
		return ReapResult{}, invalid("batch %d: reap between 1 and %d rows per statement", p.Batch, MaxBatch)
	}
	if p.Grace < 0 {
		return ReapResult{}, invalid("grace %v: must not be negative", p.Grace)
	}
	rows, err := e.db.Query(ctx, withLimit(sqlReap, p.Batch), p.Now, durationMicros(p.Grace))
	if err != nil {
		return ReapResult{}, dbError("reap", err)
	}
	defer rows.Close()
	var res ReapResult
	for rows.Next() {
		var id int64
		var lagMicros *int64
		if err := rows.Scan(&id, &lagMicros); err != nil {
			return ReapResult{}, fmt.Errorf("reap: %w", err)
		}
		res.IDs = append(res.IDs, id)
		if lagMicros != nil {
			if lag := time.Duration(*lagMicros) * time.Microsecond; lag > res.MaxLag {
				res.MaxLag = lag
			}
		}
	}
	if err := rows.Err(); err != nil {
		return ReapResult{}, dbError("reap", err)
	}
	res.Reclaimed = len(res.IDs)
	return res, nil
}

// ReaperConfig configures a Reaper. Zero fields take the defaults.
type ReaperConfig struct {
	Interval time.Duration // between passes; default 1s
	Batch    int           // rows per statement; default 1000
	Grace    time.Duration // extra time past expiry before reclaiming; default 0
	// MaxBatches bounds one pass, so a huge backlog is worked off over
	// several passes instead of one long burst; default 100.
	MaxBatches int
	// OnReap, if set, is called after every statement that reclaimed rows.
	// It runs on the reaper's goroutine and must not block.
	OnReap func(ReapResult)
}

func (c *ReaperConfig) withDefaults() ReaperConfig {
	out := *c
	out.Interval = cmp.Or(out.Interval, time.Second)
	out.Batch = cmp.Or(out.Batch, 1000)
	out.MaxBatches = cmp.Or(out.MaxBatches, 100)
	return out
}

func (c ReaperConfig) validate() error {
	switch {
	case c.Interval < 10*time.Millisecond:
		return invalid("reaper interval %v: at least 10ms", c.Interval)
	case c.Batch <= 0 || c.Batch > MaxBatch:
		return invalid("reaper batch %d: between 1 and %d", c.Batch, MaxBatch)
	case c.Grace < 0:
		return invalid("reaper grace %v: must not be negative", c.Grace)
	case c.MaxBatches <= 0:
		return invalid("reaper max batches %d: must be positive", c.MaxBatches)
	}
	return nil
}

// ReaperStats are the reaper's counters since it was created.
type ReaperStats struct {
	Passes    int64
	Reclaimed int64
	Errors    int64
	MaxLag    time.Duration // longest expiry-to-reclaim lag seen
	MaxBatch  time.Duration // longest single reap statement
	// MaxGap is the longest time from the start of one reap statement to
	// the end of the next that succeeded. A lease that expires (past its
	// grace) just after one statement looked is reclaimed by the next, so
	// no lease waits longer than Grace + MaxGap past its expiry, unless
	// its holder had its row locked (SKIP LOCKED passes over it) or a pass
	// stopped at MaxBatches. It holds whatever delayed the reaper: its
	// interval, a CPU it waited for, a server that was away.
	MaxGap time.Duration
	// MaxTwoGaps is the longest time from the start of one reap statement
	// to the end of the second that succeeded after it: the bound of a
	// lease that one statement passed over because its holder had its row
	// locked (a renewal or a commit in flight as the lease ran out; the
	// holder then finds it expired and lets go, and the next statement
	// takes it). So no lease whose row was locked at most once as the
	// reaper looked waits longer than Grace + MaxTwoGaps.
	MaxTwoGaps time.Duration
	LastError  error
}

// Reaper is the background service that returns expired leases to the pool.
// Start runs passes every Interval until Stop; RunOnce runs one pass and is
// what tests call instead of sleeping.
type Reaper struct {
	// engines are the servers it reaps, each in turn in every pass: one,
	// or the servers of a pool over several (Servers.NewReaper).
	engines []*Engine
	cfg     atomic.Pointer[ReaperConfig]

	passes, reclaimed, errs, maxLag, maxBatch, maxGap, maxTwoGaps atomic.Int64
	// lastStart[i] is when the last two statements that succeeded on
	// engines[i] started, on the monotonic clock since epoch (0: none yet).
	lastStart []starts
	lastErr   atomic.Pointer[error]

	run startstop.Runner
}

// NewReaper validates cfg (after applying defaults) and returns a stopped reaper.
func (e *Engine) NewReaper(cfg ReaperConfig) (*Reaper, error) {
	return newReaper([]*Engine{e}, cfg)
}

func newReaper(engines []*Engine, cfg ReaperConfig) (*Reaper, error) {
	r := &Reaper{engines: engines, lastStart: make([]starts, len(engines))}
	if err := r.SetConfig(cfg); err != nil {
		return nil, err
	}
	return r, nil
}

// SetConfig changes the configuration; a running reaper uses it from its next pass.
func (r *Reaper) SetConfig(cfg ReaperConfig) error {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return err
	}
	r.cfg.Store(&c)
	return nil
}

// Config returns the configuration in force.
func (r *Reaper) Config() ReaperConfig { return *r.cfg.Load() }

// RunOnce reclaims expired leases batch by batch until a batch comes back
// short or MaxBatches ran, and returns how many rows it reclaimed. Over
// several servers it reaps each in turn; one that fails does not stop the
// others, and the first error is returned.
func (r *Reaper) RunOnce(ctx context.Context) (int, error) {
	cfg := r.Config()
	total := 0
	r.passes.Add(1)
	var first error
	for i, e := range r.engines {
		n, err := r.reapOne(ctx, cfg, e, &r.lastStart[i])
		total += n
		if err != nil && first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	return total, first
}

func (r *Reaper) reapOne(ctx context.Context, cfg ReaperConfig, e *Engine, lastStart *starts) (int, error) {
	total := 0
	for i := 0; i < cfg.MaxBatches; i++ {
		start := time.Since(epoch)
		res, err := e.LeaseReap(ctx, &LeaseReapParams{Batch: cfg.Batch, Grace: cfg.Grace})
		end := time.Since(epoch)
		storeMax(&r.maxBatch, int64(end-start))
		if err != nil {
			if !errors.Is(err, context.Canceled) {
				r.errs.Add(1)
				r.lastErr.Store(&err)
			}
			return total, err
		}
		prev := lastStart.last.Swap(int64(start))
		if prev != 0 {
			storeMax(&r.maxGap, int64(end)-prev)
		}
		if before := lastStart.before.Swap(prev); before != 0 {
			storeMax(&r.maxTwoGaps, int64(end)-before)
		}
		total += res.Reclaimed
		r.reclaimed.Add(int64(res.Reclaimed))
		storeMax(&r.maxLag, int64(res.MaxLag))
		if res.Reclaimed > 0 && cfg.OnReap != nil {
			cfg.OnReap(res)
		}
		if res.Reclaimed < cfg.Batch {
			break
		}
	}
	return total, nil
}

// Start runs passes in the background until Stop or ctx ends. Starting a
// running reaper does nothing; a stopped one starts again.
func (r *Reaper) Start(ctx context.Context) { r.run.Start(ctx, r.loop) }

func (r *Reaper) loop(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		_, _ = r.RunOnce(ctx) // errors are counted in Stats
		timer.Reset(r.Config().Interval)
	}
}

// Stop ends the background loop and waits for the pass in flight. Stopping
// a stopped reaper does nothing.
func (r *Reaper) Stop() { r.run.Stop() }

// Running reports whether the background loop is on.
func (r *Reaper) Running() bool { return r.run.Running() }

// Stats returns the counters.
func (r *Reaper) Stats() ReaperStats {
	s := ReaperStats{
		Passes:     r.passes.Load(),
		Reclaimed:  r.reclaimed.Load(),
		Errors:     r.errs.Load(),
		MaxLag:     time.Duration(r.maxLag.Load()),
		MaxBatch:   time.Duration(r.maxBatch.Load()),
		MaxGap:     time.Duration(r.maxGap.Load()),
		MaxTwoGaps: time.Duration(r.maxTwoGaps.Load()),
	}
	if p := r.lastErr.Load(); p != nil {
		s.LastError = *p
	}
	return s
}

// starts are when the last statement and the one before it started.
type starts struct{ last, before atomic.Int64 }

// epoch is the origin of the reaper's monotonic clock readings.
var epoch = time.Now()

// storeMax raises a to v if v is larger.
func storeMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}
