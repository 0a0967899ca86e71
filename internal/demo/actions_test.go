package demo

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// The dashboard's actions on real sessions and leases: terminate a blocker,
// refuse a backend that is not there, release a dead holder's expired
// leases so that its late commit is fenced; each written to the event log.
func TestActorOnRealSessions(t *testing.T) {
	ctx, db := pgtest.Setup(t, 50, pgtest.Options{MaxConns: 4})
	col, err := collector.New(ctx, collector.Config{DSN: pgtest.DSN(), Table: db.Schema + ".resource_pool"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.Close)
	a := &Actor{DB: engine.WrapPool(db.Pool), Engine: db.Engine, Collector: col}

	blocker := pgtest.PeerTx(t, ctx, db.Schema)
	if _, err := blocker.Exec(ctx, "UPDATE resource_pool SET updated_at = now() WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	var pid int32
	if err := blocker.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := a.Terminate(pid); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the terminated backend gone", 10*time.Second, func() bool {
		var n int
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	if err := a.Cancel(pid); err == nil || !strings.Contains(err.Error(), "it is gone") {
		t.Fatalf("cancel of a gone backend: %v", err)
	}

	l, err := db.Engine.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "pod-9", TTL: 20 * time.Millisecond, N: 3})
	if err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the leases expired", 10*time.Second, func() bool {
		hs, err := db.Engine.Holders(ctx, 5)
		return err == nil && len(hs) == 1 && hs[0].Expired == 3
	})
	n, err := a.ReleaseExpired("pod-9")
	if err != nil || n != 3 {
		t.Fatalf("release: %d %v", n, err)
	}
	_, err = db.Engine.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l[0].ID, Token: l[0].Token, Holder: "pod-9", RequestID: "late-9"})
	if !engine.IsRejected(err) {
		t.Fatalf("pod-9's late commit: %v, want fenced", err)
	}
	var texts []string
	for _, e := range col.Events() {
		if e.Kind == collector.EventAction {
			texts = append(texts, e.Text)
		}
	}
	if len(texts) != 2 || !strings.Contains(texts[0], "terminated backend") || !strings.Contains(texts[1], "released 3 expired leases of pod-9") {
		t.Fatalf("action events: %v", texts)
	}
}

// watch --allow-actions --table s.T releases in s.T: the watched table,
// quoted (its name is not resource_pool, and not lower case), not the
// schema's resource_pool beside it, which keeps its leases and tokens.
func TestWatchActorReleasesInTheWatchedTable(t *testing.T) {
	ctx, db := pgtest.Setup(t, 10, pgtest.Options{MaxConns: 4})
	pending := `UPDATE %s SET status = 'PENDING', holder = 'pod-7', leased_until = now() - interval '1 minute', lease_token = lease_token + 4 WHERE id <= 5`
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE "Pool_B" (LIKE resource_pool INCLUDING ALL);
INSERT INTO "Pool_B" SELECT * FROM resource_pool;`); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{`resource_pool`, `"Pool_B"`} {
		if _, err := db.Pool.Exec(ctx, fmt.Sprintf(pending, table)); err != nil {
			t.Fatal(err)
		}
	}
	cfg := collector.Config{DSN: pgtest.DSN(), Table: db.Schema + ".Pool_B"}
	col, err := collector.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.Close)
	a, err := WatchActor(ctx, cfg, "--dsn", col)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.DB.Close)
	n, err := a.ReleaseExpired("pod-7")
	if err != nil || n != 5 {
		t.Fatalf("release: %d %v, want 5", n, err)
	}
	state := func(table string) (pending, tokens int64) {
		t.Helper()
		if err := db.Pool.QueryRow(ctx, "SELECT count(*) FILTER (WHERE status = 'PENDING'), sum(lease_token) FILTER (WHERE id <= 5) FROM "+table).Scan(&pending, &tokens); err != nil {
			t.Fatal(err)
		}
		return pending, tokens
	}
	if p, tok := state(`"Pool_B"`); p != 0 || tok != 5*5 {
		t.Fatalf("the watched table: %d PENDING, tokens %d: want 0 and 25 (each raised from 4 to 5)", p, tok)
	}
	if p, tok := state(`resource_pool`); p != 5 || tok != 5*4 {
		t.Fatalf("the other table: %d PENDING, tokens %d: want it untouched (5, 20)", p, tok)
	}
}

// A release in a watched table without a lease_token column (nothing would
// fence the old holder's late commits) is refused in one line, and changes
// nothing.
func TestWatchActorRefusesATableWithoutTheFence(t *testing.T) {
	ctx, db := pgtest.Setup(t, 10, pgtest.Options{MaxConns: 4})
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE bare (id bigint PRIMARY KEY, status text NOT NULL, holder text, leased_until timestamptz, updated_at timestamptz);
INSERT INTO bare SELECT g, 'PENDING', 'pod-7', now() - interval '1 minute', now() FROM generate_series(1, 5) AS g;`); err != nil {
		t.Fatal(err)
	}
	cfg := collector.Config{DSN: pgtest.DSN(), Table: db.Schema + ".bare"}
	col, err := collector.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(col.Close)
	a, err := WatchActor(ctx, cfg, "--dsn", col)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.DB.Close)
	n, err := a.ReleaseExpired("pod-7")
	if err == nil || n != 0 || !strings.Contains(err.Error(), "refused: it has no lease_token column") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("release in a table without lease_token: %d %v", n, err)
	}
	var p int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM bare WHERE status = 'PENDING'").Scan(&p); err != nil || p != 5 {
		t.Fatalf("bare: %d PENDING (%v), want 5", p, err)
	}
}
