package workload_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/internal/startstop/startstoptest"
	"github.com/pooltop-dev/pooltop/workload"
)

// The database starts before the tests and stops after them; goleak then
// checks that nothing was left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Runner{M: m}) }

type bundle struct {
	ctx context.Context
	eng *engine.Engine
}

func setup(t *testing.T, size int) *bundle {
	t.Helper()
	ctx, db := pgtest.Setup(t, size, pgtest.Options{MaxConns: 40})
	return &bundle{ctx: ctx, eng: db.Engine}
}

// newWorkload builds a workload with cfg on the test's pool, not started;
// it is stopped at cleanup.
func (b *bundle) newWorkload(t *testing.T, cfg workload.Config) *workload.Workload {
	t.Helper()
	wl, err := workload.New(b.eng, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wl.Stop)
	return wl
}

func (b *bundle) audit(t *testing.T) engine.AuditReport {
	t.Helper()
	a, err := b.eng.Audit(b.ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestKnobsChangeWhileRunningAndStopCleanly(t *testing.T) {
	b := setup(t, 20000)
	cfg := workload.Defaults()
	cfg.Workers, cfg.Task, cfg.TTL = 4, 30*time.Second, time.Minute // every worker sits on its lease
	wl := b.newWorkload(t, cfg)
	wl.Start(b.ctx)
	pending := func() int64 { return b.audit(t).Pending }
	pgtest.Eventually(t, "4 workers holding leases", 10*time.Second, func() bool { return wl.Snapshot().Workers == 4 && pending() == 4 })

	cfg.Workers = 1
	if err := wl.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	// The three stopped workers release their leases on the way out.
	pgtest.Eventually(t, "down to 1 worker", 10*time.Second, func() bool { return wl.Snapshot().Workers == 1 && pending() == 1 })
	if s := wl.Snapshot(); s.Released != 3 {
		t.Fatalf("released %d, want 3", s.Released)
	}

	cfg.Workers, cfg.Task = 6, 0
	if err := wl.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "6 workers cycling", 10*time.Second, func() bool { s := wl.Snapshot(); return s.Workers == 6 && s.Committed > 100 })

	bad := cfg
	bad.Workers = workload.MaxWorkers + 1
	if err := wl.SetConfig(bad); err == nil {
		t.Fatal("a worker count above the limit was accepted")
	}
	bad = cfg
	bad.CrashRate = 1.5
	if err := wl.SetConfig(bad); err == nil {
		t.Fatal("a crash rate above 1 was accepted")
	}
	wl.Stop()
	a := b.audit(t)
	if len(a.Violations) != 0 || a.Pending != 0 {
		t.Fatalf("after a clean stop: %d PENDING, violations %v", a.Pending, a.Violations)
	}
	if s := wl.Snapshot(); s.Committed != a.Consumed || s.Workers != 0 {
		t.Fatalf("workload counted %d commits, database has %d CONSUMED; %d workers left", s.Committed, a.Consumed, s.Workers)
	}
}

func TestStrategyAndFencingKnobsApplyWithinACycle(t *testing.T) {
	b := setup(t, 50000)
	cfg := workload.Defaults()
	cfg.Workers, cfg.Task = 4, 0
	wl := b.newWorkload(t, cfg)
	wl.Start(b.ctx)
	pgtest.Eventually(t, "cycles", 10*time.Second, func() bool { return wl.Snapshot().Committed > 50 })
	cfg.Strategy = engine.Optimistic
	cfg.Workers = 8
	if err := wl.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "optimistic conflicts", 20*time.Second, func() bool { return wl.Snapshot().Conflicts > 0 })
	// Reset, with no worker running so that nothing counts meanwhile:
	// every counter starts again from zero. Workers told to stop go on
	// counting until they exit: the counters never dip on the way.
	running := wl.Snapshot()
	cfg.Workers = 0
	if err := wl.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "workers stopped", 10*time.Second, func() bool { s := wl.Snapshot(); return s.Workers == 0 && s.Stopping == 0 })
	before := wl.Snapshot()
	if before.Committed < running.Committed || before.AcquireCalls < running.AcquireCalls {
		t.Fatalf("counters dipped as workers stopped: %d commits, %d acquire calls while running, %d and %d after",
			running.Committed, running.AcquireCalls, before.Committed, before.AcquireCalls)
	}
	wl.Reset()
	if s := wl.Snapshot(); before.Committed == 0 || before.Conflicts == 0 || s.Committed != 0 || s.Conflicts != 0 {
		t.Fatalf("reset did not restart the counters: %d commits and %d conflicts before, %d and %d after",
			before.Committed, before.Conflicts, s.Committed, s.Conflicts)
	}
	cfg.Strategy, cfg.Lease, cfg.Workers = engine.SkipLocked, false, 8
	if err := wl.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "commits without leases", 10*time.Second, func() bool { return wl.Snapshot().Committed > 50 })
	wl.Stop()
	if a := b.audit(t); len(a.Violations) != 0 {
		t.Fatalf("violations: %v", a.Violations)
	}
}

func TestRefillTopsUpThePool(t *testing.T) {
	b := setup(t, 0)
	cfg := workload.Defaults()
	cfg.Workers, cfg.Refill = 0, 2000
	wl := b.newWorkload(t, cfg)
	wl.Start(b.ctx)
	// The counter moves just after the rows land: poll both.
	pgtest.Eventually(t, "refilled ids", 10*time.Second, func() bool { return b.audit(t).Unused >= 400 && wl.Snapshot().Refilled >= 400 })
}

// chaos runs a scenario briefly and returns its summary.
func chaos(t *testing.T, name string, d time.Duration) workload.Summary {
	return chaosWith(t, name, d, nil)
}

// chaosWith is chaos with some of the scenario's knobs overridden. Each
// run shows its story whatever the machine's speed: the workload stages
// the scenario's fault on the first claim (a staged pause lasts until its
// id went to another holder), and Chaos waits for it to play out.
func chaosWith(t *testing.T, name string, d time.Duration, override func(*workload.Config)) workload.Summary {
	return chaosOnce(t, setup(t, 0), name, d, override)
}

func chaosOnce(t *testing.T, b *bundle, name string, d time.Duration, override func(*workload.Config)) workload.Summary {
	sc, err := workload.ScenarioByName(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.eng.Seed(b.ctx, 30000); err != nil {
		t.Fatal(err)
	}
	s, err := workload.Chaos(b.ctx, b.eng, sc, d, 7, override, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %.1f s, cycles %d committed %d fenced %d double %d crashes %d pauses %d lost %d reclaimed %d lag %.0f/%.0f ms expected %v violations %v",
		name, s.DurationS, s.Cycles, s.Committed, s.FencedRejections, s.DoubleFinalizations, s.Crashes, s.Pauses, s.LostIDs,
		s.Reclaimed, s.MaxReclaimLagMS, s.ReclaimBoundMS, s.Expected, s.Violations)
	return s
}

func TestChaosCrashWithLeaseRecoversEveryID(t *testing.T) {
	s := chaos(t, "crash-with-lease", 3*time.Second)
	if !s.OK() || s.Crashes == 0 || s.LostIDs != 0 || s.Reclaimed < s.Crashes {
		t.Fatalf("crash-with-lease: %+v", s)
	}
}

func TestChaosCrashNoLeaseLeaks(t *testing.T) {
	s := chaos(t, "crash-no-lease", 3*time.Second)
	if !s.OK() || s.LostIDs == 0 || s.LostIDs != s.Audit.PendingUnleased || s.Reclaimed != 0 {
		t.Fatalf("crash-no-lease: %+v", s)
	}
}

// A story does not depend on chance: with its fault's rate near zero, the
// staged fault alone shows it, once, in a run of one second.
func TestChaosStagesItsStory(t *testing.T) {
	const rare = 1e-9
	for _, tc := range []struct {
		name  string
		rare  func(*workload.Config)
		shown func(s workload.Summary) bool
	}{
		{"pause-no-fencing", func(c *workload.Config) { c.PauseRate = rare },
			func(s workload.Summary) bool { return s.Pauses == 1 && s.DoubleFinalizations == 1 }},
		{"pause-with-fencing", func(c *workload.Config) { c.PauseRate = rare },
			func(s workload.Summary) bool {
				return s.Pauses == 1 && s.FencedRejections == 1 && s.DoubleFinalizations == 0
			}},
		{"fence-in-app", func(c *workload.Config) { c.PauseRate = rare },
			func(s workload.Summary) bool { return s.Pauses == 1 && s.DoubleFinalizations == 1 }},
		{"crash-with-lease", func(c *workload.Config) { c.CrashRate = rare },
			func(s workload.Summary) bool { return s.Crashes == 1 && s.Reclaimed >= 1 && s.LostIDs == 0 }},
		{"transfer", func(c *workload.Config) { c.TransferRate = rare },
			func(s workload.Summary) bool { return s.Transferred == 1 && s.OldHolderRejections == 1 }},
		// The cure at half time stages a lost answer again, with a stable id.
		{"lost-ack", func(c *workload.Config) { c.AckLoss = rare },
			func(s workload.Summary) bool {
				return s.DuplicatesFreshID == 1 && s.Replayed == 1 && s.DuplicatesStableID == 0
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := chaosWith(t, tc.name, time.Second, tc.rare)
			if !s.OK() || !tc.shown(s) {
				t.Fatalf("%s with its fault's rate at %v: %+v", tc.name, rare, s)
			}
		})
	}
}

func TestChaosPauseWithFencingRejectsZombies(t *testing.T) {
	s := chaos(t, "pause-with-fencing", 5*time.Second)
	if !s.OK() || s.Pauses == 0 || s.FencedRejections == 0 || s.DoubleFinalizations != 0 {
		t.Fatalf("pause-with-fencing: %+v", s)
	}
	// Every acquire, commit, release and reap of the run, checked against
	// the lease register: with the fence, some order explains every id.
	if h := s.History; h == nil || !h.Linearizable || h.Ops < int(s.Committed) || h.IDs == 0 {
		t.Fatalf("pause-with-fencing: history %+v", s.History)
	}
}

func TestChaosPauseNoFencingDoubleFinalizes(t *testing.T) {
	s := chaos(t, "pause-no-fencing", 5*time.Second)
	if !s.OK() || s.DoubleFinalizations == 0 || len(s.Expected) == 0 {
		t.Fatalf("pause-no-fencing: %+v", s)
	}
	// Without the fence, zombies commit stale tokens: the history check
	// must name those ids.
	if h := s.History; h == nil || h.Linearizable || len(h.Bad) == 0 {
		t.Fatalf("pause-no-fencing: the history check passed a run with %d double finalizations: %+v", s.DoubleFinalizations, s.History)
	}
}

// The stories of the shifted digits, each run briefly and judged by its own figure.

func TestChaosFenceInAppDoubleFinalizes(t *testing.T) {
	s := chaos(t, "fence-in-app", 5*time.Second)
	if !s.OK() || s.DoubleFinalizations == 0 || s.Pauses == 0 || len(s.Expected) == 0 {
		t.Fatalf("fence-in-app: %+v", s)
	}
}

func TestChaosLocalClockWorksPastExpiryAndIsFenced(t *testing.T) {
	s := chaos(t, "local-clock", 4*time.Second)
	t.Logf("past expiry %d", s.PastExpiry)
	if !s.OK() || s.PastExpiry == 0 || s.FencedRejections == 0 || s.DoubleFinalizations != 0 {
		t.Fatalf("local-clock: %+v", s)
	}
}

func TestChaosTransferFencesTheOldHolder(t *testing.T) {
	s := chaos(t, "transfer", 3*time.Second)
	t.Logf("transferred %d, old holders rejected %d", s.Transferred, s.OldHolderRejections)
	if !s.OK() || s.Transferred == 0 || s.OldHolderRejections != s.Transferred || s.DoubleFinalizations != 0 {
		t.Fatalf("transfer: %+v", s)
	}
}

// Claimed without a lease: with fencing off, a lease that ran out under
// a commit slowed by a busy machine let a second holder in, and its late
// commit was a double finalization that no lost answer caused (one CI run:
// 6 doubles, 2 of them duplicates). Without expiry every double is a
// retried commit's.
func TestChaosLostAckDuplicatesOnlyWithFreshIDs(t *testing.T) {
	s := chaosWith(t, "lost-ack", 4*time.Second, func(c *workload.Config) { c.Lease = false })
	t.Logf("acks lost %d, duplicates fresh %d stable %d, replayed %d", s.AcksLost, s.DuplicatesFreshID, s.DuplicatesStableID, s.Replayed)
	if !s.OK() || s.DuplicatesFreshID == 0 || s.DuplicatesStableID != 0 || s.Replayed == 0 || s.DoubleFinalizations != s.DuplicatesFreshID {
		t.Fatalf("lost-ack: %+v", s)
	}
}

func TestChaosShortLeaseLosesHealthyLeases(t *testing.T) {
	s := chaos(t, "short-lease", 3*time.Second)
	t.Logf("leases lost %d", s.LeasesLost)
	if !s.OK() || s.Crashes != 0 || s.LeasesLost+s.FencedRejections == 0 || s.DoubleFinalizations != 0 {
		t.Fatalf("short-lease: %+v", s)
	}
}

// The long lease at 3 s instead of 30 s, so that the run's catch-up (a
// TTL) stays short; the story is the same: recovery takes the lease.
func TestChaosLongLeaseRecoversSlowly(t *testing.T) {
	s := chaosWith(t, "long-lease", 3*time.Second, func(c *workload.Config) { c.TTL = 3 * time.Second })
	t.Logf("max recovery %.0f ms", s.MaxRecoveryMS)
	if !s.OK() || s.Crashes == 0 || s.MaxRecoveryMS < 1500 || s.LostIDs != 0 || s.LeasesLost != 0 {
		t.Fatalf("long-lease: %+v", s)
	}
}

func TestChaosVacuumOffPilesUpDeadTuples(t *testing.T) {
	s := chaos(t, "vacuum-off", 3*time.Second)
	if s.Vacuum != nil {
		t.Logf("dead tuples %d after %d commits", s.Vacuum.DeadTuples, s.Committed)
	}
	if !s.OK() || s.Vacuum == nil || !s.Vacuum.AutovacuumOff || s.AutovacuumLeftOff {
		t.Fatalf("vacuum-off: %+v", s)
	}
}

// A report holds the lowest free ids FOR SHARE: claims pass over them,
// and it never holds a row a claim took (which would block that holder's
// commit and, held past the lease, its reaping: before the report read in
// REPEATABLE READ, half of the 15 s runs ended with leases unreaped).
func TestChaosStarvationPassesOverHeldIDs(t *testing.T) {
	s := chaos(t, "starvation", 4*time.Second)
	t.Logf("claims that passed over held ids %d", s.PassedOverClaims)
	if !s.OK() || s.PassedOverClaims == 0 || s.Errors != 0 || s.ExpiredPending != 0 {
		t.Fatalf("starvation: %+v", s)
	}
}

// The report starts when its knob turns on and ends, its transaction with
// it, when the knob turns off, while the workload runs on.
func TestReportFollowsItsKnob(t *testing.T) {
	ctx, db := pgtest.Setup(t, 5000, pgtest.Options{MaxConns: 40})
	cfg := workload.Defaults()
	cfg.Workers, cfg.Task = 2, time.Millisecond
	wl, err := workload.New(db.Engine, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wl.Stop)
	wl.Start(ctx)
	holding := func() bool { // a session of the pool idle in a transaction: the report's hold
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()
AND state = 'idle in transaction' AND query LIKE '%FOR SHARE SKIP LOCKED'`).Scan(&n)
		return err == nil && n > 0
	}
	cfg.ShareHold = time.Minute
	if err := wl.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the report holds free ids", 10*time.Second, func() bool { return wl.Snapshot().Reports > 0 && holding() })
	cfg.ShareHold = 0
	if err := wl.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the report ends its hold once the knob is off", 10*time.Second, func() bool { return !holding() })
	before := wl.Snapshot().Committed
	pgtest.Eventually(t, "the workers go on", 10*time.Second, func() bool { return wl.Snapshot().Committed > before })
}

func TestScenarioNames(t *testing.T) {
	if _, err := workload.ScenarioByName("nope"); err == nil {
		t.Fatal("unknown scenario accepted")
	}
	keys := map[string]string{}
	for _, sc := range workload.Scenarios {
		if err := sc.Config(1).Validate(); err != nil {
			t.Errorf("%s: %v", sc.Name, err)
		}
		if other, dup := keys[sc.Key]; sc.Key == "" || dup {
			t.Errorf("%s: key %q (also %s)", sc.Name, sc.Key, other)
		}
		keys[sc.Key] = sc.Name
	}
}

// The workload follows the one life cycle: stopped before it starts,
// started and stopped from several goroutines at once, and started again
// after a stop, it runs one fleet at a time, leaks no goroutine (goleak in
// TestMain) and leaves the pool audited clean.
func TestWorkloadStartStopRestart(t *testing.T) {
	b := setup(t, 50_000)
	cfg := workload.Defaults()
	cfg.Workers, cfg.Task = 4, time.Millisecond
	wl := b.newWorkload(t, cfg)
	wl.Stop() // before Start
	startstoptest.Stress(4, 10, func() { wl.Start(b.ctx) }, wl.Stop)
	wl.Stop()
	before := wl.Snapshot().Committed
	wl.Start(b.ctx)
	pgtest.Eventually(t, "commits after a restart", 30*time.Second, func() bool { return wl.Snapshot().Committed > before+10 })
	wl.Stop()
	if s := wl.Snapshot(); s.Workers != 0 {
		t.Fatalf("%d workers after Stop", s.Workers)
	}
	if a := b.audit(t); len(a.Violations) != 0 {
		t.Fatalf("violations after restarts: %v", a.Violations)
	}
}

// A fleet shrunk and grown again faster than its workers leave, then
// stopped: more workers end than the exit reports channel holds (running
// and leaving together exceed MaxWorkers), and Stop must still return with
// every worker gone and the pool audited clean.
func TestResizeThenStopWithMoreLeavingThanRunning(t *testing.T) {
	// A peer holds the first rows: blocking claims wait behind it until it
	// rolls back (a lock timeout longer than the test: with the engine's
	// 2 s, a slow machine saw every leaving worker gone before the new
	// ones ran), and the connections they hold keep the others waiting
	// for one, so that leaving workers leave only when the peer is done.
	ctx, db := pgtest.Setup(t, 1000, pgtest.Options{MaxConns: 40, LockTimeout: 2 * time.Minute})
	b := &bundle{ctx: ctx, eng: db.Engine}
	peer := pgtest.PeerTx(t, ctx, db.Schema)
	if _, err := peer.Exec(ctx, "SELECT id FROM resource_pool ORDER BY id LIMIT 10 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	cfg := workload.Defaults()
	cfg.Workers, cfg.Task, cfg.Strategy = workload.MaxWorkers, 0, engine.Blocking
	wl := b.newWorkload(t, cfg)
	wl.Start(b.ctx)
	pgtest.Eventually(t, "the fleet up", 30*time.Second, func() bool { return wl.Snapshot().Workers == workload.MaxWorkers })
	for _, n := range []int{0, workload.MaxWorkers} {
		cfg.Workers = n
		if err := wl.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		pgtest.Eventually(t, fmt.Sprintf("%d workers running", n), 30*time.Second, func() bool { return wl.Snapshot().Workers == n })
	}
	pgtest.Eventually(t, "more workers running and leaving than MaxWorkers", 30*time.Second, func() bool {
		s := wl.Snapshot()
		return s.Workers+s.Stopping > workload.MaxWorkers
	})
	stopped := make(chan struct{})
	go func() { wl.Stop(); close(stopped) }()
	if err := peer.Rollback(ctx); err != nil { // the waits end: every worker reports its exit at once
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatalf("Stop did not return: workers blocked reporting their exit (%+v)", wl.Snapshot())
	}
	if s := wl.Snapshot(); s.Workers != 0 || s.Stopping != 0 {
		t.Fatalf("after Stop: %d running, %d leaving", s.Workers, s.Stopping)
	}
	if a := b.audit(t); len(a.Violations) != 0 {
		t.Fatalf("violations: %v", a.Violations)
	}
}

// A keep-up producer adds back exactly what the workers consumed: once the
// fleet stops, the ids refilled equal the ids committed, and UNUSED is
// where it started (no task fails, nothing crashes).
func TestKeepUpRefillsWhatIsConsumed(t *testing.T) {
	b := setup(t, 5000)
	cfg := workload.Defaults()
	cfg.Workers, cfg.Task, cfg.KeepUp = 4, time.Millisecond, true
	wl := b.newWorkload(t, cfg)
	wl.Start(b.ctx)
	pgtest.Eventually(t, "some commits", 30*time.Second, func() bool { return wl.Snapshot().Committed > 500 })
	cfg.Workers = 0
	if err := wl.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the fleet stopped and the producer caught up", 30*time.Second, func() bool {
		s := wl.Snapshot()
		return s.Workers == 0 && s.Stopping == 0 && s.Refilled == s.Committed
	})
	if a := b.audit(t); a.Unused != 5000 || a.Pending != 0 {
		t.Fatalf("UNUSED %d, PENDING %d after a keep-up run, want the 5,000 it started with and none held", a.Unused, a.Pending)
	}
}
