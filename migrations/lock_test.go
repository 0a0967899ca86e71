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
// turn, past the session's lock_timeout and statement_timeout, instead of
// failing.
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
	// The CLI's sessions carry a lock_timeout and a statement_timeout (2 s
	// and 30 s); shorter here, the wait below outlasts both.
	cfg.RuntimeParams["lock_timeout"] = "200"
	cfg.RuntimeParams["statement_timeout"] = "400"
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
	// It still waits once it has waited longer than both timeouts, rather than fail.
	pgtest.Eventually(t, "the second migration waiting past its timeouts", 20*time.Second, func() bool {
		var long bool
		// (The waiting statement's start, not pg_locks.waitstart: that
		// column came in PostgreSQL 14.)
		if err := holder.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_stat_activity a USING (pid)
			WHERE l.locktype = 'advisory' AND NOT l.granted AND l.classid = 1886351212 AND clock_timestamp() - a.query_start > interval '1 s')`).Scan(&long); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the second migration ended while the lock was held: %v", err)
		default:
		}
		return long
	})
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

// Adopting a big pool builds its indexes CONCURRENTLY, which waits for the
// transactions writing to the pool and then reads the whole table: minutes,
// past the session's statement_timeout, which must not cut the build short.
func TestConcurrentBuildOutlastsTheSessionTimeouts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := pgtest.Schema(t)
	conn := pgtest.Conn(t, schema)
	if _, err := conn.Exec(ctx, handBuiltPool); err != nil {
		t.Fatal(err)
	}
	// An application transaction in flight keeps the build waiting.
	tx := pgtest.PeerTx(t, ctx, schema) // committed below
	if _, err := tx.Exec(ctx, "UPDATE resource_pool SET status = 'PENDING', updated_at = now() WHERE id = 10"); err != nil {
		t.Fatal(err)
	}
	cfg := config(t)
	cfg.RuntimeParams["lock_timeout"] = "200"
	cfg.RuntimeParams["statement_timeout"] = "400"
	done := make(chan error, 1)
	go func() {
		_, err := migrations.Apply(ctx, cfg, schema, migrations.Options{Adopt: true})
		done <- err
	}()
	pgtest.Eventually(t, "the index build running past the statement_timeout", 20*time.Second, func() bool {
		var long bool
		err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE query LIKE 'CREATE INDEX CONCURRENTLY%' AND state = 'active' AND clock_timestamp() - query_start > interval '1 s')`).Scan(&long)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-done:
			t.Fatalf("the adoption ended while its index build waited: %v", err)
		default:
		}
		return long
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := inspect(t, conn, schema); st.PendingIndex == "" || len(st.Invalid) > 0 {
		t.Fatalf("after adoption: %+v", st)
	}
}
