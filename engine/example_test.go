package engine_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
)

// examplePool makes a schema with pooltop's tables (as `pooltop migrate
// --schema` does), connects an engine to it and returns a function that
// closes the connections and drops the schema. A program of your own would
// call migrations.Apply and engine.Connect the same way with its DSN.
func examplePool(ctx context.Context) (*engine.Engine, func()) {
	schema := pgtest.UniqueName("example_")
	if err := pgtest.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		panic(err)
	}
	cfg, err := pgx.ParseConfig(pgtest.DSN())
	if err != nil {
		panic(err)
	}
	if _, err := migrations.Apply(ctx, cfg, schema, migrations.Options{}); err != nil {
		panic(err)
	}
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: pgtest.DSN(), Schema: schema})
	if err != nil {
		panic(err)
	}
	return engine.New(pool), func() {
		pool.Close()
		_ = pgtest.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
	}
}

// The whole cycle: seed free ids, claim one under a lease, and commit its
// effect through the fencing token. The commit writes the ledger row and
// consumes the id in one statement.
func Example() {
	ctx := context.Background()
	eng, done := examplePool(ctx)
	defer done()

	if _, err := eng.Seed(ctx, 3); err != nil {
		panic(err)
	}
	leases, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "worker-1", TTL: 30 * time.Second, N: 1})
	if err != nil {
		panic(err)
	}
	l := leases[0]
	fmt.Println("claimed", l.Identifier, "token", l.Token)

	// ... the work the id stands for ...

	res, err := eng.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "worker-1", RequestID: "order-42", Payload: "done"})
	if err != nil {
		panic(err)
	}
	row, err := eng.Show(ctx, res.ResourceID)
	if err != nil {
		panic(err)
	}
	fmt.Println(row.Status, "with", row.Effects, "effect")
	// Output:
	// claimed res-0000000001 token 1
	// CONSUMED with 1 effect
}

// A holder whose lease passed to someone else (here by a transfer; as
// often by the reaper after a pause) still holds its old token. Its commit
// is rejected by the fence and changes nothing.
func ExampleEngine_LeaseCommit_staleToken() {
	ctx := context.Background()
	eng, done := examplePool(ctx)
	defer done()

	if _, err := eng.Seed(ctx, 1); err != nil {
		panic(err)
	}
	leases, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "alice", TTL: time.Minute, N: 1})
	if err != nil {
		panic(err)
	}
	old := leases[0]
	moved, err := eng.LeaseTransfer(ctx, &engine.LeaseTransferParams{ID: old.ID, Token: old.Token, To: "bob"})
	if err != nil {
		panic(err)
	}
	fmt.Println("bob holds token", moved.Token)

	_, err = eng.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: old.ID, Token: old.Token, Holder: "alice", RequestID: "a"})
	fmt.Println("alice's commit:", errors.Is(err, engine.ErrStaleToken))
	_, err = eng.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: moved.ID, Token: moved.Token, Holder: "bob", RequestID: "b"})
	fmt.Println("bob's commit:", err)
	// Output:
	// bob holds token 2
	// alice's commit: true
	// bob's commit: <nil>
}

// The reaper returns leases that have passed to the pool and raises their
// tokens, so the holder that let the lease lapse can no longer commit.
// (Now stands in for the database clock to keep the example instant; a
// reaper of your own leaves it nil, or runs NewReaper.)
func ExampleEngine_LeaseReap() {
	ctx := context.Background()
	eng, done := examplePool(ctx)
	defer done()

	if _, err := eng.Seed(ctx, 2); err != nil {
		panic(err)
	}
	leases, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "crashed", TTL: time.Second, N: 2})
	if err != nil {
		panic(err)
	}
	later := leases[0].LeasedUntil.Add(time.Minute)
	res, err := eng.LeaseReap(ctx, &engine.LeaseReapParams{Batch: 100, Now: &later})
	if err != nil {
		panic(err)
	}
	fmt.Println("reclaimed", res.Reclaimed)

	_, err = eng.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: leases[0].ID, Token: leases[0].Token, Holder: "crashed", RequestID: "late"})
	fmt.Println("late commit rejected:", engine.IsRejected(err))
	// Output:
	// reclaimed 2
	// late commit rejected: true
}

// A holder that needs longer renews its lease with its token; the token
// does not change. Release gives the id back early and raises the token.
func ExampleEngine_LeaseRenew() {
	ctx := context.Background()
	eng, done := examplePool(ctx)
	defer done()

	if _, err := eng.Seed(ctx, 1); err != nil {
		panic(err)
	}
	leases, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "slow", TTL: 10 * time.Second, N: 1})
	if err != nil {
		panic(err)
	}
	l := leases[0]
	renewed, err := eng.LeaseRenew(ctx, &engine.LeaseRenewParams{ID: l.ID, Token: l.Token, TTL: time.Minute})
	if err != nil {
		panic(err)
	}
	fmt.Println("renewed, token", renewed.Token, "later:", renewed.LeasedUntil.After(*l.LeasedUntil))

	released, err := eng.LeaseRelease(ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: l.Token})
	if err != nil {
		panic(err)
	}
	fmt.Println("released, token", released.Token)
	// Output:
	// renewed, token 1 later: true
	// released, token 2
}
