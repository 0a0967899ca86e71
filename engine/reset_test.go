package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// poolRows counts the pool's rows.
func poolRows(t *testing.T, ctx context.Context, schema string) int64 {
	t.Helper()
	var n int64
	if err := pgtest.PoolQueryRow(ctx, schema, "SELECT count(*) FROM resource_pool", &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// expire ends the leases of the rows where says, as if their holder had
// frozen past its TTL.
func expire(t *testing.T, ctx context.Context, schema, where string) {
	t.Helper()
	if err := pgtest.Exec(ctx, fmt.Sprintf("UPDATE %s.resource_pool SET leased_until = now() - interval '1 second' WHERE %s", schema, where)); err != nil {
		t.Fatal(err)
	}
}

// A reset is refused while a holder other than the caller's own has a live
// lease, or another run's work process beats in pooltop_worker; the
// caller's own holders and processes, expired leases and stopped processes
// do not hold it back.
func TestResetRefusedWhileOthersHoldThePool(t *testing.T) {
	ctx, db := pgtest.Setup(t, 100, pgtest.Options{})
	eng := db.Engine
	const ours = "0123abcd"

	alice, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "alice", TTL: time.Hour, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "w0-" + ours, TTL: time.Hour, N: 1}); err != nil {
		t.Fatal(err)
	}
	err = eng.ResetPool(ctx, ours)
	if !errors.Is(err, engine.ErrResetRefused) || !strings.Contains(err.Error(), `"alice"`) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("reset under alice's live lease: %v; want one line refusing, naming alice", err)
	}
	if n := poolRows(t, ctx, db.Schema); n != 100 {
		t.Fatalf("after the refusal the pool has %d rows, want its 100", n)
	}

	// Her lease over, only live processes of other runs hold the reset back.
	expire(t, ctx, db.Schema, fmt.Sprintf("id = %d", alice[0].ID))
	for _, p := range []engine.Process{
		{Name: "fleet-a", Host: "h", PID: 1, RunID: "other", Workers: 2, Heartbeat: time.Hour},
		{Name: "fleet-gone", Host: "h", PID: 2, RunID: "gone", Workers: 2, Heartbeat: time.Hour},
		{Name: "demo", Host: "h", PID: 3, RunID: ours, Workers: 2, Heartbeat: time.Hour},
	} {
		if err := eng.Register(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	if err := eng.Deregister(ctx, engine.Process{Name: "fleet-gone", RunID: "gone"}); err != nil {
		t.Fatal(err)
	}
	err = eng.ResetPool(ctx, ours)
	if !errors.Is(err, engine.ErrResetRefused) || !strings.Contains(err.Error(), "fleet-a") || strings.Contains(err.Error(), "fleet-gone") {
		t.Fatalf("reset while work process fleet-a runs: %v; want a refusal naming it alone", err)
	}
	if err := eng.Deregister(ctx, engine.Process{Name: "fleet-a", RunID: "other"}); err != nil {
		t.Fatal(err)
	}
	if err := eng.ResetPool(ctx, ours); err != nil {
		t.Fatalf("reset with only our own holders and process left: %v", err)
	}
	if n := poolRows(t, ctx, db.Schema); n != 0 {
		t.Fatalf("after the reset the pool has %d rows, want 0", n)
	}
}

// A row claimed without a lease (NoLease: PENDING, no expiry) is held for
// as long as its holder lives, since nothing reclaims it: the reset is
// refused as for a live lease, naming the holder and saying how to free
// its ids, and the pool is kept. The caller's own such rows do not hold it
// back.
func TestResetRefusedWhileRowsAreHeldWithoutALease(t *testing.T) {
	ctx, db := pgtest.Setup(t, 100, pgtest.Options{})
	eng := db.Engine
	const ours = "0123abcd"

	if _, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "bob", NoLease: true, N: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "w0-" + ours, NoLease: true, N: 1}); err != nil {
		t.Fatal(err)
	}
	err := eng.ResetPool(ctx, ours)
	if !errors.Is(err, engine.ErrResetRefused) || !strings.Contains(err.Error(), `"bob"`) || !strings.Contains(err.Error(), "without a lease") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("reset while bob holds 2 ids without a lease: %v; want one line refusing, naming bob's rows held without a lease", err)
	}
	if n := poolRows(t, ctx, db.Schema); n != 100 {
		t.Fatalf("after the refusal the pool has %d rows, want its 100", n)
	}

	// Once bob's ids are released, only our own row is held: the reset goes.
	if _, err := eng.ReleaseHolder(ctx, engine.ReleaseHolderParams{Holder: "bob"}); err != nil {
		t.Fatal(err)
	}
	if err := eng.ResetPool(ctx, ours); err != nil {
		t.Fatalf("reset with only our own row held without a lease: %v", err)
	}
	if n := poolRows(t, ctx, db.Schema); n != 0 {
		t.Fatalf("after the reset the pool has %d rows, want 0", n)
	}
}

// takeAll leases every free id to holder (a partitioned pool's claim takes
// from one partition at a time) and fails unless that makes want leases.
func takeAll(t *testing.T, ctx context.Context, eng *engine.Engine, holder string, want int) []engine.Lease {
	t.Helper()
	var all []engine.Lease
	for len(all) < want {
		got, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: holder, TTL: time.Hour, N: want - len(all)})
		if err != nil {
			t.Fatalf("%s takes every id: %d of %d (%v)", holder, len(all), want, err)
		}
		all = append(all, got...)
	}
	return all
}

// A reset never hands an old id out again, so a lease taken before it can
// never commit on a new owner's row, even when rows were inserted by hand
// with ids above the id sequence: the zombie's commit with its old (id,
// token) is rejected, and every new id is above every old one.
func TestResetNeverReusesIDs(t *testing.T) {
	for _, parts := range pgtest.Shapes {
		t.Run(pgtest.ShapeName(parts), func(t *testing.T) {
			ctx, db := pgtest.Setup(t, 100, pgtest.Options{Partitions: parts})
			eng := db.Engine
			// Ids 101 to 300 by hand, the sequence left at 100.
			if err := pgtest.Exec(ctx, "INSERT INTO "+db.Schema+".resource_pool (id, identifier) SELECT g, 'hand-' || g FROM generate_series(101, 300) AS g"); err != nil {
				t.Fatal(err)
			}
			zombie := takeAll(t, ctx, eng, "zombie", 300)
			expire(t, ctx, db.Schema, "holder = 'zombie'")
			if err := eng.ResetPool(ctx, ""); err != nil {
				t.Fatal(err)
			}
			if n, err := eng.Seed(ctx, 300); err != nil || n != 300 {
				t.Fatalf("seed the fresh pool: %d (%v)", n, err)
			}
			var lowest int64
			if err := pgtest.PoolQueryRow(ctx, db.Schema, "SELECT min(id) FROM resource_pool", &lowest); err != nil || lowest <= 300 {
				t.Fatalf("the fresh pool starts at id %d (%v): ids before the reset came back", lowest, err)
			}
			takeAll(t, ctx, eng, "new-owner", 300)
			for _, l := range zombie {
				_, err := eng.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, RequestID: fmt.Sprintf("zombie-%d", l.ID)})
				if !errors.Is(err, engine.ErrNotFound) {
					t.Fatalf("the zombie's commit on id %d token %d from before the reset: %v; want rejected (no such id)", l.ID, l.Token, err)
				}
			}
		})
	}
}

// A pool whose id has no sequence numbers its seeds past the highest id,
// which an emptied pool no longer has: the reset is refused, the pool kept.
func TestResetRefusedWithoutAnIDSequence(t *testing.T) {
	ctx, db := pgtest.Setup(t, 100, pgtest.Options{})
	if err := pgtest.Exec(ctx, "ALTER TABLE "+db.Schema+".resource_pool ALTER COLUMN id DROP IDENTITY"); err != nil {
		t.Fatal(err)
	}
	err := db.Engine.ResetPool(ctx, "")
	if !errors.Is(err, engine.ErrResetRefused) || !strings.Contains(err.Error(), "no sequence") {
		t.Fatalf("reset of a pool without an id sequence: %v; want a refusal saying why", err)
	}
	if n := poolRows(t, ctx, db.Schema); n != 100 {
		t.Fatalf("after the refusal the pool has %d rows, want its 100", n)
	}
}
