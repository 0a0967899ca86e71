package engine_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// cutBeforeLookup is the engine's pool, whose one connection the server
// terminates just before the first lookup of a request in the ledger: the
// batch statement has run and answered, then the network fails.
type cutBeforeLookup struct {
	*pgxpool.Pool
	cut  func()
	done atomic.Bool
}

func (c *cutBeforeLookup) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if strings.Contains(sql, "request_id") && c.done.CompareAndSwap(false, true) {
		c.cut()
	}
	return c.Pool.QueryRow(ctx, sql, args...)
}

// A batched commit whose lookup of a rejected item breaks (the connection
// cut after the statement committed the others) still reports the
// committed items as committed, and the one it could not explain as of
// unknown outcome, not the whole call as failed.
func TestBatchCommitReportsPerItemWhenALookupBreaks(t *testing.T) {
	ctx, db := pgtest.Setup(t, 10, pgtest.Options{})
	pool := pgtest.Pool(t, db.Schema, pgtest.Options{MaxConns: 1, AppName: "batch-cut"})
	leases, err := engine.New(pool).LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "h", TTL: time.Minute, N: 3})
	if err != nil {
		t.Fatal(err)
	}
	db2 := &cutBeforeLookup{Pool: pool, cut: func() {
		if err := pgtest.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'batch-cut'"); err != nil {
			t.Error(err)
		}
	}}
	items := []engine.CommitItem{
		{ID: leases[0].ID, Token: leases[0].Token, RequestID: "a"},
		{ID: leases[1].ID, Token: leases[1].Token, RequestID: "b"},
		{ID: leases[2].ID, Token: leases[2].Token + 5, RequestID: "c"}, // a token the fence refuses
	}
	results, errs, err := engine.New(db2).LeaseCommitBatch(ctx, "h", items)
	if err != nil {
		t.Fatalf("the call failed as a whole (%v): the two committed items are lost to the caller", err)
	}
	if errs[0] != nil || errs[1] != nil || results[0].RequestID != "a" || results[1].RequestID != "b" {
		t.Fatalf("committed items: %+v, %v", results[:2], errs[:2])
	}
	if !errors.Is(errs[2], engine.ErrOutcomeUnknown) {
		t.Fatalf("the item whose lookup broke: %v, want ErrOutcomeUnknown", errs[2])
	}
	var effects int
	if err := pgtest.PoolQueryRow(ctx, db.Schema, "SELECT count(*) FROM business_ledger", &effects); err != nil || effects != 2 {
		t.Fatalf("%d effects in the ledger (%v), want 2", effects, err)
	}
}
