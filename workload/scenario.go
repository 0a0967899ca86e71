package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// Scenario is a named, reproducible set of knobs that produces one failure
// mode of a lease-based pool (or shows its absence).
type Scenario struct {
	Name     string
	About    string
	PoolSize int // ids the pool starts with
	// Config returns the scenario's knobs for a seed.
	Config func(seed uint64) Config
	// Shows names the failure this scenario exists to demonstrate ("" for
	// scenarios that must stay healthy): "double_finalizations" or "lost_ids".
	Shows string
	// Expect is what the audience should see, in a few words, and Proof the
	// counter that shows it: the dashboard puts both in its banner.
	Expect string
	Proof  Proof
}

// Proof names the counter that proves a scenario's story on screen.
type Proof string

// The proofs, one per story.
const (
	ProofHealthy   Proof = "healthy"   // nothing leaks, nothing is finalized twice
	ProofLeaked    Proof = "leaked"    // ids held by dead workers, never back without a lease
	ProofReclaimed Proof = "reclaimed" // leases the reaper brought back
	ProofDouble    Proof = "double"    // ids finalized twice
	ProofFenced    Proof = "fenced"    // zombie commits the fence rejected
	ProofLockWait  Proof = "lock_wait" // sessions waiting on row locks
	ProofConflicts Proof = "conflicts" // optimistic version checks lost
	ProofDrain     Proof = "drain"     // the time until the pool is empty
)

func base(seed uint64) Config {
	c := Defaults()
	c.Seed = seed
	c.Workers = 16
	c.Task = 5 * time.Millisecond
	c.TTL = 2 * time.Second
	c.ReaperInterval = 250 * time.Millisecond
	return c
}

// Scenarios are the presets, in the order of the dashboard's number keys.
// Each changes only what its story is about: the contention presets keep
// the healthy fleet's workers and task time and change the claim strategy.
var Scenarios = []Scenario{
	{Name: "healthy", PoolSize: 200_000, About: "leases, fencing and the reaper on; 2% of tasks fail and release",
		Expect: "nothing leaks, nothing doubles", Proof: ProofHealthy,
		Config: func(s uint64) Config { c := base(s); c.FailRate = 0.02; return c }},
	{Name: "crash-no-lease", PoolSize: 200_000, Shows: "lost_ids",
		About:  "workers die holding ids claimed without a lease: leaked PENDING rows pile up forever",
		Expect: "leaked climbs and never falls", Proof: ProofLeaked,
		Config: func(s uint64) Config { c := base(s); c.Lease = false; c.CrashRate = 0.05; return c }},
	{Name: "crash-with-lease", PoolSize: 200_000,
		About:  "workers die holding leased ids: the reaper brings every one back",
		Expect: "the reaper brings every leaked id back", Proof: ProofReclaimed,
		Config: func(s uint64) Config { c := base(s); c.CrashRate = 0.05; return c }},
	{Name: "pause-no-fencing", PoolSize: 200_000, Shows: "double_finalizations",
		About:  "workers freeze past their lease and commit on waking, with no token check: double finalizations",
		Expect: "zombies commit: double finalizations", Proof: ProofDouble,
		Config: func(s uint64) Config {
			c := base(s)
			c.Fencing, c.PauseRate, c.PauseLength, c.TTL = false, 0.05, 1500*time.Millisecond, time.Second
			return c
		}},
	{Name: "pause-with-fencing", PoolSize: 200_000,
		About:  "workers freeze past their lease and commit on waking: the fence rejects every zombie",
		Expect: "the fence rejects every zombie", Proof: ProofFenced,
		Config: func(s uint64) Config {
			c := base(s)
			c.PauseRate, c.PauseLength, c.TTL = 0.05, 1500*time.Millisecond, time.Second
			return c
		}},
	{Name: "blocking-contention", PoolSize: 200_000,
		About:  "SELECT … FOR UPDATE: workers queue behind each other's row locks",
		Expect: "lock waits; press s for skip-locked", Proof: ProofLockWait,
		Config: func(s uint64) Config { c := base(s); c.Strategy = engine.Blocking; return c }},
	{Name: "optimistic-herd", PoolSize: 200_000,
		About:  "optimistic version checks: every worker races for the same first rows",
		Expect: "version checks lost, claims retried", Proof: ProofConflicts,
		Config: func(s uint64) Config { c := base(s); c.Strategy = engine.Optimistic; return c }},
	{Name: "drain", PoolSize: 20_000,
		About:  "burn faster than the producer refills until the pool is empty",
		Expect: "the ETA shrinks, the pool runs dry", Proof: ProofDrain,
		Config: func(s uint64) Config { c := base(s); c.Refill = 200; return c }},
}

// ScenarioByName finds a preset.
func ScenarioByName(name string) (Scenario, error) {
	for _, s := range Scenarios {
		if s.Name == name {
			return s, nil
		}
	}
	names := make([]string, len(Scenarios))
	for i, s := range Scenarios {
		names[i] = s.Name
	}
	return Scenario{}, fmt.Errorf("scenario %q: choose one of %s", name, strings.Join(names, ", "))
}

// Summary is the outcome of a chaos run. Field names are part of the JSON contract.
type Summary struct {
	Scenario            string   `json:"scenario"`
	Seed                uint64   `json:"seed"`
	DurationS           float64  `json:"duration_s"`
	Cycles              int64    `json:"cycles"`
	Committed           int64    `json:"committed"`
	FencedRejections    int64    `json:"fenced_rejections"`
	DoubleFinalizations int64    `json:"double_finalizations"`
	LostIDs             int64    `json:"lost_ids"`
	ExpiredPending      int64    `json:"expired_pending"`
	Reclaimed           int64    `json:"reclaimed"`
	MaxReclaimLagMS     float64  `json:"max_reclaim_lag_ms"`
	ReclaimBoundMS      float64  `json:"reclaim_bound_ms"`
	Crashes             int64    `json:"crashes"`
	Pauses              int64    `json:"pauses"`
	EmptyPool           int64    `json:"empty_pool"`
	Conflicts           int64    `json:"conflicts"`
	Errors              int64    `json:"errors"`
	Violations          []string `json:"violations"`
	// Expected lists the failures the scenario exists to show, as found.
	Expected []string           `json:"expected_failures"`
	Audit    engine.AuditReport `json:"audit"`
	// History is the check of every operation of the run against the lease
	// register (CheckHistory).
	History *HistoryCheck `json:"history,omitempty"`
}

// OK reports whether the scenario's expected invariants held.
func (s Summary) OK() bool { return len(s.Violations) == 0 }

// Chaos runs a scenario headless for d, then stops the faults and the
// workers, lets the reaper catch up (TTL + 2 reaper intervals + grace),
// audits the database and summarises. The pool must already hold the
// scenario's ids. progress, if not nil, gets a line per second.
// ErrOutage: the database was unreachable during a chaos run.
var ErrOutage = errors.New("the database was unreachable during the run")

// outage names a lost connection as the outage it is.
func outage(err error) error {
	if classify(err) == ErrClassConn {
		return fmt.Errorf("%w: %w", ErrOutage, err)
	}
	return err
}

func Chaos(ctx context.Context, eng *engine.Engine, sc Scenario, d time.Duration, seed uint64, override func(*Config), progress func(Snapshot)) (Summary, error) {
	cfg := sc.Config(seed)
	if override != nil {
		override(&cfg)
	}
	wl, err := New(eng, cfg)
	if err != nil {
		return Summary{}, err
	}
	hist := engine.NewHistory(nil)
	eng.Record(hist)
	defer eng.Record(nil)
	start := time.Now()
	wl.Start(ctx)
	defer wl.Stop()

	tick := time.NewTicker(time.Second)
	deadline := time.NewTimer(d)
run:
	for {
		select {
		case <-ctx.Done():
			tick.Stop()
			return Summary{}, ctx.Err()
		case <-deadline.C:
			break run
		case <-tick.C:
			if progress != nil {
				_, _ = wl.RefreshLeaked(ctx) // so Leaked counts only ids not yet reclaimed
				progress(wl.Snapshot())
			}
		}
	}
	tick.Stop()

	// Stop the faults, then the workers (they finish or release); the
	// reaper keeps running.
	calm := cfg
	calm.CrashRate, calm.PauseRate, calm.Workers, calm.Refill, calm.KeepUp = 0, 0, 0, 0, false
	if err := wl.SetConfig(calm); err != nil {
		return Summary{}, err
	}
	if err := waitFor(ctx, cfg.PauseLength+cfg.Task*10+30*time.Second, func() bool { return wl.Snapshot().Workers == 0 }); err != nil {
		return Summary{}, fmt.Errorf("workers did not stop: %w", err)
	}
	catchUp := cfg.TTL + 2*cfg.ReaperInterval + cfg.ReaperGrace
	select {
	case <-ctx.Done():
		return Summary{}, ctx.Err()
	case <-time.After(catchUp):
	}
	if _, err := wl.Reaper().RunOnce(ctx); err != nil { // one more pass, so the audit sees its effect
		return Summary{}, outage(err)
	}
	lost, err := wl.RefreshLeaked(ctx)
	if err != nil {
		return Summary{}, outage(err)
	}
	wl.Stop()
	audit, err := eng.Audit(ctx, 0)
	if err != nil {
		return Summary{}, outage(err)
	}
	snap := wl.Snapshot()
	rs := wl.Reaper().Stats()
	var errs int64
	for _, n := range snap.Errors {
		errs += n
	}
	s := Summary{
		Scenario: sc.Name, Seed: seed, DurationS: time.Since(start).Seconds(),
		Cycles: snap.Cycles, Committed: snap.Committed, FencedRejections: snap.FencedRejections,
		DoubleFinalizations: audit.DoubleFinalizations, LostIDs: int64(lost),
		ExpiredPending: audit.PendingPastGrace, Reclaimed: rs.Reclaimed,
		MaxReclaimLagMS: ms(rs.MaxLag),
		// A lease expiring just after a pass waits for the next one: the
		// grace, one interval, the pass before it and its own statement,
		// plus timer slack on a loaded machine (100 ms + a fifth of the interval).
		ReclaimBoundMS: ms(cfg.ReaperGrace + cfg.ReaperInterval + 2*rs.MaxBatch + 100*time.Millisecond + cfg.ReaperInterval/5),
		Crashes:        snap.Crashes, Pauses: snap.Pauses, EmptyPool: snap.EmptyPool,
		Conflicts: snap.Conflicts, Errors: errs, Audit: audit,
		Violations: []string{}, Expected: []string{},
	}
	// A run the database was away for says nothing about the invariants:
	// the reaper could not reap and the workers could not commit, so what
	// the audit sees is the outage, not the protocol.
	if conn := snap.Errors[errClassNames[ErrClassConn]]; conn > 0 || rs.Errors > 0 {
		return s, fmt.Errorf("%w: %d worker statements lost their connection and %d reaper passes failed (last: %v): run the scenario again on a server that stays up",
			ErrOutage, conn, rs.Errors, rs.LastError)
	}
	eng.Record(nil)
	hc, err := CheckHistory(ctx, eng, hist.Ops())
	if err != nil {
		return Summary{}, outage(err)
	}
	s.History = &hc
	s.judge(sc, audit)
	return s, nil
}

// judge sorts findings into violations and the failures the scenario is
// meant to show; a scenario that fails to show its failure is a violation too.
func (s *Summary) judge(sc Scenario, audit engine.AuditReport) {
	for _, f := range audit.Findings {
		// Fencing off shows double finalizations and the stale effects that
		// make them; leases off shows ids nothing reclaims.
		expected := (sc.Shows == "double_finalizations" && (f.Kind == engine.FindingDoubleFinalization || f.Kind == engine.FindingStaleEffect)) ||
			(sc.Shows == "lost_ids" && f.Kind == engine.FindingPendingUnleased)
		if expected {
			s.Expected = append(s.Expected, f.Text)
		} else {
			s.Violations = append(s.Violations, f.Text)
		}
	}
	if s.LostIDs > 0 {
		msg := fmt.Sprintf("%d ids held by crashed workers never came back", s.LostIDs)
		if sc.Shows == "lost_ids" {
			s.Expected = append(s.Expected, msg)
		} else {
			s.Violations = append(s.Violations, msg)
		}
	}
	if h := s.History; h != nil {
		switch v := h.violation(); {
		case v != "" && sc.Shows == "double_finalizations":
			s.Expected = append(s.Expected, v)
		case v != "":
			s.Violations = append(s.Violations, v)
		case sc.Shows == "double_finalizations" && s.DoubleFinalizations > 0:
			s.Violations = append(s.Violations, "the history check found nothing wrong with a run that finalized ids twice")
		}
	}
	if s.Reclaimed > 0 && s.MaxReclaimLagMS > s.ReclaimBoundMS {
		s.Violations = append(s.Violations, fmt.Sprintf("a lease waited %.0f ms past expiry for the reaper (bound %.0f ms)", s.MaxReclaimLagMS, s.ReclaimBoundMS))
	}
	switch sc.Shows {
	case "double_finalizations":
		if s.DoubleFinalizations == 0 {
			s.Violations = append(s.Violations, "no double finalization appeared: the demo did not show the failure")
		}
	case "lost_ids":
		if s.LostIDs == 0 {
			s.Violations = append(s.Violations, "no id leaked: the demo did not show the failure")
		}
	}
	sort.Strings(s.Expected)
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }

// waitFor polls cond every 10 ms until it holds or the timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("gave up after %v", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}
