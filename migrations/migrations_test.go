package migrations_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// A pool built by hand after seed 000 is upgraded in place: its rows keep
// their state and it gains what pooltop needs.
func TestUpgradeSeedBuiltTable(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.Schema(t)
	conn := pgtest.Conn(t, schema)
	_, err := conn.Exec(ctx, `
CREATE TABLE resource_pool (
    id            BIGSERIAL PRIMARY KEY,
    identifier    VARCHAR(255) UNIQUE NOT NULL,
    status        VARCHAR(20) DEFAULT 'UNUSED',
    leased_until  TIMESTAMP WITH TIME ZONE,
    lease_token   BIGINT DEFAULT 0,
    updated_at    TIMESTAMP WITH TIME ZONE DEFAULT NOW()
);
INSERT INTO resource_pool (identifier) VALUES ('a'), ('b');
UPDATE resource_pool SET status = 'PENDING', lease_token = 3 WHERE identifier = 'b';`)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // the second run is a no-op
		v, err := migrations.Apply(ctx, cfg, schema)
		if err != nil || v != 1 {
			t.Fatalf("apply #%d: version %d, %v", i+1, v, err)
		}
	}
	var status string
	var token int64
	var holder *string
	if err := conn.QueryRow(ctx, "SELECT status, lease_token, holder FROM resource_pool WHERE identifier = 'b'").Scan(&status, &token, &holder); err != nil {
		t.Fatal(err)
	}
	if status != "PENDING" || token != 3 || holder != nil {
		t.Fatalf("row changed by the upgrade: %s %d %v", status, token, holder)
	}
	var indexes int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1
		AND indexname IN ('idx_resource_unused', 'idx_resource_pending_expiry')`, schema).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != 2 {
		t.Fatalf("%d of the 2 partial indexes exist", indexes)
	}
}

// The per-table autovacuum settings of a queue-like table are in place.
func TestAutovacuumSettings(t *testing.T) {
	schema := pgtest.MigratedSchema(t)
	conn := pgtest.Conn(t, schema)
	var opts []string
	if err := conn.QueryRow(context.Background(), "SELECT reloptions FROM pg_class WHERE oid = 'resource_pool'::regclass").Scan(&opts); err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"autovacuum_vacuum_scale_factor=0.02": false, "autovacuum_vacuum_cost_delay=0": false}
	for _, o := range opts {
		if _, ok := want[o]; ok {
			want[o] = true
		}
	}
	for o, found := range want {
		if !found {
			t.Errorf("reloption %s missing from %v", o, opts)
		}
	}
}
