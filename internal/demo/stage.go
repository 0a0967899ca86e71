package demo

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/termtext"
	"github.com/pooltop-dev/pooltop/workload"
)

// Stage is the demo as the dashboard drives it (tui.Knobs): the workload's
// knobs, each change written to the event log, and the scenarios, each of
// which starts on a fresh pool of its own size so that the story it tells
// is its own: the ids leaked or finalized twice before belong to the
// scenario that made them.
type Stage struct {
	Pool      Pool // the pool the workload runs on: one server's, or several
	Workload  *workload.Workload
	Collector Recorder
	// Size, when not 0, is the pool size the user asked for (--pool-size),
	// which scales each scenario's own.
	Size int
	// Rebuild: the pool may be emptied and seeded again, because pooltop
	// made it (the throwaway server, or --dsn without --allow-writes, where
	// the demo runs only on a pool pooltop created). On a pool the user let
	// the demo run on with --allow-writes, a scenario only turns the knobs.
	Rebuild bool
	// Citus: the pool is laid out on Citus, which offers the skip-locked
	// claim and the fenced commit only (see engine's citus.go).
	Citus bool

	mu sync.Mutex // one scenario switch at a time
}

// Pool is the demo's pool as a scenario rebuilds it.
type Pool interface {
	// Size is the number of ids in the pool.
	Size(ctx context.Context) (int64, error)
	// Fill adds n ids and analyzes the pool for the claims' plan.
	Fill(ctx context.Context, n int) error
	// Refill adds n ids, without analyzing.
	Refill(ctx context.Context, n int) (int64, error)
	// ResetPool empties the pool (see engine.Engine.ResetPool).
	ResetPool(ctx context.Context, ours string) error
}

// Recorder is what the stage tells the figures: a knob turned, a reset, a
// pool being rebuilt (a collector, or collector.Servers over several).
type Recorder interface {
	Note(kind collector.EventKind, text string)
	Reset(rebuilt bool)
	Suspend()
}

// OneServer is a pool on one server: its connections and engine.
func OneServer(db *engine.Pool, eng *engine.Engine) Pool { return oneServer{db, eng} }

type oneServer struct {
	db *engine.Pool
	*engine.Engine
}

func (o oneServer) Size(ctx context.Context) (int64, error) {
	var n int64
	if err := o.db.QueryRow(ctx, "SELECT count(*) FROM resource_pool").Scan(&n); err != nil {
		return 0, fmt.Errorf("count the pool: %w", err)
	}
	return n, nil
}

func (o oneServer) Fill(ctx context.Context, n int) error {
	_, err := o.Seed(ctx, n)
	return err
}

// Config is the workload's knobs in force.
func (s *Stage) Config() workload.Config { return s.Workload.Config() }

// errVacuumNotOurs refuses to turn autovacuum off on a pool pooltop did not create.
var errVacuumNotOurs = errors.New("refusing to turn autovacuum off: pooltop did not create this pool (the demo runs on it with --allow-writes); vacuum-off runs on the embedded server or a pool made by pooltop migrate")

// errReportNotOurs refuses the starvation story's report on a pool
// pooltop did not create: it holds row locks and the database's xmin
// horizon (vacuum of every table) for 20 s at a time.
var errReportNotOurs = errors.New("refusing to run the FOR SHARE report: pooltop did not create this pool (the demo runs on it with --allow-writes), and the report holds row locks and the database's vacuum horizon 20 s at a time; starvation runs on the embedded server or a pool made by pooltop migrate")

// Check refuses knobs the pool is not the demo's to take: autovacuum off
// and the report only on a pool pooltop made.
func (s *Stage) Check(c workload.Config) error {
	switch {
	case !c.Autovacuum && !s.Rebuild:
		return errVacuumNotOurs
	case c.ShareHold > 0 && !s.Rebuild:
		return errReportNotOurs
	case s.Citus:
		return OnCitus(c)
	}
	return nil
}

// OnCitus says why a workload configured as c cannot run on a pool laid
// out on Citus, which offers the skip-locked claim and the fenced commit
// only, or nil.
func OnCitus(c workload.Config) error {
	switch {
	case c.Strategy != engine.SkipLocked:
		return fmt.Errorf("on Citus pooltop claims with skip-locked only, not %s: this story needs one server (run it without --citus)", c.Strategy)
	case !c.Fencing || c.FenceInApp:
		return errors.New("on Citus every commit is fenced by the database: the stories without that fence need one server (run them without --citus)")
	case c.TransferRate > 0:
		return errors.New("on Citus leases are not transferred: this story needs one server (run it without --citus)")
	case !c.Autovacuum || c.ShareHold > 0:
		return errors.New("the vacuum and starvation stories read one server's table statistics and hold its rows: they need one server (run them without --citus)")
	}
	return nil
}

// SetConfig turns knobs and logs each change.
func (s *Stage) SetConfig(c workload.Config) error {
	if err := s.Check(c); err != nil {
		return err
	}
	before := s.Workload.Config()
	if err := s.Workload.SetConfig(c); err != nil {
		return err
	}
	for _, ch := range c.Changes(before) {
		s.Collector.Note(collector.EventKnob, ch)
	}
	return nil
}

// Reset starts the counters, charts and alerts again from zero.
func (s *Stage) Reset() {
	s.Workload.Reset()
	s.Collector.Reset(false)
	s.Collector.Note(collector.EventReset, "counters, charts and alerts reset")
}

// ScenarioConfig is a scenario's knobs in the demo: its producer keeps the
// pool topped up (it adds what the workers consume), unless the scenario
// sets its own refill rate, as drain does.
func ScenarioConfig(sc workload.Scenario, seed uint64) workload.Config {
	c := sc.Config(seed)
	c.KeepUp = c.Refill == 0
	return c
}

// PoolSize is the size of a scenario's fresh pool: its own, or, with
// --pool-size, that size scaled as the scenario's own is to the healthy
// default's (drain's pool is a tenth, to run dry while the audience watches).
func (s *Stage) PoolSize(sc workload.Scenario) int {
	if s.Size == 0 {
		return sc.PoolSize
	}
	return max(s.Size*sc.PoolSize/workload.Scenarios[0].PoolSize, 100)
}

// errNotOurs refuses to empty a pool pooltop did not create.
var errNotOurs = errors.New("refusing to empty this pool for a fresh one: pooltop did not create it (the demo runs on it with --allow-writes); the scenario's knobs are set on the pool as it is")

// Play starts scenario i of workload.Scenarios (its Key on the dashboard): it stops the
// fleet, makes a fresh pool of the scenario's size, resets the counters,
// charts and alerts, and starts the scenario's knobs.
func (s *Stage) Play(i int) error {
	if i < 0 || i >= len(workload.Scenarios) {
		return fmt.Errorf("scenario %d: choose 0 to %d", i, len(workload.Scenarios)-1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sc := workload.Scenarios[i]
	cfg := ScenarioConfig(sc, s.Workload.Config().Seed)
	if err := s.Check(cfg); err != nil {
		return fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if !s.Rebuild {
		if err := s.Workload.SetConfig(cfg); err != nil {
			return err
		}
		s.Workload.Reset()
		s.Collector.Reset(false)
		s.Collector.Note(collector.EventScenario, fmt.Sprintf("scenario %s %s on the pool as it is (not pooltop's to empty): expect %s", sc.Key, sc.Name, sc.Expect))
		return nil
	}
	size := s.PoolSize(sc)
	if err := s.fresh(ctx, size); err != nil {
		return fmt.Errorf("scenario %s: %w", sc.Name, err)
	}
	if err := s.Workload.SetConfig(cfg); err != nil {
		return err
	}
	s.Collector.Note(collector.EventScenario, fmt.Sprintf("scenario %s %s on a fresh pool of %s ids: expect %s",
		sc.Key, sc.Name, termtext.Count(int64(size)), sc.Expect))
	return nil
}

// Grow adds n ids to the pool, chunk at a time, holding the stage so that
// no scenario empties the pool meanwhile, then analyzes it and starts the
// figures afresh (the counts read while rows were being inserted are
// void). The event log says when it is done or why it failed. The demo
// seeds a first part of a new pool before the dashboard starts and the
// rest with Grow behind the first figures.
func (s *Stage) Grow(ctx context.Context, n, chunk int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	err := s.grow(ctx, n, chunk)
	switch {
	case err == nil:
		s.Collector.Note(collector.EventScenario, fmt.Sprintf("seeded the rest of the pool: %s more ids", termtext.Count(int64(n))))
	case ctx.Err() == nil:
		s.Collector.Note(collector.EventScenario, fmt.Sprintf("seeding the rest of the pool failed: %v", err))
	}
	return err
}

// grow is Grow without the stage's lock and the event: Refill in chunks,
// the last one by Seed, which also analyzes the pool for the claims' plan.
func (s *Stage) grow(ctx context.Context, n, chunk int) error {
	for left := n; left > 0; {
		k := min(left, chunk)
		var err error
		if k == left {
			err = s.Pool.Fill(ctx, k)
		} else {
			_, err = s.Pool.Refill(ctx, k)
		}
		if err != nil {
			return err
		}
		left -= k
	}
	s.Collector.Reset(true)
	return nil
}

// Fresh makes a fresh pool of the same size for the knobs in force.
func (s *Stage) Fresh() error {
	if !s.Rebuild {
		return errNotOurs
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	total, err := s.Pool.Size(ctx)
	if err != nil {
		return err
	}
	size := int(min(max(total, 1), engine.MaxSeed))
	if s.Size != 0 {
		size = s.Size
	}
	cfg := s.Workload.Config()
	if err := s.fresh(ctx, size); err != nil {
		return err
	}
	if err := s.Workload.SetConfig(cfg); err != nil {
		return err
	}
	s.Collector.Note(collector.EventScenario, fmt.Sprintf("a fresh pool of %s ids", termtext.Count(int64(size))))
	return nil
}

// fresh stops the workers, the producer and the reaper, empties the pool
// and the ledger, seeds size ids and resets every figure. The caller
// restarts the workload with the knobs it wants.
func (s *Stage) fresh(ctx context.Context, size int) error {
	before := s.Workload.Config()
	calm := before
	calm.Workers, calm.Refill, calm.KeepUp, calm.Reaper = 0, 0, false, false
	if err := s.Workload.SetConfig(calm); err != nil {
		return err
	}
	// Workers finish their cycle or release their ids; a frozen one wakes.
	for deadline := time.Now().Add(time.Minute); ; {
		if w := s.Workload.Snapshot(); w.Workers == 0 && w.Stopping == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the workers did not stop within a minute")
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	// Refused (someone else holds leases on this pool), the pool and the
	// figures stay as they were and the workload goes on.
	if err := s.Pool.ResetPool(ctx, s.Workload.RunID()); err != nil {
		if rerr := s.Workload.SetConfig(before); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	s.Collector.Suspend()
	defer s.Collector.Reset(true) // also when the rebuild fails: the old figures are void
	if err := s.Pool.Fill(ctx, size); err != nil {
		return err
	}
	s.Workload.Forget()
	s.Workload.Reset()
	return nil
}
