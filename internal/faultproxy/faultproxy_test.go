package faultproxy_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/faultproxy"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(pgtest.Runner{M: m}) }

// setup is a seeded pool, an engine on direct connections and one whose
// connections go through a fault proxy.
func setup(t *testing.T) (direct, proxied *engine.Engine, p *faultproxy.Proxy) {
	t.Helper()
	schema := pgtest.MigratedSchema(t)
	pool := pgtest.Pool(t, schema, pgtest.Options{})
	direct = engine.New(pool)
	if _, err := direct.Seed(context.Background(), 100); err != nil {
		t.Fatal(err)
	}
	cc := pool.Config().ConnConfig
	p, err := faultproxy.New(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := engine.PoolConfig(engine.ConnOptions{DSN: pgtest.DSN(), Schema: schema, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(p.Port())
	through, err := pxpool(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { through.Close(); _ = p.Close() })
	return direct, engine.New(through), p
}

func pxpool(cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

func claim(t *testing.T, e *engine.Engine, ttl time.Duration) engine.Lease {
	t.Helper()
	ls, err := e.LeaseAcquire(context.Background(), &engine.LeaseAcquireParams{Holder: "h", TTL: ttl, N: 1})
	if err != nil || len(ls) != 1 {
		t.Fatalf("claim: %v %v", ls, err)
	}
	return ls[0]
}

// effects is how many ledger rows the id has.
func effects(t *testing.T, e *engine.Engine) int64 {
	t.Helper()
	a, err := e.Audit(context.Background(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if a.DoubleFinalizations != 0 {
		t.Fatalf("double finalizations: %+v", a)
	}
	return a.Effects
}

// A commit whose answer is lost (the server executed it, the connection was
// cut before the client heard back) fails for the client; retried with the
// same request id on a new connection, it is recognised as a replay and the
// effect exists once. A commit cut before the server saw it fails too, and
// its retry writes the effect, once.
func TestLostAcknowledgement(t *testing.T) {
	ctx := context.Background()
	direct, proxied, p := setup(t)
	for _, delivered := range []bool{true, false} {
		l := claim(t, direct, time.Minute)
		before := effects(t, direct)
		params := &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "h", RequestID: "req-" + strconv.FormatBool(delivered)}
		// A statement first, so the commit is not the connection's first batch.
		if _, err := proxied.Show(ctx, l.ID); err != nil {
			t.Fatal(err)
		}
		done := p.CutNextCommit(delivered)
		if _, err := proxied.LeaseCommit(ctx, params); err == nil {
			t.Fatalf("delivered=%v: the commit's answer came back through a cut connection", delivered)
		}
		<-done
		after := effects(t, direct)
		if delivered && after != before+1 || !delivered && after != before {
			t.Fatalf("delivered=%v: %d effects before the cut, %d after", delivered, before, after)
		}
		res, err := proxied.LeaseCommit(ctx, params)
		if err != nil {
			t.Fatalf("delivered=%v: the retry: %v", delivered, err)
		}
		if res.Replayed != delivered {
			t.Fatalf("delivered=%v: the retry replayed=%v", delivered, res.Replayed)
		}
		if n := effects(t, direct); n != before+1 {
			t.Fatalf("delivered=%v: %d effects after the retry, want %d", delivered, n, before+1)
		}
	}
	if p.CutDelivered.Load() != 1 || p.CutDropped.Load() != 1 {
		t.Fatalf("cuts: delivered %d, dropped %d", p.CutDelivered.Load(), p.CutDropped.Load())
	}
}

// A partition longer than the lease: the holder's commit, sent while the
// network is cut, reaches the server after the lease has passed and the
// reaper (on its own connection) has returned the id: the fence rejects it.
func TestPartitionLongerThanTheLease(t *testing.T) {
	ctx := context.Background()
	direct, proxied, p := setup(t)
	if _, err := proxied.Show(ctx, 1); err != nil { // a connection through the proxy, before the cut
		t.Fatal(err)
	}
	l := claim(t, direct, 300*time.Millisecond)
	p.Partition(time.Second)
	errc := make(chan error, 1)
	go func() {
		_, err := proxied.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "h", RequestID: "late"})
		errc <- err
	}()
	pgtest.Eventually(t, "the reaper returns the id while the network is cut", 5*time.Second, func() bool {
		r, err := direct.LeaseReap(ctx, &engine.LeaseReapParams{Batch: 10})
		return err == nil && r.Reclaimed == 1
	})
	select {
	case err := <-errc:
		if !engine.IsRejected(err) {
			t.Fatalf("the late commit: %v, want rejected by the fence", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the commit never came back after the partition healed")
	}
	if n := effects(t, direct); n != 0 {
		t.Fatalf("%d effects from a holder cut off past its lease", n)
	}
}
