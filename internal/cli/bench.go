package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgbench"
	"github.com/pooltop-dev/pooltop/workload"
)

// benchOptions are the flags of pooltop bench, and what validate makes of
// the two lists among them.
type benchOptions struct {
	strategies, workers string
	duration, warmup    time.Duration
	poolSize            int
	noPgbench           bool
	maxConns, batch     int
	rtt                 time.Duration
	partitions          int

	modes  []workload.BenchMode // --strategies, each batched one at --batch
	counts []int                // --workers
}

func newBenchCmd(g *globals) *cobra.Command {
	return g.command(&benchOptions{}, &cobra.Command{
		Use:   "bench",
		Short: "Measure the claim strategies side by side, with pgbench as the ceiling",
		Long: `Run the full acquire → fenced commit cycle for each strategy at each worker
count, each on a fresh pool after a warm-up, and print acquires (ids claimed)
per second and claim latency. "batched" claims --batch ids per statement and
commits as many fenced effects per statement (--batch), each row still checked on its own
token. When pgbench is installed, it runs the same single-row cycle SQL at
the same concurrency as the ceiling. The last lines give the SKIP LOCKED /
blocking ratio per worker count.

--rtt adds a simulated network round trip to every exchange with the server,
for pooltop's workers and pgbench alike. On loopback a round trip costs tens
of microseconds, so a blocking transaction holds its row lock for about a
millisecond; across a network each of its round trips adds to that time (at
1 ms a round trip, a cycle of a few statements holds the lock some 5 ms),
and the waiting line behind the lock grows with it.
Go's timers overshoot by about 0.1 ms, so 1ms is about 1.1 ms per exchange.`,
		PreRun: func(cmd *cobra.Command, _ []string) { scratchDefault(g, cmd, "bench") },
	})
}

func (o *benchOptions) addFlags(c *cobra.Command, g *globals) {
	f := c.Flags()
	f.StringVar(&o.strategies, "strategies", "skip-locked,blocking,optimistic,batched", "comma-separated: skip-locked, blocking, optimistic, batched")
	f.StringVar(&o.workers, "workers", "1,8,32,64", "comma-separated worker counts")
	f.DurationVar(&o.duration, "duration", 5*time.Second, "measured time per run")
	f.DurationVar(&o.warmup, "warmup", time.Second, "unmeasured time before each run")
	f.IntVar(&o.poolSize, "pool-size", 300_000, "ids in the fresh pool of each run")
	f.BoolVar(&o.noPgbench, "no-pgbench", false, "do not run pgbench as the ceiling")
	f.IntVar(&o.maxConns, "max-conns", 16, "connections the workers share: more workers queue in Go, not in PostgreSQL")
	f.IntVar(&o.batch, "batch", 1000, "ids per claim and per commit in the batched mode")
	f.DurationVar(&o.rtt, "rtt", 0, "simulated network round trip added to every exchange with the server (e.g. 1ms)")
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
	return nil
}

func (o *benchOptions) run(ctx context.Context, g *globals) error {
	maxConns := int32(min(slices.Max(o.counts), o.maxConns))
	d, err := g.open(ctx, openOptions{appName: "pooltop-bench", maxConns: maxConns, write: true, migrate: true, load: true, rtt: o.rtt, partitions: o.partitions,
		direct: "it empties the pool with VACUUM and measures pgbench beside pooltop, which need the server"})
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
	var empty []string
	for _, r := range results {
		if r.EmptyPool > 0 {
			empty = append(empty, fmt.Sprintf("%s at %d workers (%d claims found nothing)", r.Strategy, r.Workers, r.EmptyPool))
		}
	}
	if len(empty) > 0 {
		return fmt.Errorf("the pool of %d ids ran empty in %s: those figures measure an empty pool, not the strategy; raise --pool-size", o.poolSize, strings.Join(empty, ", "))
	}
	return nil
}

// measure runs every strategy, then pgbench, at each worker count, each on a
// fresh pool, and reports each result on stderr as it comes.
func (o *benchOptions) measure(ctx context.Context, g *globals, d *database) ([]workload.BenchResult, error) {
	var results []workload.BenchResult
	keep := func(r workload.BenchResult) {
		fmt.Fprintf(g.stderr, "bench: %-11s %3d workers %8.0f acquires/s p99 %.1f ms\n", r.Strategy, r.Workers, r.AcquiresPerS, r.P99MS)
		results = append(results, r)
	}
	noPgbench := o.noPgbench
	if o.partitions > 0 {
		fmt.Fprintf(g.stderr, "bench: the pool is hash-partitioned on id in %d partitions: pooltop's workers and pgbench claim from a random partition per attempt\n", o.partitions)
	}
	for _, n := range o.counts {
		for _, m := range o.modes {
			if err := freshPool(ctx, d, o.poolSize); err != nil {
				return nil, interrupted(ctx, err)
			}
			r, err := workload.BenchRun(ctx, d.eng, m, n, o.warmup, o.duration)
			if err != nil || ctx.Err() != nil {
				return nil, interrupted(ctx, err)
			}
			r.RTTMS = float64(o.rtt.Microseconds()) / 1000
			keep(r)
		}
		if noPgbench {
			continue
		}
		if err := freshPool(ctx, d, o.poolSize); err != nil {
			return nil, interrupted(ctx, err)
		}
		r, err := pgbenchCycle(ctx, g, d, n, o.duration, o.rtt)
		switch {
		case ctx.Err() != nil:
			return nil, interrupted(ctx, err)
		case err != nil:
			fmt.Fprintf(g.stderr, "bench: pgbench skipped: %v\n", oneLine(err.Error()))
			noPgbench = true
		default:
			keep(r)
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

// pgbenchCycle runs the single-row claim and fenced commit through pgbench.
func pgbenchCycle(ctx context.Context, g *globals, d *database, workers int, dur, rtt time.Duration) (workload.BenchResult, error) {
	script := pgbench.CycleScript(time.Minute, rtt)
	parts, err := d.eng.Partitions(ctx)
	if err != nil {
		return workload.BenchResult{}, err
	}
	if len(parts) > 0 {
		script = pgbench.PartitionedCycleScript(time.Minute, rtt, parts)
	}
	res, err := pgbench.Run(ctx, pgbench.Options{DSN: d.dsn, Schema: g.schema, Script: script, Clients: workers, Duration: dur, Latency: true})
	if err != nil {
		return workload.BenchResult{}, errors.New(g.redact(err.Error()))
	}
	return workload.BenchResult{Strategy: "pgbench", Workers: workers, AcquiresPerS: res.TPS, CyclesPerS: res.TPS,
		P50MS: res.P50MS, P99MS: res.P99MS, Errors: res.Failed, RTTMS: float64(rtt.Microseconds()) / 1000}, nil
}

// printBench prints the results as a table, then the ratios between the
// strategies at each worker count.
func printBench(w io.Writer, rs []workload.BenchResult, counts []int, rtt time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tworkers\tacquires/s\tcommits/s\tp50 ms\tp99 ms\terrors\tconflicts\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%d\t%d\t\n", r.Strategy, r.Workers, r.AcquiresPerS, r.CyclesPerS, r.P50MS, r.P99MS, r.Errors, r.Conflicts)
	}
	_ = tw.Flush()
	find := func(s string, n int) float64 {
		for _, r := range rs {
			if r.Strategy == s && r.Workers == n {
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
		if pg := find("pgbench", n); sk > 0 && pg > 0 {
			fmt.Fprintf(w, "skip-locked / pgbench at %d workers: %.0f%%\n", n, 100*sk/pg)
		}
	}
	return nil
}
