package engine_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgbench"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// Benchmarks of the claim and of the acquire → commit cycle, each next to
// pgbench running the same SQL at the same concurrency on the same server:
//
//	go test -run '^$' -bench . -benchtime 20000x ./engine/
//
// "rows/s" is the figure to compare: leases (or cycles) per second of wall
// time, for pooltop and pgbench alike.

// benchPool is a migrated schema shared by the sub-benchmarks of one benchmark.
type benchPool struct {
	schema string
	eng    *engine.Engine
	ctx    context.Context
}

func newBenchPool(b *testing.B, conns int32) *benchPool {
	b.Helper()
	return newPartitionedBenchPool(b, conns, 0)
}

// newPartitionedBenchPool is newBenchPool on a pool hash-partitioned in
// partitions partitions (0: a plain table).
func newPartitionedBenchPool(b *testing.B, conns int32, partitions int) *benchPool {
	b.Helper()
	schema := pgtest.PartitionedSchema(b, partitions)
	pool := pgtest.Pool(b, schema, pgtest.Options{MaxConns: conns, AppName: "pooltop-bench"})
	return &benchPool{schema: schema, eng: engine.New(pool), ctx: context.Background()}
}

// prepare makes sure need free ids exist and vacuums, so every run starts
// from the same kind of table (the vacuum tax is measured elsewhere).
func (p *benchPool) prepare(b *testing.B, need int) {
	b.Helper()
	var free int
	if err := pgtestQueryRow(p, "SELECT count(*) FROM resource_pool WHERE status = 'UNUSED'", &free); err != nil {
		b.Fatal(err)
	}
	if free < need {
		if _, err := p.eng.Seed(p.ctx, need-free+1000); err != nil {
			b.Fatal(err)
		}
	}
	conn := pgtest.Conn(b, p.schema)
	if _, err := conn.Exec(p.ctx, "VACUUM ANALYZE resource_pool"); err != nil {
		b.Fatal(err)
	}
}

func pgtestQueryRow(p *benchPool, sql string, dst any) error {
	return pgtest.PoolQueryRow(p.ctx, p.schema, sql, dst)
}

// parallel runs op b.N times spread over workers goroutines and reports rows/s.
func parallel(b *testing.B, workers, rowsPerOp int, op func(w, i int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	hists := make([]*hdrhistogram.Histogram, workers)
	b.ResetTimer()
	start := time.Now()
	for w := 0; w < workers; w++ {
		wg.Add(1)
		hists[w] = hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1))
				if i > b.N {
					return
				}
				t0 := time.Now()
				if err := op(w, i); err != nil {
					errs <- err
					return
				}
				_ = hists[w].RecordValue(time.Since(t0).Microseconds())
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	all := hdrhistogram.New(1, int64(time.Minute/time.Microsecond), 3)
	for _, h := range hists {
		all.Merge(h)
	}
	b.ReportMetric(float64(b.N*rowsPerOp)/el.Seconds(), "rows/s")
	b.ReportMetric(float64(all.ValueAtQuantile(99))/1000, "p99_ms")
}

func BenchmarkAcquire(b *testing.B) {
	p := newBenchPool(b, 64)
	for _, n := range []int{1, 10} {
		for _, workers := range []int{1, 16, 64} {
			b.Run(fmt.Sprintf("n=%d/workers=%d/pooltop", n, workers), func(b *testing.B) {
				p.prepare(b, b.N*n)
				defer sampleWaits(b, p.schema)()
				parallel(b, workers, n, func(w, i int) error {
					ls, err := p.eng.LeaseAcquire(p.ctx, &engine.LeaseAcquireParams{Holder: "bench", TTL: time.Hour, N: n})
					if err == nil && len(ls) != n {
						err = fmt.Errorf("claimed %d of %d", len(ls), n)
					}
					return err
				})
			})
			b.Run(fmt.Sprintf("n=%d/workers=%d/pgbench", n, workers), func(b *testing.B) {
				p.prepare(b, b.N*n)
				script := pgbench.Literal(engine.ClaimSQL(n), "'pgbench'", "3600000000") + ";\n"
				runPgbench(b, p.schema, script, workers, n)
			})
		}
	}
}

// BenchmarkAcquirePartitioned is BenchmarkAcquire's pooltop half on pools
// hash-partitioned in 4 and 16 partitions, each claim from a partition
// drawn at random, at 1, 16 and 64 workers; compare its rows/s with
// BenchmarkAcquire's pooltop lines (the plain pool). A claim of n may take
// fewer rows from a partition nearly drained, so the pool holds twice what
// the run claims and rows/s counts the rows actually claimed.
//
// Beside rows/s and p99_ms it reports the page-latch contention the
// partitions are for: lwlock_waiters, the mean number of the benchmark's
// sessions found waiting on an LWLock (any), and buffer_content_waiters,
// those waiting on a buffer's content lock, from pg_stat_activity sampled
// every 20 ms during the run. Run BenchmarkAcquire's lines for the plain pool.
func BenchmarkAcquirePartitioned(b *testing.B) {
	for _, parts := range []int{4, 16} {
		p := newPartitionedBenchPool(b, 64, parts)
		for _, n := range []int{1, 10} {
			for _, workers := range []int{1, 16, 64} {
				b.Run(fmt.Sprintf("partitions=%d/n=%d/workers=%d/pooltop", parts, n, workers), func(b *testing.B) {
					p.prepare(b, 2*b.N*n)
					var rows atomic.Int64
					defer sampleWaits(b, p.schema)()
					start := time.Now()
					parallel(b, workers, n, func(w, i int) error {
						ls, err := p.eng.LeaseAcquire(p.ctx, &engine.LeaseAcquireParams{Holder: "bench", TTL: time.Hour, N: n})
						rows.Add(int64(len(ls)))
						return err
					})
					b.ReportMetric(float64(rows.Load())/time.Since(start).Seconds(), "rows/s")
				})
			}
		}
	}
}

func BenchmarkCycle(b *testing.B) {
	p := newBenchPool(b, 64)
	for _, workers := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("workers=%d/pooltop", workers), func(b *testing.B) {
			p.prepare(b, b.N)
			run := time.Now().UnixNano()
			parallel(b, workers, 1, func(w, i int) error {
				ls, err := p.eng.LeaseAcquire(p.ctx, &engine.LeaseAcquireParams{Holder: "bench", TTL: time.Hour, N: 1})
				if err != nil {
					return err
				}
				_, err = p.eng.LeaseCommit(p.ctx, &engine.LeaseCommitParams{ID: ls[0].ID, Token: ls[0].Token,
					Holder: "bench", RequestID: fmt.Sprintf("b%d-%d", run, i)})
				return err
			})
		})
		b.Run(fmt.Sprintf("workers=%d/pgbench", workers), func(b *testing.B) {
			p.prepare(b, b.N)
			script := pgbench.CycleScript(time.Hour, 0)
			runPgbench(b, p.schema, script, workers, 1)
		})
	}
}

// pgbench runs script b.N times in total over workers connections, and
// reports rows/s from pgbench's own tps (without connection time).
func runPgbench(b *testing.B, schema, script string, workers, rowsPerTx int) {
	b.Helper()
	b.ResetTimer()
	res, err := pgbench.Run(context.Background(), pgbench.Options{DSN: pgtest.DSN(), Schema: schema, Script: script,
		Clients: workers, Transactions: int(math.Ceil(float64(b.N) / float64(workers)))})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if res.Failed > 0 {
		b.Fatalf("pgbench: %d transactions failed", res.Failed)
	}
	b.ReportMetric(res.TPS*float64(rowsPerTx), "rows/s")
}

// sampleWaits samples, every 20 ms until the returned stop is called, the
// benchmark's sessions (application_name pooltop-bench) waiting on an
// LWLock, and reports the mean per sample as lwlock_waiters and, of those,
// buffer_content_waiters (the page latch).
func sampleWaits(b *testing.B, schema string) (stop func()) {
	b.Helper()
	conn := pgtest.Conn(b, schema)
	done, finished := make(chan struct{}), make(chan struct{})
	var samples, lw, bc int64
	go func() {
		defer close(finished)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			var l, c int64
			if err := conn.QueryRow(context.Background(), `
SELECT count(*) FILTER (WHERE wait_event_type = 'LWLock'),
       count(*) FILTER (WHERE wait_event_type = 'LWLock' AND wait_event = 'BufferContent')
FROM pg_stat_activity WHERE application_name = 'pooltop-bench'`).Scan(&l, &c); err != nil {
				b.Error(err)
				return
			}
			samples, lw, bc = samples+1, lw+l, bc+c
		}
	}()
	return func() {
		close(done)
		<-finished
		if samples > 0 {
			b.ReportMetric(float64(lw)/float64(samples), "lwlock_waiters")
			b.ReportMetric(float64(bc)/float64(samples), "buffer_content_waiters")
		}
	}
}

// BenchmarkReap times one reap statement of 1,000 rows over a backlog of
// expired leases, with 0 or 50 of the oldest rows locked by their holders
// (a renewal or a commit in flight: the statement passes over them and
// names them held). One op is one statement; rows/s counts the rows it
// returned to the pool.
func BenchmarkReap(b *testing.B) {
	p := newBenchPool(b, 4)
	for _, locked := range []int{0, 50} {
		b.Run(fmt.Sprintf("locked=%d", locked), func(b *testing.B) {
			const batch = 1000
			p.prepare(b, b.N*batch+locked)
			if _, err := p.eng.LeaseAcquire(p.ctx, &engine.LeaseAcquireParams{Holder: "bench", TTL: time.Millisecond, N: min(b.N*batch+locked, engine.MaxBatch)}); err != nil {
				b.Fatal(err)
			}
			for left := b.N*batch + locked - engine.MaxBatch; left > 0; left -= engine.MaxBatch {
				if _, err := p.eng.LeaseAcquire(p.ctx, &engine.LeaseAcquireParams{Holder: "bench", TTL: time.Millisecond, N: min(left, engine.MaxBatch)}); err != nil {
					b.Fatal(err)
				}
			}
			later := time.Now().Add(time.Minute)
			if locked > 0 {
				tx, err := pgtest.Conn(b, p.schema).Begin(p.ctx)
				if err != nil {
					b.Fatal(err)
				}
				defer func() { _ = tx.Rollback(p.ctx) }()
				if _, err := tx.Exec(p.ctx, `SELECT 1 FROM resource_pool WHERE id IN (
SELECT id FROM resource_pool WHERE status = 'PENDING' ORDER BY leased_until LIMIT $1) FOR NO KEY UPDATE`, locked); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			reclaimed := 0
			for range b.N {
				res, err := p.eng.LeaseReap(p.ctx, &engine.LeaseReapParams{Batch: batch, Now: &later})
				if err != nil {
					b.Fatal(err)
				}
				reclaimed += res.Reclaimed
			}
			b.ReportMetric(float64(reclaimed)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
