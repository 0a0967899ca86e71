package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
)

func TestPlanMarks(t *testing.T) {
	t.Parallel()
	addrs := []string{"a", "b", "c"}
	fresh, err := engine.PlanMarks(make([]engine.ServerMark, 2), addrs[:2])
	if err != nil {
		t.Fatal(err)
	}
	if fresh[0].Pool == "" || fresh[0].Pool != fresh[1].Pool || fresh[0].Name != "s1" || fresh[1].Name != "s2" || fresh[1].Servers != 2 {
		t.Fatalf("a new pool of two: %+v", fresh)
	}
	// A third server added later: the old two keep their names, all learn the count.
	grown, err := engine.PlanMarks([]engine.ServerMark{{}, fresh[1], fresh[0]}, addrs)
	if err != nil {
		t.Fatal(err)
	}
	if grown[0].Name != "s3" || grown[1].Name != "s2" || grown[2].Name != "s1" || grown[0].Servers != 3 || grown[2].Servers != 3 || grown[0].Pool != fresh[0].Pool {
		t.Fatalf("a server added: %+v", grown)
	}
	other := engine.ServerMark{Pool: "other", Name: "s1", Servers: 1}
	for name, have := range map[string][]engine.ServerMark{
		"another pool's server": {fresh[0], other},
		"a server listed twice": {fresh[0], fresh[0]},
		"a server left out":     {fresh[0], {}},
	} {
		if _, err := engine.PlanMarks(have, addrs[:len(have)]); !errors.Is(err, engine.ErrServers) {
			t.Errorf("%s: %v, want ErrServers", name, err)
		}
	}
}

func TestUnreachable(t *testing.T) {
	t.Parallel()
	check := func(err error, want bool) {
		t.Helper()
		if got := engine.Unreachable(err); got != want {
			t.Errorf("Unreachable(%v) = %v, want %v", err, got, want)
		}
	}
	for err, want := range map[error]bool{
		&pgconn.PgError{Code: "57P01"}:                       true,  // admin shutdown
		&pgconn.PgError{Code: "08006"}:                       true,  // connection failure
		&pgconn.PgError{Code: "53300"}:                       true,  // too many connections
		&pgconn.PgError{Code: "57014"}:                       false, // statement timeout: the server answered
		&pgconn.PgError{Code: "55P03"}:                       false, // lock not available
		engine.ErrPoolEmpty:                                  false,
		fmt.Errorf("x: %w", engine.ErrStaleToken):            false,
		errors.New("dial tcp 127.0.0.1:1: connect: refused"): true,
		engine.ErrNoServer:                                   true,
	} {
		check(err, want)
	}
	// Connection failures as ConnectError words them: refused by the
	// server is an answer, no server is not.
	cc, err := pgx.ParseConfig("postgres://app:secret@db.example:5432/pool")
	if err != nil {
		t.Fatal(err)
	}
	check(engine.ConnectError(cc, &pgconn.PgError{Code: "28P01"}), false)
	check(fmt.Errorf("open: %w", engine.ConnectError(cc, &pgconn.PgError{Code: "3D000"})), false)
	check(engine.ConnectError(cc, &pgconn.PgError{Code: "57P03"}), true)
	check(engine.ConnectError(cc, errors.New("dial tcp 10.0.0.1:5432: connect: connection refused")), true)
}

func TestOwnerSpreadsAndIsStable(t *testing.T) {
	t.Parallel()
	names := []string{"s1", "s2", "s3"}
	counts := make([]int, 3)
	moved := 0
	for n := int64(1); n <= 30_000; n++ {
		id := engine.Identifier(n)
		o := engine.Owner(id, names)
		counts[o]++
		if o2 := engine.Owner(id, append(names, "s4")); o2 != o && o2 != 3 {
			moved++ // rendezvous: adding s4 moves an identifier to s4 or nowhere
		}
	}
	for i, c := range counts {
		if c < 9_000 || c > 11_000 {
			t.Errorf("%s got %d of 30,000 identifiers", names[i], c)
		}
	}
	if moved > 0 {
		t.Errorf("%d identifiers moved between old servers when a server was added", moved)
	}
}

// servers builds a pool over the given schemas of the test server, each
// standing for a fresh server, marked as one new pool.
func servers(t *testing.T, ctx context.Context, schemas ...string) (*engine.Servers, []engine.Target) {
	t.Helper()
	var targets []engine.Target
	for _, s := range schemas {
		targets = append(targets, engine.Target{Addr: "schema " + s, Eng: engine.New(pgtest.Pool(t, s, pgtest.Options{}))})
	}
	s, err := engine.MarkNew(ctx, targets)
	if err != nil {
		t.Fatal(err)
	}
	return s, targets
}

func mark(t *testing.T, ctx context.Context, targets []engine.Target) {
	t.Helper()
	var have []engine.ServerMark
	var addrs []string
	for _, tg := range targets {
		m, err := tg.Eng.ReadMark(ctx)
		if err != nil {
			t.Fatal(err)
		}
		have, addrs = append(have, m), append(addrs, tg.Addr)
	}
	marks, err := engine.PlanMarks(have, addrs)
	if err != nil {
		t.Fatal(err)
	}
	for i, tg := range targets {
		if err := tg.Eng.WriteMark(ctx, marks[i]); err != nil {
			t.Fatal(err)
		}
	}
}

func ids(t *testing.T, ctx context.Context, schema string) map[int64]bool {
	t.Helper()
	var list []int64
	if err := pgtest.PoolQueryRow(ctx, schema, `SELECT coalesce(array_agg(id), '{}') FROM resource_pool`, &list); err != nil {
		t.Fatal(err)
	}
	out := map[int64]bool{}
	for _, id := range list {
		out[id] = true
	}
	return out
}

func TestServersSeedSpreadClaimAndRoute(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	one, two := pgtest.MigratedSchema(t), pgtest.PartitionedSchema(t, 4)
	s, _ := servers(t, ctx, one, two)
	added, err := s.Seed(ctx, 400)
	if err != nil {
		t.Fatal(err)
	}
	if added["s1"]+added["s2"] != 400 || added["s1"] < 120 || added["s2"] < 120 {
		t.Fatalf("seed placed %v, want 400 spread over s1 and s2", added)
	}
	a, b := ids(t, ctx, one), ids(t, ctx, two)
	for id := range a {
		if b[id] {
			t.Fatalf("id %d is on both servers", id)
		}
	}
	// A second seed numbers on from the highest id of either server.
	if _, err := s.Seed(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if n := len(ids(t, ctx, one)) + len(ids(t, ctx, two)); n != 410 {
		t.Fatalf("%d ids after seeding 410", n)
	}

	from := map[string]int{}
	var held []engine.Lease
	for range 40 {
		ls, err := s.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			from[l.Server]++
			held = append(held, l)
		}
	}
	if from["s1"] == 0 || from["s2"] == 0 || len(from) != 2 {
		t.Fatalf("claims came from %v, want both servers", from)
	}
	l := held[0]
	other := map[string]string{"s1": "s2", "s2": "s1"}[l.Server]
	// The handle names the server: the same id and token elsewhere is nothing.
	if _, err := s.LeaseCommit(ctx, &engine.LeaseCommitParams{Server: other, ID: l.ID, Token: l.Token, Holder: "w", RequestID: "r-wrong"}); err == nil {
		t.Fatalf("a commit of %s's lease on %s succeeded", l.Server, other)
	}
	if _, err := s.LeaseCommit(ctx, &engine.LeaseCommitParams{Server: "", ID: l.ID, Token: l.Token, Holder: "w", RequestID: "r-none"}); !errors.Is(err, engine.ErrInvalidArgument) {
		t.Fatalf("a commit naming no server: %v, want ErrInvalidArgument", err)
	}
	if _, err := s.LeaseCommit(ctx, &engine.LeaseCommitParams{Server: l.Server, ID: l.ID, Token: l.Token, Holder: "w", RequestID: "r-1"}); err != nil {
		t.Fatal(err)
	}
	r, err := s.LeaseRenew(ctx, &engine.LeaseRenewParams{Server: held[1].Server, ID: held[1].ID, Token: held[1].Token, TTL: time.Minute})
	if err != nil || r.Server != held[1].Server {
		t.Fatalf("renew: %+v, %v", r, err)
	}
	if _, err := s.LeaseRelease(ctx, &engine.LeaseReleaseParams{Server: held[2].Server, ID: held[2].ID, Token: held[2].Token}); err != nil {
		t.Fatal(err)
	}
	total, per, err := s.Audit(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(total.Violations) != 0 || total.Total != 410 || total.Consumed != 1 || total.Pending != int64(len(held)-2) || len(per) != 2 {
		t.Fatalf("audit over both servers: %+v (%d per server)", total, len(per))
	}
}

func TestOpenServersRefusesAListThatIsNotOnePool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, pool1 := servers(t, ctx, pgtest.MigratedSchema(t), pgtest.MigratedSchema(t))
	_, pool2 := servers(t, ctx, pgtest.MigratedSchema(t))
	unmarked := engine.Target{Addr: "unmarked", Eng: engine.New(pgtest.Pool(t, pgtest.MigratedSchema(t), pgtest.Options{}))}
	for name, c := range map[string]struct {
		list []engine.Target
		want string
	}{
		"another pool's server": {[]engine.Target{pool1[0], pool2[0]}, "belongs to pool"},
		"a server twice":        {[]engine.Target{pool1[0], pool1[0]}, "listed twice"},
		"a server missing":      {pool1[:1], "s2 missing"},
		"a server of no pool":   {[]engine.Target{pool1[0], unmarked}, "no pool spanning servers"},
	} {
		_, err := engine.OpenServers(ctx, c.list)
		if !errors.Is(err, engine.ErrServers) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line with %q", name, err, c.want)
		}
	}
}

// TestServersGoOnWhileOneIsStoppedHard stops one of two real servers with an
// immediate shutdown while workers claim and commit over both: claims go on
// at the other, the stopped server's leases are reclaimed by its own reaper
// once it is back, and the audit of both finds no double finalization and
// no id lost.
func TestServersGoOnWhileOneIsStoppedHard(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	// synchronous_commit on: the immediate shutdown loses nothing
	// acknowledged. Off (pgembed's default), the WAL of the last few
	// hundred ms goes with it, and on PostgreSQL 17 and 18 the stop came
	// often enough before the seed's was written that the server came back
	// with an empty pool (no claim there, and 2,000 ids short at the audit).
	srv, err := pgembed.Start(ctx, pgembed.Options{Settings: map[string]string{"synchronous_commit": "on"}})
	if err != nil {
		t.Fatalf("start a second server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	cfg, err := pgx.ParseConfig(srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Apply(ctx, cfg, "public", migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	pool2, err := engine.Connect(ctx, engine.ConnOptions{DSN: srv.DSN(), Schema: "public", AppName: "pooltop-test", MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool2.Close)
	targets := []engine.Target{
		{Addr: "test server", Eng: engine.New(pgtest.Pool(t, pgtest.MigratedSchema(t), pgtest.Options{}))},
		{Addr: fmt.Sprintf("127.0.0.1:%d", srv.Port()), Eng: engine.New(pool2)},
	}
	mark(t, ctx, targets)
	s, err := engine.OpenServers(ctx, targets)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Seed(ctx, 4000); err != nil {
		t.Fatal(err)
	}
	stopped := targets[1].Eng
	stoppedName, _ := stopped.ReadMark(ctx)

	const ttl = 500 * time.Millisecond
	reaper, err := s.NewReaper(engine.ReaperConfig{Interval: 100 * time.Millisecond, Grace: 0})
	if err != nil {
		t.Fatal(err)
	}
	reaper.Start(ctx)
	defer reaper.Stop()

	var down atomic.Bool
	var claimedWhileDown, fromStoppedWhileDown, committed atomic.Int64
	var held sync.Map // leases claimed on the stopped server before it stopped: (id) → token
	wctx, stopWorkers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("w%d", w)
			for n := 0; wctx.Err() == nil; n++ {
				ls, err := s.LeaseAcquire(wctx, &engine.LeaseAcquireParams{Holder: holder, TTL: ttl, N: 1, Strategy: engine.SkipLocked})
				if err != nil {
					continue
				}
				l := ls[0]
				if down.Load() {
					claimedWhileDown.Add(1)
					if l.Server == stoppedName.Name {
						fromStoppedWhileDown.Add(1)
					}
				}
				if n%3 == 0 { // a third of the workers' leases are left to expire
					if l.Server == stoppedName.Name {
						held.Store(l.ID, l.Token)
					}
					continue
				}
				if _, err := s.LeaseCommit(wctx, &engine.LeaseCommitParams{Server: l.Server, ID: l.ID, Token: l.Token, Holder: holder, RequestID: fmt.Sprintf("%s-%s-%d", l.Server, holder, n)}); err == nil {
					committed.Add(1)
				}
			}
		}()
	}
	pgtest.Eventually(t, "commits on both servers", 30*time.Second, func() bool { return committed.Load() > 100 })
	if err := srv.Halt(); err != nil {
		t.Fatal(err)
	}
	down.Store(true)
	before := claimedWhileDown.Load()
	pgtest.Eventually(t, "claims at the server still up", 30*time.Second, func() bool { return claimedWhileDown.Load() > before+200 })
	if n := fromStoppedWhileDown.Load(); n != 0 {
		t.Fatalf("%d claims came from the stopped server while it was down", n)
	}
	down.Store(false)
	if err := srv.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "claims at the server back up", 30*time.Second, func() bool {
		ls, err := s.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "probe", TTL: time.Minute, N: 1})
		if err == nil && ls[0].Server == stoppedName.Name {
			_, _ = s.LeaseRelease(ctx, &engine.LeaseReleaseParams{Server: ls[0].Server, ID: ls[0].ID, Token: ls[0].Token})
			return true
		}
		if err == nil {
			_, _ = s.LeaseRelease(ctx, &engine.LeaseReleaseParams{Server: ls[0].Server, ID: ls[0].ID, Token: ls[0].Token})
		}
		return false
	})
	stopWorkers()
	wg.Wait()
	// Every lease left on the stopped server, claimed before it stopped or
	// after it came back, is reclaimed by its reaper.
	var ids, tokens []int64
	held.Range(func(k, v any) bool {
		ids, tokens = append(ids, k.(int64)), append(tokens, v.(int64))
		return true
	})
	if len(ids) == 0 {
		t.Fatal("no lease was left to expire on the stopped server")
	}
	pgtest.Eventually(t, "the stopped server's leases reclaimed", 30*time.Second, func() bool {
		still, err := stopped.StillHeld(ctx, ids, tokens)
		return err == nil && len(still) == 0
	})
	pgtest.Eventually(t, "an audit with nothing past grace", 30*time.Second, func() bool {
		total, _, err := s.Audit(ctx, time.Second)
		if err != nil {
			return false
		}
		if total.DoubleFinalizations != 0 || total.StaleEffects != 0 || total.ConsumedWithoutEffect != 0 || total.Total != 4000 {
			t.Fatalf("audit after the stop: %+v", total)
		}
		return len(total.Violations) == 0
	})
}

// A reset over several servers is refused, leaving every server as it
// was, while another holder has a live lease on any of them; once that
// lease ends it empties them all, and the next seed numbers past every id
// the pool had, so no id and no token comes back.
func TestServersResetPool(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	one, two := pgtest.MigratedSchema(t), pgtest.MigratedSchema(t)
	s, _ := servers(t, ctx, one, two)
	if _, err := s.Seed(ctx, 200); err != nil {
		t.Fatal(err)
	}
	var top int64
	for _, sc := range []string{one, two} {
		for id := range ids(t, ctx, sc) {
			top = max(top, id)
		}
	}
	ls, err := s.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "someone-else", TTL: time.Minute, N: 1})
	if err != nil || len(ls) != 1 {
		t.Fatal(ls, err)
	}
	err = s.ResetPool(ctx, "ours")
	if !errors.Is(err, engine.ErrResetRefused) || !strings.Contains(err.Error(), "server "+ls[0].Server) {
		t.Fatalf("reset with another holder's lease on %s: %v", ls[0].Server, err)
	}
	if n, err := s.Size(ctx); err != nil || n != 200 {
		t.Fatalf("after a refused reset the pool holds %d ids (%v), want the 200", n, err)
	}
	if _, err := s.LeaseRelease(ctx, &engine.LeaseReleaseParams{Server: ls[0].Server, ID: ls[0].ID, Token: ls[0].Token}); err != nil {
		t.Fatal(err)
	}
	if err := s.ResetPool(ctx, "ours"); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Size(ctx); err != nil || n != 0 {
		t.Fatalf("after the reset the pool holds %d ids (%v)", n, err)
	}
	if _, err := s.Seed(ctx, 50); err != nil {
		t.Fatal(err)
	}
	for _, sc := range []string{one, two} {
		for id := range ids(t, ctx, sc) {
			if id <= top {
				t.Fatalf("id %d came back after the reset (the pool had ids up to %d)", id, top)
			}
		}
	}
}
