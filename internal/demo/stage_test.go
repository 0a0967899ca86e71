package demo

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/workload"
)

// A scenario starts on a fresh pool of its size, with the counters, the
// leaked ids and the charts of the one before gone, and its keys logged.
func TestStagePlaysScenariosOnFreshPools(t *testing.T) {
	ctx, db := pgtest.Setup(t, 3000, pgtest.Options{MaxConns: 8})
	crash := workload.Scenarios[1] // crash-no-lease
	wl, err := workload.New(db.Engine, ScenarioConfig(crash, 1))
	if err != nil {
		t.Fatal(err)
	}
	wl.Start(ctx)
	t.Cleanup(wl.Stop)
	col, err := collector.New(ctx, collector.Config{DSN: pgtest.DSN(), Table: db.Schema + ".resource_pool", Workload: wl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.Close)
	st := &Stage{Pool: OneServer(engine.WrapPool(db.Pool), db.Engine), Workload: wl, Collector: col, Size: 2000, Rebuild: true}
	drain, err := workload.ScenarioByName("drain")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.PoolSize(drain); got != 200 {
		t.Fatalf("drain's pool at --pool-size 2000: %d, want a tenth", got)
	}

	// Crashes without leases leak ids, and the charts fill.
	pgtest.Eventually(t, "ids leaked", time.Minute, func() bool {
		if _, err := col.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		return wl.Snapshot().Leaked > 0
	})
	if len(col.Series(collector.SeriesLeaked)) == 0 {
		t.Fatal("no leaked series before the switch")
	}

	if err := st.Play(4); err != nil { // pause-with-fencing
		t.Fatal(err)
	}
	w := wl.Snapshot()
	if w.Leaked != 0 || w.Crashes != 0 || len(wl.LeakedLeases()) != 0 {
		t.Fatalf("after the switch: leaked %d crashes %d", w.Leaked, w.Crashes)
	}
	if cfg := wl.Config(); cfg.Lease != true || cfg.PauseRate == 0 || !cfg.KeepUp || cfg.CrashRate != 0 {
		t.Fatalf("pause-with-fencing config: %+v", cfg)
	}
	if n := len(col.Series(collector.SeriesLeaked)); n != 0 {
		t.Fatalf("%d leaked points survived the switch", n)
	}
	var total, ledger int64
	if err := db.Pool.QueryRow(ctx, "SELECT (SELECT count(*) FROM resource_pool), (SELECT count(*) FROM business_ledger)").Scan(&total, &ledger); err != nil {
		t.Fatal(err)
	}
	// The fresh pool has the asked size; the fleet restarted a moment ago,
	// so at most a few refills have landed.
	if total < 2000 || total > 2500 || ledger > 500 {
		t.Fatalf("fresh pool: %d ids, %d ledger rows", total, ledger)
	}
	// The next poll counts the fresh pool, not the old one (CONSUMED, the
	// rest of the statistics' live-tuple estimate, may lag a moment).
	s, err := col.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pool.Unused+s.Pool.Pending > 2600 || s.Pool.Unused < 1000 {
		t.Fatalf("the collector still counts the old pool: %+v", s.Pool)
	}

	// Knobs are logged; reset says so.
	cfg := wl.Config()
	cfg.Fencing = false
	if err := st.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	st.Reset()
	var texts []string
	for _, e := range col.Events() {
		texts = append(texts, e.Text)
	}
	all := strings.Join(texts, "\n")
	for _, want := range []string{"scenario 5 pause-with-fencing on a fresh pool of 2,000 ids", "fencing on → OFF", "counters, charts and alerts reset"} {
		if !strings.Contains(all, want) {
			t.Fatalf("events lack %q: %v", want, texts)
		}
	}
	if strings.Contains(all, "the pool is empty") {
		t.Fatalf("the rebuild's empty moment reached the events: %v", texts)
	}
	if err := st.Play(len(workload.Scenarios)); err == nil {
		t.Fatal("a scenario past the last was accepted")
	}

	// vacuum-off turns autovacuum off for the pool; the next scenario, or
	// the workload's stop, turns it back on.
	vacuumOff := func() bool {
		v, err := db.Engine.Vacuum(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v.AutovacuumOff
	}
	if err := st.Play(presetOf(t, "vacuum-off")); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "autovacuum off", 30*time.Second, vacuumOff)
	if err := st.Play(0); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "autovacuum back on after the next scenario", 30*time.Second, func() bool { return !vacuumOff() })
	if err := st.Play(presetOf(t, "vacuum-off")); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "autovacuum off again", 30*time.Second, vacuumOff)
	wl.Stop()
	if vacuumOff() {
		t.Fatal("autovacuum left off after the workload stopped")
	}
}

// presetOf is the index of a scenario in workload.Scenarios.
func presetOf(t *testing.T, name string) int {
	t.Helper()
	for i, sc := range workload.Scenarios {
		if sc.Name == name {
			return i
		}
	}
	t.Fatalf("no scenario %s", name)
	return -1
}

// On a pool pooltop did not create (the demo let onto it with
// --allow-writes) a scenario turns the knobs and empties nothing, and a
// fresh pool is refused.
func TestStageNeverEmptiesAPoolNotItsOwn(t *testing.T) {
	ctx, db := pgtest.Setup(t, 500, pgtest.Options{MaxConns: 4})
	wl, err := workload.New(db.Engine, ScenarioConfig(workload.Scenarios[0], 1))
	if err != nil {
		t.Fatal(err)
	}
	wl.Start(ctx)
	t.Cleanup(wl.Stop)
	col, err := collector.New(ctx, collector.Config{DSN: pgtest.DSN(), Table: db.Schema + ".resource_pool", Workload: wl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.Close)
	st := &Stage{Pool: OneServer(engine.WrapPool(db.Pool), db.Engine), Workload: wl, Collector: col}
	pgtest.Eventually(t, "a commit", 30*time.Second, func() bool { return wl.Snapshot().Committed > 0 })
	if err := st.Play(3); err != nil {
		t.Fatal(err)
	}
	if c := wl.Config(); c.Fencing || c.PauseRate == 0 {
		t.Fatalf("the scenario's knobs were not set: %+v", c)
	}
	var ledger int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM business_ledger").Scan(&ledger); err != nil || ledger == 0 {
		t.Fatalf("the ledger was emptied (%d rows, %v)", ledger, err)
	}
	if err := st.Fresh(); err == nil || !strings.Contains(err.Error(), "pooltop did not create it") {
		t.Fatalf("fresh pool on a pool not ours: %v", err)
	}
	// Nor is autovacuum turned off on it, by the scenario or by the knob.
	if err := st.Play(presetOf(t, "vacuum-off")); !errors.Is(err, errVacuumNotOurs) {
		t.Fatalf("vacuum-off on a pool not ours: %v", err)
	}
	c := wl.Config()
	c.Autovacuum = false
	if err := st.SetConfig(c); !errors.Is(err, errVacuumNotOurs) {
		t.Fatalf("autovacuum knob on a pool not ours: %v", err)
	}
	if v, err := db.Engine.Vacuum(ctx); err != nil || v.AutovacuumOff {
		t.Fatalf("autovacuum off on a pool not ours (%v)", err)
	}
	// Nor does the report hold its rows and the vacuum horizon there.
	if err := st.Play(presetOf(t, "starvation")); !errors.Is(err, errReportNotOurs) {
		t.Fatalf("starvation on a pool not ours: %v", err)
	}
	c = wl.Config()
	c.ShareHold = workload.ShareHoldOn
	if err := st.SetConfig(c); !errors.Is(err, errReportNotOurs) {
		t.Fatalf("report knob on a pool not ours: %v", err)
	}
}

// A fresh pool never sends a token back. A holder outside the demo (a
// `work` process, a lease by hand) with a live lease makes the reset refuse,
// leaving the pool and the workload as they were; once its lease is over
// the reset goes ahead, and its late commit with the old (id, token) is
// rejected: the ids are new, where RESTART IDENTITY gave the same id to a
// new owner at the same token 1 and the zombie's commit landed on it.
func TestFreshPoolNeverSendsTokensBack(t *testing.T) {
	ctx, db := pgtest.Setup(t, 200, pgtest.Options{MaxConns: 8})
	cfg := ScenarioConfig(workload.Scenarios[0], 1)
	cfg.Workers = 2
	wl, err := workload.New(db.Engine, cfg)
	if err != nil {
		t.Fatal(err)
	}
	wl.Start(ctx)
	t.Cleanup(wl.Stop)
	col, err := collector.New(ctx, collector.Config{DSN: pgtest.DSN(), Table: db.Schema + ".resource_pool", Workload: wl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.Close)
	st := &Stage{Pool: OneServer(engine.WrapPool(db.Pool), db.Engine), Workload: wl, Collector: col, Size: 200, Rebuild: true}

	outsider := engine.New(pgtest.Pool(t, db.Schema, pgtest.Options{AppName: "outsider"}))
	held, err := outsider.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "alice", TTL: time.Hour, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Fresh()
	if !errors.Is(err, engine.ErrResetRefused) || !strings.Contains(err.Error(), "alice") {
		t.Fatalf("fresh pool while alice holds a live lease: %v, want a refusal naming her", err)
	}
	if c := wl.Config(); c.Workers != 2 {
		t.Fatalf("after the refusal the workload runs %d workers, want its 2", c.Workers)
	}
	if _, err := outsider.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: held[0].ID, Token: held[0].Token, RequestID: "alice-1"}); err != nil {
		t.Fatalf("alice's commit after the refused reset: %v", err)
	}

	// A lease that has run out no longer holds the pool back; its holder
	// may still wake and commit.
	zombie, err := outsider.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "bob", TTL: time.Millisecond, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Over once no row holds bob's token under a live lease: it ran out, or
	// the workload's reaper took the id back (a new token, perhaps a new
	// live lease of a worker's).
	pgtest.Eventually(t, "bob's lease over", 10*time.Second, func() bool {
		var live bool
		err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM resource_pool
			WHERE id = $1 AND lease_token = $2 AND leased_until > clock_timestamp())`, zombie[0].ID, zombie[0].Token).Scan(&live)
		if err != nil {
			t.Fatal(err)
		}
		return !live
	})
	if err := st.Fresh(); err != nil {
		t.Fatal(err)
	}
	var lowest int64
	if err := db.Pool.QueryRow(ctx, "SELECT min(id) FROM resource_pool").Scan(&lowest); err != nil || lowest <= zombie[0].ID {
		t.Fatalf("the fresh pool starts at id %d (%v): ids before the reset (bob's %d) came back", lowest, err, zombie[0].ID)
	}
	// Every id of the fresh pool taken at token 1, as a new owner would.
	if _, err := db.Pool.Exec(ctx, "UPDATE resource_pool SET status = 'PENDING', holder = 'new-owner', lease_token = 1, leased_until = now() + interval '1 hour'"); err != nil {
		t.Fatal(err)
	}
	_, err = outsider.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: zombie[0].ID, Token: zombie[0].Token, RequestID: "bob-late"})
	if !errors.Is(err, engine.ErrNotFound) {
		t.Fatalf("bob's late commit from before the reset: %v; want it rejected (no such id)", err)
	}
}

// Grow seeds the rest of a new pool behind the first figures: every id
// arrives with an identifier of its own, the figures start afresh (those
// read while rows were inserted are void) and the event log says so; a
// Grow stopped by its context logs nothing.
func TestGrowSeedsTheRestBehindTheFirstFigures(t *testing.T) {
	ctx, db := pgtest.Setup(t, 3000, pgtest.Options{MaxConns: 4})
	wl, err := workload.New(db.Engine, ScenarioConfig(workload.Scenarios[0], 1))
	if err != nil {
		t.Fatal(err)
	}
	col, err := collector.New(ctx, collector.Config{DSN: pgtest.DSN(), Table: db.Schema + ".resource_pool", Workload: wl})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.Close)
	st := &Stage{Pool: OneServer(engine.WrapPool(db.Pool), db.Engine), Workload: wl, Collector: col, Rebuild: true}
	if _, err := col.Poll(ctx); err != nil {
		t.Fatal(err)
	}
	if len(col.Series(collector.SeriesLeaked)) == 0 {
		t.Fatal("no series after the first poll")
	}
	if err := st.Grow(ctx, 2500, 1000); err != nil {
		t.Fatal(err)
	}
	var rows, names int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT identifier) FROM resource_pool").Scan(&rows, &names); err != nil {
		t.Fatal(err)
	}
	if rows != 5500 || names != rows {
		t.Fatalf("after Grow: %d rows, %d identifiers, want 5,500 of each", rows, names)
	}
	if n := len(col.Series(collector.SeriesLeaked)); n != 0 {
		t.Fatalf("after Grow the charts hold %d points, want them started afresh", n)
	}
	seeded := func() int {
		n := 0
		for _, e := range col.Events() {
			if e.Kind == collector.EventScenario && strings.Contains(e.Text, "seeded the rest of the pool: 2,500 more ids") {
				n++
			}
		}
		return n
	}
	if seeded() != 1 {
		t.Fatalf("events after Grow: %+v", col.Events())
	}
	s, err := col.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pool.Unused != 5500 {
		t.Fatalf("first poll after Grow: %d UNUSED, want 5,500", s.Pool.Unused)
	}

	stopped, cancel := context.WithCancel(ctx)
	cancel()
	if err := st.Grow(stopped, 100, 100); err == nil {
		t.Fatal("Grow on a stopped context returned no error")
	}
	if seeded() != 1 || len(col.Events()) != 1 {
		t.Fatalf("a stopped Grow logged: %+v", col.Events())
	}
}
