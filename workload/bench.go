package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/servercost"
)

// BenchMode is one column of `pooltop bench`: a claim strategy, or the
// batched fenced cycle.
type BenchMode struct {
	Name     string
	Strategy engine.Strategy
	Batch    int  // ids per claim
	Batched  bool // commit the batch in one fenced statement
}

// BenchModes are the modes `pooltop bench` knows, by name.
var BenchModes = []BenchMode{
	{Name: "skip-locked", Strategy: engine.SkipLocked, Batch: 1},
	{Name: "blocking", Strategy: engine.Blocking, Batch: 1},
	{Name: "optimistic", Strategy: engine.Optimistic, Batch: 1},
	{Name: "batched", Strategy: engine.SkipLocked, Batch: 100, Batched: true},
}

// BenchModeByName finds a mode.
func BenchModeByName(name string) (BenchMode, error) {
	for _, m := range BenchModes {
		if m.Name == name {
			return m, nil
		}
	}
	return BenchMode{}, fmt.Errorf("strategy %q: choose from skip-locked, blocking, optimistic, batched", name)
}

// BenchResult is one row of the benchmark. Field names are part of the JSON contract.
type BenchResult struct {
	Strategy     string  `json:"strategy"`
	Workers      int     `json:"workers"`
	AcquiresPerS float64 `json:"acquires_per_s"` // ids claimed and committed per second
	CyclesPerS   float64 `json:"cycles_per_s"`   // fenced effects committed per second
	P50MS        float64 `json:"p50_ms"`         // claim latency
	P99MS        float64 `json:"p99_ms"`
	Errors       int64   `json:"errors"`
	Conflicts    int64   `json:"conflicts,omitempty"`
	EmptyPool    int64   `json:"empty_pool,omitempty"`
	RTTMS        float64 `json:"rtt_ms"` // simulated network round trip per exchange (bench --rtt); 0 on loopback as is

	// Connections is how many server connections the side used.
	Connections int `json:"connections,omitempty"`
	// TwinOf names the strategy a pgbench row is the twin of; TwinRatio,
	// on a pooltop row, is its cycles/s over its twin's.
	TwinOf    string  `json:"twin_of,omitempty"`
	TwinRatio float64 `json:"twin_ratio,omitempty"`
	// Cost is what one cycle cost the server (and the client) in the
	// measured window.
	Cost *servercost.Cost `json:"cost,omitempty"`
	// PoolSize is the ids the run's pool started with; Refilled the ids
	// added after the warm-up so that the run could not empty it.
	PoolSize int64 `json:"pool_size,omitempty"`
	Refilled int64 `json:"refilled,omitempty"`
	// Invalid says in words why the row is no figure (the pool ran dry).
	Invalid string `json:"invalid,omitempty"`
	Dry     bool   `json:"-"` // Invalid because the pool ran dry
	RunID   string `json:"-"` // the workload's run id, the suffix of its holders
}

// BenchWindow hooks into a run at the edges of its measured window.
type BenchWindow struct {
	// AfterWarmup gets the rate at which the warm-up claimed ids (0 with no
	// warm-up) and whether it found the pool empty (then the rate is less
	// than the strategy's), to size the pool before the window opens.
	AfterWarmup func(ctx context.Context, acquiresPerS float64, ranDry bool) error
	// Begin and End are called as the window opens and closes.
	Begin, End func(ctx context.Context) error
}

// BenchRun measures one mode at one worker count: a full acquire → commit
// cycle with no simulated work and no faults, after a warm-up whose figures
// are discarded.
func BenchRun(ctx context.Context, eng Engine, m BenchMode, workers int, warmup, d time.Duration, w BenchWindow) (BenchResult, error) {
	cfg := Defaults()
	cfg.Workers, cfg.Task, cfg.Strategy, cfg.Batch, cfg.BatchCommit = workers, 0, m.Strategy, m.Batch, m.Batched
	cfg.TTL, cfg.Renew, cfg.Reaper = time.Minute, false, false
	wl, err := New(eng, cfg)
	if err != nil {
		return BenchResult{}, err
	}
	wl.Start(ctx)
	defer wl.Stop()
	run := BenchResult{RunID: wl.RunID()}
	warmStart := time.Now()
	if err := sleepCtx(ctx, warmup); err != nil {
		return run, err
	}
	if w.AfterWarmup != nil {
		rate, s := 0.0, wl.Snapshot()
		if warmup > 0 {
			rate = float64(s.Acquired) / time.Since(warmStart).Seconds()
		}
		if err := w.AfterWarmup(ctx, rate, s.EmptyPool > 0); err != nil {
			return run, err
		}
	}
	if w.Begin != nil {
		if err := w.Begin(ctx); err != nil {
			return run, err
		}
	}
	wl.Reset()
	start := time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return run, err
	}
	// A rate needs a cycle to measure: on a machine busy enough that none
	// completed in the window, the window runs on until one does (up to a
	// minute more), so a short run measures the slow machine instead of
	// reporting nothing. A pool that ran dry or a claim that failed ends
	// the wait: the caller reports that run invalid, as it does one with
	// no cycle in the minute more.
	_ = waitFor(ctx, time.Minute, func() bool {
		s := wl.Snapshot()
		failed := int64(0)
		for _, n := range s.Errors {
			failed += n
		}
		return s.Committed > 0 || s.EmptyPool > 0 || failed > 0
	})
	if err := ctx.Err(); err != nil {
		return run, err
	}
	s := wl.Snapshot()
	el := time.Since(start).Seconds()
	if w.End != nil {
		if err := w.End(ctx); err != nil {
			return run, err
		}
	}
	var errs int64
	for _, n := range s.Errors {
		errs += n
	}
	return BenchResult{
		RunID:    run.RunID,
		Strategy: m.Name, Workers: workers,
		AcquiresPerS: float64(s.Acquired) / el, CyclesPerS: float64(s.Committed) / el,
		P50MS: s.AcquireLatency.P50, P99MS: s.AcquireLatency.P99,
		Errors: errs, Conflicts: s.Conflicts, EmptyPool: s.EmptyPool,
	}, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
