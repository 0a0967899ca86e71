package engine_test

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// The database starts before the tests and stops after them; goleak then
// checks that nothing was left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Runner{M: m}) }

// bundle is what setup returns: the engine under test and its collaborators.
type bundle struct {
	ctx    context.Context
	eng    *engine.Engine
	pool   *pgxpool.Pool
	schema string
}

// setup gives the test a migrated schema of its own with size free ids, in
// a plain pool.
func setup(t *testing.T, size int) *bundle {
	t.Helper()
	return shape{}.setup(t, size)
}

// shape is a pool layout a test runs on: partitions 0 is a plain table.
type shape struct{ partitions int }

// setup is the package's setup on this layout.
func (s shape) setup(t *testing.T, size int) *bundle {
	t.Helper()
	ctx, db := pgtest.Setup(t, size, pgtest.Options{MaxConns: 40, Timeout: 3 * time.Minute, Partitions: s.partitions})
	return &bundle{ctx: ctx, eng: db.Engine, pool: db.Pool, schema: db.Schema}
}

// eachShape runs test as a subtest on every layout of pgtest.Shapes: an
// invariant of the plain pool holds on the partitioned one too.
func eachShape(t *testing.T, test func(t *testing.T, s shape)) {
	t.Helper()
	for _, parts := range pgtest.Shapes {
		t.Run(pgtest.ShapeName(parts), func(t *testing.T) { test(t, shape{parts}) })
	}
}

func (b *bundle) acquire(t *testing.T, holder string, ttl time.Duration) engine.Lease {
	t.Helper()
	ls, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: holder, TTL: ttl, N: 1})
	if err != nil {
		t.Fatalf("acquire for %s: %v", holder, err)
	}
	return ls[0]
}

// dbNow reads the database clock, the only clock leases are judged by.
func (b *bundle) dbNow(t *testing.T) time.Time {
	t.Helper()
	var now time.Time
	if err := b.pool.QueryRow(b.ctx, "SELECT clock_timestamp()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now
}

// waitExpired polls the database clock until the lease has passed.
func (b *bundle) waitExpired(t *testing.T, l engine.Lease) {
	t.Helper()
	pgtest.Eventually(t, fmt.Sprintf("lease of id %d expired by the database clock", l.ID), 10*time.Second, func() bool {
		var expired bool
		if err := b.pool.QueryRow(b.ctx, "SELECT clock_timestamp() > $1", l.LeasedUntil).Scan(&expired); err != nil {
			t.Fatal(err)
		}
		return expired
	})
}

// row reads status, token and holder of one id.
func (b *bundle) row(t *testing.T, id int64) engine.Row {
	t.Helper()
	r, err := b.eng.Show(b.ctx, id)
	if err != nil {
		t.Fatalf("show %d: %v", id, err)
	}
	return r
}

func (b *bundle) effects(t *testing.T, id int64) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FROM business_ledger WHERE resource_id = $1", id).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitLockWaiter polls pg_stat_activity until a session of appName waits
// on a lock that blocker's session holds.
func (b *bundle) waitLockWaiter(t *testing.T, appName string, blocker pgx.Tx) {
	t.Helper()
	// Blocked by that transaction's backend, not by any lock: the tests
	// commit the peer once the claim's update waits on its row, and a wait
	// on another session's lock would let that commit come first.
	var pid int32
	if err := blocker.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "a session of "+appName+" waiting on a lock of the peer", 10*time.Second, func() bool {
		var n int
		err := b.pool.QueryRow(b.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND application_name = $1 AND $2::int = ANY(pg_blocking_pids(pid))`, appName, pid).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
}

// audit checks conservation: every id has a known status, every CONSUMED id
// exactly one effect, no effect on an id that is not CONSUMED.
func (b *bundle) audit(t *testing.T, wantTotal int) {
	t.Helper()
	var total, bad, consumedWithout, multi, orphanEffects int
	err := b.pool.QueryRow(b.ctx, `
SELECT (SELECT count(*) FROM resource_pool),
       (SELECT count(*) FROM resource_pool WHERE status NOT IN ('UNUSED','PENDING','CONSUMED')),
       (SELECT count(*) FROM resource_pool r WHERE status = 'CONSUMED'
           AND NOT EXISTS (SELECT 1 FROM business_ledger b WHERE b.resource_id = r.id)),
       (SELECT count(*) FROM (SELECT resource_id FROM business_ledger GROUP BY 1 HAVING count(*) > 1) d),
       (SELECT count(*) FROM business_ledger b JOIN resource_pool r ON r.id = b.resource_id
           WHERE r.status <> 'CONSUMED')`).Scan(&total, &bad, &consumedWithout, &multi, &orphanEffects)
	if err != nil {
		t.Fatal(err)
	}
	if total != wantTotal || bad != 0 || consumedWithout != 0 || multi != 0 || orphanEffects != 0 {
		t.Fatalf("conservation broken: total %d (want %d), bad status %d, consumed without effect %d, ids with several effects %d, effects on non-consumed ids %d",
			total, wantTotal, bad, consumedWithout, multi, orphanEffects)
	}
}

func bg() context.Context { return context.Background() }

// seedOne adds one free id named after i.
func (b *bundle) seedOne(t *testing.T, i int) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, "INSERT INTO resource_pool (identifier) VALUES ($1)", fmt.Sprint("race-", i)); err != nil {
		t.Fatal(err)
	}
}

// concurrently runs work(w) for w from 0 to n-1, each on a goroutine of its
// own, all at once, and fails the test with the errors they returned once
// every one has.
func concurrently(t *testing.T, n int, work func(w int) error) {
	t.Helper()
	errs := make([]error, n)
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() { errs[w] = work(w) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// inStatus counts the rows in status.
func (b *bundle) inStatus(t *testing.T, status engine.Status) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FROM resource_pool WHERE status = $1", status).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
