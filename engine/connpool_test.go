package engine_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/faultproxy"
	"github.com/pooltop-dev/pooltop/internal/pgbouncer"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
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

// Through PgBouncer a transaction's settings travel inside it, and they
// must not take its snapshot: the isolation level can still be set after
// Begin (the starvation scenario's report reads in REPEATABLE READ), and
// the snapshot is that of the transaction's first statement, not of its
// settings.
func TestScopedBeginTakesNoSnapshotThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := pgtest.MigratedSchema(t)
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: pgtest.Bouncer(t, "transaction"), Schema: schema, MaxConns: 4, LockTimeout: 1234 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if scoped, _ := pool.Scoped(); !scoped {
		t.Fatal("a pool through PgBouncer is not scoped")
	}
	eng := engine.New(pool)
	if _, err := eng.Seed(ctx, 10); err != nil {
		t.Fatal(err)
	}
	if n, err := eng.HoldFree(ctx, 3, 0, nil); err != nil || n != 3 {
		t.Fatalf("the starvation scenario's REPEATABLE READ report through PgBouncer: held %d, %v; want 3 ids", n, err)
	}

	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
		t.Fatalf("set the isolation level after Begin through PgBouncer: %v", err)
	}
	// Written after Begin, before the transaction's first statement: seen.
	if err := pgtest.Exec(ctx, "INSERT INTO "+schema+".resource_pool (identifier) VALUES ('before')"); err != nil {
		t.Fatal(err)
	}
	var n int
	var lt, iso string
	if err := tx.QueryRow(ctx, "SELECT count(*), current_setting('lock_timeout'), current_setting('transaction_isolation') FROM resource_pool").Scan(&n, &lt, &iso); err != nil {
		t.Fatal(err)
	}
	if n != 11 || lt != "1234ms" || iso != "repeatable read" {
		t.Fatalf("first read of a transaction begun through PgBouncer: %d ids, lock_timeout %q, isolation %q; want 11 (the one added before it), 1234ms, repeatable read", n, lt, iso)
	}
	// Written after its first statement: not seen (REPEATABLE READ holds).
	if err := pgtest.Exec(ctx, "INSERT INTO "+schema+".resource_pool (identifier) VALUES ('after')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM resource_pool").Scan(&n); err != nil || n != 11 {
		t.Fatalf("second read: %d ids (%v); want the first read's 11", n, err)
	}
}

// A reset through PgBouncer on a database whose transactions are
// REPEATABLE READ by default: it locks the pool, then looks for holders.
// Its snapshot must be taken after the lock, or a claim committed while
// the reset waited for the lock is missed and its id emptied from under
// its holder.
func TestResetUnderRepeatableReadThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := pgtest.Database(t, "rr_")
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	const schema = "public"
	if _, err := migrations.Apply(ctx, cfg, schema, migrations.Options{}); err != nil {
		t.Fatal(err)
	}
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{cfg.Database}.Sanitize()+" SET default_transaction_isolation = 'repeatable read'"); err != nil {
		t.Fatal(err)
	}
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Server: dbURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Stop)
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: b.DSN(), Schema: schema, MaxConns: 2, LockTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if scoped, _ := pool.Scoped(); !scoped {
		t.Fatal("a pool through PgBouncer is not scoped")
	}
	eng := engine.New(pool)
	if _, err := eng.Seed(ctx, 10); err != nil {
		t.Fatal(err)
	}

	// A peer claims id 1 and keeps its transaction open: the reset's lock
	// waits for it.
	peer, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close(context.Background())
	claim, err := peer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = claim.Rollback(context.Background()) }()
	if _, err := claim.Exec(ctx, `UPDATE resource_pool SET status = 'PENDING', holder = 'peer', lease_token = lease_token + 1,
		leased_until = clock_timestamp() + interval '1 hour', updated_at = clock_timestamp() WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	var peerPID int32
	if err := claim.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&peerPID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- eng.ResetPool(ctx, "") }()
	// (PgBouncer does not pass application_name on to the server: the
	// reset's session is the one the peer blocks.)
	pgtest.Eventually(t, "the reset waiting for the peer's lock", 10*time.Second, func() bool {
		var n int
		err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND $1::int = ANY(pg_blocking_pids(pid))`, peerPID).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	if err := claim.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	err = <-done
	if !errors.Is(err, engine.ErrResetRefused) || !strings.Contains(err.Error(), `"peer"`) {
		t.Fatalf("reset that waited for the peer's claim of id 1: %v; want a refusal naming the peer's live lease", err)
	}
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM resource_pool").Scan(&n); err != nil || n != 10 {
		t.Fatalf("after the refusal the pool has %d rows (%v), want its 10", n, err)
	}
}

// The SET LOCAL a scoped transaction begins with gives each setting the
// value set_config gives it, quotes, case and lists included: the server
// itself compares them (a list by the schemas it names).
func TestSetLocalMatchesSetConfig(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn := pgtest.Conn(t, "public")
	// Schemas of awkward names, made for the test: a search_path is
	// compared by the schemas it finds.
	suffix := pgtest.UniqueName("_")
	names := map[string]string{}
	for _, n := range []string{"plain", "MyPool", "mypool", `we"ird`, "it's"} {
		names[n] = n + suffix
		quoted := pgx.Identifier{names[n]}.Sanitize()
		if err := pgtest.Exec(ctx, "CREATE SCHEMA "+quoted); err != nil {
			t.Fatal(err)
		}
		pgtest.DropAtCleanup(t, "DROP SCHEMA "+quoted)
	}
	q := func(n string) string { return pgx.Identifier{names[n]}.Sanitize() }
	for _, s := range []engine.Setting{
		{Name: "search_path", Value: q("plain")},
		{Name: "search_path", Value: q("MyPool") + ", public"},
		{Name: "search_path", Value: "MyPool" + suffix + `,"$user" ,  ` + q(`we"ird`)},
		{Name: "search_path", Value: q("it's")},
		{Name: "application_name", Value: `it's a \ name`},
		{Name: "lock_timeout", Value: "1234"},
		{Name: "statement_timeout", Value: "30000"},
		{Name: "default_transaction_read_only", Value: "on"},
		{Name: "plan_cache_mode", Value: "force_generic_plan"},
		{Name: "pooltop.custom", Value: "x'y"},
	} {
		set, err := engine.SetLocal(s.Name, s.Value)
		if err != nil {
			t.Fatalf("%s = %q: %v", s.Name, s.Value, err)
		}
		read := "SELECT current_setting($1)"
		if s.Name == "search_path" {
			read = "SELECT current_schemas(false)::text WHERE $1 <> ''"
		}
		var viaSet, viaConfig string
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, set); err != nil {
				return err
			}
			if err := tx.QueryRow(ctx, read, s.Name).Scan(&viaSet); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "SELECT set_config($1, $2, true)", s.Name, s.Value); err != nil {
				return err
			}
			return tx.QueryRow(ctx, read, s.Name).Scan(&viaConfig)
		})
		if err != nil {
			t.Fatalf("%s: %v", set, err)
		}
		if viaSet != viaConfig {
			t.Errorf("%s = %q: %s gives %q, set_config %q", s.Name, s.Value, set, viaSet, viaConfig)
		}
	}
}

// A scoped pool whose statements are described ahead (QualifiedNames, the
// collector's) describes each new statement in an exchange before its
// batch, and the description parses the statement, which locks the tables
// it reads: under another session's ACCESS EXCLUSIVE lock, the statement,
// alone or in a batch, ends with the pool's lock_timeout instead of waiting
// as long as the lock is held. Afterwards the pool goes on.
func TestDescribedStatementsUnderLockTimeoutThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	schema := pgtest.MigratedSchema(t)
	cfg, err := pgxpool.ParseConfig(pgtest.Bouncer(t, "transaction"))
	if err != nil {
		t.Fatal(err)
	}
	pool, err := engine.NewPool(ctx, cfg, engine.PoolOptions{QualifiedNames: true, Settings: []engine.Setting{
		{Name: "lock_timeout", Value: "100"}, {Name: "statement_timeout", Value: "5000"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if scoped, _ := pool.Scoped(); !scoped {
		t.Fatal("a pool through PgBouncer is not scoped")
	}
	peer := pgtest.PeerTx(t, ctx, schema)
	if _, err := peer.Exec(ctx, "LOCK TABLE resource_pool IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{schema, "resource_pool"}.Sanitize()
	// Far above both timeouts: a statement that reaches this deadline
	// waited on the lock without them.
	wait, stop := context.WithTimeout(ctx, 15*time.Second)
	defer stop()
	var n int
	err = pool.QueryRow(wait, "SELECT count(*) FROM "+table).Scan(&n)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("a described statement under another session's ACCESS EXCLUSIVE lock: %v; want a lock timeout (55P03)", err)
	}
	b := &pgx.Batch{}
	b.Queue("SELECT 1")
	b.Queue("SELECT max(id) FROM " + table)
	if err := pool.SendBatch(wait, b).Close(); !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
		t.Fatalf("a described batch under the lock: %v; want a lock timeout (55P03)", err)
	}
	if err := peer.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil || n != 0 {
		t.Fatalf("once the lock is gone: %d rows, %v", n, err)
	}
}

// A server that does not answer at the start (a server of a pool over
// several) is reached later through ConnectLater. Behind PgBouncer its
// connections, opened once it answers, must carry the settings inside
// their transactions as any other's: sent as startup parameters they are
// refused (08P01, and the server looks down for good) or, with
// ignore_startup_parameters, dropped, and the reset's LOCK waits without
// a lock_timeout. Straight to PostgreSQL the same pool works as well.
func TestConnectLaterThroughPgBouncer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		bouncer bool
		ignore  []string
	}{
		{"refusing-parameters", true, nil},
		{"ignoring-parameters", true, []string{"lock_timeout", "statement_timeout", "search_path"}},
		{"direct", false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			schema := pgtest.MigratedSchema(t)
			server := pgtest.DSN()
			if tc.bouncer {
				server = pgtest.Bouncer(t, "transaction", tc.ignore...)
			}
			u, err := url.Parse(server)
			if err != nil {
				t.Fatal(err)
			}
			proxy, err := faultproxy.New(u.Host)
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = proxy.Close() }()
			u.Host = proxy.Addr()
			opts := engine.ConnOptions{DSN: u.String(), Schema: schema, MaxConns: 4, LockTimeout: 250 * time.Millisecond}

			proxy.Down()
			if _, err := engine.Connect(ctx, opts); !engine.Unreachable(err) {
				t.Fatalf("connect while the server is down: %v; want it unreachable", err)
			}
			pool, err := engine.ConnectLater(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer pool.Close()
			proxy.Up()

			var sp, lt string
			if err := pool.QueryRow(ctx, "SELECT current_setting('search_path'), current_setting('lock_timeout')").Scan(&sp, &lt); err != nil {
				t.Fatalf("the server, up again: %v", err)
			}
			if want := (pgx.Identifier{schema}).Sanitize(); sp != want && sp != schema || lt != "250ms" {
				t.Fatalf("a statement on the server reached later ran with search_path %q, lock_timeout %q: the settings did not travel", sp, lt)
			}
			eng := engine.New(pool)
			if n, err := eng.Seed(ctx, 10); err != nil || n != 10 {
				t.Fatalf("seed on the server reached later: %d, %v", n, err)
			}
			// A peer holds a row: the reset's LOCK waits for it, and ends
			// at the lock timeout, well before this deadline.
			peer := pgtest.PeerTx(t, ctx, schema)
			if _, err := peer.Exec(ctx, "SELECT id FROM resource_pool WHERE id = 1 FOR UPDATE"); err != nil {
				t.Fatal(err)
			}
			wait, stop := context.WithTimeout(ctx, 15*time.Second)
			defer stop()
			err = eng.ResetPool(wait, "")
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code != "55P03" {
				t.Fatalf("reset while a peer holds a row, on the server reached later: %v; want a lock timeout (55P03)", err)
			}
		})
	}
}
