package workload

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/startstop"
)

// LeakedLease is a lease a crashed worker died holding.
type LeakedLease struct {
	ID     int64
	Token  int64
	DiedAt time.Time
	Until  time.Time // when the lease runs out (zero: no lease)
}

// Workload is a fleet of simulated workers plus the reaper and the refill
// producer. Start and Stop follow the one life cycle of internal/startstop
// (stopped again, it starts again); SetConfig changes knobs while it runs.
// All methods are safe for concurrent use.
type Workload struct {
	eng    Engine
	reaper *engine.Reaper
	cfg    atomic.Pointer[Config]
	runID  string

	changed chan struct{} // a knob changed: the supervisor reconciles
	exited  chan *worker  // a worker stopped or crashed

	mu       sync.Mutex // guards what follows; never taken on a worker's hot path
	workers  []*worker  // running, in start order
	leaving  []*worker  // told to stop, finishing their cycle; counted until they exit
	retired  *totals    // figures of workers that ended
	leaked   map[int64]LeakedLease
	nextID   int
	refilled atomic.Int64
	consumed atomic.Int64 // ids committed for the first time: what a keep-up producer replaces
	// recoveryWait is the longest time a crashed worker's lease had left to
	// run (guarded by mu); vacOff, that the supervisor turned autovacuum off.
	recoveryWait time.Duration
	vacOff       atomic.Bool
	// heldMin is the lowest free id the report holds FOR SHARE now
	// (math.MaxInt64: none); reports counts its transactions; rep is the
	// report running, touched only by the supervisor.
	heldMin atomic.Int64
	reports atomic.Int64
	rep     *reporter
	base    Snapshot // subtracted by Reset
	stage   stage    // the fault the knobs' last change shows at once

	wg  sync.WaitGroup // worker goroutines
	run startstop.Runner
}

// Engine is what a workload drives: the lease engine of one pool.
type Engine interface {
	LeaseAcquire(ctx context.Context, p *engine.LeaseAcquireParams) ([]engine.Lease, error)
	LeaseRenew(ctx context.Context, p *engine.LeaseRenewParams) (engine.Lease, error)
	LeaseRelease(ctx context.Context, p *engine.LeaseReleaseParams) (engine.Lease, error)
	LeaseTransfer(ctx context.Context, p *engine.LeaseTransferParams) (engine.Lease, error)
	LeaseCheck(ctx context.Context, p *engine.LeaseCheckParams) (bool, error)
	LeaseSuperseded(ctx context.Context, p *engine.LeaseCheckParams) (bool, error)
	LeaseCommit(ctx context.Context, p *engine.LeaseCommitParams) (engine.CommitResult, error)
	LeaseCommitBatch(ctx context.Context, holder string, items []engine.CommitItem) ([]engine.CommitResult, []error, error)
	StillHeld(ctx context.Context, ids, tokens []int64) ([]int64, error)
	Refill(ctx context.Context, count int) (int64, error)
	SetAutovacuum(ctx context.Context, on bool) error
	HoldFree(ctx context.Context, n int, hold time.Duration, held func(ids []int64)) (int, error)
	NewReaper(cfg engine.ReaperConfig) (*engine.Reaper, error)
	Stats() engine.Stats
}

var _ Engine = (*engine.Engine)(nil)

// New validates cfg and returns a stopped workload over eng.
func New(eng Engine, cfg Config) (*Workload, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	reaper, err := eng.NewReaper(cfg.reaperConfig())
	if err != nil {
		return nil, err
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	w := &Workload{
		eng: eng, reaper: reaper, runID: hex.EncodeToString(b[:]),
		changed: make(chan struct{}, 1), exited: make(chan *worker, MaxWorkers),
		retired: newTotals(), leaked: map[int64]LeakedLease{},
	}
	w.cfg.Store(&cfg)
	w.heldMin.Store(math.MaxInt64)
	w.stage.arm(Config{}, &cfg)
	return w, nil
}

// Config returns the knobs in force.
func (w *Workload) Config() Config { return *w.cfg.Load() }

// SetConfig changes the knobs. Workers read them at their next step, so a
// change takes effect within one cycle; the worker count and the reaper are
// reconciled by the supervisor right away.
func (w *Workload) SetConfig(c Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	w.stage.arm(*w.cfg.Swap(&c), &c)
	select {
	case w.changed <- struct{}{}:
	default:
	}
	return nil
}

// Reaper gives access to the reaper's statistics.
func (w *Workload) Reaper() *engine.Reaper { return w.reaper }

// Start launches the supervisor, which starts the workers, the reaper and
// the producer. It returns at once.
func (w *Workload) Start(ctx context.Context) { w.run.Start(ctx, w.supervise) }

// Stop asks every worker to finish its cycle or release its leases, waits
// for them, stops the reaper and the producer. Stopping a stopped workload
// does nothing.
func (w *Workload) Stop() { w.run.Stop() }

func (w *Workload) supervise(ctx context.Context) {
	// Database calls use dbCtx, which outlives ctx until every worker has
	// finished, so that a clean stop can still release leases.
	dbCtx, dbCancel := context.WithCancel(context.WithoutCancel(ctx))
	defer dbCancel()
	refill := time.NewTicker(100 * time.Millisecond)
	defer refill.Stop()
	var refillDebt float64
	keptUp := w.consumed.Load() // consumption the producer has matched
	w.reconcile(ctx, dbCtx)
	for {
		select {
		case <-ctx.Done():
			w.stopReport()
			w.mu.Lock()
			for _, wk := range w.workers {
				wk.quit()
			}
			w.mu.Unlock()
			// Running and leaving workers together may outnumber what
			// exited holds (a fleet shrunk, then grown, then stopped):
			// keep taking their reports while they end.
			ended := make(chan struct{})
			go func() { w.wg.Wait(); close(ended) }()
			for waiting := true; waiting; {
				select {
				case wk := <-w.exited:
					w.retire(wk)
				case <-ended:
					waiting = false
				}
			}
			w.drainExited()
			w.reaper.Stop()
			if w.vacOff.Load() { // leave the pool as it was found
				w.autovacuum(dbCtx, true)
			}
			return
		case <-w.changed:
			w.reconcile(ctx, dbCtx)
		case wk := <-w.exited:
			w.retire(wk)
			w.reconcile(ctx, dbCtx)
		case <-refill.C:
			cfg := w.Config()
			keep := int64(0)
			if consumed := w.consumed.Load(); cfg.KeepUp {
				keep = min(consumed-keptUp, engine.MaxSeed/2)
			} else {
				keptUp = consumed // turned on later, it matches from then on
			}
			n := int(keep)
			if cfg.Refill > 0 {
				refillDebt += cfg.Refill / 10
				n += int(refillDebt)
				refillDebt -= float64(int(refillDebt))
			} else {
				refillDebt = 0
			}
			if n <= 0 {
				continue
			}
			if added, err := w.eng.Refill(dbCtx, n); err == nil {
				w.refilled.Add(added)
				keptUp += keep
			}
		}
	}
}

// reconcile brings the fleet and the reaper in line with the config.
func (w *Workload) reconcile(ctx, dbCtx context.Context) {
	cfg := w.Config()
	w.mu.Lock()
	for len(w.workers) < cfg.Workers {
		wk := newWorker(w, w.nextID, cfg.Seed)
		w.nextID++
		w.workers = append(w.workers, wk)
		w.wg.Add(1)
		go wk.run(ctx, dbCtx)
	}
	for len(w.workers) > cfg.Workers {
		last := w.workers[len(w.workers)-1]
		w.workers = w.workers[:len(w.workers)-1]
		w.leaving = append(w.leaving, last)
		last.quit() // it finishes or releases, then reports on exited
	}
	limit := rate.Inf
	if cfg.Rate > 0 && cfg.Workers > 0 {
		limit = rate.Limit(cfg.Rate / float64(cfg.Workers))
	}
	for _, wk := range w.workers {
		wk.limiter.SetLimit(limit)
	}
	w.mu.Unlock()

	if off := !cfg.Autovacuum; off != w.vacOff.Load() {
		w.autovacuum(dbCtx, !off)
	}
	_ = w.reaper.SetConfig(cfg.reaperConfig()) // validated with the config
	switch {
	case cfg.Reaper && !w.reaper.Running():
		w.reaper.Start(ctx)
	case !cfg.Reaper && w.reaper.Running():
		w.reaper.Stop()
	}
	switch {
	case cfg.ShareHold > 0 && !w.rep.running():
		w.stopReport() // one that ended by itself
		rctx, cancel := context.WithCancel(ctx)
		w.rep = &reporter{cancel: cancel, done: make(chan struct{})}
		go func(r *reporter) { defer close(r.done); w.report(rctx) }(w.rep)
	case cfg.ShareHold == 0:
		w.stopReport()
	}
}

// autovacuum turns autovacuum on or off for the pool; a failure counts as
// an error and is tried again at the next reconcile.
func (w *Workload) autovacuum(ctx context.Context, on bool) {
	if err := w.eng.SetAutovacuum(ctx, on); err != nil {
		w.mu.Lock()
		w.retired.errs[classify(err)]++
		w.mu.Unlock()
		return
	}
	w.vacOff.Store(!on)
}

// retire folds a finished worker's figures into the totals and forgets it.
func (w *Workload) retire(wk *worker) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wk.shard.mergeInto(w.retired)
	w.workers = without(w.workers, wk)
	w.leaving = without(w.leaving, wk)
}

func without(ws []*worker, wk *worker) []*worker {
	for i, other := range ws {
		if other == wk {
			return append(ws[:i], ws[i+1:]...)
		}
	}
	return ws
}

func (w *Workload) drainExited() {
	for {
		select {
		case wk := <-w.exited:
			w.retire(wk)
		default:
			return
		}
	}
}

// leak records leases a crashing worker dies holding: leaked ids.
func (w *Workload) leak(leases []engine.Lease) {
	now := time.Now()
	w.mu.Lock()
	for _, l := range leases {
		ll := LeakedLease{ID: l.ID, Token: l.Token, DiedAt: now}
		if l.LeasedUntil != nil {
			ll.Until = *l.LeasedUntil
			w.recoveryWait = max(w.recoveryWait, ll.Until.Sub(now))
		}
		w.leaked[l.ID] = ll
	}
	w.mu.Unlock()
}

// LeakedLeases returns the leases crashed workers died holding, oldest first is
// not guaranteed. Callers check them against the database to see which the
// reaper brought back.
func (w *Workload) LeakedLeases() []LeakedLease {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]LeakedLease, 0, len(w.leaked))
	for _, o := range w.leaked {
		out = append(out, o)
	}
	return out
}

// RefreshLeaked asks the database which leaked leases are still PENDING
// at the dead worker's token and forgets the others (the reaper brought them
// back). It returns how many are still held. One indexed query; the
// dashboard calls it once per poll.
func (w *Workload) RefreshLeaked(ctx context.Context) (int, error) {
	leaked := w.LeakedLeases()
	ids := make([]int64, len(leaked))
	tokens := make([]int64, len(leaked))
	for i, o := range leaked {
		ids[i], tokens[i] = o.ID, o.Token
	}
	held, err := w.eng.StillHeld(ctx, ids, tokens)
	if err != nil {
		return 0, err
	}
	still := make(map[int64]bool, len(held))
	for _, id := range held {
		still[id] = true
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range leaked {
		if cur, ok := w.leaked[o.ID]; ok && cur.Token == o.Token && !still[o.ID] {
			delete(w.leaked, o.ID)
		}
	}
	return len(w.leaked), nil
}

// Forget drops the leases crashed workers died holding, once the pool they
// were in is gone (the demo makes a fresh pool for each scenario).
func (w *Workload) Forget() {
	w.mu.Lock()
	defer w.mu.Unlock()
	clear(w.leaked)
	w.recoveryWait = 0
}

// Snapshot merges every worker's figures. It takes each worker's own lock
// for a moment; workers never wait on each other or on the reader.
func (w *Workload) Snapshot() Snapshot {
	t := newTotals()
	w.mu.Lock()
	t.acquire.Merge(w.retired.acquire)
	t.cycle.Merge(w.retired.cycle)
	t.c, t.errs = w.retired.c, w.retired.errs
	shards := w.shardsLocked()
	running, stopping := len(w.workers), len(w.leaving)
	dead := len(w.leaked)
	now := time.Now()
	var oldest time.Duration
	for _, l := range w.leaked {
		oldest = max(oldest, now.Sub(l.DiedAt))
	}
	recovery := w.recoveryWait
	base := w.base
	w.mu.Unlock()
	for _, s := range shards {
		s.mergeInto(t)
	}
	rs := w.reaper.Stats()
	s := Snapshot{
		Time: time.Now(), Workers: running, Stopping: stopping,
		AcquireCalls: t.c[cAcquireCalls], Acquired: t.c[cAcquired], Committed: t.c[cCommitted],
		Released: t.c[cReleased], Renewed: t.c[cRenewed], FencedRejections: t.c[cFenced],
		DoubleFinalizations: t.c[cDouble], Crashes: t.c[cCrashes], Pauses: t.c[cPauses],
		EmptyPool: t.c[cEmpty], LeasesLost: t.c[cLeaseLost], Cycles: t.c[cCycles],
		Conflicts: w.eng.Stats().OptimisticConflicts, Errors: map[string]int64{},
		AcquireLatency: latency(t.acquire), CycleLatency: latency(t.cycle), RecentAcquireLatency: latency(t.recent),
		Leaked: dead, Reclaimed: rs.Reclaimed, ReaperMaxLag: rs.MaxLag, ReaperHeld: rs.Held, Refilled: w.refilled.Load(),
		Transferred: t.c[cTransferred], OldHolderRejections: t.c[cOldHolder], PastExpiry: t.c[cPastExpiry],
		AcksLost: t.c[cAckLost], Replayed: t.c[cReplayed], DuplicatesFreshID: t.c[cDupFresh], DuplicatesStableID: t.c[cDupStable],
		DeadOldest: oldest, RecoveryWait: recovery, AutovacuumOff: w.vacOff.Load(),
		Reports: w.reports.Load(), PassedOver: t.c[cPassedOver],
	}
	for i, n := range t.errs {
		s.Errors[errClassNames[i]] = n
	}
	return s.minus(base)
}

// Reset makes the counters and latency histograms start again from zero.
// The dashboard's "reset counters" key and the benchmark's warm-up use it.
func (w *Workload) Reset() {
	s := w.Snapshot()
	w.mu.Lock()
	b := w.base
	w.base = s.plus(b)
	w.retired.acquire.Reset()
	w.retired.cycle.Reset()
	w.recoveryWait = 0
	shards := w.shardsLocked()
	w.mu.Unlock()
	for _, sh := range shards {
		sh.resetLatency()
	}
}

// shardsLocked lists the shards of the running workers and of those still
// finishing their cycle: a worker told to stop keeps counting until it exits
// and its figures move to the retired totals. The caller holds w.mu.
func (w *Workload) shardsLocked() []*shard {
	shards := make([]*shard, 0, len(w.workers)+len(w.leaving))
	for _, wk := range w.workers {
		shards = append(shards, wk.shard)
	}
	for _, wk := range w.leaving {
		shards = append(shards, wk.shard)
	}
	return shards
}

func (s Snapshot) minus(b Snapshot) Snapshot {
	s.AcquireCalls -= b.AcquireCalls
	s.Acquired -= b.Acquired
	s.Committed -= b.Committed
	s.Released -= b.Released
	s.Renewed -= b.Renewed
	s.FencedRejections -= b.FencedRejections
	s.DoubleFinalizations -= b.DoubleFinalizations
	s.Crashes -= b.Crashes
	s.Pauses -= b.Pauses
	s.EmptyPool -= b.EmptyPool
	s.LeasesLost -= b.LeasesLost
	s.Cycles -= b.Cycles
	s.Conflicts -= b.Conflicts
	s.Reclaimed -= b.Reclaimed
	s.Refilled -= b.Refilled
	s.Transferred -= b.Transferred
	s.OldHolderRejections -= b.OldHolderRejections
	s.PastExpiry -= b.PastExpiry
	s.AcksLost -= b.AcksLost
	s.Replayed -= b.Replayed
	s.DuplicatesFreshID -= b.DuplicatesFreshID
	s.DuplicatesStableID -= b.DuplicatesStableID
	s.Reports -= b.Reports
	s.PassedOver -= b.PassedOver
	for k, v := range b.Errors {
		s.Errors[k] -= v
	}
	return s
}

func (s Snapshot) plus(b Snapshot) Snapshot {
	neg := Snapshot{Errors: map[string]int64{}}
	neg = neg.minus(b) // neg = -b
	return s.minus(neg)
}

// worker is one simulated API pod.
type worker struct {
	w       *Workload
	name    string
	shard   *shard
	rng     *mrand.Rand
	limiter *rate.Limiter
	stop    chan struct{}
	once    sync.Once
	held    atomic.Int64 // leases of the cycle in progress
	// lostConn counts the claims in a row that failed for want of a
	// connection: the server restarts, or the network is cut.
	lostConn int
}

// backoff is how long a worker waits after a failed claim: 10 ms, or while
// the server is unreachable twice as long at each failure up to a second,
// with jitter, so that a fleet does not hammer a server coming back up.
func (wk *worker) backoff(err error) time.Duration {
	if classify(err) != ErrClassConn {
		wk.lostConn = 0
		return 10 * time.Millisecond
	}
	wk.lostConn++
	d := 10 * time.Millisecond << min(wk.lostConn-1, 7)
	d = min(d, time.Second)
	return d/2 + time.Duration(wk.rng.Int64N(int64(d/2)+1))
}

func newWorker(w *Workload, n int, seed uint64) *worker {
	return &worker{
		w: w, name: fmt.Sprintf("w%d-%s", n, w.runID), shard: newShard(),
		rng:     mrand.New(mrand.NewPCG(seed, uint64(n))),
		limiter: rate.NewLimiter(rate.Inf, 1),
		stop:    make(chan struct{}),
	}
}

func (wk *worker) quit() { wk.once.Do(func() { close(wk.stop) }) }

func (wk *worker) stopping() bool {
	select {
	case <-wk.stop:
		return true
	default:
		return false
	}
}

// sleep waits d or until the worker is told to stop; it reports whether the
// full time passed.
func (wk *worker) sleep(d time.Duration) bool {
	if d <= 0 {
		return !wk.stopping()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-wk.stop:
		return false
	}
}

func (wk *worker) run(ctx, dbCtx context.Context) {
	defer wk.w.wg.Done()
	defer func() { wk.w.exited <- wk }()
	waitCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-wk.stop:
			cancel()
		case <-waitCtx.Done():
		}
	}()
	for cycle := 0; !wk.stopping(); cycle++ {
		if err := wk.limiter.Wait(waitCtx); err != nil {
			return
		}
		if crashed := wk.cycle(dbCtx, cycle); crashed {
			return
		}
	}
}

// cycle runs one acquire → work → commit cycle. It returns true when the
// worker crashed (and so must end without releasing anything).
func (wk *worker) cycle(ctx context.Context, n int) (crashed bool) {
	cfg := wk.w.cfg.Load()
	s := wk.shard
	start := time.Now()
	leases, err := wk.w.eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{
		Holder: wk.name, TTL: cfg.TTL, N: cfg.Batch, Strategy: cfg.Strategy, NoLease: !cfg.Lease,
		LockHeld: cfg.LockHeld})
	s.observe(&s.acquire, time.Since(start))
	switch {
	case errors.Is(err, engine.ErrPoolEmpty):
		s.add(cEmpty, 1)
		wk.sleep(10 * time.Millisecond) // back off: there is nothing to claim
		return false
	case err != nil:
		s.fail(err)
		wk.sleep(wk.backoff(err))
		return false
	}
	wk.lostConn = 0
	if held := wk.w.heldMin.Load(); held != math.MaxInt64 {
		for _, l := range leases {
			if l.ID > held {
				s.add(cPassedOver, 1)
			}
		}
	}
	s.add(cAcquireCalls, 1)
	s.add(cAcquired, int64(len(leases)))
	wk.held.Store(int64(len(leases)))
	defer wk.held.Store(0)

	// The first claim after the fault knobs change shows their fault for
	// certain (see stage); the others by chance.
	staged := wk.w.stage.take(cfg)
	if staged {
		defer wk.w.stage.played()
	}
	if cfg.CrashRate > 0 && (wk.rng.Float64() < cfg.CrashRate || staged) {
		s.add(cCrashes, 1)
		wk.w.leak(leases)
		return true
	}
	// A worker that checks its fence in the application freezes between
	// the check and the write; the others before their task.
	pause := noPause
	if cfg.PauseRate > 0 && (wk.rng.Float64() < cfg.PauseRate || staged) {
		pause = pauseFor
		if staged {
			pause = pauseTillSuperseded
		}
		s.add(cPauses, 1)
	}
	inApp := cfg.Fencing && cfg.FenceInApp
	if !inApp {
		wk.freeze(ctx, cfg, leases, pause) // no renewal, then wakes up believing it still owns the ids
	}
	leases = wk.work(ctx, cfg, leases)
	if wk.stopping() || (cfg.FailRate > 0 && wk.rng.Float64() < cfg.FailRate) {
		wk.release(ctx, leases)
		return false
	}
	if cfg.ClockSkew > 0 {
		leases = wk.byLocalClock(ctx, cfg, leases)
	}
	if cfg.TransferRate > 0 && (wk.rng.Float64() < cfg.TransferRate || staged && pause == noPause) {
		wk.transfer(ctx, cfg, leases, n)
	} else {
		afterCheck := noPause
		if inApp {
			afterCheck = pause
		}
		wk.commit(ctx, cfg, leases, n, afterCheck, staged && pause == noPause)
	}
	s.observe(&s.cycle, time.Since(start))
	s.add(cCycles, 1)
	return false
}

// work simulates the external call, renewing the leases whenever RenewAt of
// the TTL has passed. It returns the leases still held.
func (wk *worker) work(ctx context.Context, cfg *Config, leases []engine.Lease) []engine.Lease {
	left := time.Duration(0)
	if cfg.Task > 0 {
		left = time.Duration(math.Min(wk.rng.ExpFloat64(), 10) * float64(cfg.Task))
	}
	// A clock running behind judges the renewal due that much later.
	step := time.Duration(float64(cfg.TTL)*cfg.RenewAt) + cfg.ClockSkew
	for left > 0 {
		d := left
		renew := cfg.Renew && cfg.Lease && left > step
		if renew {
			d = step
		}
		if !wk.sleep(d) {
			return leases
		}
		left -= d
		if !renew {
			continue
		}
		kept := leases[:0]
		for _, l := range leases {
			nl, err := wk.w.eng.LeaseRenew(ctx, &engine.LeaseRenewParams{ID: l.ID, Token: l.Token, TTL: cfg.TTL})
			switch {
			case err == nil:
				wk.shard.add(cRenewed, 1)
				kept = append(kept, nl)
			case engine.IsRejected(err):
				wk.shard.add(cLeaseLost, 1)
			default:
				wk.shard.fail(err)
				kept = append(kept, l)
			}
		}
		leases = kept
	}
	return leases
}

func (wk *worker) release(ctx context.Context, leases []engine.Lease) {
	for _, l := range leases {
		_, err := wk.w.eng.LeaseRelease(ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: l.Token})
		switch {
		case err == nil:
			wk.shard.add(cReleased, 1)
		case engine.IsRejected(err):
			wk.shard.add(cLeaseLost, 1)
		default:
			wk.shard.fail(err)
		}
	}
}

// commit commits the leases, pausing between the application's token check
// and the write as afterCheck says (FenceInApp); with ackLost, the answer
// of the first commit is lost for certain (AckLoss).
func (wk *worker) commit(ctx context.Context, cfg *Config, leases []engine.Lease, cycle int, afterCheck pause, ackLost bool) {
	s := wk.shard
	reqID := func(l engine.Lease) string { return fmt.Sprintf("%s-%d-%d", wk.name, cycle, l.ID) }
	if cfg.BatchCommit && cfg.Fencing && !cfg.FenceInApp && cfg.AckLoss == 0 && len(leases) > 1 {
		items := make([]engine.CommitItem, len(leases))
		for i, l := range leases {
			items[i] = engine.CommitItem{ID: l.ID, Token: l.Token, RequestID: reqID(l)}
		}
		_, errs, err := wk.w.eng.LeaseCommitBatch(ctx, wk.name, items)
		if err != nil && !unknownOutcome(err) {
			s.fail(err)
			return
		}
		for i, l := range leases {
			// The batch's answer was lost (err), or one item's fate could
			// not be read: resolve it by its request id.
			var res engine.CommitResult
			e := err
			if e == nil {
				e = errs[i]
			}
			if unknownOutcome(e) {
				res, e = wk.resolveCommit(ctx, cfg, l, items[i].RequestID, e)
			}
			wk.countCommit(e, res.PriorEffects)
		}
		return
	}
	for _, l := range leases {
		res, err := wk.commitOne(ctx, cfg, l, wk.name, reqID(l), afterCheck)
		if unknownOutcome(err) {
			res, err = wk.resolveCommit(ctx, cfg, l, reqID(l), err)
		}
		wk.countCommit(err, res.PriorEffects)
		lost := ackLost
		ackLost = false
		if err != nil || res.Replayed || cfg.AckLoss == 0 || (wk.rng.Float64() >= cfg.AckLoss && !lost) {
			continue
		}
		// The effect is written but the answer is lost: the worker is told
		// the commit failed and tries again, with the same request id or a
		// fresh one.
		s.add(cAckLost, 1)
		retryID := reqID(l)
		if !cfg.StableRequestID {
			retryID += "-retry"
		}
		res, err = wk.commitOne(ctx, cfg, l, wk.name, retryID, noPause)
		switch {
		case err == nil && res.Replayed:
			s.add(cReplayed, 1)
			continue // the ledger answered from the first commit: nothing new to count
		case err == nil && res.PriorEffects > 0 && cfg.StableRequestID:
			s.add(cDupStable, 1)
		case err == nil && res.PriorEffects > 0:
			s.add(cDupFresh, 1)
		}
		wk.countCommit(err, res.PriorEffects)
	}
}

// unknownOutcome reports whether a commit that failed with err may or may
// not have happened: no answer came (the connection was cut, the server
// restarted), or a batched item's fate could not be read.
func unknownOutcome(err error) bool {
	return err != nil && (classify(err) == ErrClassConn || errors.Is(err, engine.ErrOutcomeUnknown))
}

// resolveCommit settles a commit of l whose outcome is unknown (err): it
// commits again with the same request id, backing off, as an application
// with an idempotency key does: the ledger replays it if it happened, the
// fence refuses it if the lease has passed meanwhile.
func (wk *worker) resolveCommit(ctx context.Context, cfg *Config, l engine.Lease, reqID string, err error) (engine.CommitResult, error) {
	s := wk.shard
	var res engine.CommitResult
	for try := 0; unknownOutcome(err) && try < 8; try++ {
		s.add(cAckLost, 1)
		wk.sleep(wk.backoff(err))
		if res, err = wk.commitOne(ctx, cfg, l, wk.name, reqID, noPause); err == nil && res.Replayed {
			s.add(cReplayed, 1)
		}
	}
	return res, err
}

func (wk *worker) countCommit(err error, prior int) {
	s := wk.shard
	switch {
	case err == nil:
		s.add(cCommitted, 1)
		if prior > 0 {
			s.add(cDouble, 1)
		} else {
			wk.w.consumed.Add(1)
		}
	case rejected(err):
		s.add(cFenced, 1)
	default:
		s.fail(err)
	}
}

// RunID is the suffix of this workload's holder names (w<n>-<run id>).
func (w *Workload) RunID() string { return w.runID }

// Held is how many leases the workload holds now: those of the cycles in
// progress, and those its crashed workers died holding that the reaper has
// not yet brought back (as RefreshLeaked last saw them).
func (w *Workload) Held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := int64(len(w.leaked))
	for _, ws := range [][]*worker{w.workers, w.leaving} {
		for _, wk := range ws {
			n += wk.held.Load()
		}
	}
	return int(n)
}

// reporter is the running report of the starvation story: started and
// stopped by the supervisor's reconcile, like the reaper.
type reporter struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// running says whether the report still runs (it ends by itself when
// ShareHold is 0 by the time it reads it).
func (r *reporter) running() bool {
	if r == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

// stopReport ends the report, if any, and waits for it.
func (w *Workload) stopReport() {
	if w.rep == nil {
		return
	}
	w.rep.cancel()
	<-w.rep.done
	w.rep = nil
}

// report holds the lowest free ids FOR SHARE for ShareHold, again and
// again, until ctx ends (reconcile cancels it when the knob turns off).
func (w *Workload) report(ctx context.Context) {
	for {
		hold := w.Config().ShareHold
		if hold <= 0 {
			return
		}
		_, err := w.eng.HoldFree(ctx, ShareRows, hold, func(ids []int64) {
			if len(ids) > 0 {
				w.heldMin.Store(ids[0])
			}
			w.reports.Add(1)
		})
		w.heldMin.Store(math.MaxInt64)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			w.mu.Lock()
			w.retired.errs[classify(err)]++
			w.mu.Unlock()
			if sleepCtx(ctx, time.Second) != nil { // do not spin on a failing report
				return
			}
		}
	}
}
