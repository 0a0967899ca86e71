package collector_test

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// firstShapes are the shapes of the collector's benchmarks and pooltop's
// own migration hash-partitioned in 8 (migrate --partitions 8).
var firstShapes = append(append([]shape(nil), shapes...), shape{name: "migrated-partitioned", interleaved: true, partitions: 8})

// buildAnalyzedInOneSession creates the shape with rows ids inserted and
// analyzed in one session, as a user seeding a pool by hand does, with
// autovacuum off for the pool so that nothing corrects the statistics:
// the session sends its count of the inserts after the ANALYZE, which
// adds them to the live-tuple count the ANALYZE has set, and that count
// reads every row twice. From PostgreSQL 15 the statistics are sent at
// once (pg_stat_force_next_flush) and the build checks the count; before
// 15 a separate process applies them whenever it reads them, maybe in the
// middle of the polls, and the shape is built as build does.
func (sh shape) buildAnalyzedInOneSession(tb testing.TB, rows int) string {
	tb.Helper()
	ctx := context.Background()
	if version := serverVersion(tb); version < 150000 {
		tb.Logf("PostgreSQL %d: the statistics counting each row twice are made from 15 on; built with the rows counted once", version)
		return sh.build(tb, rows)
	}
	schema := sh.create(tb)
	conn := pgtest.Conn(tb, schema)
	if _, err := conn.Exec(ctx, `DO $$ DECLARE r regclass; BEGIN
    FOREACH r IN ARRAY coalesce((SELECT array_agg(relid) FILTER (WHERE isleaf) FROM pg_partition_tree('resource_pool')), ARRAY['resource_pool'::regclass]) LOOP
        EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', r);
    END LOOP; END $$`); err != nil {
		tb.Fatalf("%s: autovacuum off: %v", sh.name, err)
	}
	// One simple query: a session sends its statistics only between
	// queries, so the inserts are sent after the ANALYZE, whatever the
	// timing, and at once by pg_stat_force_next_flush.
	sql := "BEGIN;" + strings.Join(sh.fill(rows), ";") + "; COMMIT; ANALYZE resource_pool; SELECT pg_stat_force_next_flush();"
	if _, err := conn.Exec(ctx, sql); err != nil {
		tb.Fatalf("%s: fill: %v", sh.name, err)
	}
	if live := liveTuples(tb, conn); live != 2*int64(rows) {
		tb.Fatalf("%s: the live-tuple count reads %d for %d rows, want each row counted twice", sh.name, live, rows)
	}
	return schema
}

// serverVersion is the test server's server_version_num.
func serverVersion(tb testing.TB) int {
	tb.Helper()
	var version int
	if err := pgtest.Conn(tb, "public").QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		tb.Fatal(err)
	}
	return version
}

// liveTuples is the live-tuple count of the pool in conn's schema, its
// partitions summed, read afresh.
func liveTuples(tb testing.TB, conn *pgx.Conn) int64 {
	tb.Helper()
	var live int64
	if _, err := conn.Exec(context.Background(), `SELECT pg_stat_clear_snapshot()`); err != nil {
		tb.Fatal(err)
	}
	if err := conn.QueryRow(context.Background(), `SELECT sum(pg_stat_get_live_tuples(o))::bigint FROM unnest(coalesce(
		(SELECT array_agg(relid) FILTER (WHERE isleaf) FROM pg_partition_tree('resource_pool')), ARRAY['resource_pool'::regclass])) AS o`).Scan(&live); err != nil {
		tb.Fatal(err)
	}
	return live
}

// partitionTruth is the UNUSED ids of each partition by name (of the table
// itself when it has none).
func partitionTruth(tb testing.TB, conn *pgx.Conn) map[string]int64 {
	tb.Helper()
	rows, err := conn.Query(context.Background(), `SELECT tableoid::regclass::text, count(*) FILTER (WHERE status = 'UNUSED') FROM resource_pool GROUP BY 1`)
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			tb.Fatal(err)
		}
		out[name[strings.LastIndex(name, ".")+1:]] = n
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// firstPolls are the snapshots a check is made of: a large pool starts in
// stages, a poll each, and counts its rows from the fourth.
const firstPolls = 4

// The counts are true from the first poll, on every shape: where the
// statistics count every row twice (the rows inserted and analyzed in one
// session), and where claims and commits have filled pages with dead
// versions (half the rows updated since the last VACUUM). A pool of at
// most ExactRows rows is counted whole from the first snapshot: every
// figure is the truth, none is marked estimated, and so is each
// partition's UNUSED. A larger pool may be estimated at first, roughly,
// but never counts a row twice: its total is within a tenth of the rows,
// and CONSUMED within a tenth of the rows of the truth.
func TestFirstSnapshotsCountEachRowOnce(t *testing.T) {
	for _, sh := range firstShapes {
		t.Run(sh.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			old := serverVersion(t) < 150000
			for _, tc := range []struct {
				rows    int
				churned bool
			}{{collector.ExactRows, false}, {collector.ExactRows, true}, {3 * collector.ExactRows, false}} {
				rows := tc.rows
				var schema string
				if tc.churned {
					schema = sh.build(t, rows)
					if _, err := pgtest.Conn(t, schema).Exec(ctx, `UPDATE resource_pool SET updated_at = updated_at WHERE id % 2 = 0`); err != nil {
						t.Fatal(err)
					}
				} else {
					schema = sh.buildAnalyzedInOneSession(t, rows)
				}
				conn := pgtest.Conn(t, schema)
				if old {
					// The statistics process applies what the build sent
					// when it gets to it; a watch starts on settled ones.
					pgtest.Eventually(t, "the statistics count the rows", time.Minute, func() bool { return liveTuples(t, conn) == int64(rows) })
				}
				c := newCollector(t, ctx, collector.Config{Table: schema + ".resource_pool"})
				cfg := c.Config()
				tr := countTruth(t, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)
				parts := partitionTruth(t, conn)
				for poll := 1; poll <= firstPolls; poll++ {
					s, err := c.Poll(ctx)
					if err != nil {
						t.Fatal(err)
					}
					p := s.Pool
					what := fmt.Sprintf("%d rows (churned %v), poll %d", rows, tc.churned, poll)
					if p.Unused+p.Pending+p.Consumed != p.Total {
						t.Fatalf("%s: unused %d + pending %d + consumed %d is not the total %d", what, p.Unused, p.Pending, p.Consumed, p.Total)
					}
					if rows > collector.ExactRows {
						if off := math.Abs(float64(p.Total-int64(rows))) / float64(rows); off > 0.1 {
							t.Fatalf("%s: total %d, consumed %d; the pool holds %d rows, %d consumed", what, p.Total, p.Consumed, rows, tr.consumed)
						}
						if off := math.Abs(float64(p.Consumed-tr.consumed)) / float64(rows); off > 0.1 {
							t.Fatalf("%s: consumed %d, the truth %d", what, p.Consumed, tr.consumed)
						}
						continue
					}
					if e, which := worstError(p, tr); e != 0 || p.Total != int64(rows) {
						t.Fatalf("%s: %s (off by %.2f%%), total %d; want every figure counted", what, which, e, p.Total)
					}
					if len(p.Estimated) != 0 || p.Counted == nil || *p.Counted != 1 {
						t.Fatalf("%s: estimated %v, counted %v; want none estimated, all counted", what, p.Estimated, p.Counted)
					}
					for _, pu := range s.Partitions {
						if pu.Estimated || pu.Unused != parts[pu.Name] {
							t.Fatalf("%s: partition %s: UNUSED %d (estimated %v), the truth %d", what, pu.Name, pu.Unused, pu.Estimated, parts[pu.Name])
						}
					}
				}
			}
		})
	}
}
