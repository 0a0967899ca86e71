package engine_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
)

// preparedTransactions counts the transactions the sessions named app
// committed in two phases through the coordinator (the test cluster does
// not recover them; a transaction's name holds its coordinator session's
// pid: citus_<group>_<pid>_<number>_<connection>).
func preparedTransactions(t *testing.T, conn *pgx.Conn, app string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_dist_transaction
		WHERE split_part(gid, '_', 3)::int IN (SELECT pid FROM pg_stat_activity WHERE application_name = $1)`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// The whole cycle on a pool laid out on Citus: claims from the shards,
// fenced commits, a replay, a stale token refused, renew and release,
// each id claimed once, an effect per commit, and not one transaction
// committed in two phases: through the coordinator, and sent to the node
// of each shard (RouteToNodes), where the workers' own record of two-phase
// commits is counted.
func TestCitusCycle(t *testing.T) {
	for _, direct := range []bool{false, true} {
		name := "coordinator"
		if direct {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) { citusCycle(t, direct) })
	}
}

func citusCycle(t *testing.T, direct bool) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const size = 400
	e, schema := pgtest.CitusEngine(t, ctx, size)
	conn := pgtest.CitusConn(t, schema)
	before := preparedTransactions(t, conn, schema)
	if before == 0 {
		t.Fatal("the seed, which wrote on both workers, left no transaction committed in two phases: the count does not see this engine's")
	}
	onWorkers := func() int {
		var n int
		if err := conn.QueryRow(ctx, `SELECT coalesce(sum(result::int), 0)::int FROM run_command_on_workers($$SELECT count(*) FROM pg_dist_transaction$$)`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	workersBefore := onWorkers()
	if direct {
		defer e.RouteToNodes(engine.ConnOptions{DSN: pgtest.CitusDSN(t), Schema: schema, AppName: schema, MaxConns: 4})()
	}
	seen := map[int64]bool{}
	committed := 0
	for i := 0; ; i++ {
		leases, err := e.LeaseAcquire(ctx, &engine.LeaseAcquireParams{N: 3, TTL: time.Minute, Holder: "w", Strategy: engine.SkipLocked})
		if errors.Is(err, engine.ErrPoolEmpty) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range leases {
			if seen[l.ID] {
				t.Fatalf("id %d claimed twice", l.ID)
			}
			seen[l.ID] = true
			switch i % 4 {
			case 0: // renewed, then committed
				if _, err := e.LeaseRenew(ctx, &engine.LeaseRenewParams{ID: l.ID, Token: l.Token, TTL: time.Minute}); err != nil {
					t.Fatal(err)
				}
			case 1: // released: claimed again later under a higher token
				r, err := e.LeaseRelease(ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: l.Token})
				if err != nil {
					t.Fatal(err)
				}
				if r.Token != l.Token+1 {
					t.Fatalf("release of id %d at token %d gave token %d", l.ID, l.Token, r.Token)
				}
				delete(seen, l.ID)
				continue
			}
			req := fmt.Sprintf("req-%d", l.ID)
			if _, err := e.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "w", RequestID: req, Payload: "p"}); err != nil {
				t.Fatal(err)
			}
			committed++
			again, err := e.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "w", RequestID: req, Payload: "p"})
			if err != nil || !again.Replayed {
				t.Fatalf("replay of %s: %+v, %v; want the first result, replayed", req, again, err)
			}
			if _, err := e.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token - 1, Holder: "z", RequestID: req + "-zombie", Payload: "p"}); !errors.Is(err, engine.ErrStaleToken) && !errors.Is(err, engine.ErrLeaseLost) {
				t.Fatalf("a commit of id %d at its old token %d: %v; want it refused", l.ID, l.Token-1, err)
			}
		}
	}
	if committed != size {
		t.Fatalf("%d ids committed; the pool held %d", committed, size)
	}
	var effects, consumed, distinct int
	if err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM business_ledger)::int, (SELECT count(*) FROM resource_pool WHERE status = 'CONSUMED')::int,
		(SELECT count(DISTINCT resource_id) FROM business_ledger)::int`).Scan(&effects, &consumed, &distinct); err != nil {
		t.Fatal(err)
	}
	if effects != size || consumed != size || distinct != size {
		t.Fatalf("%d effects on %d ids, %d CONSUMED; want %d of each", effects, distinct, consumed, size)
	}
	if after := preparedTransactions(t, conn, schema); after != before {
		t.Fatalf("%d transactions committed in two phases during the cycle; want none", after-before)
	}
	if after := onWorkers(); after != workersBefore {
		t.Fatalf("the workers committed %d transactions in two phases during the cycle; want none", after-workersBefore)
	}
	var onNodes int
	if err := conn.QueryRow(ctx, `SELECT count(*)::int FROM citus_stat_activity WHERE application_name = $1
		AND nodeid IN (SELECT nodeid FROM pg_dist_node WHERE groupid <> 0)`, schema).Scan(&onNodes); err != nil {
		t.Fatal(err)
	}
	if (onNodes > 0) != direct {
		t.Fatalf("%d sessions of the engine on the workers; routed to the nodes %v", onNodes, direct)
	}
}

// Each lease operation is one call that the coordinator passes whole to
// the node holding the shard (Citus says "pushing down the function
// call"), also inside pooltop's transaction (BEGIN, settings, call).
func TestCitusOperationsAreDelegated(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, schema := pgtest.CitusEngine(t, ctx, 100)
	cfg, err := pgx.ParseConfig(pgtest.CitusDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	cfg.RuntimeParams["client_min_messages"] = "debug1"
	var mu sync.Mutex
	var notices []string
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The engine on the one connection that collects the notices.
	e := engine.New(conn)
	pushed := func(what string, op func() error) {
		t.Helper()
		mu.Lock()
		notices = nil
		mu.Unlock()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		mu.Lock()
		defer mu.Unlock()
		for _, n := range notices {
			if strings.Contains(n, "pushing down") {
				return
			}
		}
		t.Fatalf("%s was not delegated to the shard's node; Citus said: %q", what, notices)
	}
	if on, shards, err := e.Citus(ctx); err != nil || !on || shards != migrations.CitusShards {
		t.Fatalf("the engine sees Citus %v with %d shards (%v); want %d", on, shards, err, migrations.CitusShards)
	}
	var l engine.Lease
	pushed("claim", func() error {
		leases, err := e.LeaseAcquire(ctx, &engine.LeaseAcquireParams{N: 1, TTL: time.Minute, Holder: "w", Strategy: engine.SkipLocked})
		if err == nil {
			l = leases[0]
		}
		return err
	})
	pushed("renew", func() error {
		_, err := e.LeaseRenew(ctx, &engine.LeaseRenewParams{ID: l.ID, Token: l.Token, TTL: time.Minute})
		return err
	})
	pushed("release", func() error {
		r, err := e.LeaseRelease(ctx, &engine.LeaseReleaseParams{ID: l.ID, Token: l.Token})
		l.Token = r.Token
		return err
	})
	pushed("claim in a transaction", func() error {
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', '2s', true)`); err != nil {
				return err
			}
			leases, err := engine.New(tx.Conn()).LeaseAcquire(ctx, &engine.LeaseAcquireParams{N: 1, TTL: time.Minute, Holder: "w", Strategy: engine.SkipLocked})
			if err == nil {
				l = leases[0]
			}
			return err
		})
	})
	pushed("commit", func() error {
		_, err := e.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "w", RequestID: "r", Payload: "p"})
		return err
	})
	pushed("reap", func() error {
		_, err := e.LeaseReap(ctx, &engine.LeaseReapParams{Batch: 10})
		return err
	})
}

// The reaper reclaims expired leases on every shard, bumping each token,
// and the old holder's commit is refused.
func TestCitusReaperReclaims(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, schema := pgtest.CitusEngine(t, ctx, 200)
	conn := pgtest.CitusConn(t, schema)
	leases, err := e.LeaseAcquire(ctx, &engine.LeaseAcquireParams{N: 5, TTL: time.Millisecond, Holder: "gone", Strategy: engine.SkipLocked})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the leases expire on their node's clock", 30*time.Second, func() bool {
		var live int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM resource_pool WHERE status = 'PENDING' AND leased_until >= clock_timestamp()`).Scan(&live); err != nil {
			t.Fatal(err)
		}
		return live == 0
	})
	res, err := e.LeaseReap(ctx, &engine.LeaseReapParams{Batch: 100})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reclaimed != len(leases) {
		t.Fatalf("reaped %d of %d expired leases", res.Reclaimed, len(leases))
	}
	for _, l := range leases {
		_, err := e.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "gone", RequestID: fmt.Sprint("late-", l.ID), Payload: "p"})
		if !errors.Is(err, engine.ErrStaleToken) {
			t.Fatalf("the reaped holder's commit of id %d: %v; want a stale token", l.ID, err)
		}
	}
	var unused int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM resource_pool WHERE status = 'UNUSED'`).Scan(&unused); err != nil {
		t.Fatal(err)
	}
	if unused != 200 {
		t.Fatalf("%d UNUSED after the reap; want all 200", unused)
	}
}

// Seeds running at once add every id asked for, each identifier once,
// each row in its identifier's shard.
func TestCitusConcurrentSeeds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, schema := pgtest.CitusEngine(t, ctx, 0)
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.Seed(ctx, 2500)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	conn := pgtest.CitusConn(t, schema)
	var rows, identifiers, ids, shards int
	if err := conn.QueryRow(ctx, `SELECT count(*)::int, count(DISTINCT identifier)::int, count(DISTINCT id)::int, count(DISTINCT shard)::int FROM resource_pool`).Scan(&rows, &identifiers, &ids, &shards); err != nil {
		t.Fatal(err)
	}
	if rows != 10000 || identifiers != rows || ids != rows || shards != migrations.CitusShards {
		t.Fatalf("%d rows, %d identifiers, %d ids over %d shards; want 10000 of each over %d", rows, identifiers, ids, shards, migrations.CitusShards)
	}
}

// verify finds an identifier held by two rows where nothing in the
// database prevents it (a partitioned pool: its unique index holds the
// id), and finds none on a plain pool.
func TestAuditCountsDuplicateIdentifiers(t *testing.T) {
	for _, partitions := range pgtest.Shapes {
		t.Run(pgtest.ShapeName(partitions), func(t *testing.T) {
			ctx, db := pgtest.Setup(t, 10, pgtest.Options{Partitions: partitions})
			_, err := db.Pool.Exec(ctx, `INSERT INTO resource_pool (id, identifier) SELECT 1000, identifier FROM resource_pool WHERE id = 1`)
			a, aerr := db.Engine.Audit(ctx, time.Minute)
			if aerr != nil {
				t.Fatal(aerr)
			}
			switch {
			case partitions == 0 && err == nil:
				t.Fatal("a plain pool took an identifier twice")
			case partitions == 0 && a.DuplicateIdentifiers != 0:
				t.Fatalf("%d duplicate identifiers on a plain pool", a.DuplicateIdentifiers)
			case partitions > 0 && err != nil:
				t.Fatal(err)
			case partitions > 0 && (a.DuplicateIdentifiers != 1 || !slicesContain(a.Findings, engine.FindingDuplicateIdentifier)):
				t.Fatalf("a partitioned pool with one identifier twice: %d duplicates, findings %v", a.DuplicateIdentifiers, a.Findings)
			}
		})
	}
}

func slicesContain(fs []engine.Finding, kind engine.FindingKind) bool {
	for _, f := range fs {
		if f.Kind == kind {
			return true
		}
	}
	return false
}

// A worker node stopped hard (immediate shutdown) in the middle of a run:
// claims go on at the other node's shards meanwhile, the reaper keeps
// reaping there, and after the node is back every lease it held is
// reclaimed or committed. Then the coordinator stopped hard: through it
// every call fails, and the work goes on once it is back; sent to the
// nodes (RouteToNodes), the work goes on meanwhile. No id is lost, none is
// finalized twice, and verify is clean. On a cluster of the test's own.
func TestCitusNodeStoppedHard(t *testing.T) {
	for _, direct := range []bool{false, true} {
		name := "coordinator"
		if direct {
			name = "direct"
		}
		t.Run(name, func(t *testing.T) { citusNodeStoppedHard(t, direct) })
	}
}

func citusNodeStoppedHard(t *testing.T, direct bool) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cluster := pgtest.OwnCitusCluster(t, ctx)
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: cluster.DSN(), MaxConns: 8, StatementTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	e := engine.New(pool)
	if direct {
		defer e.RouteToNodes(engine.ConnOptions{DSN: cluster.DSN(), MaxConns: 8, StatementTimeout: 10 * time.Second})()
	}
	const size = 3000
	if _, err := e.Seed(ctx, size); err != nil {
		t.Fatal(err)
	}
	reaper, err := e.NewReaper(engine.ReaperConfig{Interval: 50 * time.Millisecond, Batch: 100})
	if err != nil {
		t.Fatal(err)
	}
	reaper.Start(ctx)
	defer reaper.Stop()
	var committed, unreached, coordinatorErrs atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprint("w", w)
			for {
				select {
				case <-stop:
					return
				default:
				}
				leases, err := e.LeaseAcquire(ctx, &engine.LeaseAcquireParams{N: 1, TTL: 300 * time.Millisecond, Holder: holder, Strategy: engine.SkipLocked})
				switch {
				case errors.Is(err, engine.ErrPoolEmpty):
					return
				case err != nil && strings.Contains(err.Error(), "SQLSTATE 08"):
					unreached.Add(1)
					continue
				case err != nil && connectionLost(err):
					coordinatorErrs.Add(1)
					continue
				case err != nil:
					t.Error(err)
					return
				}
				l := leases[0]
				_, err = e.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: holder, RequestID: fmt.Sprint(l.ID, "-", l.Token), Payload: "p"})
				switch {
				case err == nil:
					committed.Add(1)
				case errors.Is(err, engine.ErrStaleToken), errors.Is(err, engine.ErrLeaseLost), strings.Contains(err.Error(), "SQLSTATE 08"), connectionLost(err):
					// reaped, or its node (or the coordinator) is down: the holder gives the id up
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	grow := func(what string, by int64) {
		t.Helper()
		from := committed.Load()
		pgtest.Eventually(t, what, time.Minute, func() bool { return committed.Load() >= from+by || t.Failed() })
	}
	grow("commits before the stop", 200)
	if err := cluster.Workers[0].Halt(); err != nil {
		t.Fatal(err)
	}
	grow("commits while a node is down", 300)
	if unreached.Load() == 0 && e.Stats().NodeFailures == 0 {
		t.Fatal("no claim met the stopped node")
	}
	if err := cluster.Workers[0].Resume(ctx); err != nil {
		t.Fatal(err)
	}
	grow("commits after the node is back", 200)
	// The coordinator stopped: every call fails, and once it is back the
	// engine's pool connects again and the work goes on.
	if err := cluster.Coordinator.Halt(); err != nil {
		t.Fatal(err)
	}
	if direct {
		// Sent to the nodes, the lease calls do not pass the coordinator.
		grow("commits while the coordinator is down, straight to the nodes", 100)
	} else {
		pgtest.Eventually(t, "claims fail while the coordinator is down", time.Minute, func() bool { return coordinatorErrs.Load() > 0 })
	}
	if err := cluster.Coordinator.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	grow("commits after the coordinator is back", 200)
	close(stop)
	wg.Wait()
	conn, err := pgx.Connect(ctx, cluster.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	pgtest.Eventually(t, "every lease reclaimed or committed", time.Minute, func() bool {
		var pending int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM resource_pool WHERE status = 'PENDING'`).Scan(&pending); err != nil {
			t.Fatal(err)
		}
		return pending == 0
	})
	a, err := e.Audit(ctx, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Findings) != 0 || a.Total != size || a.Unused+a.Consumed != size || a.Effects != a.Consumed || a.DoubleFinalizations != 0 {
		t.Fatalf("after the node came back: %d ids (%d UNUSED, %d CONSUMED), %d effects, %d double finalizations, findings %v",
			a.Total, a.Unused, a.Consumed, a.Effects, a.DoubleFinalizations, a.Findings)
	}
	t.Logf("%d commits, %d claims met the stopped node, %d node failures", committed.Load(), unreached.Load(), e.Stats().NodeFailures)
}

// connectionLost says err is the engine's connection to the coordinator
// failing: refused, cut, or ended by the server's shutdown.
func connectionLost(err error) bool {
	var ce *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) || pgconn.Timeout(err) ||
		(errors.As(err, &pgErr) && (pgErr.Code == "57P01" || pgErr.Code == "57P02" || pgErr.Code == "57P03")) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || strings.Contains(err.Error(), "conn closed") || strings.Contains(err.Error(), "EOF")
}
