package collector_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// watch through PgBouncer in transaction mode: the collector's settings
// (read-only, timeouts, generic plans) travel with every statement, the
// counts are those of a direct connection, and nothing can be written.
func TestCollectorThroughPgBouncer(t *testing.T) {
	b := setup(t, 1000)
	b.exec(t, `UPDATE resource_pool SET status = 'CONSUMED' WHERE id <= 300`)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1,
		leased_until = now() + interval '1 hour', updated_at = now() WHERE id BETWEEN 301 AND 340`)
	b.exec(t, `UPDATE resource_pool SET status = 'PENDING', holder = 'h', lease_token = 1,
		leased_until = now() - interval '10 minutes', updated_at = now() - interval '20 minutes' WHERE id BETWEEN 341 AND 350`)
	c := b.collector(t, collector.Config{DSN: pgtest.Bouncer(t, "transaction")})
	if scoped, _ := collector.DBPool(c).Scoped(); !scoped {
		t.Fatal("the collector's pool through PgBouncer is not scoped")
	}
	s := pollUntil(t, c, "live tuples counted", func(s collector.Snapshot) bool { return s.LiveTuples == 1000 })
	for i := 0; i < 5; i++ { // every kind of statement a poll runs, more than once
		var err error
		if s, err = c.Poll(b.ctx); err != nil {
			t.Fatalf("poll %d through PgBouncer: %v", i, err)
		}
	}
	if p := s.Pool; p.Unused != 650 || p.Pending != 50 || p.Expired != 10 || p.Consumed != 300 {
		t.Fatalf("pool %+v through PgBouncer, want unused 650 pending 50 expired 10 consumed 300", p)
	}
	for i := 0; i < 8; i++ {
		_, err := collector.DBPool(c).Exec(b.ctx, "UPDATE "+b.schema+".resource_pool SET lease_token = lease_token + 1 WHERE id = 1")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
			t.Fatalf("write %d through watch's pool behind PgBouncer: %v, want a read-only transaction (25006)", i, err)
		}
	}
}

// Through PgBouncer the collector describes each new statement ahead of
// its batch (its results come back in binary), and that description parses
// the statement, which takes the table's lock: a poll under an ACCESS
// EXCLUSIVE lock held by another session must end with the collector's
// lock_timeout (100 ms) instead of waiting on the lock as long as it lasts.
func TestCollectorLockTimeoutThroughPgBouncer(t *testing.T) {
	b := setup(t, 100)
	c := b.collector(t, collector.Config{DSN: pgtest.Bouncer(t, "transaction")})
	if scoped, _ := collector.DBPool(c).Scoped(); !scoped {
		t.Fatal("the collector's pool through PgBouncer is not scoped")
	}
	peer := pgtest.PeerTx(t, b.ctx, b.schema)
	if _, err := peer.Exec(b.ctx, "LOCK TABLE resource_pool IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// Far above lock_timeout and statement_timeout (2 s): a poll that
	// reaches this deadline waited on the lock without either.
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	_, err := c.Poll(ctx)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("poll under another session's ACCESS EXCLUSIVE lock through PgBouncer: %v; want a lock timeout (SQLSTATE 55P03)", err)
	}
}
