package main

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/workload"
	"github.com/spf13/cobra"
)

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
