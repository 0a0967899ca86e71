package cli

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// The doctor on a pool without a PENDING index, larger than it reads whole,
// reports its findings from a sample of pages, marked estimated, and never
// scans the whole table: the pool table's seq_scan count does not move
// (a scan of a large pool would pass the collector's statement timeout and
// leave the doctor with nothing to say about the very pool it is for).
func TestDoctorWithoutPendingIndexScansNoWholeTable(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schema := pgtest.Schema(t)
	q := pgx.Identifier{schema}.Sanitize()
	setup := pgtest.Conn(t, schema)
	var setupPID int32
	if err := setup.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&setupPID); err != nil {
		t.Fatal(err)
	}
	// 300,000 rows, about 2,500 pages: more than the doctor reads whole.
	// Every tenth row is PENDING without a lease.
	if _, err := setup.Exec(ctx, `CREATE TABLE resource_pool (id bigint PRIMARY KEY, identifier text NOT NULL, status text NOT NULL DEFAULT 'UNUSED',
		leased_until timestamptz, lease_token bigint NOT NULL DEFAULT 0, updated_at timestamptz DEFAULT now());
	INSERT INTO resource_pool (id, identifier, status) SELECT g, 'r-' || g, CASE WHEN g % 10 = 0 THEN 'PENDING' ELSE 'UNUSED' END FROM generate_series(1, 300000) g;
	CREATE INDEX ON resource_pool (id) WHERE status = 'UNUSED'`); err != nil {
		t.Fatal(err)
	}
	if _, err := setup.Exec(ctx, `VACUUM ANALYZE resource_pool`); err != nil {
		t.Fatal(err)
	}
	role := "doctor_" + strings.TrimPrefix(schema, "t_")
	role = role[:min(len(role), 60)]
	rq := pgx.Identifier{role}.Sanitize()
	if _, err := setup.Exec(ctx, `CREATE ROLE `+rq+` LOGIN; GRANT USAGE ON SCHEMA `+q+` TO `+rq+`; GRANT SELECT ON `+q+`.resource_pool TO `+rq+`; GRANT pg_monitor TO `+rq); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pgtest.Exec(context.Background(), `DROP OWNED BY `+rq, `DROP ROLE `+rq)
	})
	if err := setup.Close(ctx); err != nil {
		t.Fatal(err)
	}
	scans := func() (seq, tupRead int64) {
		t.Helper()
		if err := pgtest.PoolQueryRow(ctx, schema, "SELECT seq_scan, seq_tup_read FROM pg_stat_user_tables WHERE relid = 'resource_pool'::regclass", &seq, &tupRead); err != nil {
			t.Fatal(err)
		}
		return seq, tupRead
	}
	waitGone(t, ctx, schema, "pid = $1", setupPID)
	seq0, read0 := scans()

	u, err := url.Parse(pgtest.DSN())
	if err != nil || u.Scheme == "" {
		t.Fatalf("the test DSN must be a URL here: %v", err)
	}
	u.User = url.User(role)
	r := pooltop(t, "doctor", "--dsn", u.String(), "--schema", schema)
	if r.code != exitViolation {
		t.Fatalf("doctor: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	waitGone(t, ctx, schema, "usename = $1", role)
	seq1, read1 := scans()
	if seq1 != seq0 || read1-read0 >= 150000 {
		t.Fatalf("the doctor scanned the pool: seq_scan %d → %d, seq_tup_read %d → %d (the table has 300,000 rows)", seq0, seq1, read0, read1)
	}
	for _, want := range []string{"FAIL  reaper_index", "FAIL  unleased_pending", "PENDING rows have no lease", "estimated from a sample of"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("doctor output lacks %q:\n%s", want, r.stdout)
		}
	}
}

// waitGone waits until no session matches cond ($1: arg) in
// pg_stat_activity. A backend writes its table statistics when it exits,
// before it leaves pg_stat_activity: once its sessions are gone, what they
// scanned is in pg_stat_user_tables.
func waitGone(t *testing.T, ctx context.Context, schema, cond string, arg any) {
	t.Helper()
	conn := pgtest.Conn(t, schema)
	pgtest.Eventually(t, "the sessions where "+cond+" gone", 30*time.Second, func() bool {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE "+cond, arg).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
	if err := conn.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
