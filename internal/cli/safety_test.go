package cli

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// productionDB creates a database of its own on the test server, holding a
// hand-built pool in public (5,000 ids, 420 PENDING, no marker): the
// database an on-call shell points at. It returns its URL and a function
// that fingerprints everything in it.
func productionDB(t *testing.T) (string, func() string) {
	t.Helper()
	ctx := context.Background()
	dsn := pgtest.Database(t, "prod_")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	_, err = conn.Exec(ctx, `
CREATE TABLE resource_pool (
    id BIGSERIAL PRIMARY KEY, identifier VARCHAR(255) UNIQUE NOT NULL, status VARCHAR(20) DEFAULT 'UNUSED',
    leased_until TIMESTAMPTZ, lease_token BIGINT DEFAULT 0, updated_at TIMESTAMPTZ DEFAULT NOW());
CREATE INDEX idx_free ON resource_pool (id) WHERE status = 'UNUSED';
INSERT INTO resource_pool (identifier) SELECT 'prod-' || g FROM generate_series(1, 5000) g;
UPDATE resource_pool SET status = 'PENDING', leased_until = now() + interval '1 hour' WHERE id % 12 = 0 AND id <= 3600;
UPDATE resource_pool SET leased_until = now() - interval '1 hour' WHERE id % 12 = 0 AND id <= 1440;`)
	if err != nil {
		t.Fatal(err)
	}
	fingerprint := func() string {
		var s string
		err := conn.QueryRow(ctx, `SELECT (SELECT string_agg(n.nspname || '.' || c.relname, ',' ORDER BY 1) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast'))
			|| (SELECT string_agg(attname, ',' ORDER BY attname) FROM pg_attribute WHERE attrelid = 'public.resource_pool'::regclass AND attnum > 0 AND NOT attisdropped)
			|| (SELECT md5(string_agg(r::text, ',' ORDER BY id)) FROM public.resource_pool r)`).Scan(&s)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return dsn, fingerprint
}

// loadCommands are the commands that generate load, at their cheapest.
var loadCommands = [][]string{
	{"--headless", "--count", "1", "--pool-size", "1000"},
	{"bench", "--duration", "1s", "--warmup", "0s", "--workers", "1", "--strategies", "skip-locked", "--no-pgbench", "--pool-size", "20000"},
	{"chaos", "--scenario", "healthy", "--duration", "1s", "--pool-size", "1000"},
}

// The demo, bench and chaos never take their server from the environment:
// with PG* or DATABASE_URL naming a production database they start a
// throwaway server and leave production as it was. (Not parallel: it sets
// the environment.)
func TestLoadCommandsIgnoreTheEnvironment(t *testing.T) {
	dsn, fingerprint := productionDB(t)
	before := fingerprint()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	envs := map[string]map[string]string{
		"PG*":          {"PGHOST": cfg.Host, "PGPORT": strconv.Itoa(int(cfg.Port)), "PGUSER": cfg.User, "PGDATABASE": cfg.Database, "PGDATA": "/nonexistent/prod"},
		"DATABASE_URL": {"DATABASE_URL": dsn},
	}
	for name, env := range envs {
		for k, v := range env {
			t.Setenv(k, v)
		}
		for _, args := range loadCommands {
			r := pooltop(t, args...)
			if r.code != 0 || !strings.Contains(r.stderr, "started a throwaway PostgreSQL") || !strings.Contains(r.stderr, "never take their server from the environment") {
				t.Fatalf("%s set, pooltop %s: exit %d, stderr %s", name, strings.Join(args, " "), r.code, r.stderr)
			}
			if after := fingerprint(); after != before {
				t.Fatalf("%s set, pooltop %s changed the database it names", name, strings.Join(args, " "))
			}
		}
		// Reading commands do take it (like psql): watch reads the pool there.
		r := pooltop(t, "watch", "--headless", "--count", "1")
		if r.code != 0 || !strings.Contains(r.stdout, "unused") {
			t.Fatalf("%s set, watch: exit %d %s %s", name, r.code, r.stdout, r.stderr)
		}
		for k := range env {
			t.Setenv(k, "")
		}
	}
	if after := fingerprint(); after != before {
		t.Fatal("watch changed the database")
	}
}

// With --dsn, the load commands refuse a database pooltop did not set up,
// before writing anything; migrate does not adopt a foreign pool without
// --allow-writes, and its dry run writes nothing.
func TestLoadCommandsRefuseAForeignDatabase(t *testing.T) {
	t.Parallel()
	dsn, fingerprint := productionDB(t)
	before := fingerprint()
	one := func(r result, code int, want, what string) {
		t.Helper()
		if r.code != code || !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("%s: exit %d, stderr %q; want exit %d and one line with %q", what, r.code, r.stderr, code, want)
		}
		if after := fingerprint(); after != before {
			t.Fatalf("%s changed the database", what)
		}
	}
	one(pooltop(t, "--headless", "--count", "1", "--dsn", dsn), exitError, "pooltop did not create (no pooltop marker)", "the demo on the foreign pool")
	for _, args := range loadCommands[1:] {
		one(pooltop(t, append(args, "--dsn", dsn)...), exitError, "where pooltop set nothing up", args[0]+" in a database without a pooltop schema")
	}
	one(pooltop(t, "migrate", "--dsn", dsn), exitError, "--allow-writes", "migrate on the foreign pool")
	plan := pooltop(t, "migrate", "--dry-run", "--dsn", dsn).must(t)
	if !strings.Contains(plan.stdout, "CREATE INDEX CONCURRENTLY") || !strings.Contains(plan.stdout, "run only with --allow-writes") {
		t.Fatalf("dry run: %s", plan.stdout)
	}
	if after := fingerprint(); after != before {
		t.Fatal("migrate --dry-run changed the database")
	}

	// A pooltop schema created beside it makes the database pooltop's:
	// bench runs there in its own schema, and the demo on the new schema.
	pooltop(t, "migrate", "--dsn", dsn, "--schema", "pooltop_demo").must(t)
	pooltop(t, append(loadCommands[1], "--dsn", dsn)...).must(t)
	pooltop(t, append(loadCommands[0], "--dsn", dsn, "--schema", "pooltop_demo")...).must(t)
	// The foreign pool itself is still refused to the demo.
	r := pooltop(t, "--headless", "--count", "1", "--dsn", dsn)
	if r.code != exitError || !strings.Contains(r.stderr, "did not create") {
		t.Fatalf("demo on the foreign pool: exit %d %s", r.code, r.stderr)
	}

	// Adopted with --allow-writes, it is still not the demo's to burn.
	pooltop(t, "migrate", "--dsn", dsn, "--allow-writes").must(t)
	r = pooltop(t, "--headless", "--count", "1", "--dsn", dsn)
	if r.code != exitError || !strings.Contains(r.stderr, "adopted") {
		t.Fatalf("demo on the adopted pool: exit %d %s", r.code, r.stderr)
	}
	pooltop(t, "--headless", "--count", "1", "--dsn", dsn, "--allow-writes").must(t)
}
