package collector_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgbench"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/workload"
)

// BenchmarkPollUnderLoad measures, in one run on one pool under a running
// workload (16 workers, SKIP LOCKED, no simulated work): one full collector
// poll (poll_p50_ms, the figure to keep ≤ 10 ms), the naive exact counts it
// avoids (groupby_ms, indexcount_ms), and the workload's acquires per second
// without and with polling every second, and the overhead (the mean, and the
// median of ten polled periods, each against the quiet periods either side).
//
//	POOLTOP_BENCH_ROWS=10000000 go test -run '^$' -bench PollUnderLoad -benchtime 1x -timeout 60m ./collector/
func BenchmarkPollUnderLoad(b *testing.B) {
	rows := benchRows(b)
	ctx := context.Background()
	schema := pgtest.MigratedSchema(b)
	pool := pgtest.Pool(b, schema, pgtest.Options{MaxConns: 16, AppName: "pooltop-workload"})
	eng := engine.New(pool)
	start := time.Now()
	if _, err := eng.Seed(ctx, rows); err != nil {
		b.Fatal(err)
	}
	conn := pgtest.Conn(b, schema)
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE resource_pool"); err != nil {
		b.Fatal(err)
	}
	b.Logf("seeded %d rows in %v", rows, time.Since(start).Round(time.Millisecond))

	// The same poll on the idle server: what a poll itself costs, before any
	// wait for a CPU that a busy server adds.
	idle := newCollector(b, ctx, collector.Config{Table: schema + ".resource_pool"})
	idlePolls := pollTimes(b, ctx, idle, 40, 0)
	idle.Close()

	col := newCollector(b, ctx, collector.Config{Table: schema + ".resource_pool"})

	timeIt := func(sql string) time.Duration {
		t0 := time.Now()
		r, err := conn.Query(ctx, sql)
		if err != nil {
			b.Fatal(err)
		}
		r.Close()
		return time.Since(t0)
	}
	pollEvery := func(stop <-chan struct{}) { pollEverySecond(b, col, stop) }

	// The load: the workload in this process (default), or with
	// POOLTOP_BENCH_LOAD=pgbench the same claim → commit cycle driven by
	// pgbench from another process, as an application would load a pool
	// that pooltop watch observes.
	var rate func(d time.Duration, poll bool) float64
	var background func(d time.Duration) (stop func())
	if os.Getenv("POOLTOP_BENCH_LOAD") == "pgbench" {
		script := pgbench.CycleScript(time.Minute, 0)
		run := func(d time.Duration) float64 {
			res, err := pgbench.Run(ctx, pgbench.Options{DSN: pgtest.DSN(), Schema: schema, Script: script, Clients: 16, Duration: d})
			if err != nil {
				b.Fatal(err)
			}
			return res.TPS
		}
		rate = func(d time.Duration, poll bool) float64 {
			stop := make(chan struct{})
			if poll {
				go pollEvery(stop)
			}
			tps := run(d)
			close(stop)
			return tps
		}
		background = func(d time.Duration) func() {
			done := make(chan struct{})
			go func() { run(d); close(done) }()
			time.Sleep(2 * time.Second) // pgbench connects and reaches its rate
			return func() { <-done }
		}
	} else {
		cfg := workload.Defaults()
		cfg.Workers, cfg.Task, cfg.TTL = 16, 0, time.Minute
		wl, err := workload.New(eng, cfg)
		if err != nil {
			b.Fatal(err)
		}
		wl.Start(ctx)
		defer wl.Stop()
		time.Sleep(3 * time.Second) // warm-up: the workload reaches its steady rate
		rate = func(d time.Duration, poll bool) float64 {
			s0 := wl.Snapshot()
			t0 := time.Now()
			stop := make(chan struct{})
			if poll {
				go pollEvery(stop)
			}
			time.Sleep(d)
			close(stop)
			return float64(wl.Snapshot().Acquired-s0.Acquired) / time.Since(t0).Seconds()
		}
		background = func(time.Duration) func() { return func() {} }
	}

	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		wait := background(40 * time.Second)
		groupBy := timeIt("SELECT status, count(*) FROM resource_pool GROUP BY status")
		indexCount := timeIt("SELECT count(*) FROM resource_pool WHERE status = 'UNUSED'")
		polls := pollTimes(b, ctx, col, 60, 50*time.Millisecond)
		wait()

		quiet, polled, median := pollingOverhead(rate)
		reportPolls(b, idlePolls, polls, groupBy)
		b.ReportMetric(float64(indexCount.Microseconds())/1000, "indexcount_ms")
		b.ReportMetric(quiet, "acq/s_quiet")
		b.ReportMetric(polled, "acq/s_polled")
		b.ReportMetric(100*(quiet-polled)/quiet, "overhead_mean_%")
		b.ReportMetric(median, "overhead_median_%")
	}
}

// BenchmarkPollShapes measures, on each shape of shapes (ids consumed in
// order; a leak of 10% with the states interleaved; a hand-built pool
// with no partial index on PENDING rows; 8 hash partitions), in one run: the
// poll on the idle server, the poll under a 4-client and then a 16-client
// pgbench claim load from another process, the naive GROUP BY status in the same run, how many polls
// the figures take to come within 2% of the truth, the largest error left a
// few polls after the load stops, and what polling every second costs the
// load (median of ten polled periods, each against the quiet periods either
// side; see pollingOverhead).
//
//	POOLTOP_BENCH_ROWS=10000000 go test -run '^$' -bench PollShapes -benchtime 1x -timeout 120m ./collector/
func BenchmarkPollShapes(b *testing.B) {
	rows := benchRows(b)
	ctx := context.Background()
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			start := time.Now()
			schema := sh.build(b, rows)
			b.Logf("%s: %d rows built in %v", sh.name, rows, time.Since(start).Round(time.Second))
			conn := pgtest.Conn(b, schema)
			col := newCollector(b, ctx, collector.Config{Table: schema + ".resource_pool"})
			cfg := col.Config()
			poll := func() collector.Snapshot {
				s, err := col.Poll(ctx)
				if err != nil {
					b.Fatal(err)
				}
				return s
			}
			// Polls until the figures are within 2% of the truth, at rest.
			t0 := countTruth(b, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)
			converge := 0
			for ; converge < 600; converge++ {
				if e, _ := worstError(poll().Pool, t0); e < 2 {
					break
				}
			}
			idle := pollTimes(b, ctx, col, 40, 0)

			// The load: an application's claim and commit cycle, one row at a time.
			// (One row always comes back, 0 when the pool is empty, which pgbench
			// would take for an error.)
			script := "WITH c AS (UPDATE resource_pool SET status = 'PENDING', leased_until = now() + interval '30 seconds', updated_at = now()" +
				" WHERE id = (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id)" +
				" SELECT coalesce((SELECT id FROM c), 0) AS id \\gset\n" +
				"UPDATE resource_pool SET status = 'CONSUMED', updated_at = now() WHERE id = :id;\n"
			loadN := func(clients int, d time.Duration) float64 {
				res, err := pgbench.Run(ctx, pgbench.Options{DSN: pgtest.DSN(), Schema: schema, Script: script, Clients: clients, Duration: d})
				if err != nil {
					b.Error(err) // may run in a goroutine: no Fatal
				}
				return res.TPS
			}
			load := func(d time.Duration) float64 { return loadN(16, d) }
			b.ResetTimer()
			// The load the issue saw first: 4 clients, as many as a 2-core
			// server runs without a queue.
			done4 := make(chan struct{})
			go func() { loadN(4, 25*time.Second); close(done4) }()
			time.Sleep(3 * time.Second)
			cpu0 := serverCPU(b, conn)
			busy4 := pollTimes(b, ctx, col, 40, 50*time.Millisecond)
			cpu4 := (serverCPU(b, conn) - cpu0) / time.Duration(len(busy4))
			<-done4
			done := make(chan struct{})
			go func() { load(40 * time.Second); close(done) }()
			time.Sleep(3 * time.Second) // pgbench connects and reaches its rate
			t1 := time.Now()
			if _, err := conn.Exec(ctx, "SELECT status, count(*) FROM resource_pool GROUP BY status"); err != nil {
				b.Fatal(err)
			}
			groupBy := time.Since(t1)
			busy := pollTimes(b, ctx, col, 60, 50*time.Millisecond)
			<-done
			for j := 0; j < 5; j++ {
				poll()
				time.Sleep(200 * time.Millisecond)
			}
			after, which := worstError(poll().Pool, countTruth(b, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter))
			b.Logf("%s: largest error after the load: %.2f%% (%s)", sh.name, after, which)

			_, _, overhead := pollingOverhead(func(d time.Duration, polls bool) float64 {
				stop := make(chan struct{})
				if polls {
					go pollEverySecond(b, col, stop)
				}
				defer close(stop)
				return load(d)
			})
			reportPolls(b, idle, busy, groupBy)
			sort.Float64s(busy4)
			b.ReportMetric(busy4[len(busy4)/2], "poll4_p50_ms")
			// What a poll costs the server in CPU, read from the kernel for the
			// collector's backends: unlike wall time, it does not count the
			// wait for a CPU, and at one poll a second it is the share of the
			// machine that watching takes from the workload.
			ms := float64(cpu4.Microseconds()) / 1000
			b.ReportMetric(ms, "poll_cpu_ms")
			b.ReportMetric(100*ms/1000/float64(runtime.NumCPU()), "cpu_share_%")
			b.ReportMetric(float64(converge), "polls_to_2%")
			b.ReportMetric(after, "error_after_load_%")
			b.ReportMetric(overhead, "overhead_median_%")
		})
	}
}

// benchRows is POOLTOP_BENCH_ROWS, the size of the benchmarks' pools
// (default 1,000,000).
func benchRows(b *testing.B) int {
	s := os.Getenv("POOLTOP_BENCH_ROWS")
	if s == "" {
		return 1_000_000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		b.Fatalf("POOLTOP_BENCH_ROWS=%q: give a number of rows", s)
	}
	return n
}

// pollingOverhead measures what polling every second costs a load: rate
// runs the load for a period, polled or not, and returns its rate. Quiet and
// polled periods of 4 s alternate, starting and ending quiet, and each
// polled period is weighed against the mean of the quiet periods on either
// side of it, so that a drift of the load's rate (a pool whose head fills
// with dead entries as it is consumed, an autovacuum that starts) cancels
// instead of counting as the poll's cost, as it did when each polled period
// was weighed against the quiet one before it only. It returns the mean
// quiet and polled rates and the median overhead of the ten polled
// periods, in percent.
func pollingOverhead(rate func(d time.Duration, poll bool) float64) (quiet, polled, median float64) {
	rates := make([]float64, 2*overheadPeriods+1)
	for i := range rates {
		rates[i] = rate(4*time.Second, i%2 == 1)
	}
	return overheadOf(rates)
}

// overheadPeriods is how many polled periods pollingOverhead runs.
const overheadPeriods = 10

// overheadOf weighs each polled period's rate against the mean of the
// quiet periods on either side: rates are quiet, polled, quiet, …,
// quiet. It returns the mean quiet and polled rates and the median
// overhead, in percent.
func overheadOf(rates []float64) (quiet, polled, median float64) {
	var overheads []float64
	n := len(rates) / 2
	for k := 1; k < len(rates); k += 2 {
		around := (rates[k-1] + rates[k+1]) / 2
		overheads = append(overheads, 100*(around-rates[k])/around)
		polled += rates[k] / float64(n)
	}
	for k := 0; k < len(rates); k += 2 {
		quiet += rates[k] / float64(n+1)
	}
	sort.Float64s(overheads)
	return quiet, polled, (overheads[n/2-1] + overheads[n/2]) / 2
}

// pollEverySecond polls col once a second until stop is closed, as
// pooltop watch does beside a workload.
func pollEverySecond(b *testing.B, col *collector.Collector, stop <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
			if _, err := col.Poll(context.Background()); err != nil {
				b.Error(err)
				return
			}
		}
	}
}

// pollTimes polls col n times, pause apart, and returns how long each poll
// took (PollMS).
func pollTimes(b *testing.B, ctx context.Context, col *collector.Collector, n int, pause time.Duration) []float64 {
	b.Helper()
	var ms []float64
	for range n {
		s, err := col.Poll(ctx)
		if err != nil {
			b.Fatal(err)
		}
		ms = append(ms, s.PollMS)
		time.Sleep(pause)
	}
	return ms
}

// reportPolls reports what the poll benchmarks share: the median poll on the
// idle server, the median and 95th percentile under load, and the GROUP BY
// count a poll is weighed against. It sorts idle and busy.
func reportPolls(b *testing.B, idle, busy []float64, groupBy time.Duration) {
	sort.Float64s(idle)
	sort.Float64s(busy)
	b.ReportMetric(idle[len(idle)/2], "idle_poll_p50_ms")
	b.ReportMetric(busy[len(busy)/2], "poll_p50_ms")
	b.ReportMetric(busy[len(busy)*95/100], "poll_p95_ms")
	b.ReportMetric(float64(groupBy.Microseconds())/1000, "groupby_ms")
}

// serverCPU is the CPU time the server's backends of the collector
// ("pooltop-collector") have used, from /proc (the test server runs on this
// machine; /proc counts in USER_HZ, 100 a second on Linux).
func serverCPU(b *testing.B, conn *pgx.Conn) time.Duration {
	b.Helper()
	rows, err := conn.Query(context.Background(), "SELECT pid FROM pg_stat_activity WHERE application_name = 'pooltop-collector'")
	if err != nil {
		b.Fatal(err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		b.Fatal(err)
	}
	var ticks int64
	for _, pid := range pids {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Fatalf("the collector's backend %d: %v (the benchmark reads its CPU time from /proc, on the machine of the test server)", pid, err)
		}
		// The fields after the command name, which is in parentheses.
		f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+2:]))
		for _, i := range []int{11, 12} { // utime, stime (fields 14 and 15)
			n, _ := strconv.ParseInt(f[i], 10, 64)
			ticks += n
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// BenchmarkMechanisms measures what each counting mechanism buys: on every
// shape of pool users have, the collector runs once as it is and once with
// each mechanism switched off (collector.Knockout), and reports for each:
// the polls until every figure is within 2% of the truth, the median poll
// at rest, the median poll and the server CPU a poll takes under a 4-client
// claim load from pgbench, and the largest error a few polls after the
// load. The pool is built once per shape; each run loads it for 12 s.
//
//	POOLTOP_BENCH_ROWS=1000000 go test -run '^$' -bench Mechanisms -benchtime 1x -timeout 120m ./collector/
func BenchmarkMechanisms(b *testing.B) {
	rows := benchRows(b)
	ctx := context.Background()
	// The collector as it is runs first and again last: the two give the
	// spread between runs that a mechanism's difference must exceed.
	runs := []string{"", "settled", "cuts", "floor", "again"}
	script := "WITH c AS (UPDATE resource_pool SET status = 'PENDING', leased_until = now() + interval '30 seconds', updated_at = now()" +
		" WHERE id = (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id)" +
		" SELECT coalesce((SELECT id FROM c), 0) AS id \\gset\n" +
		"UPDATE resource_pool SET status = 'CONSUMED', updated_at = now() WHERE id = :id;\n"
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			schema := sh.build(b, rows)
			conn := pgtest.Conn(b, schema)
			for _, off := range runs {
				name := "all"
				switch off {
				case "":
				case "again":
					name = "all-again"
				default:
					name = "no-" + off
				}
				b.Run(name, func(b *testing.B) {
					if name[:3] == "no-" {
						defer collector.Knockout(off)()
					}
					col, err := collector.New(ctx, collector.Config{DSN: pgtest.DSN(), Table: schema + ".resource_pool"})
					if err != nil {
						b.Fatal(err)
					}
					defer col.Close()
					cfg := col.Config()
					poll := func() collector.Snapshot {
						s, err := col.Poll(ctx)
						if err != nil {
							b.Fatal(err)
						}
						return s
					}
					t0 := countTruth(b, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter)
					converge := 0
					for ; converge < 600; converge++ {
						if e, _ := worstError(poll().Pool, t0); e < 2 {
							break
						}
					}
					idle := pollTimes(b, ctx, col, 20, 0)
					done := loadInBackground(b, ctx, schema, script, 4, 12*time.Second)
					time.Sleep(2 * time.Second)
					cpu0 := serverCPU(b, conn)
					busy := pollTimes(b, ctx, col, 60, 50*time.Millisecond)
					cpu := (serverCPU(b, conn) - cpu0) / time.Duration(len(busy))
					<-done
					for range 5 {
						poll()
						time.Sleep(200 * time.Millisecond)
					}
					after, which := worstError(poll().Pool, countTruth(b, conn, cfg.StuckAfter, cfg.Alerts.ExpiredAfter))
					sort.Float64s(idle)
					sort.Float64s(busy)
					b.Logf("%s %s: converge %d polls, idle %.2f ms, busy %.2f ms, cpu %.2f ms, error after %.2f%% (%s)",
						sh.name, name, converge, idle[len(idle)/2], busy[len(busy)/2], float64(cpu.Microseconds())/1000, after, which)
					b.ReportMetric(float64(converge), "polls_to_2%")
					b.ReportMetric(idle[len(idle)/2], "idle_p50_ms")
					b.ReportMetric(busy[len(busy)/2], "poll4_p50_ms")
					b.ReportMetric(float64(cpu.Microseconds())/1000, "poll_cpu_ms")
					b.ReportMetric(after, "error_after_load_%")
				})
			}
		})
	}
}

// BenchmarkMechanismsDirty measures the mechanisms where they are meant to
// act: on a pool that a claim load has run on for 40 s with autovacuum off
// (the dead index entries that claims and commits leave pile up at the
// UNUSED head and around now in the PENDING index, as between two
// autovacuums of a busy pool). Then, with no load, each run polls 40 times
// and reports the buffers the collector's sessions read a poll (from
// pg_stat_database, read once its sessions have ended and flushed their
// statistics), the median poll and the server CPU of a poll.
//
//	POOLTOP_BENCH_ROWS=1000000 go test -run '^$' -bench MechanismsDirty -benchtime 1x -timeout 60m ./collector/
func BenchmarkMechanismsDirty(b *testing.B) {
	rows := benchRows(b)
	ctx := context.Background()
	// A first run, not compared, kills the dead index entries its scans
	// meet (as the workload's own scans do). The pool still changes from run
	// to run (leases expire), so the collector as it is runs between every
	// two knockouts: compare each with the runs either side.
	runs := []string{"warm-up", "", "settled", "", "cuts", "", "floor", ""}
	script := "WITH c AS (UPDATE resource_pool SET status = 'PENDING', leased_until = now() + interval '30 seconds', updated_at = now()" +
		" WHERE id = (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id)" +
		" SELECT coalesce((SELECT id FROM c), 0) AS id \\gset\n" +
		"UPDATE resource_pool SET status = 'CONSUMED', updated_at = now() WHERE id = :id;\n"
	for _, sh := range shapes {
		if sh.name == "hand-built" {
			continue // no PENDING index: the census, which no knockout touches
		}
		b.Run(sh.name, func(b *testing.B) {
			schema := sh.build(b, rows)
			conn := pgtest.Conn(b, schema)
			if _, err := conn.Exec(ctx, `DO $$ DECLARE r regclass; BEGIN
				FOR r IN SELECT relid FROM pg_partition_tree('resource_pool'::regclass) WHERE isleaf LOOP
					EXECUTE format('ALTER TABLE %s SET (autovacuum_enabled = false)', r);
				END LOOP; END $$`); err != nil {
				b.Fatal(err)
			}
			if os.Getenv("POOLTOP_BENCH_HORIZON") != "" {
				// A transaction that keeps its snapshot holds the xmin horizon
				// for the whole run, as a forgotten session does in an
				// incident: no dead entry may be removed, nor marked dead in
				// the index by the scans that meet it.
				tx := pgtest.PeerTx(b, ctx, schema)
				if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
					b.Fatal(err)
				}
				if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
					b.Fatal(err)
				}
			}
			if _, err := pgbench.Run(ctx, pgbench.Options{DSN: pgtest.DSN(), Schema: schema, Script: script, Clients: 4, Duration: 40 * time.Second}); err != nil {
				b.Fatal(err)
			}
			blocks := func() int64 {
				var n int64
				if err := conn.QueryRow(ctx, "SELECT blks_hit + blks_read FROM pg_stat_database WHERE datname = current_database()").Scan(&n); err != nil {
					b.Fatal(err)
				}
				return n
			}
			for _, off := range runs {
				name := "all"
				switch off {
				case "":
				case "warm-up":
					name = "warm-up"
				default:
					name = "no-" + off
				}
				b.Run(name, func(b *testing.B) {
					if name[:3] == "no-" {
						defer collector.Knockout(off)()
					}
					col, err := collector.New(ctx, collector.Config{DSN: pgtest.DSN(), Table: schema + ".resource_pool"})
					if err != nil {
						b.Fatal(err)
					}
					for range 30 { // the first walks and passes
						if _, err := col.Poll(ctx); err != nil {
							b.Fatal(err)
						}
					}
					// An idle session flushes its statistics within 10 s (PG 15's
					// idle interval): then the count starts from the warm-up's end.
					time.Sleep(11 * time.Second)
					blk0, cpuStart := blocks(), serverCPU(b, conn)
					ms := pollTimes(b, ctx, col, 40, 0)
					cpu := (serverCPU(b, conn) - cpuStart) / 40
					col.Close()
					pgtest.Eventually(b, "the collector's sessions gone", 10*time.Second, func() bool {
						var n int
						_ = conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pooltop-collector'").Scan(&n)
						return n == 0
					})
					perPoll := float64(blocks()-blk0) / 40
					sort.Float64s(ms)
					b.Logf("%s %s: %.0f buffers a poll, poll p50 %.2f ms, cpu %.2f ms", sh.name, name, perPoll, ms[len(ms)/2], float64(cpu.Microseconds())/1000)
					b.ReportMetric(perPoll, "buffers/poll")
					b.ReportMetric(ms[len(ms)/2], "poll_p50_ms")
					b.ReportMetric(float64(cpu.Microseconds())/1000, "poll_cpu_ms")
				})
			}
		})
	}
}

// BenchmarkFirstPolls measures what a fresh collector's first polls cost on
// each shape of pool: 40 polls at rest (100 ms apart) and 40 under a
// 4-client pgbench claim load with 30 s leases (250 ms apart), each time
// from a collector that has never polled, so the start-up walk is in them.
// It reports the first poll, the slowest and the median of each run, the
// polls until no figure is marked estimated (at rest, -1: never within 40),
// and the first and slowest polls of a second fresh collector at rest, once
// the pool has been read (read_first_ms, read_max_ms). A poll's wall time
// counts its wait for a CPU, which under load is most of it; cpu_*_ms are
// the CPU time of the collector's own backends (from /proc, -1 when the
// server is elsewhere): the poll's cost to the server.
//
//	POOLTOP_BENCH_ROWS=1000000 go test -run '^$' -bench FirstPolls -benchtime 1x -timeout 60m ./collector/
func BenchmarkFirstPolls(b *testing.B) {
	rows := benchRows(b)
	ctx := context.Background()
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			schema := sh.build(b, rows)
			run := func(pause time.Duration) (first, worst, p50, cpuWorst, cpuP50 float64, settled int) {
				col := newCollector(b, ctx, collector.Config{Table: schema + ".resource_pool"})
				var ms, cpu []float64
				settled = -1
				for i := range 40 {
					before := backendCPU(ctx, col)
					s, err := col.Poll(ctx)
					if err != nil {
						b.Fatal(err)
					}
					ms = append(ms, s.PollMS)
					if before >= 0 {
						if after := backendCPU(ctx, col); after >= before {
							cpu = append(cpu, float64(after-before)/1e6)
							if os.Getenv("POOLTOP_BENCH_VERBOSE") != "" {
								fmt.Fprintf(os.Stderr, "poll %d: %.1f ms, backends CPU %.1f ms, estimated %v\n", i+1, s.PollMS, float64(after-before)/1e6, s.Pool.Estimated)
							}
						}
					}
					if settled < 0 && len(s.Pool.Estimated) == 0 {
						settled = i + 1
					}
					time.Sleep(pause)
				}
				first = ms[0]
				sort.Float64s(ms)
				cpuWorst, cpuP50 = -1, -1
				if len(cpu) > 0 {
					sort.Float64s(cpu)
					cpuWorst, cpuP50 = cpu[len(cpu)-1], cpu[len(cpu)/2]
				}
				return first, ms[len(ms)-1], ms[len(ms)/2], cpuWorst, cpuP50, settled
			}
			b.ResetTimer()
			first, worst, p50, cpuWorst, cpuP50, settled := run(100 * time.Millisecond)
			// A second collector that has never polled, on the same pool, now
			// read once: as watch starting on a pool in use, whose pages its
			// own traffic has read (hint bits set), where the first run paid
			// the first reads after the bulk build.
			wfirst, wworst, _, _, _, _ := run(100 * time.Millisecond)
			done := loadInBackground(b, ctx, schema, claimWith30sLeases, 4, 14*time.Second)
			time.Sleep(2 * time.Second)
			lfirst, lworst, lp50, lcpuWorst, lcpuP50, _ := run(250 * time.Millisecond)
			<-done
			b.ReportMetric(first, "first_ms")
			b.ReportMetric(worst, "max_ms")
			b.ReportMetric(p50, "p50_ms")
			b.ReportMetric(float64(settled), "polls_to_exact")
			b.ReportMetric(wfirst, "read_first_ms")
			b.ReportMetric(wworst, "read_max_ms")
			b.ReportMetric(lfirst, "load_first_ms")
			b.ReportMetric(lworst, "load_max_ms")
			b.ReportMetric(lp50, "load_p50_ms")
			b.ReportMetric(cpuWorst, "cpu_max_ms")
			b.ReportMetric(cpuP50, "cpu_p50_ms")
			b.ReportMetric(lcpuWorst, "load_cpu_max_ms")
			b.ReportMetric(lcpuP50, "load_cpu_p50_ms")
		})
	}
}

// backendCPU is the CPU time in nanoseconds that col's sessions' backends
// have used (/proc/PID/schedstat), or -1 when it cannot be read (a server
// on another machine). Between polls every session is idle.
func backendCPU(ctx context.Context, col *collector.Collector) int64 {
	conns := collector.DBPool(col).Raw().AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	var sum int64
	for _, c := range conns {
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", c.Conn().PgConn().PID()))
		if err != nil {
			return -1
		}
		ns, err := strconv.ParseInt(strings.Fields(string(raw))[0], 10, 64)
		if err != nil {
			return -1
		}
		sum += ns
	}
	return sum
}

// printStatementDeltas prints, for one poll, the server time each of the
// collector's statements on schema's pool took since the last call (from
// pg_stat_statements, execution and planning, the latter where
// pg_stat_statements.track_planning is on; seen holds the totals).
func printStatementDeltas(ctx context.Context, conn *pgx.Conn, poll int, schema string, seen map[int64][2]float64) {
	rows, err := conn.Query(ctx, `SELECT queryid, total_exec_time, total_plan_time, left(regexp_replace(query, '\s+', ' ', 'g'), 70)
		FROM public.pg_stat_statements WHERE query LIKE '%' || $1 || '%' AND query NOT LIKE '%UPDATE%'`, schema)
	if err != nil {
		return
	}
	defer rows.Close()
	var line []string
	for rows.Next() {
		var id int64
		var t [2]float64
		var q string
		if rows.Scan(&id, &t[0], &t[1], &q) != nil {
			return
		}
		if exec, plan := t[0]-seen[id][0], t[1]-seen[id][1]; exec+plan >= 0.3 {
			line = append(line, fmt.Sprintf("%.1f + %.1f plan  %s", exec, plan, q))
		}
		seen[id] = t
	}
	fmt.Fprintf(os.Stderr, "poll %d:\n  %s\n", poll, strings.Join(line, "\n  "))
}

// BenchmarkWatchMinute is the minute the issue measured: a collector that
// has never polled watches each shape for 60 polls a second apart, while
// 4 pgbench clients claim ids with 30 s leases (so that from poll 30 or so
// the first leases expire and stay PENDING). It reports the slowest poll
// and the median, by wall time and by the CPU of the collector's backends,
// the median of polls 41-60 (after the leases expire), and the claimers'
// rate while watched against the minute before and the 20 s after, from
// the rows' updated_at (claims per second, each row is claimed once).
// That ratio is biased: the claimers slow down as the head of the UNUSED
// index fills with the dead entries of their claims (no vacuum runs in
// these two minutes), so the mean of the rates either side is not the
// rate the watched minute would have had. After the minute the same
// collector therefore polls in 4 s periods between 4 s quiet ones
// (pollingOverhead), each weighed against the quiet periods on either
// side: watch_cost_median_% is what watching costs the claimers.
//
//	POOLTOP_BENCH_ROWS=10000000 go test -run '^$' -bench 'WatchMinute/leak' -benchtime 1x -timeout 60m ./collector/
func BenchmarkWatchMinute(b *testing.B) {
	rows := benchRows(b)
	ctx := context.Background()
	for _, sh := range shapes {
		b.Run(sh.name, func(b *testing.B) {
			schema := sh.build(b, rows)
			conn := pgtest.Conn(b, schema)
			var began time.Time
			if err := conn.QueryRow(ctx, "SELECT now()").Scan(&began); err != nil {
				b.Fatal(err)
			}
			if os.Getenv("POOLTOP_BENCH_VERBOSE") != "" {
				_, _ = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public")
				_, _ = conn.Exec(ctx, "SELECT public.pg_stat_statements_reset()")
			}
			const quietBefore, watched, quietAfter = 20 * time.Second, 60 * time.Second, 20 * time.Second
			const alternating = (2*overheadPeriods + 1) * 4 * time.Second // the periods below
			done := loadInBackground(b, ctx, schema, claimWith30sLeases, 4, quietBefore+watched+alternating+quietAfter+5*time.Second)
			b.ResetTimer()
			time.Sleep(quietBefore)
			col := newCollector(b, ctx, collector.Config{Table: schema + ".resource_pool"})
			var from, to time.Time
			if err := conn.QueryRow(ctx, "SELECT now()").Scan(&from); err != nil {
				b.Fatal(err)
			}
			var ms, cpu []float64
			stmts := map[int64][2]float64{}
			tick := time.NewTicker(time.Second)
			for range 60 {
				before := backendCPU(ctx, col)
				s, err := col.Poll(ctx)
				if err != nil {
					b.Fatal(err)
				}
				ms = append(ms, s.PollMS)
				if after := backendCPU(ctx, col); before >= 0 && after >= before {
					cpu = append(cpu, float64(after-before)/1e6)
				}
				if os.Getenv("POOLTOP_BENCH_VERBOSE") != "" {
					printStatementDeltas(ctx, conn, len(ms), schema, stmts)
				}
				<-tick.C
			}
			tick.Stop()
			if err := conn.QueryRow(ctx, "SELECT now()").Scan(&to); err != nil {
				b.Fatal(err)
			}
			// The alternating periods: their bounds on the server's clock now,
			// their claims counted once the load is over (a count during the
			// load would read the table beside the claimers).
			type period struct{ lo, hi time.Time }
			var periods []period
			for i := range 2*overheadPeriods + 1 {
				var p period
				if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&p.lo); err != nil {
					b.Fatal(err)
				}
				stop := make(chan struct{})
				polled := make(chan struct{})
				go func() {
					defer close(polled)
					if i%2 == 1 {
						pollEverySecond(b, col, stop)
					}
				}()
				time.Sleep(4 * time.Second)
				close(stop)
				<-polled
				if err := conn.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&p.hi); err != nil {
					b.Fatal(err)
				}
				periods = append(periods, p)
			}
			col.Close()
			<-done
			b.StopTimer()
			var left int64
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM resource_pool WHERE status = 'UNUSED'").Scan(&left); err != nil || left == 0 {
				b.Fatalf("the claimers emptied the pool (%v): raise POOLTOP_BENCH_ROWS", err)
			}
			// Claims a second in each period, the first 3 s of the load
			// (pgbench's start) left out.
			rate := func(lo, hi time.Time) float64 {
				var n int64
				var secs float64
				err := conn.QueryRow(ctx, `SELECT count(*), extract(epoch FROM $2::timestamptz - $1::timestamptz)
					FROM resource_pool WHERE updated_at >= $1 AND updated_at < $2 AND status = 'PENDING'`, lo, hi).Scan(&n, &secs)
				if err != nil || secs <= 0 {
					b.Fatalf("claims between %v and %v: %v", lo, hi, err)
				}
				return float64(n) / secs
			}
			last := periods[len(periods)-1].hi
			quiet := (rate(began.Add(3*time.Second), from) + rate(last, last.Add(quietAfter-2*time.Second))) / 2
			polled := rate(from, to)
			// The periods' rates: quiet, polled, quiet, … quiet.
			claims := claimTimes(b, ctx, conn, periods[0].lo, last)
			var rates []float64
			for _, p := range periods {
				lo, _ := slices.BinarySearchFunc(claims, p.lo, time.Time.Compare)
				hi, _ := slices.BinarySearchFunc(claims, p.hi, time.Time.Compare)
				rates = append(rates, float64(hi-lo)/p.hi.Sub(p.lo).Seconds())
			}
			_, _, cost := overheadOf(rates)
			late := append([]float64(nil), ms[40:]...)
			sort.Float64s(late)
			wall := append([]float64(nil), ms...)
			sort.Float64s(wall)
			b.ReportMetric(wall[len(wall)-1], "max_ms")
			b.ReportMetric(wall[len(wall)/2], "p50_ms")
			b.ReportMetric(late[len(late)/2], "p50_41_60_ms")
			if len(cpu) > 0 {
				if os.Getenv("POOLTOP_BENCH_VERBOSE") != "" {
					fmt.Fprintf(os.Stderr, "%s: polls (backends' CPU ms) %.1f\n", sh.name, cpu)
				}
				sort.Float64s(cpu)
				b.ReportMetric(cpu[len(cpu)-1], "cpu_max_ms")
				b.ReportMetric(cpu[len(cpu)/2], "cpu_p50_ms")
			}
			b.ReportMetric(quiet, "quiet_claims/s")
			b.ReportMetric(polled/quiet, "watched_ratio")
			b.ReportMetric(cost, "watch_cost_median_%")
			if os.Getenv("POOLTOP_BENCH_VERBOSE") != "" {
				fmt.Fprintf(os.Stderr, "%s: polls (wall ms) %v\n", sh.name, ms)
				// The statements that took the most server time (the claims'
				// among them), where pg_stat_statements is loaded.
				rows, err := conn.Query(ctx, `SELECT calls, round(total_exec_time::numeric, 1), round(total_plan_time::numeric, 1), left(regexp_replace(query, '\s+', ' ', 'g'), 110)
					FROM public.pg_stat_statements ORDER BY total_exec_time + total_plan_time DESC LIMIT 12`)
				if err == nil {
					for rows.Next() {
						var calls int64
						var exec, plan float64
						var q string
						if rows.Scan(&calls, &exec, &plan, &q) == nil {
							fmt.Fprintf(os.Stderr, "  %6d calls %9.1f ms exec %7.1f ms plan  %s\n", calls, exec, plan, q)
						}
					}
					rows.Close()
				}
			}
		})
	}
}

// claimTimes returns, in order, when each id of the pool on conn's
// search path was claimed between lo and hi (its updated_at: the claimers
// of claimWith30sLeases claim each row once and leave it PENDING).
func claimTimes(b *testing.B, ctx context.Context, conn *pgx.Conn, lo, hi time.Time) []time.Time {
	rows, err := conn.Query(ctx, `SELECT updated_at FROM resource_pool
		WHERE status = 'PENDING' AND updated_at >= $1 AND updated_at < $2 ORDER BY updated_at`, lo, hi)
	if err != nil {
		b.Fatal(err)
	}
	ts, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		b.Fatal(err)
	}
	return ts
}

// claimWith30sLeases is a pgbench script that claims one id under a 30 s
// lease and never commits it (one row always comes back, 0 when the pool
// is empty, which pgbench would take for an error).
const claimWith30sLeases = "WITH c AS (UPDATE resource_pool SET status = 'PENDING', leased_until = now() + interval '30 seconds', updated_at = now()" +
	" WHERE id = (SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id)" +
	" SELECT coalesce((SELECT id FROM c), 0) AS id \\gset\n"

// loadInBackground runs script on schema from clients pgbench clients for
// d, in a goroutine; the channel closes when pgbench has ended.
func loadInBackground(b *testing.B, ctx context.Context, schema, script string, clients int, d time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := pgbench.Run(ctx, pgbench.Options{DSN: pgtest.DSN(), Schema: schema, Script: script, Clients: clients, Duration: d}); err != nil {
			b.Error(err) // in a goroutine: no Fatal
		}
	}()
	return done
}

// overheadOf weighs each polled period against the quiet ones either side,
// so a load whose rate drifts (here it falls 10 a period) reads as the
// polling's cost alone (here 5% of each quiet mean).
func TestOverheadOfCancelsADrift(t *testing.T) {
	var rates []float64
	for i := range 2*overheadPeriods + 1 {
		r := 300 - 10*float64(i)
		if i%2 == 1 {
			r *= 0.95
		}
		rates = append(rates, r)
	}
	_, _, median := overheadOf(rates)
	if math.Abs(median-5) > 1e-9 {
		t.Fatalf("median overhead %.6f%%; want 5%%", median)
	}
}

// BenchmarkExactCount measures the statement that counts a small pool
// whole (exact.go) on each shape of firstShapes and each size: the server
// CPU of its first run on a new backend (median of 5) and of a warm run
// (median of 20), from the backend's /proc/PID/schedstat, which the load
// of the machine does not inflate, on a session set as the collector's
// (no JIT, no parallel workers, generic plans). The pools are the shapes'
// (interleaved states: 3 in 10 CONSUMED, 1 PENDING), vacuumed.
// POOLTOP_BENCH_EXACT_ROWS lists the sizes (default 10000,20000,40000,80000).
//
//	go test -run '^$' -bench ExactCount -benchtime 1x ./collector/
func BenchmarkExactCount(b *testing.B) {
	sizes := []int{10_000, 20_000, 40_000, 80_000}
	if env := os.Getenv("POOLTOP_BENCH_EXACT_ROWS"); env != "" {
		sizes = nil
		for _, f := range strings.Split(env, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil {
				b.Fatalf("POOLTOP_BENCH_EXACT_ROWS: %v", err)
			}
			sizes = append(sizes, n)
		}
	}
	ctx := context.Background()
	for _, sh := range firstShapes {
		for _, rows := range sizes {
			b.Run(fmt.Sprintf("%s-%d", sh.name, rows), func(b *testing.B) {
				schema := sh.build(b, rows)
				col := newCollector(b, ctx, collector.Config{Table: schema + ".resource_pool"})
				sql, args := collector.ExactStatement(col)
				cfg, err := pgx.ParseConfig(pgtest.DSN())
				if err != nil {
					b.Fatal(err)
				}
				for k, v := range map[string]string{"jit": "off", "max_parallel_workers_per_gather": "0", "plan_cache_mode": "force_generic_plan"} {
					cfg.RuntimeParams[k] = v
				}
				cpu := func(conn *pgx.Conn) float64 {
					raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/schedstat", conn.PgConn().PID()))
					if err != nil {
						b.Fatalf("the backend's CPU time: %v (the benchmark reads it from /proc, on the machine of the test server)", err)
					}
					ns, _ := strconv.ParseFloat(strings.Fields(string(raw))[0], 64)
					return ns / 1e6
				}
				run := func(conn *pgx.Conn) float64 {
					before := cpu(conn)
					rows, err := conn.Query(ctx, sql, args...)
					if err != nil {
						b.Fatal(err)
					}
					rows.Close()
					if err := rows.Err(); err != nil {
						b.Fatal(err)
					}
					return cpu(conn) - before
				}
				var first, warm []float64
				for range b.N {
					for i := 0; i < 5; i++ {
						conn, err := pgx.ConnectConfig(ctx, cfg)
						if err != nil {
							b.Fatal(err)
						}
						if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
							b.Fatal(err)
						}
						first = append(first, run(conn))
						if i == 0 {
							for j := 0; j < 20; j++ {
								warm = append(warm, run(conn))
							}
						}
						conn.Close(ctx)
					}
				}
				var pages int64
				if err := pgtest.Conn(b, schema).QueryRow(ctx, `SELECT (coalesce((SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree('resource_pool') WHERE isleaf),
					pg_relation_size('resource_pool')) / current_setting('block_size')::bigint)::bigint`).Scan(&pages); err != nil {
					b.Fatal(err)
				}
				sort.Float64s(first)
				sort.Float64s(warm)
				b.ReportMetric(float64(pages), "pages")
				b.ReportMetric(first[len(first)/2], "first_cpu_ms")
				b.ReportMetric(warm[len(warm)/2], "warm_cpu_ms")
			})
		}
	}
}
