package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgbench"
	"github.com/pooltop-dev/pooltop/workload"
)

// exitViolation: chaos or verify found an invariant that does not hold.
const exitViolation = 6

// violationError carries exit code 6.
type violationError struct{ error }

// scratchSchema checks that bench and chaos work in a schema of their own:
// they empty it, so it must be one pooltop made for the purpose.
func scratchSchema(g *globals, c *cobra.Command, cmd string) error {
	if f := c.Flag("schema"); f == nil || !f.Changed {
		g.schema = "pooltop_" + cmd
	}
	if !strings.HasPrefix(g.schema, "pooltop_") {
		return usageError{fmt.Errorf("%s empties the pool it runs on: give it a --schema starting with pooltop_ (default pooltop_%s), never a pool you keep", cmd, cmd)}
	}
	return nil
}

// freshPool empties the schema's pool and ledger and fills it with size ids.
func freshPool(ctx context.Context, d *database, size int) error {
	if _, err := d.pool.Exec(ctx, "TRUNCATE business_ledger, resource_pool RESTART IDENTITY"); err != nil {
		return fmt.Errorf("empty the pool: %w", err)
	}
	if _, err := d.eng.Seed(ctx, size); err != nil {
		return err
	}
	_, err := d.pool.Exec(ctx, "VACUUM ANALYZE resource_pool")
	return err
}

func newChaosCmd(g *globals) *cobra.Command {
	var (
		scenario string
		duration time.Duration
		seed     uint64
		poolSize int
		workers  int
		crash    float64
		pause    float64
	)
	var names []string
	for _, s := range workload.Scenarios {
		names = append(names, fmt.Sprintf("  %-20s %s", s.Name, s.About))
	}
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run a failure scenario headless, then audit the database",
		Long: `Run a scenario for --duration with its faults, stop the faults and the
workers, let the reaper catch up (TTL + 2 reaper intervals), audit the
database and print the summary. Exit 0 only when the scenario's expected
invariants hold; for pause-no-fencing and crash-no-lease the failures are
the expected outcome and are reported under expected_failures. Exit 6 when
an invariant is violated.

Scenarios:
` + strings.Join(names, "\n"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			sc, err := workload.ScenarioByName(scenario)
			if err != nil {
				return usageError{err}
			}
			if duration < time.Second || duration > 24*time.Hour {
				return usageError{fmt.Errorf("--duration %v: between 1s and 24h", duration)}
			}
			if err := scratchSchema(g, cmd, "chaos"); err != nil {
				return err
			}
			if poolSize == 0 {
				poolSize = sc.PoolSize
			}
			if poolSize < 1 || poolSize > engine.MaxSeed {
				return usageError{fmt.Errorf("--pool-size %d: between 1 and %d", poolSize, engine.MaxSeed)}
			}
			override := func(c *workload.Config) {
				if cmd.Flags().Changed("workers") {
					c.Workers = workers
				}
				if cmd.Flags().Changed("crash-rate") {
					c.CrashRate = crash
				}
				if cmd.Flags().Changed("pause-rate") {
					c.PauseRate = pause
				}
			}
			// Every flag is checked before the pool is emptied and refilled.
			probe := sc.Config(seed)
			override(&probe)
			if err := probe.Validate(); err != nil {
				return usageError{err}
			}
			d, err := g.open(ctx, openOptions{appName: "pooltop-chaos", maxConns: 16, write: true, migrate: true, load: true})
			if err != nil {
				return err
			}
			defer d.Close()
			if err := freshPool(ctx, d, poolSize); err != nil {
				return err
			}
			fmt.Fprintf(g.stderr, "chaos: %s for %v on %d ids (seed %d)\n", sc.Name, duration, poolSize, seed)
			start := time.Now()
			sum, err := workload.Chaos(ctx, d.eng, sc, duration, seed, override, func(s workload.Snapshot) {
				fmt.Fprintf(g.stderr, "  %3.0fs cycles %d committed %d fenced %d crashes %d pauses %d leaked %d reclaimed %d empty %d\n",
					time.Since(start).Seconds(), s.Cycles, s.Committed, s.FencedRejections, s.Crashes, s.Pauses, s.Leaked, s.Reclaimed, s.EmptyPool)
			})
			if err != nil {
				return err
			}
			if g.jsonOut {
				if err := writeJSON(g.stdout, sum); err != nil {
					return err
				}
			} else {
				printSummary(g, sum)
			}
			if !sum.OK() {
				return violationError{fmt.Errorf("chaos %s: %d invariant(s) violated: %s", sc.Name, len(sum.Violations), strings.Join(sum.Violations, "; "))}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&scenario, "scenario", "healthy", "scenario to run (see above)")
	f.DurationVar(&duration, "duration", 30*time.Second, "how long the faults run")
	f.Uint64Var(&seed, "seed", 1, "random seed: the same seed makes the same fault decisions")
	f.IntVar(&poolSize, "pool-size", 0, "ids in the pool (default: the scenario's)")
	f.IntVar(&workers, "workers", 0, "override the scenario's worker count")
	f.Float64Var(&crash, "crash-rate", 0, "override the chance per cycle that a worker dies holding its leases")
	f.Float64Var(&pause, "pause-rate", 0, "override the chance per cycle that a worker freezes past its lease")
	f.BoolVar(&g.jsonOut, "json", false, "print the summary as JSON")
	f.BoolVar(&g.allowWrites, "allow-writes", false, "with --dsn: run even in a database where pooltop created no pool")
	return cmd
}

func printSummary(g *globals, s workload.Summary) {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\t%s (seed %d, %.0fs)\n", s.Scenario, s.Seed, s.DurationS)
	fmt.Fprintf(tw, "cycles\t%d\ncommitted\t%d\nfenced rejections\t%d\ndouble finalizations\t%d\n", s.Cycles, s.Committed, s.FencedRejections, s.DoubleFinalizations)
	fmt.Fprintf(tw, "crashes\t%d\npauses\t%d\nlost ids\t%d\nreclaimed\t%d\n", s.Crashes, s.Pauses, s.LostIDs, s.Reclaimed)
	fmt.Fprintf(tw, "max reclaim lag\t%.0f ms (bound %.0f ms)\nexpired pending\t%d\nempty-pool hits\t%d\nconflicts\t%d\nerrors\t%d\n",
		s.MaxReclaimLagMS, s.ReclaimBoundMS, s.ExpiredPending, s.EmptyPool, s.Conflicts, s.Errors)
	_ = tw.Flush()
	for _, e := range s.Expected {
		fmt.Fprintf(g.stdout, "expected failure: %s\n", e)
	}
	for _, v := range s.Violations {
		fmt.Fprintf(g.stdout, "VIOLATION: %s\n", v)
	}
	if s.OK() {
		fmt.Fprintln(g.stdout, "ok: the scenario's invariants hold")
	}
}

func newVerifyCmd(g *globals) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Audit a pooltop database's invariants; exit 6 on a violation",
		Long: `Audit any pooltop database: conservation (every id UNUSED, PENDING or
CONSUMED), at most one effect per id, no effect with a stale token, no
CONSUMED id without its effect, no PENDING id without a lease, and no lease
expired for longer than --grace (the reaper lags or is off). Reads only, but
scans both tables. Exit 0 when all hold, 6 on a violation.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if grace < 0 {
				return usageError{fmt.Errorf("--grace %v: must not be negative", grace)}
			}
			d, err := g.open(ctx, openOptions{appName: "pooltop-verify", maxConns: 2})
			if err != nil {
				return err
			}
			defer d.Close()
			a, err := d.eng.Audit(ctx, grace)
			if err != nil {
				return err
			}
			if g.jsonOut {
				if err := writeJSON(g.stdout, a); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(g.stdout, "%d ids: %d UNUSED, %d PENDING, %d CONSUMED; %d effects\n", a.Total, a.Unused, a.Pending, a.Consumed, a.Effects)
				for _, v := range a.Violations {
					fmt.Fprintf(g.stdout, "VIOLATION: %s\n", v)
				}
				if len(a.Violations) == 0 {
					fmt.Fprintln(g.stdout, "ok: every invariant holds")
				}
			}
			if len(a.Violations) > 0 {
				return violationError{fmt.Errorf("verify: %d invariant(s) violated", len(a.Violations))}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long past expiry a lease may wait for the reaper")
	cmd.Flags().BoolVar(&g.jsonOut, "json", false, "print JSON")
	return cmd
}

func newBenchCmd(g *globals) *cobra.Command {
	var (
		strategies, workers string
		duration, warmup    time.Duration
		poolSize            int
		noPgbench           bool
		maxConns, batch     int
		rtt                 time.Duration
	)
	cmd := &cobra.Command{
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
millisecond; across a network each of its round trips adds to that time (seed
001 reckons ~5 ms), and the waiting line behind the lock grows with it.
Go's timers overshoot by about 0.1 ms, so 1ms is about 1.1 ms per exchange.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			var modes []workload.BenchMode
			for _, s := range strings.Split(strategies, ",") {
				m, err := workload.BenchModeByName(strings.TrimSpace(s))
				if err != nil {
					return usageError{err}
				}
				modes = append(modes, m)
			}
			var counts []int
			for _, s := range strings.Split(workers, ",") {
				n, err := strconv.Atoi(strings.TrimSpace(s))
				if err != nil || n < 1 || n > workload.MaxWorkers {
					return usageError{fmt.Errorf("--workers %q: a list of counts between 1 and %d", s, workload.MaxWorkers)}
				}
				counts = append(counts, n)
			}
			if duration < time.Second || warmup < 0 {
				return usageError{fmt.Errorf("--duration %v: at least 1s; --warmup %v: not negative", duration, warmup)}
			}
			if rtt != 0 && (rtt < time.Millisecond || rtt > time.Second) {
				// Go's timers sleep at least about a millisecond here: a shorter
				// delay would be a millisecond anyway, under another name.
				return usageError{fmt.Errorf("--rtt %v: 0, or between 1ms and 1s (e.g. 1ms, 2ms)", rtt)}
			}
			if err := scratchSchema(g, cmd, "bench"); err != nil {
				return err
			}
			maxW := 0
			for _, n := range counts {
				maxW = max(maxW, n)
			}
			if maxConns < 1 || maxConns > 256 {
				return usageError{fmt.Errorf("--max-conns %d: between 1 and 256", maxConns)}
			}
			if batch < 1 || batch > workload.MaxBatch {
				return usageError{fmt.Errorf("--batch %d: between 1 and %d", batch, workload.MaxBatch)}
			}
			for i := range modes {
				if modes[i].Batched {
					modes[i].Batch = batch
				}
			}
			d, err := g.open(ctx, openOptions{appName: "pooltop-bench", maxConns: int32(min(maxW, maxConns)), write: true, migrate: true, load: true, rtt: rtt})
			if err != nil {
				return err
			}
			defer d.Close()
			var results []workload.BenchResult
			for _, n := range counts {
				for _, m := range modes {
					if err := freshPool(ctx, d, poolSize); err != nil {
						return interrupted(ctx, err)
					}
					r, err := workload.BenchRun(ctx, d.eng, m, n, warmup, duration)
					if ctx.Err() != nil {
						return interrupted(ctx, err)
					}
					if err != nil {
						return err
					}
					r.RTTMS = float64(rtt.Microseconds()) / 1000
					fmt.Fprintf(g.stderr, "bench: %-11s %3d workers %8.0f acquires/s p99 %.1f ms\n", r.Strategy, n, r.AcquiresPerS, r.P99MS)
					results = append(results, r)
				}
				if !noPgbench {
					if err := freshPool(ctx, d, poolSize); err != nil {
						return interrupted(ctx, err)
					}
					r, err := pgbenchCycle(ctx, g, d, n, duration, rtt)
					if ctx.Err() != nil {
						return interrupted(ctx, err)
					}
					if err != nil {
						fmt.Fprintf(g.stderr, "bench: pgbench skipped: %v\n", oneLine(err.Error()))
						noPgbench = true
					} else {
						fmt.Fprintf(g.stderr, "bench: %-11s %3d workers %8.0f acquires/s p99 %.1f ms\n", r.Strategy, n, r.AcquiresPerS, r.P99MS)
						results = append(results, r)
					}
				}
			}
			if g.jsonOut {
				if err := writeJSON(g.stdout, results); err != nil {
					return err
				}
			} else {
				printBench(g, results, counts, rtt)
			}
			var empty []string
			for _, r := range results {
				if r.EmptyPool > 0 {
					empty = append(empty, fmt.Sprintf("%s at %d workers (%d claims found nothing)", r.Strategy, r.Workers, r.EmptyPool))
				}
			}
			if len(empty) > 0 {
				return fmt.Errorf("the pool of %d ids ran empty in %s: those figures measure an empty pool, not the strategy; raise --pool-size", poolSize, strings.Join(empty, ", "))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&strategies, "strategies", "skip-locked,blocking,optimistic,batched", "comma-separated: skip-locked, blocking, optimistic, batched")
	f.StringVar(&workers, "workers", "1,8,32,64", "comma-separated worker counts")
	f.DurationVar(&duration, "duration", 5*time.Second, "measured time per run")
	f.DurationVar(&warmup, "warmup", time.Second, "unmeasured time before each run")
	f.IntVar(&poolSize, "pool-size", 300_000, "ids in the fresh pool of each run")
	f.BoolVar(&noPgbench, "no-pgbench", false, "do not run pgbench as the ceiling")
	f.IntVar(&maxConns, "max-conns", 16, "connections the workers share: more workers queue in Go, not in PostgreSQL")
	f.IntVar(&batch, "batch", 1000, "ids per claim and per commit in the batched mode")
	f.DurationVar(&rtt, "rtt", 0, "simulated network round trip added to every exchange with the server (e.g. 1ms)")
	f.BoolVar(&g.jsonOut, "json", false, "print JSON")
	f.BoolVar(&g.allowWrites, "allow-writes", false, "with --dsn: run even in a database where pooltop created no pool")
	return cmd
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
	res, err := pgbench.Run(ctx, pgbench.Options{DSN: d.dsn, Schema: g.schema, Script: script, Clients: workers, Duration: dur, Latency: true})
	if err != nil {
		return workload.BenchResult{}, errors.New(g.redact(err.Error()))
	}
	return workload.BenchResult{Strategy: "pgbench", Workers: workers, AcquiresPerS: res.TPS, CyclesPerS: res.TPS,
		P50MS: res.P50MS, P99MS: res.P99MS, Errors: res.Failed, RTTMS: float64(rtt.Microseconds()) / 1000}, nil
}

func printBench(g *globals, rs []workload.BenchResult, counts []int, rtt time.Duration) {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
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
		fmt.Fprintf(g.stdout, "every exchange with the server delayed by a simulated network round trip of %v (--rtt)\n", rtt)
	} else {
		fmt.Fprintln(g.stdout, "no network between client and server (add one with --rtt 1ms: blocking holds its lock across its round trips)")
	}
	for _, n := range counts {
		sk, bl := find("skip-locked", n), find("blocking", n)
		if sk > 0 && bl > 0 {
			fmt.Fprintf(g.stdout, "SKIP LOCKED / blocking at %d workers: %.1f×\n", n, sk/bl)
		}
		if pg := find("pgbench", n); sk > 0 && pg > 0 {
			fmt.Fprintf(g.stdout, "skip-locked / pgbench at %d workers: %.0f%%\n", n, 100*sk/pg)
		}
	}
}
