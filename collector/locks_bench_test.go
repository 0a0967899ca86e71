package collector_test

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// BenchmarkPollLockWaiters measures a poll, and the statement that reads
// the lock waits in it, while 200 sessions wait on row locks of the
// pool (10 behind each of 20 rows one transaction holds): the incident in
// which reading the lock table costs most. It reports the median poll
// (poll_p50_ms) and the median of the lock statement alone
// (lockstmt_p50_ms), over b.N rounds of each.
//
//	go test -run '^$' -bench PollLockWaiters -benchtime 50x ./collector/
func BenchmarkPollLockWaiters(b *testing.B) {
	const waiters, rows = 200, 20
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	db := pgtest.NewSeeded(b, ctx, 1000, pgtest.Options{MaxConns: 2})
	holder := pgtest.PeerTx(b, ctx, db.Schema)
	if _, err := holder.Exec(ctx, fmt.Sprintf("UPDATE resource_pool SET updated_at = now() WHERE id <= %d", rows)); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	conns := make([]*pgx.Conn, waiters)
	for i := range conns {
		conns[i] = pgtest.Conn(b, db.Schema)
	}
	for i, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Ends with an error when the holder's rollback lets it through
			// and the context is gone, or at cleanup: either is fine here.
			_, _ = c.Exec(ctx, fmt.Sprintf("UPDATE resource_pool SET updated_at = now() WHERE id = %d", i%rows+1))
		}()
	}
	defer wg.Wait()
	defer func() { _ = holder.Rollback(context.Background()) }()
	conn := pgtest.Conn(b, db.Schema)
	pgtest.Eventually(b, "200 waiters", time.Minute, func() bool {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND application_name = 'pooltop-test-peer'").Scan(&n); err != nil {
			b.Fatal(err)
		}
		return n == waiters
	})
	col := newCollector(b, ctx, collector.Config{Table: db.Schema + ".resource_pool"})
	s, err := col.Poll(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if s.LockWaiters != waiters {
		b.Fatalf("lock_waiters %d, want %d", s.LockWaiters, waiters)
	}
	sql, args := collector.LocksStatement(col)
	// As the collector's sessions run it: one generic plan, no JIT.
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan; SET jit = off; SET max_parallel_workers_per_gather = 0"); err != nil {
		b.Fatal(err)
	}
	var polls, stmts []float64
	b.ResetTimer()
	for range b.N {
		t0 := time.Now()
		if _, err := col.Poll(ctx); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			b.Fatal(err)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		polls, stmts = append(polls, ms(t1.Sub(t0))), append(stmts, ms(time.Since(t1)))
	}
	b.StopTimer()
	b.ReportMetric(median(polls), "poll_p50_ms")
	b.ReportMetric(median(stmts), "lockstmt_p50_ms")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func median(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}
