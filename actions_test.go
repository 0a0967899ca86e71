package main

import (
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
	a := &actor{db: engine.WrapPool(db.Pool), eng: db.Engine, col: col}

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

// --allow-actions belongs to the dashboard, and to a database named with
// --dsn: never one picked up from DATABASE_URL.
func TestWatchActionsNeedTheDashboardAndADSN(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtest.DSN())
	r := pooltop(t, "watch", "--dsn", pgtest.DSN(), "--headless", "--allow-actions", "--count", "1")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--allow-actions is for the dashboard") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	r = pooltop(t, "watch", "--allow-actions")
	if r.code != exitUsage || !strings.Contains(r.stderr, "name the database with --dsn") {
		t.Fatalf("actions on DATABASE_URL: exit %d: %s", r.code, r.stderr)
	}
}
