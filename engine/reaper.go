package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

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
	// Held are the expired leases the statement passed over because their
	// holder had the row locked (a renewal or a commit in flight as the
	// lease ran out): SKIP LOCKED cannot take them, and the next statement
	// looks again.
	Held []int64 `json:"-"`

	at      time.Time  // the statement's start on the database clock
	expired []reapedAt // of each of IDs: its expiry and when it was reclaimed
}

// reapedAt is when a reclaimed lease had expired (zero: at -infinity,
// unknown) and when the statement took it, both on the database clock.
type reapedAt struct{ expired, reclaimed time.Time }

// The reaper returns expired leases to the pool in short batches, skipping
// rows a worker has locked (a commit or renew in flight wins; the next pass
// sees the row again), re-checking the expiry in the UPDATE itself, and
// bumping the token so the old holder is fenced out. The batch size is
// written into the LIMIT for the plan's sake, as in the claim. A lease that
// expires at -infinity is reaped like any other (its lag is unknown); a row
// whose token cannot be raised any more is left for a person (verify names it).
//
// The same statement names the leases it passed over: rows expired at its
// start (on its snapshot) that it did not lock, up to the last expiry it
// reached when its batch was full. The reaper's lag is measured from the
// last time it found a lease held, so a lease is called late only when
// nothing held its row.
const sqlReap = `
WITH expired AS MATERIALIZED (
    SELECT id, leased_until FROM resource_pool
    WHERE status = 'PENDING' AND lease_token < 9223372036854775807
      AND leased_until < coalesce($1::timestamptz, clock_timestamp()) - $2::bigint * interval '1 microsecond'
    ORDER BY leased_until
    LIMIT %[1]d
    FOR NO KEY UPDATE SKIP LOCKED
), reclaimed AS (
    UPDATE resource_pool AS r
    SET status = 'UNUSED', holder = NULL, leased_until = NULL,
        lease_token = r.lease_token + 1, updated_at = clock_timestamp()
    FROM expired
    WHERE r.id = expired.id AND r.status = 'PENDING'
      AND r.leased_until < coalesce($1::timestamptz, clock_timestamp()) - $2::bigint * interval '1 microsecond'
    RETURNING r.id, expired.leased_until
), reached AS (
    SELECT CASE WHEN count(*) < %[1]d THEN 'infinity'::timestamptz ELSE max(leased_until) END AS upto FROM expired
), held AS (
    SELECT p.id FROM resource_pool AS p
    WHERE p.status = 'PENDING' AND p.lease_token < 9223372036854775807
      AND p.leased_until < coalesce($1::timestamptz, statement_timestamp()) - $2::bigint * interval '1 microsecond'
      AND p.leased_until <= (SELECT upto FROM reached)
      AND NOT EXISTS (SELECT FROM expired WHERE expired.id = p.id)
    ORDER BY p.leased_until
    LIMIT %[1]d
)
SELECT id, CASE WHEN isfinite(leased_until) THEN leased_until END, coalesce($1::timestamptz, clock_timestamp()), false FROM reclaimed
UNION ALL
SELECT id, NULL, coalesce($1::timestamptz, statement_timestamp()), true FROM held`

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
	sh, err := e.poolShape(ctx)
	if err != nil {
		return ReapResult{}, dbError("reap", err)
	}
	if len(sh.shards) > 0 {
		return e.reapCitus(ctx, sh, p)
	}
	rows, err := e.db.Query(ctx, withLimit(sqlReap, p.Batch), p.Now, durationMicros(p.Grace))
	if err != nil {
		return ReapResult{}, dbError("reap", err)
	}
	defer rows.Close()
	var res ReapResult
	for rows.Next() {
		if err := res.scan(rows); err != nil {
			return ReapResult{}, fmt.Errorf("reap: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return ReapResult{}, dbError("reap", err)
	}
	res.Reclaimed = len(res.IDs)
	return res, nil
}

// scan adds one row of a reap statement to res: a lease reclaimed (its
// expiry, when the statement took it) or one passed over because its row
// was held (the earliest statement time of those is kept: on Citus each
// shard's node reads its own).
func (res *ReapResult) scan(row pgx.Row) error {
	var id int64
	var expired *time.Time
	var at time.Time
	var held bool
	if err := row.Scan(&id, &expired, &at, &held); err != nil {
		return err
	}
	if held {
		res.Held = append(res.Held, id)
		if res.at.IsZero() || at.Before(res.at) {
			res.at = at
		}
		return nil
	}
	res.IDs = append(res.IDs, id)
	r := reapedAt{reclaimed: at}
	if expired != nil {
		r.expired = *expired
		res.MaxLag = max(res.MaxLag, at.Sub(*expired))
	}
	res.expired = append(res.expired, r)
	return nil
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
	// Held counts the expired leases a statement passed over because
	// their holder had the row locked (a renewal or a commit in flight as
	// the lease ran out): SKIP LOCKED cannot take them. A lease held at
	// several statements is counted at each.
	Held int64
	// MaxLag is the longest a reclaimed lease waited for the reaper: from
	// its expiry, or from the last statement that found its row held if
	// that came later. A lease is late only while nothing holds its row.
	MaxLag   time.Duration
	MaxBatch time.Duration // longest single reap statement
	// MaxGap is the longest time from the start of a reap statement that
	// took every expired lease it saw (its batch not full), or from the
	// reaper's making, to the end of a statement that succeeded before the
	// next such one. With no backlog that is the time between two
	// statements; with one, the time the reaper took to work through it.
	// A lease that expires (past its grace) after such a statement looked,
	// or that a statement found held, is reclaimed by the next such
	// statement at the latest unless its row is held again, so MaxLag
	// stays within Grace + MaxGap. It holds whatever delayed the reaper:
	// its interval, a CPU it waited for, a server that was away, a backlog.
	MaxGap    time.Duration
	LastError error
}

// Reaper is the background service that returns expired leases to the pool.
// Start runs passes every Interval until Stop; RunOnce runs one pass and is
// what tests call instead of sleeping.
type Reaper struct {
	// engines are the servers it reaps, each in turn in every pass: one,
	// or the servers of a pool over several (Servers.NewReaper).
	engines []*Engine
	cfg     atomic.Pointer[ReaperConfig]

	passes, reclaimed, held, errs, maxLag, maxBatch, maxGap atomic.Int64
	// caughtUp[i] is when the last statement on engines[i] that took every
	// expired lease it saw (a batch not full) started, on the monotonic
	// clock since epoch; at first, when the reaper was made.
	caughtUp []atomic.Int64
	// heldAt[i] holds, for the leases of engines[i] found held, when.
	heldAt  []heldLeases
	lastErr atomic.Pointer[error]

	run startstop.Runner
}

// NewReaper validates cfg (after applying defaults) and returns a stopped reaper.
func (e *Engine) NewReaper(cfg ReaperConfig) (*Reaper, error) {
	return newReaper([]*Engine{e}, cfg)
}

func newReaper(engines []*Engine, cfg ReaperConfig) (*Reaper, error) {
	r := &Reaper{engines: engines, caughtUp: make([]atomic.Int64, len(engines)), heldAt: make([]heldLeases, len(engines))}
	for i := range r.caughtUp {
		r.caughtUp[i].Store(int64(time.Since(epoch)))
	}
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
		n, err := r.reapOne(ctx, cfg, e, &r.caughtUp[i], &r.heldAt[i])
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

func (r *Reaper) reapOne(ctx context.Context, cfg ReaperConfig, e *Engine, caughtUp *atomic.Int64, held *heldLeases) (int, error) {
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
		storeMax(&r.maxGap, int64(end)-caughtUp.Load())
		if res.Reclaimed < cfg.Batch {
			caughtUp.Store(int64(start))
		}
		total += res.Reclaimed
		r.reclaimed.Add(int64(res.Reclaimed))
		r.held.Add(int64(len(res.Held)))
		storeMax(&r.maxLag, int64(held.judge(&res, cfg.Batch)))
		if res.Reclaimed > 0 && cfg.OnReap != nil {
			cfg.OnReap(res)
		}
		if res.Reclaimed < cfg.Batch {
			break
		}
	}
	return total, nil
}

// LagBound is the longest a lease may wait for this reaper as far as it
// has measured: the grace and the longest gap between two statements
// (ReaperStats.MaxGap), with 0.1% of that gap and a millisecond for the
// lag being read on the database's clock and the gap on ours (a clock
// slewed by NTP runs at most 0.05% fast; timestamps are rounded to µs).
func (r *Reaper) LagBound() time.Duration {
	gap := time.Duration(r.maxGap.Load())
	return r.Config().Grace + gap + gap/1000 + time.Millisecond
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
		Passes:    r.passes.Load(),
		Reclaimed: r.reclaimed.Load(),
		Held:      r.held.Load(),
		Errors:    r.errs.Load(),
		MaxLag:    time.Duration(r.maxLag.Load()),
		MaxBatch:  time.Duration(r.maxBatch.Load()),
		MaxGap:    time.Duration(r.maxGap.Load()),
	}
	if p := r.lastErr.Load(); p != nil {
		s.LastError = *p
	}
	return s
}

// heldLeases remembers the leases of one server that a statement found
// held, and when (on the database clock), so that the lag of a lease
// reclaimed later is measured from then. Entries are dropped when the
// lease is reclaimed, or when a statement that saw every expired lease
// (its batch not full) found the lease neither held nor expired any more
// (committed, released or renewed).
type heldLeases struct {
	mu    sync.Mutex
	since map[int64]time.Time
}

// maxHeldRemembered bounds the memory of held leases; past it, leases found
// held are not remembered and their lag counts from their expiry.
const maxHeldRemembered = 100_000

// judge returns the longest lag of the leases res reclaimed, each from its
// expiry or from when it was last found held, whichever came later, and
// remembers the leases res found held.
func (h *heldLeases) judge(res *ReapResult, batch int) time.Duration {
	h.mu.Lock()
	defer h.mu.Unlock()
	var lag time.Duration
	for i, id := range res.IDs {
		at := res.expired[i]
		from, ok := h.since[id]
		delete(h.since, id)
		if at.expired.IsZero() {
			continue // expired at -infinity: its lag is unknown
		}
		if !ok || from.Before(at.expired) {
			from = at.expired
		}
		lag = max(lag, at.reclaimed.Sub(from))
	}
	if res.Reclaimed < batch && len(res.Held) < batch && len(h.since) > 0 {
		clear(h.since)
	}
	if h.since == nil && len(res.Held) > 0 {
		h.since = make(map[int64]time.Time)
	}
	for _, id := range res.Held {
		if len(h.since) >= maxHeldRemembered {
			break
		}
		h.since[id] = res.at
	}
	return lag
}

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
