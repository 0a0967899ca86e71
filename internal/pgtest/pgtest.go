// Package pgtest gives tests a real PostgreSQL: TEST_DATABASE_URL when set,
// otherwise a private server started with pgembed for the test binary. Each
// test gets its own migrated schema, so tests run in parallel without seeing
// each other's rows. There is no skip: a test that needs a database fails
// when none can be had.
package pgtest

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgbouncer"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/migrations"
)

var (
	dsn    string
	server *pgembed.Server
)

// Main starts the database, runs the tests and stops it. Call it from TestMain.
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run is Main without the exit, for TestMains that check more afterwards
// (goleak.VerifyTestMain takes anything with a Run method).
func Run(m *testing.M) int {
	dsn = os.Getenv("TEST_DATABASE_URL")
	if dsn == "" {
		// pg_stat_statements, for the tests of what pooltop reads from it;
		// a server whose binaries lack it starts without (and those tests
		// say so and fail).
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		s, err := pgembed.Start(ctx, pgembed.Options{Database: "pooltop_test", Settings: map[string]string{"shared_preload_libraries": "pg_stat_statements"}})
		if err != nil {
			s, err = pgembed.Start(ctx, pgembed.Options{Database: "pooltop_test"})
		}
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: cannot start PostgreSQL for the tests: %v (or set TEST_DATABASE_URL)\n", err)
			return 1
		}
		server = s
		defer func() { _ = s.Stop() }()
		dsn = s.DSN()
	}
	defer stopCitus()
	return m.Run()
}

// DSN is the connection string of the test database.
func DSN() string { return dsn }

// Server is the embedded server, or nil when TEST_DATABASE_URL is used.
func Server() *pgembed.Server { return server }

var unsafe = regexp.MustCompile(`[^a-z0-9_]+`)

// UniqueName is prefix and eight random hex digits: a name for a schema or
// a database that no other test, nor an earlier run, uses.
func UniqueName(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// Schema creates an empty schema named after the test and drops it at cleanup.
func Schema(t testing.TB) string {
	t.Helper()
	name := strings.ToLower(t.Name())
	name = unsafe.ReplaceAllString(name, "_")
	if len(name) > 40 {
		name = name[:40]
	}
	schema := UniqueName("t_" + name + "_")
	quoted := pgx.Identifier{schema}.Sanitize()
	if err := Exec(context.Background(), "CREATE SCHEMA "+quoted); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	DropAtCleanup(t, "DROP SCHEMA "+quoted+" CASCADE")
	return schema
}

// Exec runs statements, in order, on a short-lived connection to the test
// database, outside any test's schema.
func Exec(ctx context.Context, statements ...string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, s := range statements {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	return nil
}

// DropAtCleanup runs statements (a DROP, as a rule) with Exec when the test
// ends, and reports a failure with t.Error: what a test creates outside its
// own schema, it removes this way.
func DropAtCleanup(t testing.TB, statements ...string) {
	t.Helper()
	t.Cleanup(func() {
		if err := Exec(context.Background(), statements...); err != nil {
			t.Errorf("pgtest: cleanup: %v", err)
		}
	})
}

// Options tune Pool, and Setup's deadline.
type Options struct {
	MaxConns int32
	AppName  string
	// Timeout bounds Setup's context; 0 means two minutes.
	Timeout time.Duration
	// Partitions, when not 0, makes the pool hash-partitioned on id in that
	// many partitions (migrate --partitions).
	Partitions int
	// LockTimeout is the sessions' lock_timeout; 0 means the engine's 2 s.
	LockTimeout time.Duration
}

// MigratedSchema creates a schema for the test and applies the migrations.
func MigratedSchema(t testing.TB) string {
	t.Helper()
	return PartitionedSchema(t, 0)
}

// PartitionedSchema is MigratedSchema with the pool hash-partitioned on id
// in partitions partitions (0: a plain table).
func PartitionedSchema(t testing.TB, partitions int) string {
	t.Helper()
	schema := Schema(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if _, err := migrations.Apply(context.Background(), cfg, schema, migrations.Options{Partitions: partitions}); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return schema
}

// Pool opens a pool on schema; it is closed at cleanup.
func Pool(t testing.TB, schema string, o Options) *pgxpool.Pool {
	t.Helper()
	o.MaxConns = cmp.Or(o.MaxConns, 8)
	o.AppName = cmp.Or(o.AppName, "pooltop-test")
	pool, err := engine.Connect(context.Background(), engine.ConnOptions{
		DSN: dsn, Schema: schema, AppName: o.AppName, MaxConns: o.MaxConns, LockTimeout: o.LockTimeout,
	})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool.Raw()
}

// Conn opens one dedicated connection on schema, closed at cleanup. Tests use
// it to play a second party (another worker, a lock holder) on its own session.
func Conn(t testing.TB, schema string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	cfg.RuntimeParams["application_name"] = "pooltop-test-peer"
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// PoolQueryRow runs one query on schema with a short-lived connection and
// scans the single row into dst.
func PoolQueryRow(ctx context.Context, schema, sql string, dst ...any) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql).Scan(dst...)
}

// Runner lets a TestMain wrap the database around goleak's leak check:
// goleak.VerifyTestMain(pgtest.Runner{M: m}).
type Runner struct{ M *testing.M }

// Run starts the database, runs the tests and stops the database.
func (r Runner) Run() int { return Run(r.M) }

// Seeded is a migrated schema of the test's own, a pool on it and an engine
// over that pool, with size free ids: what most database tests start from.
type Seeded struct {
	Schema string
	Pool   *pgxpool.Pool
	Engine *engine.Engine
}

// NewSeeded builds a Seeded for the test; everything is dropped at cleanup.
func NewSeeded(t testing.TB, ctx context.Context, size int, o Options) Seeded {
	t.Helper()
	schema := PartitionedSchema(t, o.Partitions)
	pool := Pool(t, schema, o)
	eng := engine.New(pool)
	if size > 0 {
		if _, err := eng.Seed(ctx, size); err != nil {
			t.Fatalf("pgtest: seed %d ids: %v", size, err)
		}
	}
	return Seeded{Schema: schema, Pool: pool, Engine: eng}
}

// Setup is how most database tests begin: it marks the test parallel, gives
// it a context that ends after o.Timeout or when the test does, and builds a
// Seeded with size free ids on that context.
func Setup(t *testing.T, size int, o Options) (context.Context, Seeded) {
	t.Helper()
	t.Parallel()
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	t.Cleanup(cancel)
	return ctx, NewSeeded(t, ctx, size, o)
}

// PeerTx begins a transaction on a session of its own on schema (see Conn),
// rolled back at cleanup unless the test ends it first: the other party
// that holds row locks while the test acts.
func PeerTx(t testing.TB, ctx context.Context, schema string) pgx.Tx {
	t.Helper()
	tx, err := Conn(t, schema).Begin(ctx)
	if err != nil {
		t.Fatalf("pgtest: begin: %v", err)
	}
	t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	return tx
}

// Shapes are the pool layouts the tests of every invariant run over: a plain
// table and a pool hash-partitioned on id in four partitions.
var Shapes = []int{0, 4}

// ShapeName names a layout for a subtest: "plain" or "partitions=N".
func ShapeName(partitions int) string {
	if partitions == 0 {
		return "plain"
	}
	return fmt.Sprintf("partitions=%d", partitions)
}

// Eventually calls cond every few milliseconds until it returns true, and
// fails the test, naming what it waited for, when timeout passes first.
// cond runs on the test's goroutine: it may call t.Fatal itself.
func Eventually(t testing.TB, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
		<-tick.C
	}
}

// Bouncer starts a real PgBouncer in front of the test database, in mode
// ("transaction" or "session"), stopped at cleanup; ignore lists startup
// parameters it should accept and drop. It returns the URL that goes through
// it. A machine without pgbouncer fails the test: CI installs it.
func Bouncer(t testing.TB, mode string, ignore ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, err := pgbouncer.Start(ctx, pgbouncer.Options{Server: dsn, Mode: mode, Ignore: ignore})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(b.Stop)
	return b.DSN()
}

// Database creates a database of its own on the test server, named from
// prefix, dropped at cleanup, and returns its URL: a server of its own
// for a test of several servers, or a database pooltop did not make.
func Database(t testing.TB, prefix string) string {
	t.Helper()
	name := UniqueName(prefix)
	if err := Exec(context.Background(), "CREATE DATABASE "+name); err != nil {
		t.Fatalf("pgtest: create a database for the test (the test role needs CREATEDB): %v", err)
	}
	// Sessions the test left on the database would make the DROP fail.
	DropAtCleanup(t, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '"+name+"'",
		"DROP DATABASE IF EXISTS "+name)
	u, err := url.Parse(DSN())
	if err != nil || u.Scheme == "" {
		t.Fatalf("pgtest: the test DSN must be a URL here: %v", err)
	}
	u.Path = "/" + name
	return u.String()
}
