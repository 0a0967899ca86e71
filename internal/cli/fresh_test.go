package cli

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// bench and chaos empty their pool between runs only when nobody else holds
// it: another holder's live lease makes freshPool fail with one line and
// leave the pool as it was.
func TestFreshPoolForBenchRefusesUnderOthersLeases(t *testing.T) {
	ctx, db := pgtest.Setup(t, 100, pgtest.Options{})
	d := &database{pool: engine.WrapPool(db.Pool), eng: db.Engine}
	if _, err := db.Engine.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "carol", TTL: time.Hour, N: 1}); err != nil {
		t.Fatal(err)
	}
	err := freshPool(ctx, d, 50, "")
	if !errors.Is(err, engine.ErrResetRefused) || !strings.Contains(err.Error(), `"carol"`) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("freshPool under carol's live lease: %v; want one line refusing, naming her", err)
	}
	var rows int64
	if err := db.Pool.QueryRow(ctx, "SELECT count(*) FROM resource_pool").Scan(&rows); err != nil || rows != 100 {
		t.Fatalf("after the refusal the pool has %d rows (%v), want its 100", rows, err)
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
