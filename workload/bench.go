package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
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
}

// BenchRun measures one mode at one worker count: a full acquire → commit
// cycle with no simulated work and no faults, after a warm-up whose figures
// are discarded.
func BenchRun(ctx context.Context, eng *engine.Engine, m BenchMode, workers int, warmup, d time.Duration) (BenchResult, error) {
	cfg := Defaults()
	cfg.Workers, cfg.Task, cfg.Strategy, cfg.Batch, cfg.BatchCommit = workers, 0, m.Strategy, m.Batch, m.Batched
	cfg.TTL, cfg.Renew, cfg.Reaper = time.Minute, false, false
	wl, err := New(eng, cfg)
	if err != nil {
		return BenchResult{}, err
	}
	wl.Start(ctx)
	defer wl.Stop()
	if err := sleepCtx(ctx, warmup); err != nil {
		return BenchResult{}, err
	}
	wl.Reset()
	start := time.Now()
	if err := sleepCtx(ctx, d); err != nil {
		return BenchResult{}, err
	}
	s := wl.Snapshot()
	el := time.Since(start).Seconds()
	var errs int64
	for _, n := range s.Errors {
		errs += n
	}
	return BenchResult{
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
