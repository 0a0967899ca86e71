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
	Name string
	// Key is the dashboard key that plays it: 1-8, then the shifted digits
	// ! @ # $ % ^ & (shift+1…7) for the stories of a lease's edges.
	Key      string
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
	// Fix, when set, is the knob that cures the story (the key the
	// audience is told to press); chaos runs the second half of its time
	// with it, so that both the failure and its cure are checked.
	Fix func(*Config)
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
	// The stories of a lease's edges: where the fence is, whose clock, transfers, retries, lease length, vacuum.
	ProofInApp        Proof = "in_app"        // double finalizations with the fence checked in the application
	ProofPastExpiry   Proof = "past_expiry"   // work committed after the database's expiry, by a slow local clock
	ProofTransfer     Proof = "transfer"      // leases transferred, old holders' late commits fenced
	ProofDuplicates   Proof = "duplicates"    // retried commits that wrote twice, by request id kind
	ProofFalseReclaim Proof = "false_reclaim" // healthy workers that lost their lease to a short TTL
	ProofRecovery     Proof = "recovery"      // how long crashed workers' ids wait under a long TTL
	ProofDeadTuples   Proof = "dead_tuples"   // dead tuples with autovacuum off
	ProofStarvation   Proof = "starvation"    // claims that took newer ids while a report held older free ones
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
	{Name: "healthy", Key: "1", PoolSize: 200_000, About: "leases, fencing and the reaper on; 2% of tasks fail and release",
		Expect: "nothing leaks, nothing doubles", Proof: ProofHealthy,
		Config: func(s uint64) Config { c := base(s); c.FailRate = 0.02; return c }},
	{Name: "crash-no-lease", Key: "2", PoolSize: 200_000, Shows: "lost_ids",
		About:  "workers die holding ids claimed without a lease: leaked PENDING rows pile up forever",
		Expect: "leaked climbs and never falls", Proof: ProofLeaked,
		Config: func(s uint64) Config { c := base(s); c.Lease = false; c.CrashRate = 0.05; return c }},
	{Name: "crash-with-lease", Key: "3", PoolSize: 200_000,
		About:  "workers die holding leased ids: the reaper brings every one back",
		Expect: "the reaper brings every leaked id back", Proof: ProofReclaimed,
		Config: func(s uint64) Config { c := base(s); c.CrashRate = 0.05; return c }},
	{Name: "pause-no-fencing", Key: "4", PoolSize: 200_000, Shows: "double_finalizations",
		About:  "workers freeze past their lease and commit on waking, with no token check: double finalizations",
		Expect: "zombies commit: double finalizations", Proof: ProofDouble,
		Config: func(s uint64) Config {
			c := base(s)
			c.Fencing, c.PauseRate, c.PauseLength, c.TTL = false, 0.05, 1500*time.Millisecond, time.Second
			return c
		}},
	{Name: "pause-with-fencing", Key: "5", PoolSize: 200_000,
		About:  "workers freeze past their lease and commit on waking: the fence rejects every zombie",
		Expect: "the fence rejects every zombie", Proof: ProofFenced,
		Config: func(s uint64) Config {
			c := base(s)
			c.PauseRate, c.PauseLength, c.TTL = 0.05, 1500*time.Millisecond, time.Second
			return c
		}},
	{Name: "blocking-contention", Key: "6", PoolSize: 200_000,
		About:  "SELECT … FOR UPDATE, then 5ms of application code before the UPDATE: workers queue behind each other's row locks",
		Expect: "lock waits; press s for skip-locked", Proof: ProofLockWait,
		Config: func(s uint64) Config {
			c := base(s)
			c.Strategy, c.LockHeld = engine.Blocking, 5*time.Millisecond
			return c
		}},
	{Name: "optimistic-herd", Key: "7", PoolSize: 200_000,
		About:  "optimistic version checks: every worker races for the same first rows",
		Expect: "version checks lost, claims retried", Proof: ProofConflicts,
		Config: func(s uint64) Config { c := base(s); c.Strategy = engine.Optimistic; return c }},
	{Name: "drain", Key: "8", PoolSize: 20_000,
		About:  "burn faster than the producer refills until the pool is empty",
		Expect: "the ETA shrinks, the pool runs dry", Proof: ProofDrain,
		Config: func(s uint64) Config { c := base(s); c.Refill = 200; return c }},
	{Name: "fence-in-app", Key: "!", PoolSize: 200_000, Shows: "double_finalizations",
		About:  "the worker checks in the application that its token is current, then writes without it: a pause after the check lets zombies through",
		Expect: "fencing in app, yet double; F: in the database", Proof: ProofInApp,
		Config: func(s uint64) Config {
			c := base(s)
			c.FenceInApp, c.PauseRate, c.PauseLength, c.TTL = true, 0.05, 1500*time.Millisecond, time.Second
			return c
		}},
	{Name: "local-clock", Key: "@", PoolSize: 200_000,
		About:  "workers judge their lease by a local clock 2s behind the database's: they renew late and commit past the expiry, and the fence rejects it",
		Expect: "work past the DB expiry, fenced; z: less skew", Proof: ProofPastExpiry,
		Config: func(s uint64) Config {
			c := base(s)
			c.TTL, c.Task, c.ClockSkew = time.Second, 800*time.Millisecond, 2*time.Second
			return c
		}},
	{Name: "transfer", Key: "#", PoolSize: 200_000,
		About:  "leases handed to a peer mid-task (the token rises); the old holder commits late with its old token and the ledger rejects it",
		Expect: "old holders fenced, no double; f: they double", Proof: ProofTransfer,
		Config: func(s uint64) Config { c := base(s); c.TransferRate = 0.1; return c }},
	{Name: "lost-ack", Key: "$", PoolSize: 200_000, Shows: "double_finalizations",
		About:  "a service that takes no token (fencing off); 5% of commit answers are lost and retried with a fresh request id: duplicates. With a stable id (key i), none",
		Expect: "fresh ids duplicate; i: stable ids, no duplicate", Proof: ProofDuplicates,
		Config: func(s uint64) Config {
			c := base(s)
			c.Fencing, c.AckLoss, c.StableRequestID = false, 0.05, false
			return c
		},
		Fix: func(c *Config) { c.StableRequestID = true }},
	{Name: "short-lease", Key: "%", PoolSize: 200_000,
		About:  "a 250ms lease and minor 300ms stalls (GC, network jitter): healthy workers lose their leases to the reaper, no crash needed",
		Expect: "healthy workers lose leases; T: a longer TTL", Proof: ProofFalseReclaim,
		Config: func(s uint64) Config {
			c := base(s)
			c.TTL, c.Task, c.PauseRate, c.PauseLength = 250*time.Millisecond, 50*time.Millisecond, 0.05, 300*time.Millisecond
			return c
		}},
	{Name: "long-lease", Key: "^", PoolSize: 200_000,
		About:  "a 30s lease for 50ms of work: the same stalls cost nothing, but a crashed worker's ids stay frozen for the whole lease",
		Expect: "crashed ids frozen ~30s; t: a shorter TTL", Proof: ProofRecovery,
		Config: func(s uint64) Config {
			c := base(s)
			c.TTL, c.Task, c.CrashRate, c.PauseRate, c.PauseLength = 30*time.Second, 50*time.Millisecond, 0.02, 0.05, 300*time.Millisecond
			return c
		}},
	{Name: "vacuum-off", Key: "&", PoolSize: 200_000,
		About:  "autovacuum off for the pool table: every claim and commit leaves a dead tuple, and claims slow down as they pile up",
		Expect: "dead tuples climb; u: autovacuum on", Proof: ProofDeadTuples,
		Config: func(s uint64) Config { c := base(s); c.Autovacuum = false; return c }},
	{Name: "starvation", Key: "*", PoolSize: 200_000,
		About:  "a report reads the 20 lowest free ids FOR SHARE and keeps its transaction open 20s: SKIP LOCKED claims pass over them and take newer ids (seed 001 §6.3)",
		Expect: "free ids passed over; g: report off", Proof: ProofStarvation,
		Config: func(s uint64) Config { c := base(s); c.ShareHold = ShareHoldOn; return c }},
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
	Scenario            string  `json:"scenario"`
	Seed                uint64  `json:"seed"`
	DurationS           float64 `json:"duration_s"`
	Cycles              int64   `json:"cycles"`
	Committed           int64   `json:"committed"`
	FencedRejections    int64   `json:"fenced_rejections"`
	DoubleFinalizations int64   `json:"double_finalizations"`
	LostIDs             int64   `json:"lost_ids"`
	ExpiredPending      int64   `json:"expired_pending"`
	Reclaimed           int64   `json:"reclaimed"`
	MaxReclaimLagMS     float64 `json:"max_reclaim_lag_ms"`
	ReclaimBoundMS      float64 `json:"reclaim_bound_ms"`
	// ReaperHeld counts the expired leases the reaper passed over because
	// their holder had the row locked (their lag counts from then).
	ReaperHeld int64 `json:"reaper_held"`
	Crashes    int64 `json:"crashes"`
	Pauses     int64 `json:"pauses"`
	EmptyPool  int64 `json:"empty_pool"`
	Conflicts  int64 `json:"conflicts"`
	Errors     int64 `json:"errors"`
	// The figures of the stories of a lease's edges.
	LeasesLost          int64   `json:"leases_lost"`
	Transferred         int64   `json:"transferred,omitempty"`
	OldHolderRejections int64   `json:"old_holder_rejections,omitempty"`
	PastExpiry          int64   `json:"past_expiry,omitempty"`
	AcksLost            int64   `json:"acks_lost,omitempty"`
	Replayed            int64   `json:"replayed,omitempty"`
	DuplicatesFreshID   int64   `json:"duplicates_fresh_id,omitempty"`
	DuplicatesStableID  int64   `json:"duplicates_stable_id"`
	MaxRecoveryMS       float64 `json:"max_recovery_ms,omitempty"`
	// PassedOverClaims: ids claimed above a free id the report held FOR
	// SHARE, while it held it (the starvation story).
	PassedOverClaims int64 `json:"passed_over_claims,omitempty"`
	// Vacuum is the pool's vacuum state at the end of the run, before the
	// workload stopped (and restored autovacuum); AutovacuumLeftOff, after.
	Vacuum            *engine.VacuumState `json:"vacuum,omitempty"`
	AutovacuumLeftOff bool                `json:"autovacuum_left_off,omitempty"`
	Violations        []string            `json:"violations"`
	// Expected lists the failures the scenario exists to show, as found.
	Expected []string           `json:"expected_failures"`
	Audit    engine.AuditReport `json:"audit"`
	// History is the check of every operation of the run against the lease
	// register (CheckHistory).
	History *HistoryCheck `json:"history,omitempty"`
}

// OK reports whether the scenario's expected invariants held.
func (s Summary) OK() bool { return len(s.Violations) == 0 }

// ErrOutage means the database was unreachable during a chaos run.
var ErrOutage = errors.New("the database was unreachable during the run")

// outage names a lost connection as the outage it is.
func outage(err error) error {
	if classify(err) == ErrClassConn {
		return fmt.Errorf("%w: %w", ErrOutage, err)
	}
	return err
}

// Chaos runs a scenario headless for d, then stops the faults and the
// workers, lets the reaper catch up (TTL + 2 reaper intervals + grace),
// audits the database and summarises. The pool must already hold the
// scenario's ids. progress, if not nil, gets a line per second.
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
	// A story with a cure runs its second half cured.
	var half <-chan time.Time
	if sc.Fix != nil {
		half = time.After(d / 2)
	}
run:
	for {
		select {
		case <-ctx.Done():
			tick.Stop()
			return Summary{}, ctx.Err()
		case <-deadline.C:
			break run
		case <-half:
			cured := wl.Config()
			sc.Fix(&cured)
			if err := wl.SetConfig(cured); err != nil {
				return Summary{}, err
			}
		case <-tick.C:
			if progress != nil {
				_, _ = wl.RefreshLeaked(ctx) // so Leaked counts only ids not yet reclaimed
				progress(wl.Snapshot())
			}
		}
	}
	tick.Stop()

	// The fault staged at the start (or by the cure) plays out before the
	// faults stop: a staged pause waits for its id to be committed by
	// another holder, which takes a lease, a reaper pass and a claim.
	stagedFor := cfg.PauseLength + 2*cfg.TTL + 4*cfg.ReaperInterval + cfg.ReaperGrace + 30*time.Second
	notStaged := waitFor(ctx, stagedFor, wl.Staged)
	if ctx.Err() != nil {
		return Summary{}, ctx.Err()
	}

	// Stop the faults, then the workers (they finish or release); the
	// reaper keeps running.
	calm := wl.Config() // with the cure, if the second half had one
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
	var vac *engine.VacuumState
	if sc.Proof == ProofDeadTuples {
		v, err := eng.Vacuum(ctx)
		if err != nil {
			return Summary{}, outage(err)
		}
		vac = &v
	}
	wl.Stop()
	leftOff := false
	if vac != nil {
		v, err := eng.Vacuum(ctx)
		if err != nil {
			return Summary{}, outage(err)
		}
		leftOff = v.AutovacuumOff
	}
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
		// A lease expiring just after a reap statement looked, or found
		// held by its holder then (a renewal or a commit in flight as it
		// ran out: SKIP LOCKED passes over it, and the lag counts from
		// then), is reclaimed by the next statement: it waits at most the
		// grace and the longest gap between statements, which holds the
		// interval and whatever delayed the reaper (a CPU it waited for, a
		// pass's other batches). See engine.Reaper.LagBound.
		ReclaimBoundMS: ms(wl.Reaper().LagBound()), ReaperHeld: rs.Held,
		Crashes: snap.Crashes, Pauses: snap.Pauses, EmptyPool: snap.EmptyPool,
		Conflicts: snap.Conflicts, Errors: errs, Audit: audit,
		LeasesLost: snap.LeasesLost, Transferred: snap.Transferred, OldHolderRejections: snap.OldHolderRejections,
		PastExpiry: snap.PastExpiry, AcksLost: snap.AcksLost, Replayed: snap.Replayed,
		DuplicatesFreshID: snap.DuplicatesFreshID, DuplicatesStableID: snap.DuplicatesStableID,
		Vacuum: vac, AutovacuumLeftOff: leftOff, PassedOverClaims: snap.PassedOver,
		Violations: []string{}, Expected: []string{},
	}
	if snap.RecoveryWait > 0 {
		// A crashed worker's ids come back once its lease has run out and
		// the reaper has passed: at least the wait, at most the reaper's lag more.
		s.MaxRecoveryMS = ms(snap.RecoveryWait + rs.MaxLag)
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
	s.judge(sc, cfg, audit)
	if notStaged != nil {
		s.Violations = append(s.Violations, fmt.Sprintf("the scenario's staged fault did not play out: %v", notStaged))
	}
	return s, nil
}

// judge sorts findings into violations and the failures the scenario is
// meant to show; a scenario that fails to show its failure is a violation too.
func (s *Summary) judge(sc Scenario, cfg Config, audit engine.AuditReport) {
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
	s.judgeStory(sc, cfg)
	sort.Strings(s.Expected)
}

// judgeStory checks that the stories of a lease's edges showed what they exist to show,
// each by its own figure.
func (s *Summary) judgeStory(sc Scenario, cfg Config) {
	fail := func(format string, args ...any) { s.Violations = append(s.Violations, fmt.Sprintf(format, args...)) }
	switch sc.Proof {
	case ProofTransfer:
		if s.Transferred == 0 {
			fail("no lease was transferred: the demo did not show the story")
		} else if cfg.Fencing && s.OldHolderRejections == 0 {
			fail("%d leases were transferred but no old holder's late commit was rejected", s.Transferred)
		}
	case ProofPastExpiry:
		if s.PastExpiry == 0 {
			fail("no work was committed past the database's expiry: the slow clock did not show")
		} else if cfg.Fencing && s.FencedRejections == 0 {
			fail("%d commits came past the expiry but the fence rejected none", s.PastExpiry)
		}
	case ProofDuplicates:
		if s.DuplicatesFreshID == 0 {
			fail("no retry with a fresh request id wrote twice: the demo did not show the failure")
		}
		if s.DuplicatesStableID > 0 {
			fail("%d retries with a stable request id wrote a second effect", s.DuplicatesStableID)
		}
		if sc.Fix != nil && s.Replayed == 0 {
			fail("no retry with a stable request id was answered from the ledger: the cure did not show")
		}
	case ProofFalseReclaim:
		if s.LeasesLost+s.FencedRejections == 0 {
			fail("no healthy worker lost its lease: the short TTL did not show")
		}
		if cfg.CrashRate == 0 && s.Crashes > 0 {
			fail("%d crashes in a story without any", s.Crashes)
		}
	case ProofRecovery:
		if s.Crashes == 0 {
			fail("no worker crashed: the long lease's slow recovery did not show")
		} else if s.MaxRecoveryMS < ms(cfg.TTL/2) {
			fail("crashed workers' ids came back within %.0f ms, under half the %v lease", s.MaxRecoveryMS, cfg.TTL)
		}
		if s.LeasesLost+s.FencedRejections > 0 {
			fail("%d leases lost and %d commits fenced under a lease far longer than the work", s.LeasesLost, s.FencedRejections)
		}
	case ProofStarvation:
		if s.PassedOverClaims == 0 {
			fail("no claim took a newer id while the report held older free ones: starvation did not show")
		}
	case ProofDeadTuples:
		switch v := s.Vacuum; {
		case v == nil || !v.AutovacuumOff:
			fail("autovacuum was not off for the pool during the run")
		case v.DeadTuples < max(s.Committed/2, 100):
			fail("only %d dead tuples after %d commits with autovacuum off: the vacuum tax did not show", v.DeadTuples, s.Committed)
		}
		if s.AutovacuumLeftOff {
			fail("autovacuum was left off for the pool after the run")
		}
	}
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
