package engine_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// A hand-over: A holds, transfers to B; B's token is higher; A's commit
// with its old token is rejected at the ledger; B's is accepted.
func TestTransferRejectsOldHolder(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 1)
		a := b.acquire(t, "worker-a", time.Minute)
		bl, err := b.eng.LeaseTransfer(b.ctx, &engine.LeaseTransferParams{ID: a.ID, Token: a.Token, To: "worker-b"})
		if err != nil {
			t.Fatal(err)
		}
		if bl.Token <= a.Token || bl.Holder != "worker-b" {
			t.Fatalf("transfer gave %+v, want holder worker-b and a token above %d", bl, a.Token)
		}
		_, err = b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: a.ID, Token: a.Token, Holder: "worker-a", RequestID: "a-1"})
		if !errors.Is(err, engine.ErrStaleToken) {
			t.Fatalf("old holder's commit: %v, want ErrStaleToken", err)
		}
		if _, err := b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: bl.ID, Token: bl.Token, Holder: "worker-b", RequestID: "b-1"}); err != nil {
			t.Fatalf("new holder's commit: %v", err)
		}
		var holder string
		var token int64
		if err := b.pool.QueryRow(b.ctx, "SELECT holder, lease_token FROM business_ledger WHERE resource_id = $1", a.ID).Scan(&holder, &token); err != nil {
			t.Fatal(err)
		}
		if holder != "worker-b" || token != bl.Token {
			t.Fatalf("ledger has %s/%d, want worker-b/%d", holder, token, bl.Token)
		}
	})
}

// A zombie's resurrection, step by step: A acquires, pauses past its TTL,
// the reaper reclaims, B acquires, A wakes and commits (rejected), B
// commits (accepted); exactly one effect.
func TestZombieResurrectionTimeline(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 1)
		a := b.acquire(t, "pod-a", 20*time.Millisecond)
		b.waitExpired(t, a) // A is frozen past its lease
		reaper, err := b.eng.NewReaper(engine.ReaperConfig{Batch: 10})
		if err != nil {
			t.Fatal(err)
		}
		if n, err := reaper.RunOnce(b.ctx); err != nil || n != 1 {
			t.Fatalf("reaper: %v, reclaimed %d", err, n)
		}
		bl := b.acquire(t, "pod-b", time.Minute)
		if bl.ID != a.ID || bl.Token <= a.Token {
			t.Fatalf("B got %+v, want id %d with a token above %d", bl, a.ID, a.Token)
		}
		_, err = b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: a.ID, Token: a.Token, Holder: "pod-a", RequestID: "pay-a"})
		if !errors.Is(err, engine.ErrStaleToken) {
			t.Fatalf("zombie commit: %v, want ErrStaleToken", err)
		}
		if _, err := b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: bl.ID, Token: bl.Token, Holder: "pod-b", RequestID: "pay-b"}); err != nil {
			t.Fatalf("B's commit: %v", err)
		}
		if n := b.effects(t, a.ID); n != 1 {
			t.Fatalf("%d effects, want exactly 1", n)
		}
		if s := reaper.Stats(); s.Reclaimed != 1 || s.MaxLag <= 0 {
			t.Fatalf("reaper stats %+v", s)
		}
	})
}

// The same timeline with fencing off records the double finalization the
// demo shows; with leases off the id leaks and the reaper never returns it.
func TestUnfencedAndUnleasedModes(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 1) // one id: pod-b gets the one pod-a lost, whatever the layout
		a := b.acquire(t, "pod-a", 10*time.Millisecond)
		b.waitExpired(t, a)
		if _, err := b.eng.LeaseReap(b.ctx, &engine.LeaseReapParams{Batch: 10}); err != nil {
			t.Fatal(err)
		}
		bl := b.acquire(t, "pod-b", time.Minute)
		for _, c := range []engine.LeaseCommitParams{
			{ID: a.ID, Token: a.Token, Holder: "pod-a", RequestID: "a", NoFence: true},
			{ID: bl.ID, Token: bl.Token, Holder: "pod-b", RequestID: "b", NoFence: true},
		} {
			if _, err := b.eng.LeaseCommit(b.ctx, &c); err != nil {
				t.Fatalf("unfenced commit by %s: %v", c.Holder, err)
			}
		}
		if n := b.effects(t, a.ID); n != 2 {
			t.Fatalf("unfenced: %d effects, want the double finalization (2)", n)
		}

		b.seedOne(t, 0)
		leak, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "crashy", N: 1, NoLease: true})
		if err != nil {
			t.Fatal(err)
		}
		if leak[0].LeasedUntil != nil {
			t.Fatalf("no-lease claim has an expiry %v", leak[0].LeasedUntil)
		}
		far := time.Now().Add(24 * 365 * time.Hour)
		res, err := b.eng.LeaseReap(b.ctx, &engine.LeaseReapParams{Batch: 10, Now: &far})
		if err != nil || res.Reclaimed != 0 {
			t.Fatalf("reaper reclaimed %d unleased rows (%v); they must leak", res.Reclaimed, err)
		}
	})
}

// Idempotency: replaying a committed request_id returns the original result;
// the same request_id with another payload or id is refused.
func TestCommitIdempotency(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 2)
		l := b.acquire(t, "a", time.Minute)
		first, err := b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "a", RequestID: "req-1", Payload: "charge 10"})
		if err != nil || first.Replayed {
			t.Fatalf("first commit: %+v %v", first, err)
		}
		again, err := b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "a", RequestID: "req-1", Payload: "charge 10"})
		if err != nil || !again.Replayed || again.LedgerID != first.LedgerID || !again.CommittedAt.Equal(first.CommittedAt) {
			t.Fatalf("replay: %+v %v, want the original %+v", again, err, first)
		}
		_, err = b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "a", RequestID: "req-1", Payload: "charge 99"})
		if !errors.Is(err, engine.ErrRequestConflict) {
			t.Fatalf("same request_id, other payload: %v, want ErrRequestConflict", err)
		}
		other := b.acquire(t, "a", time.Minute)
		_, err = b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: other.ID, Token: other.Token, Holder: "a", RequestID: "req-1", Payload: "charge 10"})
		if !errors.Is(err, engine.ErrRequestConflict) {
			t.Fatalf("same request_id, other id: %v, want ErrRequestConflict", err)
		}
		if r := b.row(t, other.ID); r.Status != "PENDING" || r.Token != other.Token {
			t.Fatalf("refused commit changed the row: %+v", r)
		}
		b.audit(t, 2)
	})
}

// op is one side of a race, run on the engine of its side.
type op func(*engine.Engine) error

// race runs two operations at once on separate connections, many times,
// and checks that exactly one of them wins every time. Each round adds an
// id, leases it to "w" for a minute, and races the operations ops makes for
// that lease.
func race(t *testing.T, b *bundle, rounds int, ops func(i int, l engine.Lease) (op, op)) (firstWins, secondWins int) {
	t.Helper()
	engA := engine.New(pgtest.Pool(t, b.schema, pgtest.Options{MaxConns: 1, AppName: "side-a"}))
	engB := engine.New(pgtest.Pool(t, b.schema, pgtest.Options{MaxConns: 1, AppName: "side-b"}))
	for i := 0; i < rounds; i++ {
		b.seedOne(t, i)
		opA, opB := ops(i, b.acquire(t, "w", time.Minute))
		var errA, errB error
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Add(2)
		go func() { defer wg.Done(); <-start; errA = opA(engA) }()
		go func() { defer wg.Done(); <-start; errB = opB(engB) }()
		close(start)
		wg.Wait()
		for _, err := range []error{errA, errB} {
			if err != nil && !engine.IsRejected(err) {
				t.Fatalf("round %d: unexpected error %v", i, err)
			}
		}
		switch {
		case errA == nil && errB == nil:
			t.Fatalf("round %d: both sides won", i)
		case errA != nil && errB != nil:
			t.Fatalf("round %d: neither side won: %v / %v", i, errA, errB)
		case errA == nil:
			firstWins++
		default:
			secondWins++
		}
	}
	return firstWins, secondWins
}

// reaperAt reaps as if the clock were far ahead, so it races with calls the
// database clock still considers live.
func reaperAt(id int64) op {
	return func(e *engine.Engine) error {
		now := time.Now().Add(time.Hour)
		res, err := e.LeaseReap(bg(), &engine.LeaseReapParams{Batch: 10, Now: &now})
		if err != nil {
			return err
		}
		if res.Reclaimed == 0 {
			return fmt.Errorf("reap of id %d: %w", id, engine.ErrLeaseLost)
		}
		return nil
	}
}

func TestRaceReaperVsRenew(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 0)
		a, c := race(t, b, 100, func(_ int, l engine.Lease) (op, op) {
			return reaperAt(l.ID), func(e *engine.Engine) error {
				_, err := e.LeaseRenew(bg(), &engine.LeaseRenewParams{ID: l.ID, Token: l.Token, TTL: 2 * time.Hour})
				return err
			}
		})
		t.Logf("reaper won %d, renew won %d", a, c)
		b.audit(t, 100)
	})
}

func TestRaceReaperVsCommit(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 0)
		a, c := race(t, b, 100, func(i int, l engine.Lease) (op, op) {
			return reaperAt(l.ID), func(e *engine.Engine) error {
				_, err := e.LeaseCommit(bg(), &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "w", RequestID: fmt.Sprint("r", i)})
				return err
			}
		})
		t.Logf("reaper won %d, commit won %d", a, c)
		b.audit(t, 100)
		var effects int
		if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FROM business_ledger").Scan(&effects); err != nil {
			t.Fatal(err)
		}
		if effects != c {
			t.Fatalf("%d effects for %d winning commits", effects, c)
		}
	})
}

func TestRaceTransferVsRelease(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 0)
		a, c := race(t, b, 100, func(_ int, l engine.Lease) (op, op) {
			transfer := func(e *engine.Engine) error {
				_, err := e.LeaseTransfer(bg(), &engine.LeaseTransferParams{ID: l.ID, Token: l.Token, To: "x"})
				return err
			}
			release := func(e *engine.Engine) error {
				_, err := e.LeaseRelease(bg(), &engine.LeaseReleaseParams{ID: l.ID, Token: l.Token})
				return err
			}
			return transfer, release
		})
		t.Logf("transfer won %d, release won %d", a, c)
	})
}

// 32 workers × 1,000 cycles on separate connections: no id held by two at
// once, no double effect, every id accounted for.
func TestConcurrentCyclesStress(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		const workers, cycles, size = 32, 1000, 20000
		b := s.setup(t, size)
		pool := pgtest.Pool(t, b.schema, pgtest.Options{MaxConns: workers})
		eng := engine.New(pool)
		var (
			mu      sync.Mutex
			held    = map[int64]string{}
			commits atomic.Int64
		)
		take := func(id int64, who string) error {
			mu.Lock()
			defer mu.Unlock()
			if other, ok := held[id]; ok {
				return fmt.Errorf("id %d handed to %s while %s holds it", id, who, other)
			}
			held[id] = who
			return nil
		}
		drop := func(id int64) { mu.Lock(); delete(held, id); mu.Unlock() }
		concurrently(t, workers, func(w int) error {
			me := fmt.Sprint("w", w)
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for c := 0; c < cycles; c++ {
				ls, err := eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: me, TTL: time.Minute, N: 1})
				if err != nil {
					return fmt.Errorf("%s cycle %d: acquire: %w", me, c, err)
				}
				l := ls[0]
				if err := take(l.ID, me); err != nil {
					return err
				}
				switch p := rng.IntN(10); {
				case p < 3: // commit
					drop(l.ID) // before the call: once committed nobody may hold it
					if _, err := eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: me, RequestID: fmt.Sprint(me, "-", c)}); err != nil {
						return fmt.Errorf("%s commit: %w", me, err)
					}
					commits.Add(1)
				case p < 4: // hand over to a colleague who commits
					tr, err := eng.LeaseTransfer(b.ctx, &engine.LeaseTransferParams{ID: l.ID, Token: l.Token, To: me + "-b"})
					if err != nil {
						return fmt.Errorf("%s transfer: %w", me, err)
					}
					if _, err := eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, RequestID: fmt.Sprint(me, "-stale-", c)}); !errors.Is(err, engine.ErrStaleToken) {
						return fmt.Errorf("%s: stale commit after transfer: %v", me, err)
					}
					drop(l.ID)
					if _, err := eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: tr.ID, Token: tr.Token, Holder: tr.Holder, RequestID: fmt.Sprint(me, "-", c)}); err != nil {
						return fmt.Errorf("%s commit after transfer: %w", me, err)
					}
					commits.Add(1)
				default: // renew sometimes, then release
					if p == 9 {
						if _, err := eng.LeaseRenew(b.ctx, &engine.LeaseRenewParams{ID: l.ID, Token: l.Token, TTL: time.Minute}); err != nil {
							return fmt.Errorf("%s renew: %w", me, err)
						}
					}
					drop(l.ID)
					if _, err := eng.LeaseRelease(b.ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: l.Token}); err != nil {
						return fmt.Errorf("%s release: %w", me, err)
					}
				}
			}
			return nil
		})
		b.audit(t, size)
		var consumed, pending int64
		if err := b.pool.QueryRow(b.ctx, "SELECT count(*) FILTER (WHERE status = 'CONSUMED'), count(*) FILTER (WHERE status = 'PENDING') FROM resource_pool").Scan(&consumed, &pending); err != nil {
			t.Fatal(err)
		}
		if consumed != commits.Load() || pending != 0 {
			t.Fatalf("CONSUMED %d for %d commits, %d still PENDING", consumed, commits.Load(), pending)
		}
		t.Logf("%d cycles, %d commits", workers*cycles, commits.Load())
	})
}

// The other strategies are correct too, if slow: blocking and optimistic
// under concurrency hand no id to two workers, and a forced conflict is
// counted and retried.
func TestStrategiesUnderConcurrency(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		for _, st := range []engine.Strategy{engine.Blocking, engine.Optimistic} {
			t.Run(st.String(), func(t *testing.T) {
				b := s.setup(t, 2000)
				var mu sync.Mutex
				seen := map[int64]bool{}
				// claim records the ids of one claim, and says if one was seen before.
				claim := func(ls []engine.Lease) error {
					mu.Lock()
					defer mu.Unlock()
					var twice error
					for _, l := range ls {
						if seen[l.ID] {
							twice = fmt.Errorf("id %d claimed twice", l.ID)
						}
						seen[l.ID] = true
					}
					return twice
				}
				concurrently(t, 8, func(int) error {
					for i := 0; i < 50; i++ {
						ls, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 3, Strategy: st})
						if errors.Is(err, engine.ErrContended) {
							continue
						}
						if err != nil {
							return err
						}
						if err := claim(ls); err != nil {
							return err
						}
					}
					return nil
				})
				if pending := b.inStatus(t, engine.StatusPending); pending != len(seen) {
					t.Fatalf("%d PENDING rows, %d distinct leases", pending, len(seen))
				}
			})
		}
	})
}

func TestOptimisticConflictIsCountedAndRetried(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 3)
		if s.partitions > 0 {
			// The race is within one partition: keep only the rows of the
			// lowest id's, so that the claim reads the peer's row wherever
			// its random start falls (the empty partitions hand out nothing).
			b.exec(t, "INSERT INTO resource_pool (identifier) SELECT 'more-' || g FROM generate_series(1, 40) g")
			b.exec(t, `DELETE FROM resource_pool WHERE tableoid <> (SELECT tableoid FROM resource_pool ORDER BY id LIMIT 1)`)
			if n := b.inStatus(t, engine.StatusUnused); n < 2 {
				t.Fatalf("%d ids left in the lowest id's partition", n)
			}
		}
		tx := pgtest.PeerTx(t, b.ctx, b.schema)
		var first int64
		// Another worker wins the first row but has not committed yet.
		if err := tx.QueryRow(b.ctx, `UPDATE resource_pool SET status = 'PENDING', holder = 'peer', lease_token = lease_token + 1
		WHERE id = (SELECT min(id) FROM resource_pool) RETURNING id`).Scan(&first); err != nil {
			t.Fatal(err)
		}
		pool, err := engine.Connect(b.ctx, engine.ConnOptions{DSN: pgtest.DSN(), Schema: b.schema, AppName: "optimist"})
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		eng := engine.New(pool)
		done := make(chan []engine.Lease, 1)
		fail := make(chan error, 1)
		go func() {
			ls, err := eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "o", TTL: time.Minute, N: 1, Strategy: engine.Optimistic})
			if err != nil {
				fail <- err
				return
			}
			done <- ls
		}()
		b.waitLockWaiter(t, "optimist", tx) // its version-checked UPDATE waits on the peer's row
		if err := tx.Commit(b.ctx); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-fail:
			t.Fatal(err)
		case ls := <-done:
			if ls[0].ID == first {
				t.Fatalf("optimistic claim took id %d that the peer won", first)
			}
		}
		if s := eng.Stats(); s.OptimisticConflicts != 1 || s.OptimisticRetries != 1 {
			t.Fatalf("stats %+v, want 1 conflict and 1 retry", s)
		}
	})
}

// The reaper measures the longest gap between two of its statements (by
// hand or in the background), and no lease it reclaims waits past its
// expiry longer than the grace and that gap: each statement reclaims
// every lease that expired before it looked.
func TestReaperGapBoundsTheReclaimLag(t *testing.T) {
	b := setup(t, 50)
	byHand, err := b.eng.NewReaper(engine.ReaperConfig{Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := byHand.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if gap := byHand.Stats().MaxGap; gap != 0 {
		t.Fatalf("one statement measured a gap of %v", gap)
	}
	waited := time.Now()
	if _, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "h", TTL: time.Millisecond, N: 1}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // the 1 ms lease runs out
	if _, err := byHand.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if s := byHand.Stats(); s.MaxGap < time.Since(waited) || s.Reclaimed != 1 || s.MaxLag > s.MaxGap {
		t.Fatalf("by hand: %+v, want a gap of at least %v, 1 reclaimed within it", s, time.Since(waited))
	}

	const interval, grace = 50 * time.Millisecond, 20 * time.Millisecond
	r, err := b.eng.NewReaper(engine.ReaperConfig{Batch: 3, Interval: interval, Grace: grace})
	if err != nil {
		t.Fatal(err)
	}
	r.Start(b.ctx)
	defer r.Stop()
	// Leases of different lengths expire at every point of the interval.
	for i := range 20 {
		ttl := time.Duration(1+i*7) * time.Millisecond
		if _, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "h", TTL: ttl, N: 2}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for r.Stats().Reclaimed < 40 {
		if time.Now().After(deadline) {
			t.Fatalf("the background reaper reclaimed %d of 40 leases in 20 s", r.Stats().Reclaimed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r.Stop()
	s := r.Stats()
	if s.MaxGap < interval || s.MaxLag > grace+s.MaxGap+10*time.Millisecond {
		t.Fatalf("background: %+v, want a gap of at least %v and a lag within the grace and the gap", s, interval)
	}
}

// A lease whose row its holder has locked as the reaper looks (a renewal
// in flight as it ran out) is passed over by SKIP LOCKED and taken by the
// next statement: its lag is over the longest gap between two statements
// but within the longest two gaps, the bound chaos judges the reaper by.
func TestReaperPassesOverALockedLeaseOnce(t *testing.T) {
	b := setup(t, 10)
	r, err := b.eng.NewReaper(engine.ReaperConfig{Batch: 10})
	if err != nil {
		t.Fatal(err)
	}
	looked := time.Now()
	if _, err := r.RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	leases, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "h", TTL: time.Millisecond, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(40 * time.Millisecond) // the lease runs out well before the next statement
	tx, err := b.pool.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(b.ctx) }()
	if _, err := tx.Exec(b.ctx, "SELECT 1 FROM resource_pool WHERE id = $1 FOR NO KEY UPDATE", leases[0].ID); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(b.ctx); err != nil || n != 0 {
		t.Fatalf("the reaper took %d rows (%v) while the lease's row was locked", n, err)
	}
	// The holder's transaction goes on for longer than the reaper's first
	// gap so far, which holds the acquire (100 ms and more on a busy
	// machine): the second gap is then the longer, and the lease, which ran
	// out after the first statement, waits more than either.
	time.Sleep(time.Since(looked))
	if err := tx.Rollback(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RunOnce(b.ctx); err != nil || n != 1 {
		t.Fatalf("the reaper took %d rows (%v) once the row was free, want 1", n, err)
	}
	s := r.Stats()
	if s.MaxLag <= s.MaxGap || s.MaxLag > s.MaxTwoGaps {
		t.Fatalf("%+v: want a lag over the longest gap and within the longest two gaps", s)
	}
}
