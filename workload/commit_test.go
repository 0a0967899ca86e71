package workload_test

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/faultproxy"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/workload"
)

// A batched commit whose answer is lost (the server committed the batch,
// the connection was cut before the worker heard back) is resolved by its
// request ids: the ledger replays each item, and the workload counts every
// effect that was written, no more, no less.
func TestLostBatchCommitAnswerIsCounted(t *testing.T) {
	ctx, db := pgtest.Setup(t, 20000, pgtest.Options{})
	cc := db.Pool.Config().ConnConfig
	p, err := faultproxy.New(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	pcfg, err := engine.PoolConfig(engine.ConnOptions{DSN: pgtest.DSN(), Schema: db.Schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	pcfg.ConnConfig.Host, pcfg.ConnConfig.Port = "127.0.0.1", uint16(p.Port())
	proxied, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxied.Close)

	cfg := workload.Defaults()
	cfg.Workers, cfg.Batch, cfg.BatchCommit, cfg.Task, cfg.Reaper = 1, 5, true, 0, false
	wl, err := workload.New(engine.New(proxied), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wl.Stop)
	wl.Start(ctx)
	pgtest.Eventually(t, "a first batch committed", 20*time.Second, func() bool { return wl.Snapshot().Committed > 0 })
	cut := p.CutNextCommit(true)
	select {
	case <-cut:
	case <-time.After(20 * time.Second):
		t.Fatal("no batched commit went through the proxy")
	}
	mark := wl.Snapshot().Committed
	pgtest.Eventually(t, "more batches committed after the cut", 20*time.Second, func() bool { return wl.Snapshot().Committed >= mark+20 })
	wl.Stop()

	snap := wl.Snapshot()
	a, err := db.Engine.Audit(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Committed != a.Effects || a.DoubleFinalizations != 0 {
		t.Fatalf("the workload counted %d commits, the ledger holds %d effects (%d double)", snap.Committed, a.Effects, a.DoubleFinalizations)
	}
	if p.CutDelivered.Load() != 1 || snap.Replayed < 1 {
		t.Fatalf("cuts delivered %d, replayed %d: the lost answer was not resolved by request id", p.CutDelivered.Load(), snap.Replayed)
	}
}
