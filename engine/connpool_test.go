package engine_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// Through PgBouncer in transaction mode, a server connection serves another
// client after every transaction, and PgBouncer refuses pooltop's startup
// parameters (or drops them, with ignore_startup_parameters). The pool then
// scopes every statement: the schema, the timeouts and the engine's whole
// cycle hold on whichever server connection runs them.
func TestPoolThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		mode   string
		ignore []string
	}{
		{"transaction", "transaction", nil},
		{"transaction-ignoring-parameters", "transaction", []string{"lock_timeout", "statement_timeout", "search_path"}},
		{"session", "session", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			schema := pgtest.MigratedSchema(t)
			url := pgtest.Bouncer(t, tc.mode, tc.ignore...)
			pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: url, Schema: schema, AppName: "pooler-test", MaxConns: 8, LockTimeout: 1234 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			if scoped, why := pool.Scoped(); !scoped {
				t.Fatalf("a pool through PgBouncer is not scoped")
			} else {
				t.Logf("scoped: %s", why)
			}
			// Every statement sees the settings, however the server
			// connections are shared (the pool has 8 clients, PgBouncer 4
			// server connections).
			for i := 0; i < 20; i++ {
				var sp, lt string
				if err := pool.QueryRow(ctx, "SELECT current_setting('search_path'), current_setting('lock_timeout')").Scan(&sp, &lt); err != nil {
					t.Fatal(err)
				}
				if want := (pgx.Identifier{schema}).Sanitize(); sp != want && sp != schema || lt != "1234ms" {
					t.Fatalf("statement %d ran with search_path %q, lock_timeout %q: the settings did not travel", i, sp, lt)
				}
			}
			// The engine's cycle, in the right schema: seed, claim, commit
			// through the fence, a stale token rejected.
			eng := engine.New(pool)
			if n, err := eng.Seed(ctx, 100); err != nil || n != 100 {
				t.Fatalf("seed: %d, %v", n, err)
			}
			var here int
			if err := pgtest.PoolQueryRow(ctx, schema, "SELECT count(*) FROM resource_pool", &here); err != nil || here != 100 {
				t.Fatalf("the schema's pool holds %d ids after seeding 100 through PgBouncer (%v)", here, err)
			}
			leases, err := eng.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "h", TTL: time.Minute, N: 3})
			if err != nil || len(leases) != 3 {
				t.Fatalf("acquire: %v, %v", leases, err)
			}
			l := leases[0]
			if _, err := eng.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, RequestID: "r1"}); err != nil {
				t.Fatalf("commit: %v", err)
			}
			if _, err := eng.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: leases[1].ID, Token: leases[1].Token - 1, RequestID: "r2"}); err == nil {
				t.Fatal("a stale token's commit was accepted through PgBouncer")
			}
			// The blocking strategy runs in a transaction (Begin): the
			// settings hold there too.
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var lt string
			if err := tx.QueryRow(ctx, "SELECT current_setting('lock_timeout')").Scan(&lt); err != nil || lt != "1234ms" {
				t.Fatalf("in a transaction lock_timeout is %q (%v)", lt, err)
			}
			_ = tx.Rollback(ctx)
			// A statement that fails leaves the pool usable.
			if _, err := pool.Exec(ctx, "SELECT 1/0"); err == nil {
				t.Fatal("division by zero succeeded")
			}
			var one int
			if err := pool.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
				t.Fatalf("after a failed statement: %v", err)
			}
			if err := pool.QueryRow(ctx, "SELECT 1 WHERE false").Scan(&one); !errors.Is(err, pgx.ErrNoRows) {
				t.Fatalf("no row: %v, want pgx.ErrNoRows", err)
			}
		})
	}
}

// Straight to PostgreSQL the settings are startup parameters, and nothing
// is scoped.
func TestPoolDirectIsNotScoped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: pgtest.DSN(), Schema: pgtest.MigratedSchema(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if scoped, why := pool.Scoped(); scoped {
		t.Fatalf("a direct pool is scoped: %s", why)
	}
}

// A scoped read-only pool cannot write, through PgBouncer, whichever server
// connection it lands on.
func TestScopedReadOnlyThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.MigratedSchema(t)
	url := pgtest.Bouncer(t, "transaction")
	cfg, err := engine.PoolConfig(engine.ConnOptions{DSN: url, Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	for k := range cfg.ConnConfig.RuntimeParams {
		if k != "application_name" {
			delete(cfg.ConnConfig.RuntimeParams, k)
		}
	}
	pool, err := engine.NewPool(ctx, cfg, engine.PoolOptions{Settings: []engine.Setting{{Name: "search_path", Value: schema}, {Name: "default_transaction_read_only", Value: "on"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for i := 0; i < 10; i++ {
		_, err := pool.Exec(ctx, "UPDATE resource_pool SET lease_token = lease_token + 1")
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "25006" {
			t.Fatalf("write %d through a read-only scoped pool: %v, want SQLSTATE 25006", i, err)
		}
	}
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	b.Queue("DELETE FROM resource_pool")
	if err := pool.SendBatch(ctx, b).Close(); err == nil {
		t.Fatal("a batch wrote through a read-only scoped pool")
	}
}

// A statement cancelled while it waits on a lock, through PgBouncer: the
// scoped pool drops the connection rather than send a cancel request (on
// which PgBouncer 1.18 has been seen to crash, "bad client state"), and
// PgBouncer goes on serving. (The server's backend waits on until its
// lock_timeout or statement_timeout, which the scoped pool sets.)
func TestCancelThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := pgtest.MigratedSchema(t)
	url := pgtest.Bouncer(t, "transaction")
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: url, Schema: schema, MaxConns: 4, LockTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := engine.New(pool).Seed(ctx, 10); err != nil {
		t.Fatal(err)
	}
	peer := pgtest.PeerTx(t, ctx, schema)
	if _, err := peer.Exec(ctx, "SELECT * FROM resource_pool WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		wait, stop := context.WithTimeout(ctx, 200*time.Millisecond)
		_, err := pool.Exec(wait, "SELECT * FROM resource_pool WHERE id = 1 FOR UPDATE")
		stop()
		if err == nil {
			t.Fatal("a statement waiting on a held row lock returned without error")
		}
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM resource_pool").Scan(&n); err != nil || n != 10 {
			t.Fatalf("PgBouncer after a cancelled statement (%d): %d, %v", i, n, err)
		}
	}
}
