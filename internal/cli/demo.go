package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/charmbracelet/x/term"
	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/demo"
	"github.com/pooltop-dev/pooltop/tui"
	"github.com/pooltop-dev/pooltop/workload"
)

// demoOptions are the flags of the demo (pooltop with no command), and the
// workload's configuration validate makes of them.
type demoOptions struct {
	poolSize int
	workers  int
	scenario string
	maxConns int
	// partitions: create the pool hash-partitioned on id in this many partitions.
	partitions int
	// servers: the flag of the retired demo over several servers, refused.
	servers int
	// citus: run on a throwaway Citus cluster.
	citus  bool
	reaper engine.ReaperConfig
	watch  watchOptions

	cfg workload.Config   // the workload's, made by validate
	sc  workload.Scenario // the scenario it starts with
}

func (o *demoOptions) addFlags(c *cobra.Command, g *globals) {
	f := c.Flags()
	f.IntVar(&o.poolSize, "pool-size", 0, "ids in the pool: created when it is empty, and in each scenario's fresh pool (default: the scenario's, 200,000; drain a tenth)")
	f.IntVar(&o.workers, "workers", 0, "simulated workers at start (default: the scenario's)")
	f.StringVar(&o.scenario, "scenario", "healthy", "the scenario preset to start with (see pooltop chaos --help)")
	f.IntVar(&o.maxConns, "max-conns", 16, "connections the workers share")
	partitionsFlag(c, &o.partitions)
	f.IntVar(&o.servers, "servers", 0, "gone: pooltop --citus runs the demo on a throwaway Citus cluster")
	_ = f.MarkHidden("servers")
	f.BoolVar(&o.citus, "citus", false, "run the demo on a throwaway Citus cluster (a coordinator and two workers, when Citus is installed): the pool spread over 32 shards, a row per node, and the key S stops a worker hard and starts it again")
	f.DurationVar(&o.reaper.Interval, "reaper-interval", time.Second, "time between reaper passes")
	f.IntVar(&o.reaper.Batch, "reaper-batch", 1000, "rows per reaper statement")
	f.DurationVar(&o.reaper.Grace, "reaper-grace", 0, "reclaim only leases expired for longer than this")
	f.BoolVar(&o.watch.headless, "headless", false, "print one line per poll instead of the dashboard")
	f.DurationVar(&o.watch.interval, "interval", time.Second, "time between polls (0.25s to 60s)")
	f.IntVar(&o.watch.count, "count", 0, "with --headless: stop after this many polls (0: until Ctrl-C)")
	g.allowWritesFlag(c, "with --dsn: run even where pooltop did not create the pool (its ids are consumed)")
	o.watch.sink.addFlags(c)
}

// isTerminal reports whether the dashboard can run here.
func isTerminal() bool { return term.IsTerminal(os.Stdout.Fd()) && term.IsTerminal(os.Stdin.Fd()) }

// useColor honours NO_COLOR (https://no-color.org).
func useColor() bool { return os.Getenv("NO_COLOR") == "" }

func (o *demoOptions) validate(g *globals) error {
	if o.poolSize < 0 || o.poolSize > engine.MaxSeed {
		return usageError{fmt.Errorf("--pool-size %d: give between 1 and %d", o.poolSize, engine.MaxSeed)}
	}
	if o.maxConns < 1 || o.maxConns > 256 {
		return usageError{fmt.Errorf("--max-conns %d: between 1 and 256", o.maxConns)}
	}
	if err := checkPartitionsFlag(o.partitions); err != nil {
		return err
	}
	if err := o.validateServers(g); err != nil {
		return err
	}
	sc, err := workload.ScenarioByName(o.scenario)
	if err != nil {
		return usageError{err}
	}
	o.sc = sc
	cfg := demo.ScenarioConfig(sc, 1)
	if o.workers != 0 {
		cfg.Workers = o.workers
	}
	cfg.ReaperInterval, cfg.ReaperBatch, cfg.ReaperGrace = o.reaper.Interval, o.reaper.Batch, o.reaper.Grace
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	o.cfg = cfg
	if err := checkVacuumOff(g, cfg); err != nil {
		return err
	}
	if err := o.watch.checkCount(); err != nil {
		return err
	}
	if err := o.watch.sink.validate(); err != nil {
		return err
	}
	return checkInterval(o.watch.interval)
}

// demoFirstSeed is how many ids a new demo pool holds when the dashboard
// starts (about a tenth of a second to insert); the rest follow behind.
const demoFirstSeed = 20_000

// run starts (or connects to) the database, creates the schema and a pool,
// runs the workload with its reaper, and shows the dashboard; on a terminal
// that is not one (or with --headless) it prints a line per poll. Quitting
// stops the workload, the reaper and the embedded server.
func (o *demoOptions) run(ctx context.Context, g *globals) error {
	cfg := o.cfg
	metrics, err := o.watch.sink.serveMetrics(g)
	if err != nil {
		return err
	}
	defer metrics.close()
	if o.citus {
		return o.runCitus(ctx, g, metrics)
	}
	d, err := g.open(ctx, openOptions{appName: "pooltop-workload", maxConns: int32(o.maxConns), write: true, migrate: true, load: true, partitions: o.partitions})
	if err != nil {
		return err
	}
	defer d.Close()

	var existing int64
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM resource_pool").Scan(&existing); err != nil {
		return fmt.Errorf("count the pool: %w", err)
	}
	st := &demo.Stage{Pool: demo.OneServer(d.pool, d.eng), Size: o.poolSize, Rebuild: d.embedded != nil || !g.allowWrites}
	if err := st.Check(cfg); err != nil {
		return usageError{err}
	}
	// A new pool gets its first ids before the dashboard starts and the
	// rest behind the first figures: 200,000 rows under three indexes take
	// most of a second, which a user would spend before an empty screen.
	rest := 0
	if existing == 0 {
		start := time.Now()
		size := st.PoolSize(o.sc)
		first := min(size, demoFirstSeed)
		if _, err := d.eng.Seed(ctx, first); err != nil {
			return err
		}
		rest = size - first
		if rest > 0 {
			fmt.Fprintf(g.stderr, "pooltop: created %d ids in %.2fs; the other %d follow while the dashboard starts\n", first, time.Since(start).Seconds(), rest)
		} else {
			fmt.Fprintf(g.stderr, "pooltop: created %d ids in %.2fs\n", size, time.Since(start).Seconds())
		}
	}

	wl, err := workload.New(d.eng, cfg)
	if err != nil {
		return usageError{err}
	}
	// The workers start once the first poll has returned: the collector's
	// first statements, on sessions that read the catalog afresh, queue
	// behind busy workers on a small machine, and the first figures are
	// then the pool as seeded, exact.
	col, err := collector.New(ctx, collector.Config{DSN: d.dsn, Table: g.schema + ".resource_pool",
		Alerts: collector.AlertConfig{ExpiredAfter: cfg.ReaperInterval + cfg.ReaperGrace}, Workload: wl})
	if err != nil {
		return err
	}
	defer col.Close()
	defer wl.Stop()
	st.Workload, st.Collector = wl, col
	show := demoShow{stage: st, col: col, metrics: metrics, rest: rest,
		actions: &demo.Actor{DB: d.pool, Engine: d.eng, Collector: col}, on: "on " + g.redact(d.dsn)}
	if d.embedded != nil {
		show.server = fmt.Sprintf("embedded 127.0.0.1:%d", d.embedded.Port())
		show.on = "on the throwaway server, DATABASE_URL=" + d.dsn
	}
	return o.show(ctx, g, show)
}

// demoShow is what the demo shows, once its pool and workload are made.
type demoShow struct {
	stage   *demo.Stage
	knobs   tui.Knobs  // the dashboard's knobs, when not the stage alone
	col     tui.Source // the collector, or collector.Servers
	metrics *metricsServer
	rest    int         // ids still to seed behind the first figures
	actions tui.Actions // nil over several servers
	server  string      // the header's server, when it is the demo's own
	on      string      // where the demo runs, for the headless banner
}

// show taps the source for --listen and --record, starts the workers once
// the first poll has returned and the pool holds all its ids, and runs the
// dashboard, or the headless lines.
func (o *demoOptions) show(ctx context.Context, g *globals, d demoShow) error {
	src, err := o.watch.sink.tap(g, d.col, d.metrics, "demo", o.watch.interval)
	if err != nil {
		return err
	}
	defer src.close()
	var starter sync.WaitGroup
	defer starter.Wait() // before the workload stops and the pool closes
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	polled := make(chan struct{})
	src.afterFirst = func() { close(polled) }
	starter.Go(func() {
		if d.rest > 0 {
			_ = d.stage.Grow(ctx, d.rest, demoFirstSeed)
		}
		select {
		case <-polled:
			d.stage.Workload.Start(ctx)
		case <-ctx.Done():
		}
	})
	if o.watch.headless || !isTerminal() {
		fmt.Fprintf(g.stderr, "pooltop demo (headless) %s; Ctrl-C stops it\n", d.on)
		return runHeadless(ctx, g, src, &o.watch)
	}
	var knobs tui.Knobs = d.stage
	if d.knobs != nil {
		knobs = d.knobs
	}
	return tui.Run(ctx, tui.Options{Source: src.source(), Knobs: knobs, Mode: "demo", Server: d.server, Interval: o.watch.interval,
		Color: useColor(), Scenario: o.sc.Name, Actions: d.actions, Report: o.watch.sink.report()})
}

// checkVacuumOff refuses a start with autovacuum off (the vacuum-off story)
// or the FOR SHARE report (starvation) where the pool may not be
// pooltop's: with --allow-writes on a --dsn the demo and work run on pools
// pooltop did not create, and turning a user's autovacuum off, or holding
// their database's vacuum horizon, is not theirs to do. (The dashboard's
// keys are checked by the stage the same way.)
func checkVacuumOff(g *globals, cfg workload.Config) error {
	if g.dsn == "" || !g.allowWrites {
		return nil
	}
	switch {
	case !cfg.Autovacuum:
		return usageError{errors.New("--scenario vacuum-off turns autovacuum off for the pool: refused with --allow-writes, where the pool may not be pooltop's; run it on the throwaway server or on a pool made by pooltop migrate, without --allow-writes")}
	case cfg.ShareHold > 0:
		return usageError{errors.New("--scenario starvation holds rows FOR SHARE and the database's vacuum horizon 20 s at a time: refused with --allow-writes, where the pool may not be pooltop's; run it on the throwaway server or on a pool made by pooltop migrate, without --allow-writes")}
	}
	return nil
}
