package engine_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := b.pool.Exec(b.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// One row at the largest token a bigint holds (the schema allows it) used
// to fail every claim, release, transfer and reap with "bigint out of
// range". The pool keeps moving around it, and the row is named.
func TestRowAtTheLargestTokenDoesNotStopThePool(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 10)
		b.exec(t, "UPDATE resource_pool SET lease_token = $1 WHERE id = 1", int64(math.MaxInt64))
		for _, st := range engine.Strategies {
			ls, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 3, Strategy: st})
			if err != nil || len(ls) == 0 {
				t.Fatalf("%s claim past a row at the largest token: %v", st, err)
			}
			for _, l := range ls {
				if l.ID == 1 {
					t.Fatalf("%s claimed the row whose token cannot be raised", st)
				}
			}
		}
		// A PENDING row at the largest token: release and transfer say why,
		// the reaper reclaims the other expired leases.
		b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'dead', lease_token = $1, leased_until = now() - interval '1 hour' WHERE id = 1`, int64(math.MaxInt64))
		b.exec(t, `UPDATE resource_pool SET leased_until = now() - interval '1 hour' WHERE status = 'PENDING' AND id <> 1`)
		_, err := b.eng.LeaseRelease(b.ctx, &engine.LeaseReleaseParams{ID: 1, Token: math.MaxInt64})
		if !errors.Is(err, engine.ErrTokenExhausted) || !strings.Contains(err.Error(), "largest") {
			t.Fatalf("release at the largest token: %v", err)
		}
		res, err := b.eng.LeaseReap(b.ctx, &engine.LeaseReapParams{Batch: 100})
		if err != nil || res.Reclaimed == 0 {
			t.Fatalf("reap past a row at the largest token: %+v %v", res, err)
		}
		a, err := b.eng.Audit(b.ctx, time.Hour*24)
		if err != nil || a.TokenExhausted != 1 || !strings.Contains(strings.Join(a.Violations, " "), "largest token") {
			t.Fatalf("audit: %+v %v", a, err)
		}
		r, err := b.eng.Show(b.ctx, 1)
		if err != nil || !strings.Contains(r.Note, "largest") {
			t.Fatalf("show: %+v %v", r, err)
		}
	})
}

// Leases at ±infinity, and (on a pool without pooltop's constraints) rows
// with no status, an unknown one or no updated_at, are reported, never a
// crash ("cannot subtract infinite timestamps", "can't scan into dest").
func TestRowsOutsideTheContract(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 10)
		b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1, leased_until = '-infinity' WHERE id = 1`)
		b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1, leased_until = 'infinity' WHERE id = 2`)
		res, err := b.eng.LeaseReap(b.ctx, &engine.LeaseReapParams{Batch: 10})
		if err != nil || res.Reclaimed != 1 || res.IDs[0] != 1 {
			t.Fatalf("reap of a lease at -infinity: %+v %v", res, err)
		}
		b.exec(t, `ALTER TABLE resource_pool DROP CONSTRAINT resource_pool_status_check, ALTER COLUMN status DROP NOT NULL, ALTER COLUMN updated_at DROP NOT NULL`)
		b.exec(t, `UPDATE resource_pool SET status = NULL WHERE id = 3`)
		b.exec(t, `UPDATE resource_pool SET status = 'LOST' WHERE id = 4`)
		b.exec(t, `UPDATE resource_pool SET updated_at = NULL WHERE id = 5`)
		a, err := b.eng.Audit(b.ctx, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if a.PendingForever != 1 || a.BadStatus != 2 || a.BadUpdatedAt != 1 {
			t.Fatalf("audit %+v", a)
		}
		for id, want := range map[int64]string{2: "infinity", 3: "status is NULL", 4: "'LOST'", 5: "updated_at is NULL"} {
			r, err := b.eng.Show(b.ctx, id)
			if err != nil || !strings.Contains(r.Note, want) {
				t.Errorf("show %d: %+v %v, want a note with %q", id, r, err, want)
			}
		}
	})
}

// A commit without the fence, with a token never issued, on an id nobody
// leased: verify calls it what it is, not a stale token.
func TestUnfencedCommitWithATokenNeverIssued(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 3)
		if _, err := b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: 2, Token: 77, RequestID: "made-up", Holder: "x", NoFence: true}); err != nil {
			t.Fatal(err)
		}
		a, err := b.eng.Audit(b.ctx, time.Hour)
		if err != nil || a.UnissuedEffects != 1 || a.StaleEffects != 0 || !strings.Contains(strings.Join(a.Violations, " "), "never given") {
			t.Fatalf("audit %+v %v", a, err)
		}
	})
}
