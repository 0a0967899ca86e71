package collector_test

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// A shape is a pool as users have them, not only as pooltop builds it.
type shape struct {
	name string
	// ddl creates resource_pool in the current schema; "" uses pooltop's migration.
	ddl string
	// interleaved mixes the states over the whole id range (a leak, states
	// after reaping); otherwise ids are consumed in order from the lowest.
	interleaved bool
	// partitions: with ddl "", pooltop's migration with the pool
	// hash-partitioned in this many partitions (migrate --partitions).
	partitions int
}

var shapes = []shape{
	{name: "ordered"},
	{name: "leak", interleaved: true},
	{name: "hand-built", interleaved: true, ddl: `
CREATE TABLE resource_pool (
    id BIGSERIAL PRIMARY KEY, identifier VARCHAR(255) UNIQUE NOT NULL, status VARCHAR(20) DEFAULT 'UNUSED',
    leased_until TIMESTAMPTZ, lease_token BIGINT DEFAULT 0, updated_at TIMESTAMPTZ DEFAULT NOW());
CREATE INDEX idx_resource_unused ON resource_pool (id) WHERE status = 'UNUSED';`},
	{name: "partitioned", interleaved: true, ddl: `
CREATE TABLE resource_pool (
    id bigint NOT NULL, identifier text NOT NULL, status text NOT NULL DEFAULT 'UNUSED',
    leased_until timestamptz, lease_token bigint NOT NULL DEFAULT 0, updated_at timestamptz DEFAULT now(), holder text,
    PRIMARY KEY (id)) PARTITION BY HASH (id);
DO $$ BEGIN FOR i IN 0..7 LOOP
    EXECUTE format('CREATE TABLE resource_pool_%s PARTITION OF resource_pool FOR VALUES WITH (MODULUS 8, REMAINDER %s)', i, i);
END LOOP; END $$;
CREATE INDEX idx_resource_unused ON resource_pool (id) WHERE status = 'UNUSED';
CREATE INDEX idx_resource_pending_expiry ON resource_pool (leased_until) WHERE status = 'PENDING';`},
}

// build creates the shape with rows ids in a schema of the test's own and
// returns the schema. Interleaved: of every ten ids three are CONSUMED, one
// PENDING and six UNUSED; the PENDING ones take turns at a lease expired an
// hour ago, no lease (unchanged for an hour), a live lease and a lease
// expired seconds ago. In order: the lowest 30% CONSUMED, then 0.1%
// PENDING under live leases, the rest UNUSED.
func (sh shape) build(tb testing.TB, rows int) string {
	tb.Helper()
	schema := sh.create(tb)
	ctx := context.Background()
	fill := sh.fill(rows)
	// Filled on a connection closed before the VACUUM: a backend sends its
	// table statistics when it goes idle or exits, and counts sent after
	// the VACUUM would add the rows to the live-tuple count a second time.
	cfg, err := pgx.ParseConfig(pgtest.DSN())
	if err != nil {
		tb.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = pgx.Identifier{schema}.Sanitize()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	for _, sql := range fill {
		if _, err := conn.Exec(ctx, sql); err != nil {
			tb.Fatalf("%s: fill: %v", sh.name, err)
		}
	}
	if err := conn.Close(ctx); err != nil {
		tb.Fatal(err)
	}
	// The backend sends them as it exits, after Close returns, and before
	// PostgreSQL 15 a collector process counts them later still: the
	// VACUUM waits for them.
	vac := pgtest.Conn(tb, schema)
	pgtest.Eventually(tb, "the statistics of the fill", 30*time.Second, func() bool {
		var n int64
		if err := vac.QueryRow(ctx, `SELECT coalesce(sum(pg_stat_get_tuples_inserted(c.oid)), 0)::bigint FROM pg_class c
			WHERE c.oid = 'resource_pool'::regclass OR c.oid IN (SELECT relid FROM pg_partition_tree('resource_pool') WHERE isleaf)`).Scan(&n); err != nil {
			tb.Fatal(err)
		}
		return n >= int64(rows)
	})
	if _, err := vac.Exec(ctx, "VACUUM ANALYZE resource_pool"); err != nil {
		tb.Fatal(err)
	}
	return schema
}

// create makes the shape's empty table in a schema of the test's own and
// returns the schema.
func (sh shape) create(tb testing.TB) string {
	tb.Helper()
	var schema string
	if sh.ddl == "" {
		schema = pgtest.PartitionedSchema(tb, sh.partitions)
	} else {
		schema = pgtest.Schema(tb)
		if _, err := pgtest.Conn(tb, schema).Exec(context.Background(), sh.ddl); err != nil {
			tb.Fatalf("%s: %v", sh.name, err)
		}
	}
	return schema
}

// fill is the statements that insert the shape's rows ids (see build).
func (sh shape) fill(rows int) []string {
	status := fmt.Sprintf(`CASE WHEN g <= %[1]d * 3 / 10 THEN 'CONSUMED' WHEN g <= %[1]d * 3 / 10 + %[1]d / 1000 THEN 'PENDING' ELSE 'UNUSED' END`, rows)
	lease := `CASE WHEN s = 'PENDING' THEN now() + interval '1 hour' END`
	updated := `now()`
	if sh.interleaved {
		status = `CASE WHEN g % 10 < 3 THEN 'CONSUMED' WHEN g % 10 = 3 THEN 'PENDING' ELSE 'UNUSED' END`
		// Leases taken one by one: each its own expiry, a microsecond apart.
		lease = `CASE WHEN s <> 'PENDING' THEN NULL WHEN (g / 10) % 4 = 0 THEN now() - interval '1 hour' - g * interval '1 microsecond'
                      WHEN (g / 10) % 4 = 1 THEN NULL WHEN (g / 10) % 4 = 2 THEN now() + interval '1 hour' - g * interval '1 microsecond'
                      ELSE now() - interval '10 seconds' - g * interval '1 microsecond' END`
		updated = `CASE WHEN s = 'PENDING' AND (g / 10) % 4 < 2 THEN now() - interval '2 hours' - g * interval '1 microsecond' ELSE now() END`
	}
	var out []string
	for lo := 1; lo <= rows; lo += 1_000_000 {
		hi := min(lo+999_999, rows)
		out = append(out, fmt.Sprintf(`
INSERT INTO resource_pool (id, identifier, status, leased_until, lease_token, updated_at)
SELECT g, 'res-' || g, s, %s, CASE WHEN s = 'UNUSED' THEN 0 ELSE 1 END, %s
FROM (SELECT g, %s AS s FROM generate_series(%d::bigint, %d) AS g) AS x`, lease, updated, status, lo, hi))
	}
	return out
}

// truth is the exact count of every figure, by reading the whole table.
type truth struct{ unused, pending, expired, expiredOld, stuck, consumed int64 }

func countTruth(tb testing.TB, conn *pgx.Conn, stuckAfter, expiredAfter time.Duration) truth {
	tb.Helper()
	var t truth
	err := conn.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE status = 'UNUSED'), count(*) FILTER (WHERE status = 'PENDING'),
       count(*) FILTER (WHERE status = 'PENDING' AND leased_until < now()),
       count(*) FILTER (WHERE status = 'PENDING' AND leased_until < now() - $2::bigint * interval '1 microsecond'),
       count(*) FILTER (WHERE status = 'PENDING' AND (leased_until < now() - $1::bigint * interval '1 microsecond'
                        OR (leased_until IS NULL AND updated_at < now() - $1::bigint * interval '1 microsecond'))),
       count(*) FILTER (WHERE status = 'CONSUMED')
FROM resource_pool`, stuckAfter.Microseconds(), expiredAfter.Microseconds()).
		Scan(&t.unused, &t.pending, &t.expired, &t.expiredOld, &t.stuck, &t.consumed)
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// worstError is the largest relative error of a snapshot against the truth,
// in percent (an absolute error of one row on a figure of zero counts 100%).
func worstError(p collector.Pool, t truth) (float64, string) {
	worst, which := 0.0, ""
	for _, f := range []struct {
		name      string
		got, want int64
	}{{"unused", p.Unused, t.unused}, {"pending", p.Pending, t.pending}, {"expired", p.Expired, t.expired},
		{"expired_old", p.ExpiredOld, t.expiredOld}, {"stuck", p.Stuck, t.stuck}, {"consumed", p.Consumed, t.consumed}} {
		e := 0.0
		switch {
		case f.want != 0:
			e = 100 * math.Abs(float64(f.got-f.want)) / float64(f.want)
		case f.got != 0:
			e = 100
		}
		if e > worst {
			worst, which = e, fmt.Sprintf("%s %d, truth %d", f.name, f.got, f.want)
		}
	}
	return worst, which
}

// Every figure is exact within a few polls on every shape, and again after
// the pool changes as workers, a reaper and an on-call engineer change it:
// claims at the head, commits, reaped leases and released ids scattered
// over the whole id range.
func TestCountsOnEveryShape(t *testing.T) {
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := sh.build(t, 40_000)
			conn := pgtest.Conn(t, schema)
			c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool"})
			cfg := c.Config()
			check := func(when string) {
				t.Helper()
				var worst float64
				var which string
				// Within one sweep of the id range (40 chunks, one a poll when
				// the server is slow, as under -race).
				for i := 0; i < 60; i++ {
					s, err := c.Poll(ctx)
					if err != nil {
						t.Fatal(err)
					}
					tr := countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)
					worst, which = worstError(s.Pool, tr)
					if worst == 0 {
						return
					}
				}
				s, _ := c.Poll(ctx)
				t.Fatalf("%s, after 60 polls: off by %.2f%% (%s): %+v truth %+v", when, worst, which, s.Pool, countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter))
			}
			check("at start")
			for _, sql := range []string{
				// claims at the head, under a live lease
				`UPDATE resource_pool SET status = 'PENDING', leased_until = now() + interval '1 minute', updated_at = now()
				 WHERE id IN (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 300)`,
				// commits of live leases
				`UPDATE resource_pool SET status = 'CONSUMED', updated_at = now()
				 WHERE id IN (SELECT id FROM resource_pool WHERE status = 'PENDING' AND leased_until > now() ORDER BY id DESC LIMIT 100)`,
				// the reaper: the oldest expired leases back to the pool
				`UPDATE resource_pool SET status = 'UNUSED', leased_until = NULL, lease_token = lease_token + 1, updated_at = now()
				 WHERE id IN (SELECT id FROM resource_pool WHERE status = 'PENDING' AND leased_until < now() ORDER BY leased_until LIMIT 200)`,
				// by hand: ids held without a lease released, anywhere
				`UPDATE resource_pool SET status = 'UNUSED', updated_at = now()
				 WHERE id IN (SELECT id FROM resource_pool WHERE status = 'PENDING' AND leased_until IS NULL AND id % 7 = 0)`,
			} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					t.Fatal(err)
				}
			}
			check("after claims, commits, reaping and releases")
			// One session on the server, whatever the shape.
			if n := collector.Sessions(c); n != 1 {
				t.Fatalf("%d sessions open, want 1", n)
			}
		})
	}
}

// On a partitioned pool the statistics are the partitions' (the parent has
// none): live and dead tuples are summed, the partition with the most dead
// tuples is named, and a session waiting on a row lock in a partition is a
// lock wait on the pool.
func TestPartitionedPoolStatisticsAndLockWaits(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	schema := shapes[3].build(t, 8000)
	// Dead tuples in one partition: update its rows twice, on a connection
	// closed at once (an idle backend may keep its table statistics to
	// itself for seconds).
	upd, err := pgx.Connect(ctx, pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	// Autovacuum off for that partition, or it may clear the dead tuples
	// before the first poll sees them (the test server's naptime is short).
	if _, err := upd.Exec(ctx, "ALTER TABLE "+pgx.Identifier{schema, "resource_pool_5"}.Sanitize()+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if _, err := upd.Exec(ctx, "UPDATE "+pgx.Identifier{schema, "resource_pool_5"}.Sanitize()+" SET updated_at = now()"); err != nil {
			t.Fatal(err)
		}
	}
	if err := upd.Close(ctx); err != nil {
		t.Fatal(err)
	}
	c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool", Alerts: collector.AlertConfig{LockWait: 50 * time.Millisecond}})
	s := pollWithin(t, c, "partition statistics", 45*time.Second, func(s collector.Snapshot) bool {
		return s.LiveTuples == 8000 && s.DeadTuples > 0 && s.WorstPartition != nil && s.WorstPartition.Name == "resource_pool_5"
	})
	if s.WorstPartition.Partitions != 8 || s.WorstPartition.DeadRatio <= 0 || s.Pool.Total != 8000 {
		t.Fatalf("worst partition %+v, total %d", s.WorstPartition, s.Pool.Total)
	}
	tx := pgtest.PeerTx(t, ctx, schema)
	if _, err := tx.Exec(ctx, "UPDATE resource_pool SET updated_at = now() WHERE id = 42"); err != nil {
		t.Fatal(err)
	}
	waiter := pgtest.Conn(t, schema)
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, "UPDATE resource_pool SET updated_at = now() WHERE id = 42")
		done <- err
	}()
	s = pollUntil(t, c, "a waiter on a partition's row", func(s collector.Snapshot) bool { return s.LockWaiters == 1 && s.LockWaitMaxMS > 60 })
	if len(s.Blockers) != 1 {
		t.Fatalf("blockers %+v", s.Blockers)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A producer that adds more than the claims take reads as a pool that does
// not drain, on every shape: consumption at the head faster than a chunk a
// poll, ids added at the top, from the first polls on (before the sweep of
// the id range is done). With a threshold of a day, any positive burn on
// these 40,000 ids would raise the depletion alert.
func TestRefillFasterThanBurnOnEveryShape(t *testing.T) {
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := sh.build(t, 40_000)
			conn := pgtest.Conn(t, schema)
			c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool", Alerts: collector.AlertConfig{DepletionWithin: 24 * time.Hour}})
			var s collector.Snapshot
			for i := 0; i < 12; i++ {
				for _, sql := range []string{
					`UPDATE resource_pool SET status = 'CONSUMED' WHERE id IN (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 1500)`,
					`INSERT INTO resource_pool (id, identifier, status) SELECT m + g, 'res-' || (m + g), 'UNUSED'
					 FROM (SELECT max(id) AS m FROM resource_pool) AS t, generate_series(1, 3000) AS g`,
				} {
					if _, err := conn.Exec(ctx, sql); err != nil {
						t.Fatal(err)
					}
				}
				var err error
				if s, err = c.Poll(ctx); err != nil {
					t.Fatal(err)
				}
				for _, a := range s.Alerts {
					if a.Name == collector.AlertDepletion && a.Active {
						t.Fatalf("poll %d: depletion alert while the pool grows by 1,500 a poll: %s (burn %.1f/s)", i, a.Message, s.BurnPerS)
					}
				}
			}
			if s.BurnPerS > 0 || s.DepletionETAS != nil {
				t.Fatalf("burn %.1f/s, eta %v while the pool grew by 18,000", s.BurnPerS, s.DepletionETAS)
			}
		})
	}
}

// Holders and the bulk release of a holder's expired leases on a
// hash-partitioned pool: the holders sample reads across partitions, and
// the release frees every one of them, with higher tokens.
func TestHoldersAndBulkReleaseOnAPartitionedPool(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var part shape
	for _, sh := range shapes {
		if sh.name == "partitioned" {
			part = sh
		}
	}
	schema := part.build(t, 20_000)
	conn := pgtest.Conn(t, schema)
	// Every PENDING row whose lease expired an hour ago belongs to pod-9.
	if _, err := conn.Exec(ctx, `UPDATE resource_pool SET holder = 'pod-9' WHERE status = 'PENDING' AND leased_until < now() - interval '30 minutes'`); err != nil {
		t.Fatal(err)
	}
	var want int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM resource_pool WHERE holder = 'pod-9'`).Scan(&want); err != nil || want == 0 {
		t.Fatalf("pod-9 holds %d rows (%v)", want, err)
	}
	c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool"})
	var s collector.Snapshot
	for range collector.HoldersFrom { // the first poll that reads the holders
		var err error
		if s, err = c.Poll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	found := false
	for _, h := range s.Holders {
		found = found || (h.Holder == "pod-9" && h.Expired > 0)
	}
	if !found {
		t.Fatalf("holders on the partitioned pool: %+v", s.Holders)
	}
	eng := engine.New(pgtest.Pool(t, schema, pgtest.Options{MaxConns: 2}))
	res, err := eng.ReleaseHolder(ctx, engine.ReleaseHolderParams{Holder: "pod-9", Expired: true, Batch: 100})
	if err != nil || res.Released != want {
		t.Fatalf("release on the partitioned pool: %+v %v, want %d", res, err, want)
	}
	var left, raised int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE holder = 'pod-9'), count(*) FILTER (WHERE status = 'UNUSED' AND lease_token = 2) FROM resource_pool`).Scan(&left, &raised); err != nil {
		t.Fatal(err)
	}
	if left != 0 || raised != want {
		t.Fatalf("after the release: %d rows still held, %d released at token 2, want 0 and %d", left, raised, want)
	}
}

// CONSUMED is the pool's rows less UNUSED and PENDING, and the rows are
// counted, not taken from the statistics: on every shape, after the
// statistics are reset (the live-tuple count reads 0, as it reads 1% off
// after a few VACUUMs of a long-lived pool) and while rows are added at
// the top and consumed rows pruned, the figure comes back exact within a
// deadline, not marked estimated but for UNUSED's and PENDING's marks.
func TestConsumedExactWhenStatisticsDrift(t *testing.T) {
	for _, sh := range shapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			schema := sh.build(t, 20_000)
			conn := pgtest.Conn(t, schema)
			c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool"})
			cfg := c.Config()
			exact := func(when string) {
				t.Helper()
				var tr truth
				var rows int64
				pollUntil(t, c, when, func(s collector.Snapshot) bool {
					tr = countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)
					if err := conn.QueryRow(ctx, `SELECT count(*) FROM resource_pool`).Scan(&rows); err != nil {
						t.Fatal(err)
					}
					// Marked estimated only while UNUSED or PENDING is (a
					// rolling recount with its age).
					e := s.Pool.Estimated
					return s.Pool.Consumed == tr.consumed && s.Pool.Total == rows &&
						(!has(e, "consumed") || has(e, "unused") || has(e, "pending"))
				})
			}
			exact("at start")
			// The statistics reset: n_live_tup, n_tup_ins and n_tup_del read 0.
			if _, err := conn.Exec(ctx, `SELECT pg_stat_reset_single_table_counters(relid) FROM pg_partition_tree('resource_pool')`); err != nil {
				t.Fatal(err)
			}
			// Before PostgreSQL 15 the statistics collector takes the reset
			// a moment later, and a session keeps its snapshot of them.
			pgtest.Eventually(t, "live tuples read 0 after the reset", 10*time.Second, func() bool {
				var live int64
				_, err := conn.Exec(ctx, `SELECT pg_stat_clear_snapshot()`)
				if err == nil {
					err = conn.QueryRow(ctx, `SELECT coalesce(sum(n_live_tup), 0) FROM pg_stat_user_tables WHERE relid IN (SELECT relid FROM pg_partition_tree('resource_pool'))`).Scan(&live)
				}
				return err == nil && live == 0
			})
			exact("after a statistics reset")
			// A refill at the top and consumed rows pruned, on a connection
			// closed at once, so that its statistics reach the server.
			other, err := pgx.Connect(ctx, pgtest.DSN())
			if err != nil {
				t.Fatal(err)
			}
			for _, sql := range []string{
				`INSERT INTO resource_pool (id, identifier, status) SELECT m + g, 'res-' || (m + g), 'UNUSED'
				 FROM (SELECT max(id) AS m FROM resource_pool) AS t, generate_series(1, 3000) AS g`,
				`DELETE FROM resource_pool WHERE id IN (SELECT id FROM resource_pool WHERE status = 'CONSUMED' ORDER BY id DESC LIMIT 700)`,
			} {
				if _, err := other.Exec(ctx, "SET search_path = "+pgx.Identifier{schema}.Sanitize()+"; "+sql); err != nil {
					t.Fatal(err)
				}
			}
			if err := other.Close(ctx); err != nil {
				t.Fatal(err)
			}
			exact("after a refill and a prune")
		})
	}
}

// A pool of at most exactRows rows is counted whole at every poll (from
// the first: TestFirstSnapshotsCountEachRowOnce): no figure is marked
// estimated, each is the truth, also right after a change; a larger one is
// counted by parts. On the leak shape (the states interleaved, leases
// expired long ago and none).
func TestSmallPoolsAreCountedExactly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		rows  int
		exact bool
	}{{collector.ExactRows, true}, {collector.ExactRows + 10_000, false}} {
		schema := shapes[1].build(t, c.rows)
		conn := pgtest.Conn(t, schema)
		col := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool"})
		cfg := col.Config()
		for range 2 {
			if _, err := col.Poll(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := conn.Exec(ctx, "UPDATE resource_pool SET status = 'CONSUMED', updated_at = now() WHERE id IN (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id DESC LIMIT 37)"); err != nil {
			t.Fatal(err)
		}
		s, err := col.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if !c.exact {
			continue // counted by parts: TestCountsOnEveryShape holds those figures
		}
		if len(s.Pool.Estimated) != 0 {
			t.Errorf("%d rows: figures marked estimated %v, want none", c.rows, s.Pool.Estimated)
		}
		if e, which := worstError(s.Pool, countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)); e != 0 {
			t.Errorf("%d rows: %s off by %.2f%% right after a change", c.rows, which, e)
		}
	}
}

// Many PENDING rows without a lease are looked for a little further at
// each poll (64, 128, 256, 512, then 1,025 rows, a heap fetch each), never
// all at once, before they are counted by ranges of the table; on a pool
// whose first walk cannot cover the PENDING index, from the fourth poll
// (such a pool starts in stages: its first poll walks nothing, its third
// seeks the lowest UNUSED id).
func TestRowsWithoutALeaseAreLookedForFurtherEachPoll(t *testing.T) {
	ctx := context.Background()
	schema := shapes[1].build(t, 60_000) // 1,500 PENDING rows without a lease
	c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool"})
	looks := []int64{64, 128, 256, 512, 1025}
	last := len(looks) - 1
	// Its PENDING index (6,000 entries) holds more than the first walk
	// reads: the first three polls leave the rows without a lease to the
	// fourth.
	for poll := 1; poll <= 3; poll++ {
		s, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := collector.LeaselessLook(c); s.Pool.NoLease != nil || got != looks[0] {
			t.Fatalf("after poll %d: without a lease %v, next look %d; want not counted yet, %d", poll, s.Pool.NoLease, got, looks[0])
		}
	}
	for i := range looks {
		s, err := c.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := looks[min(i+1, last)]
		ranged, _, _ := collector.CountsByRanges(c)
		if got := collector.LeaselessLook(c); got != want || ranged != (i == last) {
			t.Fatalf("after poll %d: next look %d, by ranges %v; want %d, %v", i+4, got, ranged, want, i == last)
		}
		if s.Pool.NoLease == nil || *s.Pool.NoLease < looks[i] || !slices.Contains(s.Pool.Estimated, "pending") {
			t.Fatalf("after poll %d: without a lease %v (estimated %v), want at least %d, estimated", i+4, s.Pool.NoLease, s.Pool.Estimated, looks[i])
		}
	}
}

// More PENDING rows without a lease than the index count takes at every
// poll (noneCap) are counted by ranges of the table in turn, their figures
// marked estimated, and match the table once every range has been read;
// once most are released the index counts them again.
func TestManyRowsWithoutALeaseAreCountedByRanges(t *testing.T) {
	for _, sh := range []shape{shapes[1], shapes[3]} {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := sh.build(t, 60_000) // 1,500 PENDING rows without a lease
			conn := pgtest.Conn(t, schema)
			c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool"})
			cfg := c.Config()
			var noLease int64
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM resource_pool WHERE status = 'PENDING' AND leased_until IS NULL`).Scan(&noLease); err != nil {
				t.Fatal(err)
			}
			exact := func(when string, byRanges bool) {
				t.Helper()
				var s collector.Snapshot
				for i := 0; i < 100; i++ {
					var err error
					if s, err = c.Poll(ctx); err != nil {
						t.Fatal(err)
					}
					tr := countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)
					e, _ := worstError(s.Pool, tr)
					ranged, _, _ := collector.CountsByRanges(c)
					if e == 0 && s.Pool.NoLease != nil && *s.Pool.NoLease == noLease && ranged == byRanges {
						if byRanges && !slices.Contains(s.Pool.Estimated, "pending") {
							t.Fatalf("%s: pending not marked estimated", when)
						}
						return
					}
				}
				e, which := worstError(s.Pool, countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter))
				ranged, read, ranges := collector.CountsByRanges(c)
				t.Fatalf("%s, after 100 polls: off by %.2f%% (%s), without a lease %v, want %d; by ranges %v (%d of %d read), want %v",
					when, e, which, s.Pool.NoLease, noLease, ranged, read, ranges, byRanges)
			}
			exact("by ranges", true)
			tag, err := conn.Exec(ctx, `UPDATE resource_pool SET status = 'UNUSED', updated_at = now()
				WHERE status = 'PENDING' AND leased_until IS NULL AND (id / 10) % 40 <> 1`)
			if err != nil {
				t.Fatal(err)
			}
			noLease -= tag.RowsAffected()
			if noLease <= 0 || noLease > 500 {
				t.Fatalf("%d rows without a lease left, want a few", noLease)
			}
			exact("from the index again", false)
		})
	}
}

// A partitioned pool polls on one session: every poll runs on the backend
// of the first, which alone has read the partitions' catalog, and its
// counts are exact all the same.
func TestAPartitionedPoolPollsOnOneSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := shapes[3].build(t, 8000)
	conn := pgtest.Conn(t, schema)
	c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool"})
	var s collector.Snapshot
	var first uint32
	for poll := 1; poll <= 5; poll++ {
		var err error
		if s, err = c.Poll(ctx); err != nil {
			t.Fatal(err)
		}
		seat := collector.Seat(c)
		if poll == 1 {
			first = seat
		}
		if seat != first {
			t.Fatalf("poll %d ran on backend %d; want %d alone, as the first", poll, seat, first)
		}
	}
	if n := collector.Sessions(c); n != 1 {
		t.Fatalf("the collector holds %d sessions; want 1", n)
	}
	cfg := c.Config()
	if e, which := worstError(s.Pool, countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)); e > 0 {
		t.Fatalf("after 5 polls on one session: %s off by %.2f%%", which, e)
	}
}

// A large pool starts in stages: its first poll reads the server and
// takes PENDING, UNUSED and the total of rows from the statistics
// (estimated, and near the truth; not a missing index), its second walks
// the PENDING index, its third counts UNUSED, a partitioned pool's fourth
// each partition's, and the next the rows; and the counts come to the
// truth. Large is a PENDING index larger than the
// first walk (the leak, 8 partitions) or a large table (ordered, whose
// PENDING index is small). A small pool's first poll counts it all.
func TestALargePoolStartsInStages(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sh          shape
		rows        int
		staged      bool
		totalAtPoll int // the poll that first counts the rows
	}{
		{shapes[3], 60_000, true, 5},  // a PENDING index of 6,000 entries
		{shapes[1], 60_000, true, 5},  // the same, unpartitioned
		{shapes[0], 400_000, true, 5}, // over 2,000 pages, 400 PENDING entries
		{shapes[0], 20_000, false, 1},
	} {
		t.Run(fmt.Sprintf("%s-%d", tc.sh.name, tc.rows), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := tc.sh.build(t, tc.rows)
			conn := pgtest.Conn(t, schema)
			createStatStatements(t, ctx, conn)
			dsn, role := roleOfItsOwn(t, ctx, conn, schema)
			// ran: the calls of the collector's statements on this pool whose
			// text holds marker (the UNUSED statement's "AS head", the total's
			// "AS lo", the walk's "got, r1", the PENDING looks' "AS u FROM"
			// and "DESC LIMIT"), by the collector's role.
			ran := func(marker string) (n int64) {
				t.Helper()
				if err := conn.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM public.pg_stat_statements
					WHERE userid = $1::regrole AND query LIKE '%' || $2 || '%' AND query LIKE '%' || $3 || '%'`, role, schema, marker).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n
			}
			c, tr, s := firstPoll(t, ctx, schema, conn, dsn)
			cfg := c.Config()
			if !tc.staged {
				if u, n := ran("AS head"), ran("AS lo)"); u == 0 || n == 0 {
					t.Fatalf("poll 1 of a small pool ran the UNUSED statement %d times and the total's %d; want both", u, n)
				}
				if e, which := worstError(s.Pool, tr); e != 0 {
					t.Fatalf("poll 1 of a small pool: %s off by %.2f%%; want it counted whole", which, e)
				}
				return
			}
			if u, n, w := ran("AS head"), ran("AS lo)"), ran("got, r1"); u != 0 || n != 0 || w != 0 {
				t.Fatalf("poll 1 ran the UNUSED statement %d times, the total's %d and the walk %d; want none", u, n, w)
			}
			for _, l := range s.Limits {
				if strings.Contains(l, "no index on id") {
					t.Fatalf("poll 1 says %q of a pool with a primary key", l)
				}
			}
			if !slices.Contains(s.Pool.Estimated, "consumed") || !slices.Contains(s.Pool.Estimated, "unused") || s.Pool.Total <= 0 {
				t.Fatalf("poll 1: total %d, estimated %v; want the statistics' total and UNUSED, estimated", s.Pool.Total, s.Pool.Estimated)
			}
			if d := float64(s.Pool.Unused-tr.unused) / float64(tr.unused); d < -0.25 || d > 0.25 {
				t.Fatalf("poll 1: UNUSED %d from the statistics; the truth is %d", s.Pool.Unused, tr.unused)
			}
			tr = countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)
			for poll := 2; poll <= 100; poll++ {
				var err error
				if s, err = c.Poll(ctx); err != nil {
					t.Fatal(err)
				}
				looks := ran("AS u FROM") + ran("DESC LIMIT")
				switch u, n, w := ran("AS head"), ran("AS lo)"), ran("got, r1"); {
				case poll == 2 && (w == 0 || u != 0):
					t.Fatalf("poll 2 walked %d times and ran the UNUSED statement %d times; want the walk only", w, u)
				case poll == 3 && (u == 0 || n != 0 || looks != 0):
					t.Fatalf("poll 3 ran the UNUSED statement %d times, the total's %d and the looks %d; want the first only", u, n, looks)
				case poll == 4 && looks == 0:
					t.Fatalf("poll 4 did not look for the rows without a lease nor the lowest live lease")
				case tc.sh.name == "partitioned" && poll >= 4 && poll < 12 && ran(`resource\_pool\_%AS head`) != int64(poll-3):
					// Each partition's first count plans and reads its index
					// cold: one a poll.
					t.Fatalf("by poll %d the partitions were counted %d times; want one a poll from poll 4", poll, ran(`resource\_pool\_%AS head`))
				case poll < tc.totalAtPoll && n != 0:
					t.Fatalf("poll %d counted the rows; want them left to poll %d", poll, tc.totalAtPoll)
				case poll == tc.totalAtPoll && n == 0:
					t.Fatalf("poll %d did not count the rows", poll)
				}
				if e, _ := worstError(s.Pool, tr); e == 0 && poll >= tc.totalAtPoll {
					return
				}
			}
			e, which := worstError(s.Pool, tr)
			t.Fatalf("after 100 polls: %s off by %.2f%%", which, e)
		})
	}
}

// The first poll of a leak whose PENDING index is larger than the first
// walk shows PENDING near the truth, not only the entries it walked: the
// part not walked yet is the table's rows times the share of PENDING in
// its statistics (capped by the index's own count). It is marked
// estimated, and the pool line says how far the counting has come.
func TestAFirstPollEstimatesThePendingItHasNotWalked(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, sh := range []shape{shapes[1], shapes[3]} {
		t.Run(sh.name, func(t *testing.T) {
			schema := sh.build(t, 200_000) // 20,000 PENDING rows
			conn := pgtest.Conn(t, schema)
			if _, err := conn.Exec(ctx, "ANALYZE resource_pool"); err != nil {
				t.Fatal(err)
			}
			c, tr, s := firstPoll(t, ctx, schema, conn, "")
			if d := float64(s.Pool.Pending-tr.pending) / float64(tr.pending); d < -0.2 || d > 0.2 {
				t.Fatalf("poll 1: PENDING %d, the truth %d; want within 20%%", s.Pool.Pending, tr.pending)
			}
			if !slices.Contains(s.Pool.Estimated, "pending") || s.Pool.Counted == nil || *s.Pool.Counted >= 1 {
				t.Fatalf("poll 1: estimated %v, counted %v; want PENDING estimated and the counting under way", s.Pool.Estimated, s.Pool.Counted)
			}
			// The part not walked yet is the catalog's, of no age: the
			// figures' age is that of the parts counted (the dashboard
			// showed "106751d old", the zero time's).
			for poll := 2; poll <= 3; poll++ {
				if s.Pool.PendingAgeS < 0 || s.Pool.PendingAgeS > 60 {
					t.Fatalf("poll %d: PENDING counted %.0f s ago; want within the minute the test ran", poll-1, s.Pool.PendingAgeS)
				}
				var err error
				if s, err = c.Poll(ctx); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// firstPoll starts a collector on schema's pool (connected to dsn, ""
// for the test database's), reads the truth of it on conn, and returns
// them with the collector's first snapshot.
func firstPoll(t *testing.T, ctx context.Context, schema string, conn *pgx.Conn, dsn string) (*collector.Collector, truth, collector.Snapshot) {
	t.Helper()
	c := newCollector(t, ctx, collector.Config{DSN: dsn, Table: schema + ".resource_pool"})
	cfg := c.Config()
	tr := countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)
	s, err := c.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return c, tr, s
}

// Walks of the PENDING index that stop at their deadline (here as soon as
// they may, past minPending entries) and in a run of one key longer than
// a walk reads at once (1,500 leases set by one statement) still count
// the pool exactly, on the server. (With 3,000, the index passed 8 pages
// on PostgreSQL 12, which has no deduplication of equal keys: the pool
// then started in stages, whose first walk stops at its limit, never
// early.)
func TestWalksThatStopEarlyCountExactly(t *testing.T) {
	for _, sh := range shapes[:2] { // the shapes with a PENDING index and no partitions (whose walks stay short here)
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			schema := sh.build(t, 40_000)
			conn := pgtest.Conn(t, schema)
			if _, err := conn.Exec(ctx, `UPDATE resource_pool SET status = 'PENDING', leased_until = now() + interval '10 minutes', updated_at = now()
				WHERE id IN (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id DESC LIMIT 1500)`); err != nil {
				t.Fatal(err)
			}
			c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool"})
			collector.SetWalkStop(c, time.Nanosecond)
			cfg := c.Config()
			var worst float64
			var which string
			for i := 0; i < 100; i++ {
				s, err := c.Poll(ctx)
				if err != nil {
					t.Fatal(err)
				}
				worst, which = worstError(s.Pool, countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter))
				if worst == 0 && collector.WalkStops(c) > 0 {
					t.Logf("exact after %d polls, %d walks stopped early", i+1, collector.WalkStops(c))
					return
				}
			}
			t.Fatalf("after 100 polls: off by %.2f%% (%s), %d walks stopped early", worst, which, collector.WalkStops(c))
		})
	}
}

// roleOfItsOwn creates a login role for a test's collector (a superuser:
// it watches as pooltop's own tests do) and returns the test DSN as that
// role, and the role. pg_stat_statements keeps a statement's figures by
// role, database and query id, and from PostgreSQL 18 on the query id
// names a table by its name, not its OID: the same statement on
// resource_pool in the schemas of the tests running at once is one
// entry, whose text names the schema that ran it first. A role of its own
// keeps the collector's statements apart from the other tests'.
func roleOfItsOwn(t *testing.T, ctx context.Context, conn *pgx.Conn, schema string) (string, string) {
	t.Helper()
	role := "watcher_" + strings.TrimPrefix(schema, "t_")
	role = role[:min(len(role), 60)]
	rq := pgx.Identifier{role}.Sanitize()
	if _, err := conn.Exec(ctx, `CREATE ROLE `+rq+` LOGIN SUPERUSER`); err != nil {
		t.Fatal(err)
	}
	// Registered before the collector's Close, so it runs after it.
	pgtest.DropAtCleanup(t, `DROP ROLE `+rq)
	u, err := url.Parse(pgtest.DSN())
	if err != nil || u.Scheme == "" {
		t.Fatalf("the test DSN must be a URL here: %v", err)
	}
	u.User = url.User(role)
	return u.String(), role
}
