package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgbench"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/internal/servercost"
	"github.com/pooltop-dev/pooltop/workload"
)

// benchOptions are the flags of pooltop bench, and what validate makes of
// the two lists among them.
type benchOptions struct {
	strategies, workers string
	duration, warmup    time.Duration
	poolSize            int
	poolSizeSet         bool // --pool-size was given: every run starts with it
	noPgbench           bool
	maxConns, batch     int
	rtt                 time.Duration
	partitions          int
	servers             string // --servers: server counts to compare, each a pool over that many throwaway servers
	citus               bool   // --citus: a throwaway Citus cluster beside a throwaway server

	modes  []workload.BenchMode // --strategies, each batched one at --batch
	counts []int                // --workers
}

func newBenchCmd(g *globals) *cobra.Command {
	o := &benchOptions{}
	return g.command(o, &cobra.Command{
		Use:   "bench",
		Short: "Measure each claim strategy beside pgbench running its statements",
		Long: `Run the full acquire → fenced commit cycle for each strategy at each worker
count, each on a fresh pool after a warm-up, and print acquires (ids claimed)
and cycles (fenced effects committed) per second and claim latency. "batched"
claims --batch ids per statement and commits as many fenced effects per
statement, each row still checked on its own token.

Beside each strategy, its pgbench twin runs the identical statements (same
SQL text, same number of connections, warm-up, window and pool shape) on a
fresh pool, and "÷ twin" gives pooltop's cycles/s over the twin's: how close
pooltop comes to PostgreSQL running the same work. The twin's cycles are
counted in the ledger. For each side, bench also prints what one cycle cost:
WAL bytes (from the WAL position), WAL records, shared buffers hit and read
and time in statements (from pg_stat_statements, where it is installed; the
embedded server loads it), the server's CPU (from /proc, when the server runs
on this machine) and the client's CPU (pooltop's process, or pgbench's).

Each run's pool is sized from its warm-up: once the warm-up has shown the
rate, ids are added so that the window cannot empty the pool; a run that
still empties it is run again on a larger pool. With --warmup 0s there is no
probe: the pool is --pool-size, and a run that empties it is reported as
invalid, with no figure.

--rtt adds a simulated network round trip to every exchange with the server,
for pooltop's workers and pgbench alike. On loopback a round trip costs tens
of microseconds, so a blocking transaction holds its row lock for about a
millisecond; across a network each of its round trips adds to that time (at
1 ms a round trip, a cycle of a few statements holds the lock some 5 ms),
and the waiting line behind the lock grows with it.
Go's timers overshoot by about 0.1 ms, so 1ms is about 1.1 ms per exchange.

--servers 1,2,3 compares pools over that many throwaway servers; given
--dsn once per server of yours, bench runs on a pool over them, in its
scratch schema on each (see --servers for what it prints).`,
		PreRun: func(cmd *cobra.Command, _ []string) {
			scratchDefault(g, cmd, "bench")
			o.poolSizeSet = cmd.Flag("pool-size").Changed
		},
	})
}

func (o *benchOptions) addFlags(c *cobra.Command, g *globals) {
	f := c.Flags()
	f.StringVar(&o.strategies, "strategies", "skip-locked,blocking,optimistic,batched", "comma-separated: skip-locked, blocking, optimistic, batched")
	f.StringVar(&o.workers, "workers", "1,8,32,64", "comma-separated worker counts")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per run")
	f.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured time before each run")
	f.IntVar(&o.poolSize, "pool-size", 300_000, "ids each run's fresh pool starts with (topped up after the warm-up)")
	f.BoolVar(&o.noPgbench, "no-pgbench", false, "do not run the pgbench twins")
	f.IntVar(&o.maxConns, "max-conns", 16, "connections the workers share: more workers queue in Go, not in PostgreSQL")
	f.IntVar(&o.batch, "batch", 1000, "ids per claim and per commit in the batched mode")
	f.DurationVar(&o.rtt, "rtt", 0, "simulated network round trip added to every exchange with the server (e.g. 1ms)")
	f.BoolVar(&o.citus, "citus", false, "compare a throwaway PostgreSQL server with a throwaway Citus cluster (a coordinator and two workers) on this machine, the lease calls through the coordinator and sent to the nodes: cycles/s, and each node's CPU per cycle; skip-locked and batched only, no pgbench twins")
	f.StringVar(&o.servers, "servers", "", "gone: bench --citus compares one server with a Citus cluster")
	_ = f.MarkHidden("servers")
	partitionsFlag(c, &o.partitions)
	g.loadFlags(c, "print JSON")
}

func (o *benchOptions) validate(g *globals) error {
	o.modes, o.counts = nil, nil
	for _, s := range strings.Split(o.strategies, ",") {
		m, err := workload.BenchModeByName(strings.TrimSpace(s))
		if err != nil {
			return usageError{err}
		}
		o.modes = append(o.modes, m)
	}
	for _, s := range strings.Split(o.workers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > workload.MaxWorkers {
			return usageError{fmt.Errorf("--workers %q: a list of counts between 1 and %d", s, workload.MaxWorkers)}
		}
		o.counts = append(o.counts, n)
	}
	if o.duration < time.Second || o.warmup < 0 {
		return usageError{fmt.Errorf("--duration %v: at least 1s; --warmup %v: not negative", o.duration, o.warmup)}
	}
	if o.rtt != 0 && (o.rtt < time.Millisecond || o.rtt > time.Second) {
		// Go's timers sleep at least about a millisecond here: a shorter
		// delay would be a millisecond anyway, under another name.
		return usageError{fmt.Errorf("--rtt %v: 0, or between 1ms and 1s (e.g. 1ms, 2ms)", o.rtt)}
	}
	if o.poolSize < 1 || o.poolSize > engine.MaxSeed {
		return usageError{fmt.Errorf("--pool-size %d: between 1 and %d", o.poolSize, engine.MaxSeed)}
	}
	if err := checkScratch(g.schema, "bench"); err != nil {
		return err
	}
	if err := checkPartitionsFlag(o.partitions); err != nil {
		return err
	}
	if o.maxConns < 1 || o.maxConns > 256 {
		return usageError{fmt.Errorf("--max-conns %d: between 1 and 256", o.maxConns)}
	}
	if o.batch < 1 || o.batch > workload.MaxBatch {
		return usageError{fmt.Errorf("--batch %d: between 1 and %d", o.batch, workload.MaxBatch)}
	}
	for i := range o.modes {
		if o.modes[i].Batched {
			o.modes[i].Batch = o.batch
		}
	}
	if o.citus {
		if g.dsn != "" || len(g.servers) > 0 || o.servers != "" || o.partitions > 0 {
			return usageError{errors.New("--citus starts a throwaway server and a throwaway Citus cluster of its own: drop --dsn, --servers and --partitions")}
		}
		var modes []workload.BenchMode
		for _, m := range o.modes {
			if m.Strategy == engine.SkipLocked {
				modes = append(modes, m)
			}
		}
		if len(modes) == 0 {
			return usageError{errors.New("--citus: on Citus pooltop claims with skip-locked: give --strategies skip-locked or batched")}
		}
		o.modes = modes
	}
	if o.servers != "" {
		return errServersGone
	}
	return nil
}

func (o *benchOptions) run(ctx context.Context, g *globals) error {
	if o.citus {
		return o.runCitus(ctx, g)
	}
	maxConns := int32(min(slices.Max(o.counts), o.maxConns))
	d, err := g.open(ctx, openOptions{appName: "pooltop-bench", maxConns: maxConns, write: true, migrate: true, load: true, rtt: o.rtt, partitions: o.partitions,
		direct:   "it empties the pool with VACUUM and measures pgbench beside pooltop, which need the server",
		settings: statementStats()})
	if err != nil {
		return err
	}
	defer d.Close()
	results, err := o.measure(ctx, g, d)
	if err != nil {
		return err
	}
	if err := g.emit(results, func(w io.Writer) error { return printBench(w, results, o.counts, o.rtt) }); err != nil {
		return err
	}
	var invalid []string
	for _, r := range results {
		if r.Invalid != "" {
			name := r.Strategy
			if r.TwinOf != "" {
				name = "the pgbench twin of " + r.TwinOf
			}
			invalid = append(invalid, fmt.Sprintf("%s at %d workers", name, r.Workers))
		}
	}
	if len(invalid) > 0 {
		return fmt.Errorf("no figure for %s: the run did not measure what it should (see \"invalid\" above)", strings.Join(invalid, ", "))
	}
	return nil
}

// statementStats loads pg_stat_statements into an embedded server, when the
// installed PostgreSQL has it, for the per-cycle costs.
func statementStats() map[string]string {
	dir, err := pgembed.FindBinaries()
	if err != nil {
		return nil
	}
	if _, err := os.Stat(filepath.Join(dir, "..", "lib", "pg_stat_statements.so")); err != nil {
		return nil
	}
	return map[string]string{"shared_preload_libraries": "pg_stat_statements"}
}

// measure runs, at each worker count, each strategy and then its pgbench
// twin, each on a fresh pool, and reports each result on stderr as it comes.
func (o *benchOptions) measure(ctx context.Context, g *globals, d *database) ([]workload.BenchResult, error) {
	var results []workload.BenchResult
	keep := func(r workload.BenchResult) {
		name := r.Strategy
		if r.TwinOf != "" {
			name = "pgbench:" + r.TwinOf
		}
		if r.Invalid != "" {
			fmt.Fprintf(g.stderr, "bench: %-20s %3d workers  invalid: %s\n", name, r.Workers, r.Invalid)
		} else {
			fmt.Fprintf(g.stderr, "bench: %-20s %3d workers %8.0f cycles/s p99 %.1f ms\n", name, r.Workers, r.CyclesPerS, r.P99MS)
		}
		results = append(results, r)
	}
	if o.partitions > 0 {
		fmt.Fprintf(g.stderr, "bench: the pool is hash-partitioned on id in %d partitions: pooltop's workers and pgbench claim from a random partition per attempt\n", o.partitions)
	}
	sampler, err := servercost.Open(ctx, d.dsn, d.embedded != nil)
	if err != nil {
		return nil, fmt.Errorf("open a connection to read the server's counters: %s", g.redact(err.Error()))
	}
	defer sampler.Close()
	if !sampler.Statements() {
		fmt.Fprintln(g.stderr, "bench: pg_stat_statements is not installed in this database: per-cycle WAL records, buffers and statement time are left out (WAL bytes come from the WAL position)")
	}
	b := &benchSides{o: o, g: g, d: d, s: sampler, rates: map[string]float64{}, grow: map[string]int{}}
	parts, err := d.eng.Partitions(ctx)
	if err != nil {
		return nil, err
	}
	b.parts = parts
	twins := !o.noPgbench
	for _, n := range o.counts {
		for _, m := range o.modes {
			r, err := b.again(ctx, m.Name, func() (workload.BenchResult, error) { return b.pooltop(ctx, m, n) })
			if err != nil || ctx.Err() != nil {
				return nil, interrupted(ctx, err)
			}
			keep(r)
			if !twins {
				continue
			}
			t, err := b.again(ctx, "pgbench:"+m.Name, func() (workload.BenchResult, error) { return b.twin(ctx, m, n) })
			switch {
			case ctx.Err() != nil:
				return nil, interrupted(ctx, err)
			case errors.Is(err, errNoPgbench):
				fmt.Fprintf(g.stderr, "bench: pgbench twins skipped: %v\n", oneLine(err.Error()))
				twins = false
				continue
			case err != nil:
				return nil, err
			}
			if r.Invalid == "" && t.Invalid == "" && t.CyclesPerS > 0 {
				results[len(results)-1].TwinRatio = r.CyclesPerS / t.CyclesPerS
			}
			keep(t)
		}
	}
	return results, nil
}

// interrupted names a bench stopped by Ctrl-C (or SIGTERM) as such.
func interrupted(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return errors.New("bench interrupted: no table is printed for a partial run")
	}
	return err
}

// errNoPgbench: pgbench cannot run here; bench goes on without twins.
var errNoPgbench = errors.New("pgbench cannot run")

// benchSides runs the two sides of each measurement and sizes their pools.
type benchSides struct {
	o     *benchOptions
	g     *globals
	d     *database
	s     *servercost.Sampler
	parts []string
	rates map[string]float64 // the last cycles/s seen per strategy, to size the next pool
	grow  map[string]int     // how many times larger than planned, after a run ran dry
	// lastRun is the run id of the last workload: its workers, stopped
	// mid-cycle, may leave live leases that must not refuse the next reset.
	lastRun string
}

// again runs one side, and runs it again on a pool four times as large
// when it ran dry in spite of the warm-up's sizing (up to twice). With no
// warm-up there is no probe: the pool is --pool-size, and a run that
// empties it is reported invalid.
func (b *benchSides) again(ctx context.Context, key string, run func() (workload.BenchResult, error)) (workload.BenchResult, error) {
	for try := 0; ; try++ {
		r, err := run()
		if err != nil || r.Invalid == "" || !r.Dry || b.o.warmup == 0 || try == 2 || ctx.Err() != nil {
			return r, err
		}
		fmt.Fprintf(b.g.stderr, "bench: %s at %d workers ran dry on %d ids (%d added after the warm-up): again on a pool 4 times as large\n",
			key, r.Workers, r.PoolSize, r.Refilled)
		b.grow[key] = 4 * max(b.grow[key], 1)
	}
}

// headroom is how many times the ids a window needs at the rate the
// warm-up showed are kept free when the window opens.
const headroom = 1.5

// initialSize is the pool a run starts with: --pool-size when given, else
// enough for the warm-up and the window at the rate this strategy (or its
// twin) last ran, from a first guess of 300,000 ids.
func (b *benchSides) initialSize(key string) int {
	size := b.o.poolSize
	if rate, ok := b.rates[key]; ok && !b.o.poolSizeSet {
		size = max(20_000, int(headroom*rate*(b.o.warmup+b.o.duration).Seconds())+b.inFlight())
	}
	return min(engine.MaxSeed, size*max(1, b.grow[key]))
}

// inFlight is the ids the workers may hold at once, kept free on top.
func (b *benchSides) inFlight() int {
	batch := 1
	for _, m := range b.o.modes {
		batch = max(batch, m.Batch)
	}
	return 2 * b.o.maxConns * batch
}

// topUp adds ids after the warm-up until the pool holds what the window
// needs at rate (ids a second), so that neither side runs dry. It returns
// the ids added.
func (b *benchSides) topUp(ctx context.Context, key string, rate float64) (int64, error) {
	need := (int64(headroom*rate*b.o.duration.Seconds()) + int64(b.inFlight())) * int64(max(1, b.grow[key]))
	var added int64
	for try := 0; try < 3; try++ {
		free, err := b.free(ctx)
		if err != nil {
			return added, err
		}
		if free >= need {
			return added, nil
		}
		n, err := b.d.eng.Refill(ctx, int(min(int64(engine.MaxSeed), 2*need-free)))
		added += n
		if err != nil {
			return added, err
		}
	}
	return added, nil
}

// pgbenchGone waits, up to 5 s, until no pgbench session is left.
func (b *benchSides) pgbenchGone(ctx context.Context) error {
	deadline := time.Now().Add(5 * time.Second)
	for {
		var n int
		err := b.s.Conn().QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench' AND datname = current_database()").Scan(&n)
		if err != nil || n == 0 || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (b *benchSides) free(ctx context.Context) (int64, error) {
	var n int64
	err := b.s.Conn().QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.g.schema, "resource_pool"}.Sanitize()+" WHERE status = 'UNUSED'").Scan(&n)
	return n, err
}

// ledgerMark is the highest ledger id; committed counts the effects since.
func (b *benchSides) ledgerMark(ctx context.Context) (int64, error) {
	var n int64
	err := b.s.Conn().QueryRow(ctx, "SELECT coalesce(max(id), 0) FROM "+pgx.Identifier{b.g.schema, "business_ledger"}.Sanitize()).Scan(&n)
	return n, err
}

func (b *benchSides) committed(ctx context.Context, mark int64) (int64, error) {
	var n int64
	err := b.s.Conn().QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{b.g.schema, "business_ledger"}.Sanitize()+" WHERE id > $1", mark).Scan(&n)
	return n, err
}

// pooltop runs one strategy in pooltop's workers.
func (b *benchSides) pooltop(ctx context.Context, m workload.BenchMode, n int) (workload.BenchResult, error) {
	size := b.initialSize(m.Name)
	if err := freshPool(ctx, b.d, size, b.lastRun); err != nil {
		return workload.BenchResult{}, err
	}
	var refilled int64
	var before, after servercost.Sample
	var cpu0, cpu1 time.Duration
	r, err := workload.BenchRun(ctx, b.d.eng, m, n, b.o.warmup, b.o.duration, workload.BenchWindow{
		AfterWarmup: func(ctx context.Context, rate float64, ranDry bool) (err error) {
			if b.o.warmup == 0 {
				return nil // no probe: the pool is --pool-size
			}
			if ranDry {
				rate *= 4 // the empty pool held it back: the strategy runs faster
			}
			refilled, err = b.topUp(ctx, m.Name, rate)
			return err
		},
		Begin: func(ctx context.Context) (err error) {
			cpu0 = servercost.SelfCPU()
			before, err = b.s.Take(ctx)
			return err
		},
		End: func(ctx context.Context) (err error) {
			cpu1 = servercost.SelfCPU()
			after, err = b.s.Take(ctx)
			return err
		},
	})
	b.lastRun = r.RunID
	if err != nil {
		return r, err
	}
	r.RTTMS = float64(b.o.rtt.Microseconds()) / 1000
	r.Connections = min(n, b.o.maxConns)
	r.PoolSize, r.Refilled = int64(size), refilled
	cycles := int64(r.CyclesPerS*b.o.duration.Seconds() + 0.5)
	cost := servercost.Per(before, after, cycles, cpu1-cpu0)
	r.Cost = &cost
	if r.EmptyPool > 0 {
		r.Dry = true
		r.Invalid = fmt.Sprintf("the pool ran dry: %d claims found no free id, so the figure measures an empty pool; raise --pool-size", r.EmptyPool)
		r.AcquiresPerS, r.CyclesPerS = 0, 0
	} else {
		b.rates[m.Name] = max(b.rates[m.Name], r.AcquiresPerS)
	}
	return r, nil
}

// twin runs the same strategy's statements in pgbench, with the same
// connections, warm-up and window, on a fresh pool of the same shape.
func (b *benchSides) twin(ctx context.Context, m workload.BenchMode, n int) (workload.BenchResult, error) {
	r := workload.BenchResult{Strategy: "pgbench", TwinOf: m.Name, Workers: n, Connections: min(n, b.o.maxConns),
		RTTMS: float64(b.o.rtt.Microseconds()) / 1000}
	script, err := pgbench.TwinScript(pgbench.Twin{Strategy: m.Name, Batch: m.Batch}, time.Minute, b.o.rtt, b.parts)
	if err != nil {
		return r, err
	}
	if _, err := pgbench.Find(); err != nil {
		return r, fmt.Errorf("%w: %v", errNoPgbench, err)
	}
	key := "pgbench:" + m.Name
	if _, ok := b.rates[key]; !ok && b.rates[m.Name] > 0 {
		b.rates[key] = 2 * b.rates[m.Name] // a first guess: the twin may run faster
	}
	size := b.initialSize(key)
	if err := freshPool(ctx, b.d, size, b.lastRun); err != nil {
		return r, err
	}
	r.PoolSize = int64(size)
	opts := pgbench.Options{DSN: b.d.dsn, Schema: b.g.schema, Script: script, Clients: r.Connections}
	if m.Batched {
		// The engine sends the batched commit unprepared, planned for each
		// execution's arrays; so does the twin (-M extended). Prepared, its
		// cached generic plan misjudges unnest() of 1,000 ids: 184 ms a
		// batch against 42 ms (pgbench, 1 client, batch 1,000).
		opts.Protocol = "extended"
	}
	run := func(d time.Duration, latency bool) (pgbench.Result, error) {
		o := opts
		o.Duration, o.Latency = d, latency
		res, err := pgbench.Run(ctx, o)
		if err != nil && !errors.Is(err, pgbench.ErrAborted) {
			return res, fmt.Errorf("%w: %s", errNoPgbench, b.g.redact(err.Error()))
		}
		return res, err
	}
	if b.o.warmup > 0 {
		mark, err := b.ledgerMark(ctx)
		if err != nil {
			return r, err
		}
		warm := max(time.Second, b.o.warmup.Round(time.Second))
		_, werr := run(warm, false)
		if werr != nil && !errors.Is(werr, pgbench.ErrAborted) {
			return r, werr
		}
		done, err := b.committed(ctx, mark)
		if err != nil {
			return r, err
		}
		rate := float64(done) / warm.Seconds()
		if werr != nil {
			rate *= 4 // it ran dry in the warm-up: the rate is more than this
		}
		if r.Refilled, err = b.topUp(ctx, key, rate); err != nil {
			return r, err
		}
	}
	mark, err := b.ledgerMark(ctx)
	if err != nil {
		return r, err
	}
	before, err := b.s.Take(ctx)
	if err != nil {
		return r, err
	}
	res, rerr := run(b.o.duration, true)
	// pgbench's backends are still ending when it exits: wait for them,
	// so that their CPU time is in the figures.
	if err := b.pgbenchGone(ctx); err != nil {
		return r, err
	}
	after, err := b.s.Take(ctx)
	if err != nil {
		return r, err
	}
	done, err := b.committed(ctx, mark)
	if err != nil {
		return r, err
	}
	secs := max(time.Second, b.o.duration.Round(time.Second)).Seconds()
	r.CyclesPerS, r.AcquiresPerS = float64(done)/secs, float64(done)/secs
	r.P50MS, r.P99MS, r.Errors = res.P50MS, res.P99MS, res.Failed
	cost := servercost.Per(before, after, done, res.CPU)
	r.Cost = &cost
	if rerr != nil {
		free, ferr := b.free(ctx)
		if ferr == nil && free == 0 {
			r.Dry = true
			r.Invalid = fmt.Sprintf("the pool ran dry after %d cycles: pgbench stopped its clients, so the figure measures an empty pool; raise --pool-size", done)
		} else {
			r.Invalid = "pgbench stopped its clients before the end: " + oneLine(b.g.redact(rerr.Error()))
		}
		r.CyclesPerS, r.AcquiresPerS = 0, 0
		return r, nil
	}
	b.rates[key] = max(b.rates[key], r.CyclesPerS)
	return r, nil
}

// printBench prints the results as a table, each strategy beside its
// pgbench twin with the ratio, then what one cycle cost on each side, then
// the ratios between the strategies at each worker count.
func printBench(w io.Writer, rs []workload.BenchResult, counts []int, rtt time.Duration) error {
	name := func(r workload.BenchResult) string {
		if r.TwinOf != "" {
			return "  pgbench twin"
		}
		return r.Strategy
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tworkers\tconns\tacquires/s\tcycles/s\tp50 ms\tp99 ms\terrors\tconflicts\t÷ twin\t")
	for _, r := range rs {
		if r.Invalid != "" {
			fmt.Fprintf(tw, "%s\t%d\t%d\tinvalid\t-\t-\t-\t-\t-\t-\t\n", name(r), r.Workers, r.Connections)
			continue
		}
		ratio := "-"
		if r.TwinRatio > 0 {
			ratio = fmt.Sprintf("%.2f×", r.TwinRatio)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%d\t%d\t%s\t\n", name(r), r.Workers, r.Connections,
			r.AcquiresPerS, r.CyclesPerS, r.P50MS, r.P99MS, r.Errors, r.Conflicts, ratio)
	}
	_ = tw.Flush()
	fmt.Fprintln(w, "\nper cycle (one fenced effect), in the measured window:")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tworkers\tWAL bytes\tWAL records\tbuffers hit\tbuffers read\tserver µs in statements\tserver CPU µs\tclient CPU µs\t")
	opt := func(v *float64, f string) string {
		if v == nil {
			return "-"
		}
		return fmt.Sprintf(f, *v)
	}
	for _, r := range rs {
		if r.Cost == nil || r.Invalid != "" {
			continue
		}
		c := r.Cost
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", name(r), r.Workers, c.WALBytes,
			opt(c.WALRecords, "%.1f"), opt(c.SharedHit, "%.1f"), opt(c.SharedRead, "%.2f"), opt(c.ExecUS, "%.0f"), opt(c.ServerCPU, "%.0f"), opt(c.ClientCPU, "%.0f"))
	}
	_ = tw.Flush()
	find := func(s string, n int) float64 {
		for _, r := range rs {
			if r.Strategy == s && r.Workers == n && r.Invalid == "" {
				return r.AcquiresPerS
			}
		}
		return 0
	}
	if rtt > 0 {
		fmt.Fprintf(w, "every exchange with the server delayed by a simulated network round trip of %v (--rtt)\n", rtt)
	} else {
		fmt.Fprintln(w, "no network between client and server (add one with --rtt 1ms: blocking holds its lock across its round trips)")
	}
	for _, n := range counts {
		sk, bl := find("skip-locked", n), find("blocking", n)
		if sk > 0 && bl > 0 {
			fmt.Fprintf(w, "SKIP LOCKED / blocking at %d workers: %.1f×\n", n, sk/bl)
		}
	}
	return nil
}
