package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/demo"
	"github.com/pooltop-dev/pooltop/internal/faultproxy"
	"github.com/pooltop-dev/pooltop/workload"
)

// chaosOptions are the flags of pooltop chaos, and the scenario validate
// finds by --scenario.
type chaosOptions struct {
	scenario string
	duration time.Duration
	seed     uint64
	poolSize int
	workers  int
	crash    float64
	pause    float64
	faults   string
	procs    int
	every    time.Duration
	// servers: a pool over this many throwaway servers, one stopped hard mid-run.
	servers int
	// citus: the pool on a throwaway Citus cluster.
	citus bool
	// partitions: the pool hash-partitioned on id in this many partitions.
	partitions int
	// changed reports whether a flag was given: only those override the
	// scenario's settings.
	changed func(flag string) bool

	sc   workload.Scenario
	kind []workload.Fault // --faults
}

// workBinary is the pooltop binary chaos --faults runs its worker processes
// from: this one (tests point it at a built binary).
var workBinary = os.Executable

func newChaosCmd(g *globals) *cobra.Command {
	var names []string
	for _, s := range workload.Scenarios {
		names = append(names, fmt.Sprintf("  %-20s %s", s.Name, s.About))
	}
	return g.command(&chaosOptions{}, &cobra.Command{
		Use:   "chaos",
		Short: "Run a failure scenario headless, then audit the database",
		Long: `Run a scenario for --duration with its faults, stop the faults and the
workers, let the reaper catch up (TTL + 2 reaper intervals), audit the
database and print the summary. Exit 0 only when the scenario's expected
invariants hold and its story showed; for pause-no-fencing, crash-no-lease,
fence-in-app and lost-ack the failures are the expected outcome and are
reported under expected_failures. lost-ack runs its second half with stable
request ids and checks that duplicates appear only in the first. Exit 6 when
an invariant is violated or the story did not show.

--servers N runs it over a pool on N throwaway servers and stops one hard
for the middle third of the run. Given --dsn once per server of yours, it
runs over a pool on those servers (in its scratch schema on each), stops
none, and audits every server.

Scenarios:
` + strings.Join(names, "\n"),
		PreRun: func(cmd *cobra.Command, _ []string) { scratchDefault(g, cmd, "chaos") },
	})
}

func (o *chaosOptions) addFlags(c *cobra.Command, g *globals) {
	f := c.Flags()
	f.StringVar(&o.scenario, "scenario", "healthy", "scenario to run (see above)")
	f.DurationVar(&o.duration, "duration", 30*time.Second, "how long the faults run")
	f.Uint64Var(&o.seed, "seed", 1, "random seed: the same seed makes the same fault decisions")
	f.IntVar(&o.poolSize, "pool-size", 0, "ids in the pool (default: the scenario's)")
	f.IntVar(&o.workers, "workers", 0, "override the scenario's worker count")
	f.Float64Var(&o.crash, "crash-rate", 0, "override the chance per cycle that a worker dies holding its leases")
	f.Float64Var(&o.pause, "pause-rate", 0, "override the chance per cycle that a worker freezes past its lease")
	f.StringVar(&o.faults, "faults", "", "real faults instead of the scenario's simulated ones: kill,terminate,restart,lost-ack,partition,pause (worker processes killed with SIGKILL, their sessions terminated, PostgreSQL restarted by an immediate shutdown, the connection cut around a commit, the network stalled longer than a lease, a process frozen with SIGSTOP past its leases and resumed); on the throwaway server only")
	f.IntVar(&o.procs, "processes", 4, "with --faults: pooltop work processes in the fleet")
	f.DurationVar(&o.every, "fault-every", 2*time.Second, "with --faults: mean time between faults")
	f.BoolVar(&o.citus, "citus", false, "run the scenario on a throwaway Citus cluster (a coordinator and two workers; the pool over 32 shards), then audit it: the scenarios with the skip-locked claim and the database's fence")
	f.IntVar(&o.servers, "servers", 0, "gone: chaos --citus runs the scenario on a throwaway Citus cluster")
	_ = f.MarkHidden("servers")
	partitionsFlag(c, &o.partitions)
	o.changed = f.Changed
	g.loadFlags(c, "print the summary as JSON")
}

// override sets in c the scenario settings given as flags.
func (o *chaosOptions) override(c *workload.Config) {
	if o.changed("workers") {
		c.Workers = o.workers
	}
	if o.changed("crash-rate") {
		c.CrashRate = o.crash
	}
	if o.changed("pause-rate") {
		c.PauseRate = o.pause
	}
}

func (o *chaosOptions) validate(g *globals) error {
	sc, err := workload.ScenarioByName(o.scenario)
	if err != nil {
		return usageError{err}
	}
	o.sc = sc
	if o.duration < time.Second || o.duration > 24*time.Hour {
		return usageError{fmt.Errorf("--duration %v: between 1s and 24h", o.duration)}
	}
	if err := checkScratch(g.schema, "chaos"); err != nil {
		return err
	}
	if err := checkPartitionsFlag(o.partitions); err != nil {
		return err
	}
	if o.changed("servers") {
		return errServersGone
	}
	if o.citus {
		cfg := sc.Config(o.seed)
		o.override(&cfg)
		switch {
		case g.dsn != "" || len(g.servers) > 0 || o.changed("servers") || o.faults != "" || o.partitions > 0:
			return usageError{errors.New("--citus runs on a throwaway Citus cluster of its own: drop --dsn, --servers, --faults and --partitions")}
		case demo.OnCitus(cfg) != nil:
			return usageError{fmt.Errorf("--scenario %s: %w", sc.Name, demo.OnCitus(cfg))}
		}
	}
	if o.faults != "" {
		kind, err := workload.ParseFaults(o.faults)
		if err != nil {
			return usageError{fmt.Errorf("--faults: %w", err)}
		}
		o.kind = kind
		if g.dsn != "" || len(g.servers) > 0 {
			return usageError{errors.New("--faults kills worker processes and restarts PostgreSQL: it runs only on the throwaway server; drop --dsn")}
		}
		if o.procs < 1 || o.procs > 64 {
			return usageError{fmt.Errorf("--processes %d: between 1 and 64", o.procs)}
		}
		if o.every < 100*time.Millisecond || o.every > time.Hour {
			return usageError{fmt.Errorf("--fault-every %v: between 100ms and 1h", o.every)}
		}
		if o.changed("crash-rate") || o.changed("pause-rate") {
			return usageError{errors.New("--faults injects real faults: --crash-rate and --pause-rate are for the simulated ones; give one or the other")}
		}
	} else {
		for _, flag := range []string{"processes", "fault-every"} {
			if o.changed(flag) {
				return usageError{fmt.Errorf("--%s goes with --faults", flag)}
			}
		}
	}
	if o.poolSize == 0 {
		o.poolSize = sc.PoolSize
	}
	if o.poolSize < 1 || o.poolSize > engine.MaxSeed {
		return usageError{fmt.Errorf("--pool-size %d: between 1 and %d", o.poolSize, engine.MaxSeed)}
	}
	// Every flag is checked before the pool is emptied and refilled.
	probe := sc.Config(o.seed)
	o.override(&probe)
	if err := probe.Validate(); err != nil {
		return usageError{err}
	}
	return nil
}

func (o *chaosOptions) run(ctx context.Context, g *globals) error {
	if o.kind != nil {
		return o.runFaults(ctx, g)
	}
	if o.citus {
		return o.runCitus(ctx, g)
	}
	d, err := g.open(ctx, openOptions{appName: "pooltop-chaos", maxConns: 16, write: true, migrate: true, load: true, partitions: o.partitions,
		direct: "it empties the pool with VACUUM between runs, which needs the server"})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := freshPool(ctx, d, o.poolSize, ""); err != nil {
		return err
	}
	return o.chaosOn(ctx, g, d.eng, "")
}

// chaosOn runs the scenario on eng's pool (where names it, for the
// banner), prints its summary and says whether the invariants held.
func (o *chaosOptions) chaosOn(ctx context.Context, g *globals, eng *engine.Engine, where string) error {
	fmt.Fprintf(g.stderr, "chaos: %s for %v on %d ids%s (seed %d)\n", o.sc.Name, o.duration, o.poolSize, where, o.seed)
	start := time.Now()
	sum, err := workload.Chaos(ctx, eng, o.sc, o.duration, o.seed, o.override, func(s workload.Snapshot) {
		fmt.Fprintf(g.stderr, "  %3.0fs cycles %d committed %d fenced %d crashes %d pauses %d leaked %d reclaimed %d empty %d\n",
			time.Since(start).Seconds(), s.Cycles, s.Committed, s.FencedRejections, s.Crashes, s.Pauses, s.Leaked, s.Reclaimed, s.EmptyPool)
	})
	if err != nil {
		return err
	}
	if err := g.emit(sum, func(w io.Writer) error { return printSummary(w, sum) }); err != nil {
		return err
	}
	if !sum.OK() {
		return violationError{fmt.Errorf("chaos %s: %d invariant(s) violated: %s", o.sc.Name, len(sum.Violations), strings.Join(sum.Violations, "; "))}
	}
	return nil
}

// printSummary prints a chaos run's summary as a table, then its expected
// failures and violations.
func printSummary(w io.Writer, s workload.Summary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\t%s (seed %d, %.0fs)\n", s.Scenario, s.Seed, s.DurationS)
	fmt.Fprintf(tw, "cycles\t%d\ncommitted\t%d\nfenced rejections\t%d\ndouble finalizations\t%d\n", s.Cycles, s.Committed, s.FencedRejections, s.DoubleFinalizations)
	fmt.Fprintf(tw, "crashes\t%d\npauses\t%d\nlost ids\t%d\nreclaimed\t%d\n", s.Crashes, s.Pauses, s.LostIDs, s.Reclaimed)
	fmt.Fprintf(tw, "max reclaim lag\t%.0f ms (bound %.0f ms)\nexpired pending\t%d\nempty-pool hits\t%d\nconflicts\t%d\nerrors\t%d\n",
		s.MaxReclaimLagMS, s.ReclaimBoundMS, s.ExpiredPending, s.EmptyPool, s.Conflicts, s.Errors)
	story := []struct {
		name string
		v    int64
	}{{"leases lost", s.LeasesLost}, {"transferred", s.Transferred}, {"old holders rejected", s.OldHolderRejections},
		{"past DB expiry", s.PastExpiry}, {"acks lost", s.AcksLost}, {"replayed by request id", s.Replayed},
		{"duplicates (fresh ids)", s.DuplicatesFreshID}, {"duplicates (stable ids)", s.DuplicatesStableID}}
	for _, f := range story {
		if f.v != 0 {
			fmt.Fprintf(tw, "%s\t%d\n", f.name, f.v)
		}
	}
	if s.MaxRecoveryMS > 0 {
		fmt.Fprintf(tw, "max recovery\t%.0f ms\n", s.MaxRecoveryMS)
	}
	if v := s.Vacuum; v != nil {
		fmt.Fprintf(tw, "dead tuples\t%d (autovacuum off %v, left off after %v)\n", v.DeadTuples, v.AutovacuumOff, s.AutovacuumLeftOff)
	}
	_ = tw.Flush()
	for _, e := range s.Expected {
		fmt.Fprintf(w, "expected failure: %s\n", e)
	}
	for _, v := range s.Violations {
		fmt.Fprintf(w, "VIOLATION: %s\n", v)
	}
	if s.OK() {
		fmt.Fprintln(w, "ok: the scenario's invariants hold")
	}
	return nil
}

// runFaults runs a campaign of real faults on a fleet of pooltop work
// processes on the throwaway server, then audits it.
func (o *chaosOptions) runFaults(ctx context.Context, g *globals) error {
	// A restart must lose nothing acknowledged: commits wait for their WAL.
	d, err := g.open(ctx, openOptions{appName: "pooltop-chaos", maxConns: 8, write: true, migrate: true, load: true, partitions: o.partitions,
		settings: map[string]string{"synchronous_commit": "on"}})
	if err != nil {
		return err
	}
	defer d.Close()
	if err := freshPool(ctx, d, o.poolSize, ""); err != nil {
		return err
	}
	bin, err := workBinary()
	if err != nil {
		return fmt.Errorf("find the pooltop binary for the worker processes: %w", err)
	}
	// The network's faults need the workers behind a proxy; the campaign's
	// own sessions (the reaper, the audit) reach the server directly.
	workDSN := d.dsn
	var proxy *faultproxy.Proxy
	for _, f := range o.kind {
		if f.NeedsProxy() && proxy == nil {
			if proxy, err = faultproxy.New(fmt.Sprintf("127.0.0.1:%d", d.embedded.Port())); err != nil {
				return fmt.Errorf("start the fault proxy: %w", err)
			}
			defer proxy.Close()
			u, err := url.Parse(d.dsn)
			if err != nil {
				return err
			}
			u.Host = proxy.Addr()
			workDSN = u.String()
		}
	}
	workers := 4
	if o.changed("workers") {
		workers = o.workers
	}
	// The worker processes' stderr and the campaign's lines share one
	// writer, a line at a time.
	errw := &lockedWriter{w: g.stderr}
	c := &workload.Campaign{Faults: o.kind, Processes: o.procs, Duration: o.duration, Every: o.every, Seed: o.seed, Scenario: o.sc,
		Pool: d.pool.Raw(), Crash: d.embedded.Crash, Proxy: proxy,
		Spawn: func(name, history string) *exec.Cmd {
			cmd := exec.Command(bin, "work", "--dsn", workDSN, "--schema", g.schema, "--name", name, "--scenario", o.sc.Name,
				"--workers", strconv.Itoa(workers), "--heartbeat", "250ms", "--no-reaper", "--json", "--history", history)
			cmd.Env, cmd.Stdout, cmd.Stderr = workload.WorkEnv(), io.Discard, errw
			return cmd
		},
		Progress: func(s string) { fmt.Fprintf(errw, "chaos: %s\n", s) },
	}
	fmt.Fprintf(g.stderr, "chaos: %s with %d processes of %d workers for %v on %d ids (seed %d)\n", o.faults, o.procs, workers, o.duration, o.poolSize, o.seed)
	sum, err := c.Run(ctx)
	if err != nil {
		return err
	}
	if err := g.emit(sum, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		var kinds []string
		for _, f := range o.kind {
			kinds = append(kinds, fmt.Sprintf("%s %d", f, sum.Faults[string(f)]))
		}
		fmt.Fprintf(tw, "faults\t%s\nprocesses started\t%d\ncommitted\t%d\nreclaimed\t%d\n", strings.Join(kinds, ", "), sum.Processes, sum.Committed, sum.Reclaimed)
		if sum.Faults[string(workload.FaultPause)] > 0 {
			fmt.Fprintf(tw, "zombie commits rejected\t%d, other operations %d (by processes resumed from a pause, on the leases taken back from them)\n", sum.ZombieCommitsRejected, sum.ZombieOthersRejected)
		}
		if sum.AcksLost != nil {
			fmt.Fprintf(tw, "commits cut\t%d after the server ran them, %d before\n", sum.AcksLost["delivered"], sum.AcksLost["dropped"])
		}
		fmt.Fprintf(tw, "max reclaim lag\t%.0f ms (bound %.0f ms)\nlongest restart\t%.1f s\nrecovered\t%v\n", sum.MaxReclaimLagMS, sum.ReclaimBoundMS, sum.DownS, sum.Recovered)
		fmt.Fprintf(tw, "double effects\t%d\nstill pending\t%d\n", sum.Audit.DoubleFinalizations, sum.Audit.Pending)
		fmt.Fprintf(tw, "history\t%d operations on %d ids, %d unanswered: linearizable %v\n", sum.History.Ops, sum.History.IDs, sum.History.Unknown, sum.History.Linearizable)
		_ = tw.Flush()
		for _, v := range sum.Violations {
			fmt.Fprintf(w, "VIOLATION: %s\n", v)
		}
		if sum.OK() {
			fmt.Fprintln(w, "ok: at most one effect per id, every id back in the pool or consumed, every process recovered")
		}
		return nil
	}); err != nil {
		return err
	}
	if !sum.OK() {
		return violationError{fmt.Errorf("chaos --faults %s: %d invariant(s) violated: %s", o.faults, len(sum.Violations), strings.Join(sum.Violations, "; "))}
	}
	return nil
}

// lockedWriter serialises writes from several goroutines.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
