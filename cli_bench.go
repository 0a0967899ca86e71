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

	"github.com/pooltop-dev/pooltop/internal/pgbench"
	"github.com/pooltop-dev/pooltop/workload"
)

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
