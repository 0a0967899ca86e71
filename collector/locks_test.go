package collector_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// More waiters on the pool's rows than are asked pg_blocking_pids: every
// one is counted and names who blocks it (the others' blockers come from
// the same read of pg_locks), each of them one pg_blocking_pids names too,
// and the blocking tree leads to the holder. A session waiting on a row of
// another table of the same database is not the pool's: it is neither
// counted nor shown, nor is its blocker.
func TestLockWaitersPastTheCapAndOnAnotherTable(t *testing.T) {
	const waiters = 16 // more than the collector asks pg_blocking_pids about
	b := setup(t, 10)
	b.exec(t, `CREATE TABLE other (id int PRIMARY KEY, v int); INSERT INTO other VALUES (1, 0)`)
	pid := func(c interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) int32 {
		t.Helper()
		var p int32
		if err := c.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	holder := pgtest.PeerTx(t, b.ctx, b.schema)
	if _, err := holder.Exec(b.ctx, "UPDATE resource_pool SET updated_at = now() WHERE id IN (1, 2)"); err != nil {
		t.Fatal(err)
	}
	otherHolder := pgtest.PeerTx(t, b.ctx, b.schema)
	if _, err := otherHolder.Exec(b.ctx, "UPDATE other SET v = 1 WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	holderPID, otherHolderPID := pid(holder), pid(otherHolder)

	var wg sync.WaitGroup
	start := func(sql string) int32 {
		c := pgtest.Conn(t, b.schema)
		p := pid(c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.Exec(context.Background(), sql) // ends when the holder lets go
		}()
		return p
	}
	var pool []int32
	for i := range waiters {
		pool = append(pool, start(fmt.Sprintf("UPDATE resource_pool SET updated_at = now() WHERE id = %d", i%2+1)))
	}
	otherWaiter := start("UPDATE other SET v = 2 WHERE id = 1")
	// Registered last, so run first: the holders let go and the waiters
	// finish before their connections are closed.
	t.Cleanup(func() {
		_ = holder.Rollback(context.Background())
		_ = otherHolder.Rollback(context.Background())
		wg.Wait()
	})
	all := append(slices.Clone(pool), otherWaiter)
	pgtest.Eventually(t, "every session waiting", 30*time.Second, func() bool {
		var n int
		if err := b.conn.QueryRow(b.ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid = ANY($1)", all).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == len(all)
	})

	c := b.collector(t, collector.Config{})
	s, err := c.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.LockWaiters != waiters || len(s.Waiters) != waiters {
		t.Fatalf("lock_waiters %d, %d waiters shown: want the pool's %d", s.LockWaiters, len(s.Waiters), waiters)
	}
	for _, w := range s.Waiters {
		if !slices.Contains(pool, w.PID) {
			t.Fatalf("waiter %d is not one of the pool's (the other table's is %d)", w.PID, otherWaiter)
		}
		var truth []int32
		if err := b.conn.QueryRow(b.ctx, "SELECT pg_blocking_pids($1)", w.PID).Scan(&truth); err != nil {
			t.Fatal(err)
		}
		if len(w.BlockedBy) == 0 {
			t.Fatalf("waiter %d names no blocker (pg_blocking_pids: %v)", w.PID, truth)
		}
		for _, by := range w.BlockedBy {
			if !slices.Contains(truth, by) {
				t.Fatalf("waiter %d blocked by %v, but pg_blocking_pids says %v", w.PID, w.BlockedBy, truth)
			}
		}
	}
	var holderBlocks []int32
	for _, bl := range s.Blockers {
		if bl.PID == otherHolderPID {
			t.Fatalf("the other table's holder %d shown as a blocker: %+v", otherHolderPID, s.Blockers)
		}
		if bl.PID == holderPID {
			holderBlocks = bl.Blocks
		}
	}
	// The first waiter of each row waits on the holder's transaction; the
	// rest queue on the row's tuple lock, which that first waiter holds.
	if len(holderBlocks) != 2 {
		t.Fatalf("the holder %d blocks %v, want the first waiter of each of its 2 rows; blockers %+v", holderPID, holderBlocks, s.Blockers)
	}
}

// A write waiting behind a migration's DDL is shown, but does not raise
// lock_wait: a planned change, not an incident. The same wait behind a
// transaction holding the row does.
func TestLockWaitBehindAMigrationDoesNotPage(t *testing.T) {
	for _, tc := range []struct {
		name, hold string
		page       bool
	}{
		{"migration", "CREATE INDEX ON resource_pool (identifier)", false},
		{"row lock", "SELECT id FROM resource_pool WHERE id = 1 FOR UPDATE", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t, 100)
			c := b.collector(t, collector.Config{})
			holder := pgtest.PeerTx(t, b.ctx, b.schema)
			if _, err := holder.Exec(b.ctx, tc.hold); err != nil {
				t.Fatal(err)
			}
			waiter := pgtest.Conn(t, b.schema)
			if _, err := waiter.Exec(b.ctx, "SET lock_timeout = '60s'"); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() {
				_, err := waiter.Exec(b.ctx, "UPDATE resource_pool SET updated_at = now() WHERE id = 1")
				done <- err
			}()
			s := pollUntil(t, c, "the write waits over 100 ms", func(s collector.Snapshot) bool { return s.LockWaitMaxMS > 100 })
			for range 5 { // 3 of the last 5 polls over the threshold would page
				var err error
				if s, err = c.Poll(b.ctx); err != nil {
					t.Fatal(err)
				}
			}
			paged := false
			for _, a := range s.Alerts {
				paged = paged || (a.Name == collector.AlertLockWait && a.Active)
			}
			if paged != tc.page || s.LockWaiters != 1 || s.LockWaitUnplannedMaxMS == nil || (*s.LockWaitUnplannedMaxMS > 0) != tc.page {
				t.Fatalf("behind %q: lock_wait raised %v (want %v), waiters %d, longest %.0f ms, unplanned %v",
					tc.hold, paged, tc.page, s.LockWaiters, s.LockWaitMaxMS, deref(s.LockWaitUnplannedMaxMS))
			}
			if err := holder.Rollback(b.ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// The lock waits (pg_locks, and a statement whose first plan costs a new
// backend more than the rest of the server statement) are read only while
// a session of the database waits on a lock: in the poll that first sees
// one, by a second statement, then with the server statement until a
// poll sees none. Not parallel: a wait of another test in the same
// database would be read too.
func TestLockWaitsAreReadOnlyWhileASessionWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	db := pgtest.NewSeeded(t, ctx, 10, pgtest.Options{MaxConns: 4})
	b := &bundle{ctx: ctx, schema: db.Schema, conn: pgtest.Conn(t, db.Schema), eng: db.Engine}
	c := b.collector(t, collector.Config{})
	poll := func(what string, waiters, reads int) {
		t.Helper()
		s, err := c.Poll(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if s.LockWaiters != waiters || collector.LockReads(c) != reads {
			t.Fatalf("%s: %d waiters, lock waits read %d times; want %d, %d", what, s.LockWaiters, collector.LockReads(c), waiters, reads)
		}
	}
	poll("no wait, poll 1", 0, 0)
	poll("no wait, poll 2", 0, 0)

	holder := pgtest.PeerTx(t, b.ctx, b.schema)
	if _, err := holder.Exec(b.ctx, "UPDATE resource_pool SET updated_at = now() WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	waiter := pgtest.Conn(t, b.schema)
	var waiterPID int32
	if err := waiter.QueryRow(b.ctx, "SELECT pg_backend_pid()").Scan(&waiterPID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(context.Background(), "UPDATE resource_pool SET updated_at = now() WHERE id = 1")
		done <- err
	}()
	t.Cleanup(func() { _ = holder.Rollback(context.Background()); <-done })
	pgtest.Eventually(t, "the waiter waiting", 30*time.Second, func() bool {
		var n int
		if err := b.conn.QueryRow(b.ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND pid = $1", waiterPID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	poll("a wait begins", 1, 1)
	poll("the wait goes on", 1, 2)

	if err := holder.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	done <- nil // for the cleanup
	poll("the wait is over", 0, 3)
	poll("no wait again", 0, 3)
}

// PostgreSQL 13 renamed the LWLock wait events (buffer_content became
// BufferContent, CLogControlLock XactSLRU, WALWriteLock WALWrite): pooltop
// shows 12's under the names of 13 and later, so that the dashboard, the
// JSON and the runbooks name the same latch on every version. Other wait
// events, and every event from 13 on, are left as they are.
func TestLWLockWaitEventsUnderOneNameOnEveryVersion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		version    int
		event, out string
	}{
		{120022, "LWLock:buffer_content", "LWLock:BufferContent"},
		{120022, "LWLock:lock_manager", "LWLock:LockManager"},
		{120022, "LWLock:wal_insert", "LWLock:WALInsert"},
		{120022, "LWLock:CLogControlLock", "LWLock:XactSLRU"},
		{120022, "LWLock:WALWriteLock", "LWLock:WALWrite"},
		{120022, "LWLock:ProcArrayLock", "LWLock:ProcArray"},
		{120022, "LWLock:some_extension_tranche", "LWLock:some_extension_tranche"},
		{120022, "Lock:transactionid", "Lock:transactionid"},
		{120022, "IO:WALWrite", "IO:WALWrite"},
		{120022, "", ""},
		{130000, "LWLock:BufferContent", "LWLock:BufferContent"},
		{180004, "LWLock:LockManager", "LWLock:LockManager"},
		{180004, "LWLock:SomeTrancheLock", "LWLock:SomeTrancheLock"},
	} {
		if got := collector.WaitEventName(c.version, c.event); got != c.out {
			t.Errorf("WaitEventName(%d, %q) = %q, want %q", c.version, c.event, got, c.out)
		}
	}
}
