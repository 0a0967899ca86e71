// Package pgtest gives tests a real PostgreSQL: TEST_DATABASE_URL when set,
// otherwise a private server started with pgembed for the test binary. Each
// test gets its own migrated schema, so tests run in parallel without seeing
// each other's rows. There is no skip: a test that needs a database fails
// when none can be had.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pooltop-dev/pooltop/engine"
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
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		s, err := pgembed.Start(ctx, pgembed.Options{Database: "pooltop_test"})
		cancel()
		if err != nil {
			fmt.Fprintf(os.Stderr, "pgtest: cannot start PostgreSQL for the tests: %v (or set TEST_DATABASE_URL)\n", err)
			return 1
		}
		server = s
		defer s.Stop()
		dsn = s.DSN()
	}
	return m.Run()
}

// DSN is the connection string of the test database.
func DSN() string { return dsn }

// Server is the embedded server, or nil when TEST_DATABASE_URL is used.
func Server() *pgembed.Server { return server }

var unsafe = regexp.MustCompile(`[^a-z0-9_]+`)

// Schema creates an empty schema named after the test and drops it at cleanup.
func Schema(t testing.TB) string {
	t.Helper()
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := strings.ToLower(t.Name())
	name = unsafe.ReplaceAllString(name, "_")
	if len(name) > 40 {
		name = name[:40]
	}
	schema := "t_" + name + "_" + hex.EncodeToString(b[:])
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("pgtest: connect: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create schema: %v", err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), dsn)
		if err != nil {
			t.Errorf("pgtest: drop schema: %v", err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("pgtest: drop schema %s: %v", schema, err)
		}
	})
	return schema
}

// Options tune Pool.
type Options struct {
	MaxConns int32
	AppName  string
}

// MigratedSchema creates a schema for the test and applies the migrations.
func MigratedSchema(t testing.TB) string {
	t.Helper()
	schema := Schema(t)
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	if _, err := migrations.Apply(context.Background(), cfg, schema, migrations.Options{}); err != nil {
		t.Fatalf("pgtest: migrate: %v", err)
	}
	return schema
}

// Pool opens a pool on schema; it is closed at cleanup.
func Pool(t testing.TB, schema string, o Options) *pgxpool.Pool {
	t.Helper()
	if o.MaxConns == 0 {
		o.MaxConns = 8
	}
	if o.AppName == "" {
		o.AppName = "pooltop-test"
	}
	pool, err := engine.Connect(context.Background(), engine.ConnOptions{
		DSN: dsn, Schema: schema, AppName: o.AppName, MaxConns: o.MaxConns,
	})
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
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
	schema := MigratedSchema(t)
	pool := Pool(t, schema, o)
	eng := engine.New(pool)
	if size > 0 {
		if _, err := eng.Seed(ctx, size); err != nil {
			t.Fatalf("pgtest: seed %d ids: %v", size, err)
		}
	}
	return Seeded{Schema: schema, Pool: pool, Engine: eng}
}
