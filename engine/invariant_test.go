package engine_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// Invariant: tokens per row strictly increase on every change of owner
// (acquire, transfer, release, reap) and are never reset; renewal keeps the owner and the token.
func TestInvariantTokensStrictlyIncrease(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 1)
		seen := []int64{0}
		step := func(what string, tok int64) {
			t.Helper()
			if last := seen[len(seen)-1]; tok <= last {
				t.Fatalf("%s: token %d not above previous %d (history %v)", what, tok, last, seen)
			}
			seen = append(seen, tok)
		}
		l := b.acquire(t, "a", time.Minute)
		step("acquire", l.Token)

		r, err := b.eng.LeaseRenew(b.ctx, &engine.LeaseRenewParams{ID: l.ID, Token: l.Token, TTL: time.Hour})
		if err != nil || r.Token != l.Token {
			t.Fatalf("renew: %v, token %d want unchanged %d", err, r.Token, l.Token)
		}
		tr, err := b.eng.LeaseTransfer(b.ctx, &engine.LeaseTransferParams{ID: l.ID, Token: l.Token, To: "b"})
		if err != nil {
			t.Fatal(err)
		}
		step("transfer", tr.Token)
		rel, err := b.eng.LeaseRelease(b.ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: tr.Token})
		if err != nil {
			t.Fatal(err)
		}
		step("release", rel.Token)
		l2 := b.acquire(t, "c", time.Millisecond)
		step("re-acquire", l2.Token)
		b.waitExpired(t, l2)
		res, err := b.eng.LeaseReap(b.ctx, &engine.LeaseReapParams{Batch: 10})
		if err != nil || res.Reclaimed != 1 {
			t.Fatalf("reap: %v, reclaimed %d", err, res.Reclaimed)
		}
		step("reap", b.row(t, l.ID).Token)
		l3 := b.acquire(t, "d", time.Minute)
		step("acquire after reap", l3.Token)
		if _, err := b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l3.ID, Token: l3.Token, Holder: "d", RequestID: "r1"}); err != nil {
			t.Fatal(err)
		}
		if got := b.row(t, l.ID); got.Token != l3.Token || got.Status != "CONSUMED" {
			t.Fatalf("after commit: %+v, want CONSUMED at token %d (commit is no change of owner)", got, l3.Token)
		}
	})
}

// Invariant: every transition is a compare-and-set on (id, token, status);
// zero rows changed is a typed error, never success, and changes nothing.
func TestInvariantTransitionsAreCompareAndSet(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 2)
		l := b.acquire(t, "a", time.Minute)
		before := b.row(t, l.ID)
		wrong := l.Token - 1
		checks := map[string]error{}
		_, checks["renew"] = b.eng.LeaseRenew(b.ctx, &engine.LeaseRenewParams{ID: l.ID, Token: wrong, TTL: time.Hour})
		_, checks["release"] = b.eng.LeaseRelease(b.ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: wrong})
		_, checks["transfer"] = b.eng.LeaseTransfer(b.ctx, &engine.LeaseTransferParams{ID: l.ID, Token: wrong, To: "x"})
		_, checks["commit"] = b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l.ID, Token: wrong, Holder: "a", RequestID: "r"})
		_, checks["future token"] = b.eng.LeaseRelease(b.ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: l.Token + 5})
		for op, err := range checks {
			if !errors.Is(err, engine.ErrStaleToken) {
				t.Errorf("%s with a wrong token: got %v, want ErrStaleToken", op, err)
			}
			var le *engine.LeaseError
			if !errors.As(err, &le) || le.CurrentToken != l.Token || le.Status != "PENDING" {
				t.Errorf("%s: error %#v does not describe the row", op, le)
			}
		}
		after := b.row(t, l.ID)
		if !reflect.DeepEqual(after, before) {
			t.Fatalf("row changed by rejected calls:\nbefore %+v\nafter  %+v", before, after)
		}
		if n := b.effects(t, l.ID); n != 0 {
			t.Fatalf("rejected commit wrote %d effects", n)
		}
		// A free id cannot be released or committed: status is part of the CAS.
		var free int64
		if err := b.pool.QueryRow(b.ctx, "SELECT id FROM resource_pool WHERE status = 'UNUSED'").Scan(&free); err != nil {
			t.Fatal(err)
		}
		if _, err := b.eng.LeaseRelease(b.ctx, &engine.LeaseReleaseParams{ID: free, Token: 0}); !errors.Is(err, engine.ErrLeaseLost) {
			t.Fatalf("release of a free id: %v, want ErrLeaseLost", err)
		}
		if _, err := b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: free, Token: 0, RequestID: "r2"}); !errors.Is(err, engine.ErrLeaseLost) {
			t.Fatalf("commit of a free id: %v, want ErrLeaseLost", err)
		}
	})
}

// Invariant: acquire(n) claims at most n rows whatever plan the planner
// picks (PostgreSQL BUG #15715), under concurrency.
func TestInvariantAcquireAtMostN(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 3000)
		plans := []string{
			"",
			"SET enable_indexscan = off; SET enable_bitmapscan = off",
			"SET enable_seqscan = off; SET enable_sort = off",
			"SET enable_hashjoin = off; SET enable_mergejoin = off",
			"SET enable_nestloop = off; SET enable_hashjoin = off",
			"SET enable_nestloop = off; SET enable_mergejoin = off; SET enable_indexscan = off",
		}
		claimed := 0
		for _, plan := range plans {
			for _, n := range []int{1, 3, 10} {
				conns := make([]*pgx.Conn, 8)
				for w := range conns {
					conns[w] = pgtest.Conn(t, b.schema)
					if plan != "" {
						if _, err := conns[w].Exec(b.ctx, plan); err != nil {
							t.Fatal(err)
						}
					}
				}
				var mu sync.Mutex
				concurrently(t, len(conns), func(w int) error {
					ls, err := engine.New(connBeginner{conns[w]}).LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: n})
					if err != nil {
						return err
					}
					mu.Lock()
					claimed += len(ls)
					mu.Unlock()
					if len(ls) > n {
						return fmt.Errorf("plan %q: n=%d claimed %d", plan, n, len(ls))
					}
					return nil
				})
			}
		}
		if pending := b.inStatus(t, engine.StatusPending); pending != claimed || claimed > len(plans)*8*(1+3+10) {
			t.Fatalf("rows PENDING %d, leases handed out %d", pending, claimed)
		}
	})
}

// connBeginner adapts one dedicated connection to the engine.
type connBeginner struct{ *pgx.Conn }

// Invariant: acquire never waits on a row another transaction holds. The
// pool's lock_timeout turns any wait into an error, so the claim must skip.
func TestInvariantAcquireNeverWaits(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 5)
		pool, err := engine.Connect(b.ctx, engine.ConnOptions{DSN: pgtest.DSN(), Schema: b.schema, LockTimeout: 50 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		eng := engine.New(pool)

		// Two of the five free ids locked by another transaction: claims one
		// at a time get the other three without waiting, then nothing. (One
		// claim of five would do on a plain pool; on a partitioned one a
		// claim takes its rows from a single partition.)
		tx := pgtest.PeerTx(t, b.ctx, b.schema)
		rows, err := tx.Query(b.ctx, "SELECT id FROM resource_pool ORDER BY id LIMIT 2 FOR UPDATE")
		if err != nil {
			t.Fatal(err)
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		var claimed []int64
		for {
			ls, err := eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 5})
			if errors.Is(err, engine.ErrPoolEmpty) {
				break
			}
			if err != nil {
				t.Fatalf("skip-locked acquire waited or failed: %v", err)
			}
			for _, l := range ls {
				if slices.Contains(locked, l.ID) {
					t.Fatalf("claimed id %d that another transaction holds", l.ID)
				}
				claimed = append(claimed, l.ID)
			}
		}
		if len(claimed) != 3 {
			t.Fatalf("claimed %v, want the 3 ids not locked (locked: %v)", claimed, locked)
		}
		// The blocking strategy does wait, and so times out here.
		_, err = eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 1, Strategy: engine.Blocking})
		if err == nil || !isLockTimeout(err) {
			t.Fatalf("blocking acquire on a locked row: %v, want lock timeout", err)
		}
	})
}

func isLockTimeout(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr) && pgErr.SQLState() == "55P03"
}

// A foreign-key insert into the ledger takes FOR KEY SHARE on the pool row;
// the claim (FOR NO KEY UPDATE) must not skip or wait on that row.
func TestAcquireClaimsRowUnderKeyShare(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 3)
		// Every id under FOR KEY SHARE: each claim still gets one.
		tx := pgtest.PeerTx(t, b.ctx, b.schema)
		if _, err := tx.Exec(b.ctx, "SELECT id FROM resource_pool FOR KEY SHARE"); err != nil {
			t.Fatal(err)
		}
		seen := map[int64]bool{}
		for range 3 {
			l := b.acquire(t, "a", time.Minute)
			if seen[l.ID] {
				t.Fatalf("id %d claimed twice", l.ID)
			}
			seen[l.ID] = true
		}
	})
}

// Invariant: expiry is decided by the database clock. The lease ends TTL
// after the server's clock_timestamp(), and the reaper's boundary is exact.
func TestInvariantDatabaseClock(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 1)
		before := b.dbNow(t)
		l := b.acquire(t, "a", 30*time.Second)
		after := b.dbNow(t)
		if l.LeasedUntil.Before(before.Add(30*time.Second)) || l.LeasedUntil.After(after.Add(30*time.Second)) {
			t.Fatalf("leased_until %v not within database clock [%v, %v] + 30s", l.LeasedUntil, before, after)
		}
		// Reap with an injected "now": strictly after expiry + grace, never at it.
		grace := 2 * time.Second
		at := l.LeasedUntil.Add(grace)
		res, err := b.eng.LeaseReap(b.ctx, &engine.LeaseReapParams{Batch: 10, Grace: grace, Now: &at})
		if err != nil || res.Reclaimed != 0 {
			t.Fatalf("reap exactly at expiry+grace: %v, reclaimed %d, want 0", err, res.Reclaimed)
		}
		at = at.Add(time.Microsecond)
		res, err = b.eng.LeaseReap(b.ctx, &engine.LeaseReapParams{Batch: 10, Grace: grace, Now: &at})
		if err != nil || res.Reclaimed != 1 {
			t.Fatalf("reap 1µs after expiry+grace: %v, reclaimed %d, want 1", err, res.Reclaimed)
		}
		if res.MaxLag != grace+time.Microsecond {
			t.Fatalf("reclaim lag %v, want %v", res.MaxLag, grace+time.Microsecond)
		}
	})
}

// An expired lease cannot be renewed or transferred, even before the reaper runs.
func TestExpiredLeaseCannotBeRenewedOrTransferred(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 1)
		l := b.acquire(t, "a", time.Millisecond)
		b.waitExpired(t, l)
		_, err := b.eng.LeaseRenew(b.ctx, &engine.LeaseRenewParams{ID: l.ID, Token: l.Token, TTL: time.Minute})
		if !errors.Is(err, engine.ErrLeaseLost) {
			t.Fatalf("renew of an expired lease: %v, want ErrLeaseLost", err)
		}
		_, err = b.eng.LeaseTransfer(b.ctx, &engine.LeaseTransferParams{ID: l.ID, Token: l.Token, To: "b"})
		if !errors.Is(err, engine.ErrLeaseLost) {
			t.Fatalf("transfer of an expired lease: %v, want ErrLeaseLost", err)
		}
		_, err = b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, RequestID: "r"})
		if !errors.Is(err, engine.ErrLeaseLost) {
			t.Fatalf("commit of an expired lease: %v, want ErrLeaseLost", err)
		}
		if r := b.row(t, l.ID); r.Status != "PENDING" || r.Token != l.Token || !r.Expired {
			t.Fatalf("row after rejected calls: %+v", r)
		}
	})
}

// Invariant: the fence is enforced where the effect is written. A commit
// that is already past any check in Go, waiting on the row, is still
// rejected when the reaper bumps the token under it.
func TestInvariantFenceAtSystemOfRecord(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 1)
		l := b.acquire(t, "a", time.Minute)

		// The "reaper", a peer, takes the row and bumps its token, not yet committed.
		tx := pgtest.PeerTx(t, b.ctx, b.schema)
		if _, err := tx.Exec(b.ctx, `UPDATE resource_pool SET status = 'UNUSED', holder = NULL, leased_until = NULL,
		lease_token = lease_token + 1 WHERE id = $1`, l.ID); err != nil {
			t.Fatal(err)
		}
		pool, err := engine.Connect(b.ctx, engine.ConnOptions{DSN: pgtest.DSN(), Schema: b.schema, AppName: "fence-test"})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		done := make(chan error, 1)
		go func() {
			_, err := engine.New(pool).LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "a", RequestID: "zombie"})
			done <- err
		}()
		b.waitLockWaiter(t, "fence-test", tx)
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; !errors.Is(err, engine.ErrStaleToken) {
			t.Fatalf("commit that waited on the row: %v, want ErrStaleToken", err)
		}
		if n := b.effects(t, l.ID); n != 0 {
			t.Fatalf("%d effects written past the fence", n)
		}
	})
}

// Invariant: conservation holds after every kind of transition.
func TestInvariantConservation(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 20)
		var commits int
		for i := 0; i < 20; i++ {
			l := b.acquire(t, "w", time.Minute)
			switch i % 4 {
			case 0:
				if _, err := b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, RequestID: fmt.Sprint("r", i)}); err != nil {
					t.Fatal(err)
				}
				commits++
			case 1:
				if _, err := b.eng.LeaseRelease(b.ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: l.Token}); err != nil {
					t.Fatal(err)
				}
			case 2:
				tr, err := b.eng.LeaseTransfer(b.ctx, &engine.LeaseTransferParams{ID: l.ID, Token: l.Token, To: "x", TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				if _, err := b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: tr.ID, Token: tr.Token, RequestID: fmt.Sprint("r", i)}); err != nil {
					t.Fatal(err)
				}
				commits++
			}
		}
		b.audit(t, 20)
		if consumed := b.inStatus(t, engine.StatusConsumed); consumed != commits {
			t.Fatalf("%d CONSUMED, %d commits", consumed, commits)
		}
	})
}

// Rows inserted by a user's own producer with only an identifier are valid free ids.
func TestBareInsertIsUnused(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 0)
		if _, err := b.pool.Exec(b.ctx, "INSERT INTO resource_pool (identifier) VALUES ('mine-1'), ('mine-2')"); err != nil {
			t.Fatal(err)
		}
		l := b.acquire(t, "a", time.Minute)
		if (l.Identifier != "mine-1" && l.Identifier != "mine-2") || l.Token != 1 {
			t.Fatalf("claimed %+v, want mine-1 or mine-2 at token 1", l)
		}
		_, err := b.pool.Exec(b.ctx, "INSERT INTO resource_pool (identifier, status) VALUES ('bad', 'LOST')")
		if err == nil {
			t.Fatal("a status outside UNUSED/PENDING/CONSUMED was accepted")
		}
		_, err = b.pool.Exec(b.ctx, "INSERT INTO resource_pool (identifier, holder) VALUES ('bad2', 'someone')")
		if err == nil {
			t.Fatal("an UNUSED row with a holder was accepted")
		}
	})
}

var _ = context.Background

// LockHeld keeps a blocking claim's row locks across the hold: a second
// blocking claim queues behind the first and returns only after it, with
// another id. The other strategies never wait on it.
func TestBlockingClaimHoldsItsLockForLockHeld(t *testing.T) {
	b := setup(t, 4)
	type result struct {
		ls  []engine.Lease
		err error
		at  time.Time // when the claim returned
	}
	claim := func(holder string, held time.Duration) <-chan result {
		out := make(chan result, 1)
		go func() {
			ls, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{
				Holder: holder, TTL: time.Minute, N: 1, Strategy: engine.Blocking, LockHeld: held})
			out <- result{ls, err, time.Now()}
		}()
		return out
	}
	sessions := func(cond string) (n int) {
		q := `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND ` + cond
		if err := b.pool.QueryRow(b.ctx, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	slowStart := time.Now()
	slow := claim("slow", time.Second)
	pgtest.Eventually(t, "the slow claim holds its row lock, idle in its transaction", 10*time.Second, func() bool {
		return sessions(`state = 'idle in transaction' AND query LIKE '%id = ANY%'`) == 1
	})
	fast := claim("fast", 0)
	pgtest.Eventually(t, "the fast claim waits on the slow claim's lock", 10*time.Second, func() bool {
		return sessions(`wait_event_type = 'Lock' AND query LIKE '%FOR NO KEY UPDATE'`) == 1
	})
	// Both may have returned by now (the slow one lets go after a second),
	// at the same moment: the slow one's commit frees the fast one, and
	// either may be first back. The fast one returned only once the slow
	// one's second was over.
	first, second := <-slow, <-fast
	if waited := second.at.Sub(slowStart); waited < time.Second {
		t.Fatalf("the fast claim returned (%v, %v) %v after the slow one began, which held its lock for a second", second.ls, second.err, waited)
	}
	if first.err != nil || second.err != nil {
		t.Fatalf("claims: slow %v, fast %v", first.err, second.err)
	}
	if first.ls[0].ID == second.ls[0].ID {
		t.Fatalf("both claims got id %d", first.ls[0].ID)
	}
	_, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{
		Holder: "w", TTL: time.Minute, N: 1, Strategy: engine.Blocking, LockHeld: 2 * time.Second})
	if !errors.Is(err, engine.ErrInvalidArgument) {
		t.Fatalf("lock held 2s: %v, want ErrInvalidArgument", err)
	}
}
