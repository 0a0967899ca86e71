package migrations_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
)

// A migration holds its schema's lock for as long as it runs (an adoption
// building indexes on a big table: minutes). Meanwhile a migration of
// another schema goes ahead at once, and one of the same schema waits its
// turn, past the session's lock_timeout, instead of failing.
func TestMigrationsTakeTurnsPerSchema(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	busy, other := pgtest.Schema(t), pgtest.Schema(t)
	holder := pgtest.Conn(t, busy)
	// The lock a running migration of busy holds.
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock(1886351212, hashtext($1))", busy); err != nil {
		t.Fatal(err)
	}
	cfg := config(t)
	cfg.RuntimeParams["lock_timeout"] = "200" // the CLI's sessions carry a lock_timeout
	if _, err := migrations.Apply(ctx, cfg, other, migrations.Options{}); err != nil {
		t.Fatalf("migrate %s while %s is being migrated: %v", other, busy, err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := migrations.Apply(ctx, cfg, busy, migrations.Options{})
		done <- err
	}()
	pgtest.Eventually(t, "the second migration waiting on the lock", 20*time.Second, func() bool {
		var waiting bool
		if err := holder.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND classid = 1886351212)").Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the second migration of %s ended while the first held the lock: %v", busy, err)
		default:
		}
		return waiting
	})
	// Five times its lock_timeout later it still waits, rather than fail.
	select {
	case err := <-done:
		t.Fatalf("the second migration ended while the lock was held: %v", err)
	case <-time.After(time.Second):
	}
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock(1886351212, hashtext($1))", busy); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("the second migration, after its turn: %v", err)
	}
	var version int64
	if err := holder.QueryRow(ctx, "SELECT max(version_id) FROM "+pgx.Identifier{busy, migrations.VersionTable}.Sanitize()).Scan(&version); err != nil || version == 0 {
		t.Fatalf("schema %s not migrated: version %d (%v)", busy, version, err)
	}
}
