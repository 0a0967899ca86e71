package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// LeaseCheck reads whether a lease is current, and is only a read: after a
// transfer the old token reads false, and the check changed nothing.
func TestLeaseCheckIsARead(t *testing.T) {
	b := setup(t, 1)
	a := b.acquire(t, "worker-a", time.Minute)
	check := func(token int64) bool {
		t.Helper()
		ok, err := b.eng.LeaseCheck(b.ctx, &engine.LeaseCheckParams{ID: a.ID, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if !check(a.Token) {
		t.Fatal("a live lease reads as not current")
	}
	nl, err := b.eng.LeaseTransfer(b.ctx, &engine.LeaseTransferParams{ID: a.ID, Token: a.Token, To: "worker-b"})
	if err != nil {
		t.Fatal(err)
	}
	if check(a.Token) || !check(nl.Token) {
		t.Fatal("after a transfer the old token should read stale and the new one current")
	}
	if row, err := b.eng.Show(b.ctx, a.ID); err != nil || row.Token != nl.Token || row.Status != engine.StatusPending {
		t.Fatalf("the check changed the row: %+v %v", row, err)
	}
}

// SetAutovacuum turns autovacuum off and back on for the pool, on a plain
// table and on every partition of a hash-partitioned one.
func TestSetAutovacuum(t *testing.T) {
	b := setup(t, 100)
	roundTrip(t, b.ctx, b.eng)

	schema := pgtest.Schema(t)
	conn, err := pgx.Connect(b.ctx, pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		"SET search_path = " + pgx.Identifier{schema}.Sanitize(),
		`CREATE TABLE resource_pool (id bigint NOT NULL, identifier text NOT NULL, status text, leased_until timestamptz,
		    lease_token bigint NOT NULL DEFAULT 0, updated_at timestamptz, PRIMARY KEY (id)) PARTITION BY HASH (id)`,
		"CREATE TABLE resource_pool_0 PARTITION OF resource_pool FOR VALUES WITH (MODULUS 2, REMAINDER 0)",
		"CREATE TABLE resource_pool_1 PARTITION OF resource_pool FOR VALUES WITH (MODULUS 2, REMAINDER 1)",
	} {
		if _, err := conn.Exec(b.ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	partitionsOff := func() int {
		t.Helper()
		var off int
		if err := conn.QueryRow(b.ctx, `SELECT count(*) FROM pg_class WHERE relname LIKE 'resource_pool_%' AND relnamespace = $1::regnamespace
		    AND reloptions::text[] @> ARRAY['autovacuum_enabled=false']`, schema).Scan(&off); err != nil {
			t.Fatal(err)
		}
		return off
	}
	eng := engine.New(conn)
	roundTrip(t, b.ctx, eng)
	if err := eng.SetAutovacuum(b.ctx, false); err != nil {
		t.Fatal(err)
	}
	if n := partitionsOff(); n != 2 {
		t.Fatalf("autovacuum off on %d of 2 partitions", n)
	}
	if err := eng.SetAutovacuum(b.ctx, true); err != nil {
		t.Fatal(err)
	}
	if n := partitionsOff(); n != 0 {
		t.Fatalf("%d partitions left with autovacuum off", n)
	}
}

func roundTrip(t *testing.T, ctx context.Context, eng *engine.Engine) {
	t.Helper()
	state := func() engine.VacuumState {
		t.Helper()
		v, err := eng.Vacuum(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if state().AutovacuumOff {
		t.Fatal("autovacuum off before anything turned it off")
	}
	if err := eng.SetAutovacuum(ctx, false); err != nil {
		t.Fatal(err)
	}
	if !state().AutovacuumOff {
		t.Fatal("autovacuum still on after SetAutovacuum(false)")
	}
	if err := eng.SetAutovacuum(ctx, true); err != nil {
		t.Fatal(err)
	}
	if state().AutovacuumOff {
		t.Fatal("autovacuum still off after SetAutovacuum(true)")
	}
}
