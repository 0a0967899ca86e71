package collector_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/goleak"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// The database starts before the tests and stops after them; goleak then
// checks that nothing was left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Runner{M: m}) }

type bundle struct {
	ctx    context.Context
	schema string
	conn   *pgx.Conn // a peer session on the schema
	eng    *engine.Engine
}

func setup(t *testing.T, size int) *bundle {
	t.Helper()
	ctx, db := pgtest.Setup(t, size, pgtest.Options{MaxConns: 4})
	return &bundle{ctx: ctx, schema: db.Schema, conn: pgtest.Conn(t, db.Schema), eng: db.Engine}
}

func (b *bundle) collector(t *testing.T, cfg collector.Config) *collector.Collector {
	t.Helper()
	cfg.Table = cmp.Or(cfg.Table, b.schema+".resource_pool")
	return newCollector(t, b.ctx, cfg)
}

// newCollector opens a collector with cfg, on the test database unless cfg
// names another; it is closed at cleanup.
func newCollector(tb testing.TB, ctx context.Context, cfg collector.Config) *collector.Collector {
	tb.Helper()
	cfg.DSN = cmp.Or(cfg.DSN, pgtest.DSN())
	c, err := collector.New(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(c.Close)
	return c
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.conn.Exec(b.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// pollUntil polls until cond holds for a snapshot, with a deadline.
func pollUntil(t *testing.T, c *collector.Collector, what string, cond func(collector.Snapshot) bool) collector.Snapshot {
	t.Helper()
	return pollWithin(t, c, what, 15*time.Second, cond)
}

// pollWithin is pollUntil with its own deadline, for figures that wait on
// the server (table statistics an idle backend flushes only every 10 s on
// PostgreSQL 15).
func pollWithin(t *testing.T, c *collector.Collector, what string, within time.Duration, cond func(collector.Snapshot) bool) collector.Snapshot {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		s, err := c.Poll(context.Background())
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" && time.Now().Before(deadline) {
			// The collector gives way to a lock held a moment (lock_timeout):
			// autovacuum's truncation of the table's tail takes ACCESS
			// EXCLUSIVE. Poll again.
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last snapshot %+v, live %d dead %d worst %+v, lock waiters %d", what, s.Pool, s.LiveTuples, s.DeadTuples, s.WorstPartition, s.LockWaiters)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func has(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func TestCountsOfAKnownPool(t *testing.T) {
	b := setup(t, 1000)
	b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id <= 300`)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1,
		leased_until = now() + interval '1 hour', updated_at = now() WHERE id BETWEEN 301 AND 340`)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1,
		leased_until = now() - interval '10 minutes', updated_at = now() - interval '20 minutes' WHERE id BETWEEN 341 AND 350`)
	c := b.collector(t, collector.Config{})
	s := pollUntil(t, c, "live tuples counted", func(s collector.Snapshot) bool { return s.LiveTuples == 1000 })
	p := s.Pool
	if p.Unused != 650 || p.Pending != 50 || p.Expired != 10 || p.ExpiredOld != 10 || p.Stuck != 10 || p.Consumed != 300 {
		t.Fatalf("pool %+v, want unused 650 pending 50 expired 10 stuck 10 consumed 300", p)
	}
	if has(p.Estimated, "unused") || has(p.Estimated, "pending") || has(p.Estimated, "consumed") || p.Total != 1000 {
		t.Fatalf("estimated %v, total %d: every count is exact here, consumed from the rows counted less the others", p.Estimated, p.Total)
	}
	if p.OldestPendingS == nil || *p.OldestPendingS < 10*60-5 || *p.OldestPendingS > 10*60+5 { // since the oldest lease expired
		t.Fatalf("oldest pending %v, want about 10 minutes", *p.OldestPendingS)
	}
	var reaper *collector.Alert
	for i := range s.Alerts {
		if s.Alerts[i].Name == "reaper_lag" {
			reaper = &s.Alerts[i]
		}
	}
	if reaper == nil || !reaper.Active {
		t.Fatalf("reaper_lag alert not raised: %+v", s.Alerts)
	}
}

// The rolling recount stays exact where claims happen and converges on a
// pool too large to count in one poll.
func TestRollingUnusedCountConverges(t *testing.T) {
	b := setup(t, 60000)
	b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id % 3 = 0`)
	c := b.collector(t, collector.Config{CountBudget: time.Nanosecond}) // one chunk per poll beyond the head
	want := int64(60000 - 20000)
	// 60,000 ids make 59 chunks: after 60 polls of one chunk each every
	// chunk has been counted once, and the sum is exact.
	for i := 0; i < 60; i++ {
		if _, err := c.Poll(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	pollUntil(t, c, "full sweep", func(s collector.Snapshot) bool { return s.Pool.Unused == want })
	// Claim at the head: the next poll sees it at once.
	b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id IN (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 100)`)
	s, err := c.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pool.Unused != want-100 {
		t.Fatalf("unused %d after claiming 100 at the head, want %d", s.Pool.Unused, want-100)
	}
}

// The lowest UNUSED id is looked for from a floor (the lower of the lowest
// UNUSED id and the lowest id of a live lease, at the previous poll): leases
// released below the head are counted at the next poll, and ids put back by
// hand below the floor, which the lease protocol never does, at the next
// re-anchoring.
func TestUnusedHeadFloor(t *testing.T) {
	const rows = collector.ExactRows + 2000 // past the size counted whole at every poll
	b := setup(t, rows)
	b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id <= 300`)
	c := b.collector(t, collector.Config{})
	pollUntil(t, c, "an exact count", func(s collector.Snapshot) bool { return s.Pool.Unused == rows-300 })
	// 60 live leases: few enough for the lowest of their ids to be read.
	ls, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "t", TTL: time.Minute, N: 60})
	if err != nil || len(ls) != 60 || ls[0].ID != 301 {
		t.Fatalf("acquire: %d leases from id %v, %v", len(ls), ls, err)
	}
	poll := func(want int64, when string) {
		t.Helper()
		s, err := c.Poll(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.Pool.Unused != want {
			t.Fatalf("%s: unused %d, want %d", when, s.Pool.Unused, want)
		}
	}
	poll(rows-360, "ids 301-360 leased") // floor: 301, the lowest id of a live lease
	// Released leases return below the lowest UNUSED id (361).
	for _, l := range ls[:50] {
		if _, err := b.eng.LeaseRelease(b.ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: l.Token}); err != nil {
			t.Fatal(err)
		}
	}
	poll(rows-310, "50 leases released")
	poll(rows-310, "nothing changed") // freed leases make the next poll look from the start: this one sets the floor again
	// By hand, CONSUMED ids become UNUSED below the floor: not seen until the
	// scan starts from the beginning again.
	b.exec(t, `UPDATE resource_pool SET status = 'UNUSED' WHERE id > 100 AND id <= 120`)
	poll(rows-310, "20 ids put back by hand, before re-anchoring")
	collector.SetReanchor(c, time.Nanosecond)
	poll(rows-290, "20 ids put back by hand, after re-anchoring")
}

// A fresh collector seeks the lowest UNUSED id by windows of ids over
// several polls when one statement's time runs out first (here it opens
// one window a statement, of 1,024 ids after the first, and after 10
// polls reads the rest at once: the dead entries claims left at the head of the
// index cost a new backend tens of microseconds a page): until it finds
// it, UNUSED is an estimate, and then exact. Ids put back by hand below
// the floor are found by the next seek from the start, a window a poll.
func TestTheLowestUnusedIdIsSoughtByWindows(t *testing.T) {
	const rows = 120_000
	b := setup(t, rows)
	// The head: 70,000 ids claimed, their entries dead in the index.
	b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id <= 70000`)
	c := b.collector(t, collector.Config{})
	collector.SetSeekTime(c, time.Nanosecond)
	s, err := c.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !collector.Seeking(c) || !slices.Contains(s.Pool.Estimated, "unused") || s.Pool.Counted == nil || *s.Pool.Counted != 0 {
		t.Fatalf("poll 1: seeking %v, estimated %v, counted %v: the seek's first window (16,384 ids) cannot reach id 70,001", collector.Seeking(c), s.Pool.Estimated, s.Pool.Counted)
	}
	polls := 1
	for collector.Seeking(c) {
		if polls++; polls > 12 {
			t.Fatal("the seek did not reach id 70,001 in 12 polls: after 10 it reads the rest at once")
		}
		if s, err = c.Poll(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The poll that found it counted from it: the chunks not counted yet
	// are taken as dense as those that were (none of them is taken for
	// empty).
	if off := math.Abs(float64(s.Pool.Unused-(rows-70000))) / (rows - 70000); off > 0.05 {
		t.Fatalf("the poll that ended the seek: unused %d, truth %d", s.Pool.Unused, rows-70000)
	}
	if polls < 3 {
		t.Fatalf("the seek ended at poll %d: a window a statement cannot cover 70,000 ids so soon", polls)
	}
	pollUntil(t, c, "an exact count", func(s collector.Snapshot) bool { return s.Pool.Unused == rows-70000 })
	// By hand, CONSUMED ids become UNUSED deep below the floor.
	b.exec(t, `UPDATE resource_pool SET status = 'UNUSED' WHERE id > 50000 AND id <= 50020`)
	collector.SetReanchor(c, time.Nanosecond)
	pollUntil(t, c, "the ids put back by hand", func(s collector.Snapshot) bool { return s.Pool.Unused == rows-70000+20 })
}

// The sweep covers the whole id range even while the head moves faster than
// it, and the count stays exact: the upper half of this pool is sparser than
// the lower, so taking the chunks never counted as dense as the others
// would be off (22,270 for 22,000 when the sweep followed the head).
func TestSweepCoversARangeTheHeadRunsThrough(t *testing.T) {
	b := setup(t, 60000)
	b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id > 30000 AND id % 3 = 0`)
	c := b.collector(t, collector.Config{CountBudget: time.Nanosecond}) // one chunk swept per poll
	var s collector.Snapshot
	var want int64
	for i := 0; i < 35; i++ {
		// The head moves about a chunk a poll (800 of 1,024 ids), faster than
		// the sweep could follow it upwards; after 35 polls it is still in the
		// dense lower half.
		b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id IN (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 800)`)
		var err error
		if s, err = c.Poll(b.ctx); err != nil {
			t.Fatal(err)
		}
		if err := b.conn.QueryRow(b.ctx, `SELECT count(*) FROM resource_pool WHERE status = 'UNUSED'`).Scan(&want); err != nil {
			t.Fatal(err)
		}
	}
	if s.Pool.Unused != want {
		t.Fatalf("after 35 polls with the head moving 800 ids a poll: unused %d, want %d", s.Pool.Unused, want)
	}
}

func TestLockWaitsAndBlockingTree(t *testing.T) {
	b := setup(t, 10)
	tx := pgtest.PeerTx(t, b.ctx, b.schema)
	var holderPID int32
	if err := tx.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "UPDATE resource_pool SET updated_at = now() WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	waiter := pgtest.Conn(t, b.schema)
	var waiterPID int32
	if err := waiter.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&waiterPID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(b.ctx, "UPDATE resource_pool SET updated_at = now() WHERE id = 1")
		done <- err
	}()
	c := b.collector(t, collector.Config{Alerts: collector.AlertConfig{LockWait: 100 * time.Millisecond, LockWaitFor: 100 * time.Millisecond, Hold: time.Second}})
	s := pollUntil(t, c, "a waiter past 150 ms", func(s collector.Snapshot) bool { return s.LockWaiters == 1 && s.LockWaitMaxMS > 150 })
	w := s.Waiters[0]
	if w.PID != waiterPID || len(w.BlockedBy) != 1 || w.BlockedBy[0] != holderPID || !strings.HasPrefix(w.WaitEvent, "Lock") {
		t.Fatalf("waiter %+v, want pid %d blocked by %d", w, waiterPID, holderPID)
	}
	if len(s.Blockers) != 1 || s.Blockers[0].PID != holderPID || s.Blockers[0].Blocks[0] != waiterPID {
		t.Fatalf("blockers %+v", s.Blockers)
	}
	if s.LockWaitP95MS <= 0 || s.LockWaitP95MS > s.LockWaitMaxMS {
		t.Fatalf("p95 %v max %v", s.LockWaitP95MS, s.LockWaitMaxMS)
	}
	active := false
	for _, a := range s.Alerts {
		active = active || (a.Name == "lock_wait" && a.Active)
	}
	if !active {
		t.Fatalf("lock_wait alert not raised at %.0f ms", s.LockWaitMaxMS)
	}
	if err := tx.Commit(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// The alert clears once the waits have stayed low for the hold.
	pollUntil(t, c, "the lock_wait alert cleared", func(s collector.Snapshot) bool {
		for _, e := range s.Events {
			if e.Kind == collector.EventCleared && strings.Contains(e.Text, "lock_wait") {
				return true
			}
		}
		return false
	})
}

func TestBurnRateAndETAOfAKnownDrain(t *testing.T) {
	b := setup(t, 5000)
	c := b.collector(t, collector.Config{Alerts: collector.AlertConfig{DepletionFor: time.Nanosecond}})
	first := pollUntil(t, c, "an exact count", func(s collector.Snapshot) bool { return !has(s.Pool.Estimated, "unused") })
	b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id <= 500`)
	second, err := c.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	dt := second.Time.Sub(first.Time).Seconds()
	want := 500 / dt // the first burn sample is taken as it is
	if math.Abs(second.BurnPerS-want) > want*1e-6 {
		t.Fatalf("burn %.3f/s, want %.3f/s", second.BurnPerS, want)
	}
	if second.DepletionETAS == nil || math.Abs(*second.DepletionETAS-4500/want) > 1e-6*4500/want {
		t.Fatalf("eta %v, want %.1f s", second.DepletionETAS, 4500/want)
	}
	// Draining faster than 15 minutes raises the depletion alert.
	for _, a := range second.Alerts {
		if a.Name == "depletion" && !a.Active {
			t.Fatalf("depletion alert not raised with eta %.0fs", *second.DepletionETAS)
		}
	}
	b.exec(t, `UPDATE resource_pool SET status = 'UNUSED' WHERE id <= 500`) // refill: not draining
	third, err := c.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if third.BurnPerS >= second.BurnPerS {
		t.Fatalf("burn did not fall after a refill: %.2f then %.2f", second.BurnPerS, third.BurnPerS)
	}
}

// Watch mode writes nothing: no row changes, nothing created, and its
// sessions refuse writes.
func TestReadOnly(t *testing.T) {
	b := setup(t, 500)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', leased_until = now() - interval '1 hour' WHERE id < 10`)
	fingerprint := func() string {
		var s string
		err := b.conn.QueryRow(b.ctx, `SELECT md5(string_agg(r::text, ',' ORDER BY id)) || (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = current_schema())::text
			|| (SELECT count(*) FROM business_ledger)::text FROM resource_pool r`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	before := fingerprint()
	c := b.collector(t, collector.Config{})
	for i := 0; i < 5; i++ {
		if _, err := c.Poll(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if after := fingerprint(); after != before {
		t.Fatalf("watching changed the database: %s → %s", before, after)
	}
}

// A statistics reset between polls gives no negative rate and no error.
func TestStatisticsResetMidRun(t *testing.T) {
	b := setup(t, 2000)
	c := b.collector(t, collector.Config{})
	pollUntil(t, c, "live tuples", func(s collector.Snapshot) bool { return s.LiveTuples == 2000 })
	var oid uint32
	if err := b.conn.QueryRow(b.ctx, "SELECT 'resource_pool'::regclass::oid").Scan(&oid); err != nil {
		t.Fatal(err)
	}
	b.exec(t, "SELECT pg_stat_reset_single_table_counters($1)", oid)
	s, err := c.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.ConsumedPerS < 0 || s.BurnPerS < 0 || s.Pool.Consumed < 0 {
		t.Fatalf("after a reset: consumed/s %v burn %v consumed %d", s.ConsumedPerS, s.BurnPerS, s.Pool.Consumed)
	}
	if s.Pool.Unused != 2000 {
		t.Fatalf("unused %d after the reset, want 2000 (counted, not from statistics)", s.Pool.Unused)
	}
}

// A hand-built pool, in its own schema, with only the basic columns and
// no ledger, watched by a role with SELECT and pg_monitor only.
func TestHandBuiltPoolInAnotherSchemaWithMinimalRole(t *testing.T) {
	b := setup(t, 0)
	ops := pgtest.Schema(t)
	q := pgx.Identifier{ops}.Sanitize()
	// Built on a connection of its own, closed at once: before PostgreSQL 15
	// a backend sends its table statistics when it goes idle at most every
	// 500 ms, or when it exits, and an idle one would keep them to itself.
	setupConn, err := pgx.Connect(b.ctx, pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	_, err = setupConn.Exec(b.ctx, `CREATE TABLE `+q+`.resource_pool (
		id BIGSERIAL PRIMARY KEY, identifier VARCHAR(255) UNIQUE NOT NULL, status VARCHAR(20) DEFAULT 'UNUSED',
		leased_until TIMESTAMPTZ, lease_token BIGINT DEFAULT 0, updated_at TIMESTAMPTZ DEFAULT NOW());
		CREATE INDEX ON `+q+`.resource_pool (id) WHERE status = 'UNUSED';
		INSERT INTO `+q+`.resource_pool (identifier) SELECT 'x' || g FROM generate_series(1, 300) g;
		UPDATE `+q+`.resource_pool SET status = 'PENDING' WHERE id <= 30;
		ANALYZE `+q+`.resource_pool`)
	if err != nil {
		t.Fatal(err)
	}
	if err := setupConn.Close(b.ctx); err != nil {
		t.Fatal(err)
	}
	role := "watcher_" + strings.TrimPrefix(ops, "t_")
	role = role[:min(len(role), 60)]
	rq := pgx.Identifier{role}.Sanitize()
	b.exec(t, `CREATE ROLE `+rq+` LOGIN; GRANT USAGE ON SCHEMA `+q+` TO `+rq+`; GRANT SELECT ON `+q+`.resource_pool TO `+rq+`; GRANT pg_monitor TO `+rq)
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), pgtest.DSN())
		if err == nil {
			_, _ = c.Exec(context.Background(), `DROP OWNED BY `+rq+`; DROP ROLE `+rq)
			c.Close(context.Background())
		}
	})
	u, err := url.Parse(pgtest.DSN())
	if err != nil || u.Scheme == "" {
		t.Fatalf("the test DSN must be a URL here: %v", err)
	}
	u.User = url.User(role)
	c := b.collector(t, collector.Config{DSN: u.String(), Table: ops + ".resource_pool"})
	s := pollUntil(t, c, "seed-only pool", func(s collector.Snapshot) bool { return s.LiveTuples == 300 })
	// No partial index on PENDING rows: a table this small is read whole at
	// every poll, so the figures are exact, and the remedy is named.
	if s.Pool.Unused != 270 || s.Pool.Pending != 30 || has(s.Pool.Estimated, "pending") ||
		!strings.Contains(strings.Join(s.Limits, " "), "(leased_until) WHERE status = 'PENDING'") {
		t.Fatalf("pool %+v, limits %v", s.Pool, s.Limits)
	}
	if info := c.Info(); !info.Monitor || strings.Contains(info.Host, "@") {
		t.Fatalf("info %+v", info)
	}

	// Without pg_monitor it still works and says what it cannot see.
	b.exec(t, `REVOKE pg_monitor FROM `+rq)
	c2 := b.collector(t, collector.Config{DSN: u.String(), Table: ops + ".resource_pool"})
	s2, err := c2.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s2.Limits) == 0 || !strings.Contains(strings.Join(s2.Limits, " "), "pg_monitor") {
		t.Fatalf("limits %v", s2.Limits)
	}

	// Without USAGE on the schema the role is told so, not that the table
	// does not exist.
	b.exec(t, `REVOKE USAGE ON SCHEMA `+q+` FROM `+rq)
	if _, err := collector.New(b.ctx, collector.Config{DSN: u.String(), Table: ops + ".resource_pool"}); err == nil || !strings.Contains(err.Error(), "no USAGE on schema") {
		t.Fatalf("without USAGE: %v", err)
	}
}

func TestBadTable(t *testing.T) {
	b := setup(t, 0)
	_, err := collector.New(b.ctx, collector.Config{DSN: pgtest.DSN(), Table: b.schema + ".nope"})
	if !errors.Is(err, collector.ErrNoTable) || !strings.Contains(err.Error(), "--table") {
		t.Fatalf("missing table: %v", err)
	}
	// A view, and tables whose columns every poll would fail to compare, are
	// refused at start with what is wrong (they used to fail every poll as
	// "disconnected, retrying").
	b.exec(t, `CREATE VIEW pool_view AS SELECT * FROM resource_pool`)
	b.exec(t, `CREATE TABLE int_status (id bigint PRIMARY KEY, status integer)`)
	b.exec(t, `CREATE TABLE text_lease (id bigint PRIMARY KEY, status text, leased_until text)`)
	for table, want := range map[string]string{"pool_view": "is a view", "int_status": "column status is integer", "text_lease": "column leased_until is text"} {
		_, err := collector.New(b.ctx, collector.Config{DSN: pgtest.DSN(), Table: b.schema + "." + table})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", table, err, want)
		}
	}
	if _, err := collector.New(b.ctx, collector.Config{DSN: pgtest.DSN(), Table: "no_such_schema.resource_pool"}); err == nil || !strings.Contains(err.Error(), "schema no_such_schema does not exist") {
		t.Errorf("missing schema: %v", err)
	}
	for _, bad := range []string{"a.b.c", "x;drop", "", "1abc.t"} {
		if _, _, err := collector.ParseTable(bad); err == nil {
			t.Errorf("table %q accepted", bad)
		}
	}
}

func TestRingIsBounded(t *testing.T) {
	r := collector.NewRing(3)
	for i := 0; i < 10; i++ {
		r.Add(collector.Point{V: float64(i)})
	}
	got := fmt.Sprint(r.Points())
	if r.Len() != 3 || !strings.Contains(got, "7") || strings.Contains(got, " 6}") {
		t.Fatalf("ring %v", got)
	}
}

// An empty pool says so: not "lasts forever at 0/s".
func TestEmptyPoolIsNamed(t *testing.T) {
	b := setup(t, 50)
	b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED'`)
	c := b.collector(t, collector.Config{})
	s := pollUntil(t, c, "live tuples counted", func(s collector.Snapshot) bool { return s.LiveTuples == 50 })
	for _, a := range s.Alerts {
		if a.Name == "depletion" && (!a.Active || !strings.Contains(a.Message, "the pool is empty") || strings.Contains(a.Message, "forever")) {
			t.Fatalf("depletion alert on an empty pool: %+v", a)
		}
	}
}

// Leases at ±infinity are counted (one never expires, one expired forever
// ago), not a failed poll.
func TestInfiniteLeasesAreCounted(t *testing.T) {
	b := setup(t, 20)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1, leased_until = '-infinity' WHERE id = 1`)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1, leased_until = 'infinity' WHERE id = 2`)
	c := b.collector(t, collector.Config{})
	s := pollUntil(t, c, "both counted", func(s collector.Snapshot) bool { return s.Pool.Pending == 2 })
	if s.Pool.Expired != 1 || s.Pool.Stuck != 1 || s.Pool.Unused != 18 {
		t.Fatalf("pool %+v", s.Pool)
	}
}

// A producer that keeps up is not a depletion: with ids refilled faster
// than they are claimed, the burn is zero or negative and the depletion
// alert stays off (the refilled ids land in chunks never counted before).
func TestRefillFasterThanBurnIsNoDepletion(t *testing.T) {
	b := setup(t, 50_000)
	c := b.collector(t, collector.Config{Alerts: collector.AlertConfig{DepletionWithin: 24 * time.Hour}})
	pollUntil(t, c, "an exact count", func(s collector.Snapshot) bool { return s.Pool.Unused == 50_000 })
	var s collector.Snapshot
	for i := 0; i < 10; i++ {
		b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id IN (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 500)`)
		if _, err := b.eng.Refill(b.ctx, 2000); err != nil {
			t.Fatal(err)
		}
		var err error
		if s, err = c.Poll(b.ctx); err != nil {
			t.Fatal(err)
		}
		for _, a := range s.Alerts {
			if a.Name == collector.AlertDepletion && a.Active {
				t.Fatalf("poll %d: depletion alert while the pool grows: %s (burn %.1f/s, unused %d)", i, a.Message, s.BurnPerS, s.Pool.Unused)
			}
		}
	}
	if s.BurnPerS > 0 || s.DepletionETAS != nil {
		t.Fatalf("burn %.1f/s, eta %v while the pool grew by 15,000", s.BurnPerS, s.DepletionETAS)
	}
	pollUntil(t, c, "the refilled ids counted", func(s collector.Snapshot) bool { return s.Pool.Unused == 50_000-5000+20_000 })
}

// The snapshot names the top holders of PENDING rows and their expired
// leases; without a holder column it says what it cannot see.
func TestHoldersInTheSnapshot(t *testing.T) {
	b := setup(t, 200)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'pod-a', lease_token = 1,
	           leased_until = now() + interval '1 hour', updated_at = now() WHERE id <= 30`)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'pod-b', lease_token = 1,
	           leased_until = now() - interval '1 minute', updated_at = now() - interval '2 minutes' WHERE id > 30 AND id <= 40`)
	c := b.collector(t, collector.Config{})
	// Read from the fourth poll on, once the start has brought in the
	// poll's sessions.
	var s collector.Snapshot
	var err error
	for poll := 1; poll <= collector.HoldersFrom; poll++ {
		if s, err = c.Poll(b.ctx); err != nil {
			t.Fatal(err)
		}
		if poll < collector.HoldersFrom && len(s.Holders) != 0 {
			t.Fatalf("poll %d: holders %+v, want none yet", poll, s.Holders)
		}
	}
	if len(s.Holders) != 2 || s.Holders[0].Holder != "pod-a" || s.Holders[0].Pending != 30 || s.Holders[0].Expired != 0 ||
		s.Holders[1].Holder != "pod-b" || s.Holders[1].Expired != 10 || s.Holders[1].OldestS < 100 || s.HoldersRead != 40 {
		t.Fatalf("holders %+v (read %d)", s.Holders, s.HoldersRead)
	}
	// Between readings the last one is kept.
	if s, err = c.Poll(b.ctx); err != nil || len(s.Holders) != 2 {
		t.Fatalf("second poll: %+v %v", s.Holders, err)
	}
	b.exec(t, `ALTER TABLE resource_pool DROP COLUMN holder`)
	c2 := b.collector(t, collector.Config{})
	for range 2 {
		if s, err = c2.Poll(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.Holders) != 0 || !strings.Contains(strings.Join(s.Limits, "\n"), "no holder column") {
		t.Fatalf("without a holder column: %+v %v", s.Holders, s.Limits)
	}
}

// Where pg_stat_statements is readable, the snapshot carries the claim
// statements' rate and mean time (watch charts them). Not parallel:
// pg_stat_statements counts the whole database, and the claims of tests
// running at once in other schemas share their text (and, read between
// two readings of the texts, were counted as this pool's).
func TestClaimStatementsFromPgStatStatements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	db := pgtest.NewSeeded(t, ctx, 2000, pgtest.Options{MaxConns: 4})
	b := &bundle{ctx: ctx, schema: db.Schema, conn: pgtest.Conn(t, db.Schema), eng: db.Engine}
	b.statStatements(t)
	c := b.collector(t, collector.Config{})
	var last collector.Snapshot
	// pg_stat_statements is read at polls 2, 7, 12…: the last of these
	// polls reads it, so that each claimReading below ends on a reading.
	for i := 0; i < 2*5+2; i++ {
		for n := 0; n < 20; n++ {
			if _, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 1}); err != nil {
				t.Fatal(err)
			}
		}
		s, err := c.Poll(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		last = s
	}
	cs := last.Claims
	if cs == nil || cs.CallsPerS <= 0 || cs.MeanMS <= 0 || cs.MaxMS < cs.MeanMS {
		t.Fatalf("claim statements: %+v", cs)
	}
	// Between readings of the texts the counters are read by queryid: a
	// claim statement that appears later (a deploy) counts from the next
	// reading of the texts on, and its history before it is not taken for
	// the calls of one period.
	collector.SetStatementsLearnEvery(c, time.Hour)
	newClaims := func(n int) { b.skipLockedClaims(t, "resource_pool", n) }
	reading := func() *collector.ClaimStats { return claimReading(t, b.ctx, c) }
	newClaims(500)
	if cs := reading(); cs == nil || cs.CallsPerS != 0 {
		t.Fatalf("no known claim ran, a new one did: %+v; want 0 calls/s until the texts are read again", cs)
	}
	collector.SetStatementsLearnEvery(c, time.Nanosecond)
	if cs := reading(); cs == nil || cs.CallsPerS != 0 {
		t.Fatalf("the reading that found the new statement: %+v; want the rates started afresh, not its 500 calls at once", cs)
	}
	newClaims(50)
	if cs := reading(); cs == nil || cs.CallsPerS <= 0 {
		t.Fatalf("after the new statement was found: %+v; want its calls counted", cs)
	}
}

// The claim statements are those that name the watched table, whatever its
// name: a pool called otherwise had no claim figures, and statements on a
// table named resource_pool elsewhere were counted as its claims. The
// first claim statement is found at the reading after it ran.
func TestClaimStatementsOfAPoolWithAnotherName(t *testing.T) {
	b := setup(t, 200)
	b.statStatements(t)
	// A name of its own: pg_stat_statements is the server's, and another
	// run's statements on a slot_pool of the same text would be found
	// first and kept for the hour.
	slot := pgtest.UniqueName("slot_pool_")
	b.exec(t, `CREATE TABLE `+slot+` (LIKE resource_pool INCLUDING ALL)`)
	b.exec(t, `INSERT INTO `+slot+` SELECT * FROM resource_pool`)
	c := b.collector(t, collector.Config{Table: b.schema + "." + slot})
	claims := func(table string, n int) { b.skipLockedClaims(t, table, n) }
	reading := func() *collector.ClaimStats { return claimReading(t, b.ctx, c) }
	// The texts are read again only in an hour, but while no claim
	// statement is known they are read at every reading: a watcher started
	// before the workload's first claim finds it at the next one.
	collector.SetStatementsLearnEvery(c, time.Hour)
	claims("resource_pool", 10)
	reading() // the first reading: no claim on slot_pool yet
	claims(slot, 10)
	reading() // finds it; the rates start afresh
	claims("resource_pool", 300)
	if cs := reading(); cs == nil || cs.CallsPerS != 0 {
		t.Fatalf("claims on another table only: %+v; want 0 calls/s on %s", cs, slot)
	}
	claims(slot, 50)
	if cs := reading(); cs == nil || cs.CallsPerS <= 0 {
		t.Fatalf("claims on %s: %+v; want them counted", slot, cs)
	}
}

// statStatements creates pg_stat_statements in the test database.
func (b *bundle) statStatements(t *testing.T) { createStatStatements(t, b.ctx, b.conn) }

// createStatStatements creates pg_stat_statements in the database of conn.
func createStatStatements(tb testing.TB, ctx context.Context, conn *pgx.Conn) {
	tb.Helper()
	// Tests that run at once may both create it: IF NOT EXISTS does not
	// guard against a concurrent CREATE, whose loser fails on the unique
	// index of pg_extension; the extension is there all the same.
	_, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public")
	if err != nil && strings.Contains(err.Error(), "23505") {
		_, err = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public")
	}
	if err != nil {
		tb.Fatalf("pg_stat_statements is needed for this test (the server's contrib modules; pgtest preloads it): %v", err)
	}
}

// skipLockedClaims runs n claim statements (SKIP LOCKED) on table, a
// statement of their own in pg_stat_statements.
func (b *bundle) skipLockedClaims(t *testing.T, table string, n int) {
	t.Helper()
	for range n {
		if _, err := b.conn.Exec(b.ctx, `SELECT id FROM `+table+` WHERE status = 'UNUSED' AND id > $1 ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED`, 0); err != nil {
			t.Fatal(err)
		}
	}
}

// claimReading polls c five times (pg_stat_statements is read once in
// five, from the second poll) and returns the claim figures of the last.
func claimReading(t *testing.T, ctx context.Context, c *collector.Collector) *collector.ClaimStats {
	t.Helper()
	var s collector.Snapshot
	for range 5 {
		var err error
		if s, err = c.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return s.Claims
}

// A poll that fails makes the next one read less. Here the poll's session
// is ended under it; on a busy server it is the walk of a large leak
// running into statement_timeout (65,536 entries of 8 partitions took over
// 2 s under a 16-client load, cold), and the same walk was sent again and
// failed again, 30 polls in a row.
func TestAFailedPollBacksOff(t *testing.T) {
	b := setup(t, 4000)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1, leased_until = now() + id * interval '1 second' WHERE id % 2 = 0`)
	c := b.collector(t, collector.Config{})
	if _, err := c.Poll(b.ctx); err != nil {
		t.Fatal(err)
	}
	walk, per, sweep := collector.Paces(c)
	seat := collector.Seat(c)
	b.exec(t, `SELECT pg_terminate_backend($1)`, seat)
	pgtest.Eventually(t, "the poll's backend ends", 10*time.Second, func() bool {
		var gone bool
		if err := b.conn.QueryRow(b.ctx, `SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, seat).Scan(&gone); err != nil {
			t.Fatal(err)
		}
		return gone
	})
	if _, err := c.Poll(b.ctx); err == nil {
		t.Fatal("a poll on a session that ended did not fail")
	}
	// Whatever the first poll's paces were (they follow the machine's
	// speed), the failed poll divides each, down to its floor.
	w, p, s := collector.Paces(c)
	wlo, plo, slo := collector.PaceFloors(c)
	if w != max(wlo, walk/4) || p != max(plo, per/2) || s != max(slo, sweep/2) {
		t.Fatalf("after a failed poll: walk %d (was %d, floor %d), recount pace %d (was %d, floor %d), sweep %d chunks (was %d, floor %d); want a quarter, a half and a half",
			w, walk, wlo, p, per, plo, s, sweep, slo)
	}
	pollUntil(t, c, "the counts after the new session", func(s collector.Snapshot) bool { return s.Pool.Pending == 2000 && s.Pool.Unused == 2000 })
}

// waitedLong says a statement of the collector (its backend pid, or any
// with 0) has waited on a lock on the pool's table for longer than 150 ms
// by the server's clock: past the lock_timeout the collector had once.
func waitedLong(t *testing.T, b *bundle, pid uint32) bool {
	t.Helper()
	var long bool
	if err := b.conn.QueryRow(b.ctx, `SELECT EXISTS (SELECT FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE NOT l.granted AND l.relation = 'resource_pool'::regclass AND a.application_name = 'pooltop-collector'
		  AND ($1 = 0 OR a.pid = $1) AND clock_timestamp() - a.query_start > interval '150 milliseconds')`, int64(pid)).Scan(&long); err != nil {
		t.Fatal(err)
	}
	return long
}

// A poll waits out an ACCESS EXCLUSIVE lock held for a little longer than
// its lock_timeout — autovacuum truncating the pool's table or a catalog
// holds one for milliseconds, longer when the CPUs are busy, and a
// dashboard or a first poll that failed on it showed an error for
// nothing. The lock is released once the poll's statement has waited
// longer than the 100 ms lock_timeout the collector once had.
func TestAPollWaitsOutABriefLock(t *testing.T) {
	b := setup(t, 4000)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1, leased_until = now() + id * interval '1 second' WHERE id % 2 = 0`)
	c := b.collector(t, collector.Config{})
	if _, err := c.Poll(b.ctx); err != nil {
		t.Fatal(err)
	}
	seat := collector.Seat(c)
	holder := pgtest.Conn(t, b.schema)
	tx, err := holder.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "LOCK TABLE resource_pool IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		s   collector.Snapshot
		err error
	}
	done := make(chan result, 1)
	go func() {
		s, err := c.Poll(b.ctx)
		done <- result{s, err}
	}()
	pgtest.Eventually(t, "the poll waits on the lock past 150 ms", 30*time.Second, func() bool { return waitedLong(t, b, seat) })
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("a poll behind a lock released after its lock_timeout failed: %v", r.err)
	}
	if r.s.Pool.Pending != 2000 || r.s.Pool.Unused != 2000 {
		t.Fatalf("after the lock: pending %d, unused %d; want 2000 and 2000", r.s.Pool.Pending, r.s.Pool.Unused)
	}
}

// A lock held longer fails the poll after a second, and the error names
// who holds it, with its query.
func TestAPollNamesWhoHoldsTheLock(t *testing.T) {
	b := setup(t, 1000)
	c := b.collector(t, collector.Config{})
	if _, err := c.Poll(b.ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := b.conn.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(b.ctx) //nolint:errcheck // the test's end
	if _, err := tx.Exec(b.ctx, "LOCK TABLE resource_pool IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	pid := b.conn.PgConn().PID()
	_, err = c.Poll(b.ctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("a poll behind a lock held throughout: %v; want a lock timeout", err)
	}
	want := fmt.Sprintf("pid %d (pooltop-test-peer) holds %s.resource_pool: LOCK TABLE resource_pool IN ACCESS EXCLUSIVE MODE", pid, b.schema)
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("the poll's error:\n%v\nwant it to say %q", err, want)
	}
}

// The walk's time is the server's time to read its entries: a walk of tens
// of thousands of index entries cannot take under a millisecond (about 30
// ns an entry; PostgreSQL takes ten times that). Its first column used to
// read the clock after the aggregate had read them all, so that every walk
// measured about nothing and the pace doubled at every walk to its largest.
func TestTheWalkIsTimed(t *testing.T) {
	b := setup(t, 40_000)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1, leased_until = now() + id * interval '1 millisecond'`)
	b.exec(t, `ANALYZE resource_pool`)
	c := b.collector(t, collector.Config{})
	// The first walk of a PENDING index this large reads 512 entries (the
	// pool starts in stages); the pace grows on walks that fit its budget.
	var n int64
	var ms float64
	for poll := 1; n < 2_000; poll++ {
		if poll > 20 {
			t.Fatalf("20 polls walked at most %d entries each; want a walk of 2,000 or more", n)
		}
		if _, err := c.Poll(b.ctx); err != nil {
			t.Fatal(err)
		}
		n, ms = collector.LastWalk(c)
	}
	if floor := float64(n) * 30e-6; ms < floor {
		t.Fatalf("a walk of %d entries timed at %.3f ms: under %.1f ms, it was not timed", n, ms, floor)
	}
}

// A backend's first statements cost it tens of milliseconds of CPU: every
// poll runs on the one session the collector opened, and a backend that
// ends gives its place to a new one.
func TestEveryPollRunsOnOneSession(t *testing.T) {
	b := setup(t, 4000)
	c := b.collector(t, collector.Config{})
	if n := collector.Sessions(c); n != 1 {
		t.Fatalf("the collector opened %d sessions before its first poll; want 1", n)
	}
	var seat uint32
	for poll := 1; poll <= 5; poll++ {
		if _, err := c.Poll(b.ctx); err != nil {
			t.Fatal(err)
		}
		now := collector.Seat(c)
		if poll == 1 {
			seat = now
		}
		if now == 0 || now != seat {
			t.Fatalf("poll %d ran on backend %d; the polls before on %d", poll, now, seat)
		}
	}
	if n := collector.Sessions(c); n != 1 {
		t.Fatalf("the collector holds %d sessions after 5 polls; want 1", n)
	}
	if _, err := b.conn.Exec(b.ctx, `SELECT pg_terminate_backend($1)`, seat); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := c.Poll(b.ctx) // the first may fail on the ended session
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no poll succeeded after the session ended: %v", err)
		}
	}
	if now := collector.Seat(c); now == seat || now == 0 {
		t.Fatalf("after backend %d ended, the poll ran on %d; want a new one", seat, now)
	}
}

// A note (a knob turned, an action taken) goes with the next snapshot, so
// that a recording, its replay and its report hold it, and only once.
func TestNotesGoWithTheNextSnapshot(t *testing.T) {
	b := setup(t, 100)
	c := b.collector(t, collector.Config{})
	c.Note(collector.EventKnob, "workers 8 → 16")
	s, err := c.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Events) == 0 || s.Events[0].Text != "workers 8 → 16" || s.Events[0].Kind != collector.EventKnob {
		t.Fatalf("the next snapshot's events: %+v", s.Events)
	}
	if s, err = c.Poll(b.ctx); err != nil {
		t.Fatal(err)
	}
	for _, e := range s.Events {
		if e.Text == "workers 8 → 16" {
			t.Fatal("a note went with two snapshots")
		}
	}
	if n := len(c.Events()); n != 1 {
		t.Fatalf("the log holds %d events, want the note once", n)
	}
}

// Opening a collector waits out a brief lock the same way: the catalog
// reads that find the pool's partitions, indexes and size.
func TestOpeningWaitsOutABriefLock(t *testing.T) {
	b := setup(t, 1000)
	holder := pgtest.Conn(t, b.schema)
	tx, err := holder.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(b.ctx, "LOCK TABLE resource_pool IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		c   *collector.Collector
		err error
	}
	done := make(chan result, 1)
	go func() {
		c, err := collector.New(b.ctx, collector.Config{DSN: pgtest.DSN(), Table: b.schema + ".resource_pool"})
		done <- result{c, err}
	}()
	pgtest.Eventually(t, "the opening waits on the lock past 150 ms", 30*time.Second, func() bool { return waitedLong(t, b, 0) })
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("opening behind a lock released after its lock_timeout failed: %v", r.err)
	}
	defer r.c.Close()
	s, err := r.c.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pool.Total != 1000 {
		t.Fatalf("total %d; want 1000", s.Pool.Total)
	}
}
