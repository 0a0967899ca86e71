package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/workload"
)

// workOptions are the flags of pooltop work: the workload as a process of
// its own, one of a fleet on one database.
type workOptions struct {
	name      string
	scenario  string
	workers   int
	duration  time.Duration
	heartbeat time.Duration
	maxConns  int
	noReaper  bool
	// toNodes: on Citus, send the lease calls to the node of each shard.
	toNodes bool
	history string
	knobs   workload.Config // the knobs given as flags
	changed func(flag string) bool

	cfg workload.Config
}

func newWorkCmd(g *globals) *cobra.Command {
	return g.command(&workOptions{}, &cobra.Command{
		Use:   "work --dsn URL",
		Short: "Run workers as a process of their own, one of a fleet on one pool",
		Long: `Run a scenario's workers (and, unless --no-reaper, a reaper) against the pool
of --dsn until --duration passes or the process is told to stop. Run many,
on many hosts, against one database: each registers under --name in
pooltop_worker and heartbeats there, and pooltop watch shows the fleet.

SIGTERM or Ctrl-C drains: every worker finishes its cycle or releases its
leases, then the process marks itself stopped. SIGKILL does not: its
leases stay PENDING until a reaper brings them back, and watch shows it
as gone once it misses three heartbeats.

work generates load and consumes ids: it needs --dsn (never the
environment) and a pool pooltop created there, unless --allow-writes.

Given --dsn once per server of a pool over several (or --dsn-file), the
workers claim on a server drawn at random and go round the others when it
is empty or does not answer; each lease's renew and commit go to its
server; the reaper reaps every server; the process registers on each. A
server down at the start is tried again until it answers.`,
	})
}

func (o *workOptions) addFlags(c *cobra.Command, g *globals) {
	f := c.Flags()
	host, _ := os.Hostname()
	f.StringVar(&o.name, "name", fmt.Sprintf("%s-%d", host, os.Getpid()), "this process's name in the fleet (unique among live processes)")
	f.StringVar(&o.scenario, "scenario", "healthy", "the scenario whose knobs the workers use (see pooltop chaos --help)")
	f.IntVar(&o.workers, "workers", 0, "workers in this process (default: the scenario's)")
	f.DurationVar(&o.duration, "duration", 0, "stop after this long (0: until SIGTERM or Ctrl-C)")
	f.DurationVar(&o.heartbeat, "heartbeat", time.Second, "time between heartbeats (0.1s to 1m)")
	f.IntVar(&o.maxConns, "max-conns", 0, "connections the workers share (default: workers + 2, at most 64)")
	f.BoolVar(&o.toNodes, "to-nodes", false, "on a pool on Citus: send each lease call to the node that holds its shard, not through the coordinator (faster; the nodes' addresses in pg_dist_node must be reachable from here, with the same user and password)")
	f.BoolVar(&o.noReaper, "no-reaper", false, "run no reaper in this process (another process or pooltop lease reap does it)")
	f.StringVar(&o.history, "history", "", "write every operation with its outcome to this file as NDJSON, for the history check of chaos --faults")
	k := &o.knobs
	f.DurationVar(&k.Task, "task", 0, "override the scenario's mean task time (the work done under a lease)")
	f.DurationVar(&k.TTL, "ttl", 0, "override the scenario's lease length")
	f.IntVar(&k.Batch, "batch", 0, "override the ids a worker claims at a time")
	f.Float64Var(&k.CrashRate, "crash-rate", 0, "override the chance per cycle that a worker dies holding its leases")
	f.Float64Var(&k.PauseRate, "pause-rate", 0, "override the chance per cycle that a worker freezes past its lease")
	f.Float64Var(&k.FailRate, "fail-rate", 0, "override the chance per cycle that a task fails and releases its leases")
	o.changed = f.Changed
	g.loadFlags(c, "print the final figures as JSON")
}

func (o *workOptions) validate(g *globals) error {
	if g.dsn == "" {
		return usageError{errors.New("--dsn is required: pooltop work joins a fleet on a shared database, and a command that generates load never takes its server from DATABASE_URL or PG*")}
	}
	if o.name == "" || len(o.name) > 200 {
		return usageError{fmt.Errorf("--name %q: give 1 to 200 characters", o.name)}
	}
	if o.duration < 0 || o.duration > 30*24*time.Hour {
		return usageError{fmt.Errorf("--duration %v: between 0 (until stopped) and 720h", o.duration)}
	}
	if o.heartbeat < 100*time.Millisecond || o.heartbeat > time.Minute {
		return usageError{fmt.Errorf("--heartbeat %v: between 100ms and 1m", o.heartbeat)}
	}
	sc, err := workload.ScenarioByName(o.scenario)
	if err != nil {
		return usageError{err}
	}
	cfg := sc.Config(uint64(os.Getpid()))
	if o.changed("workers") {
		cfg.Workers = o.workers
	}
	k := o.knobs
	for flag, set := range map[string]func(){
		"task": func() { cfg.Task = k.Task }, "ttl": func() { cfg.TTL = k.TTL }, "batch": func() { cfg.Batch = k.Batch },
		"crash-rate": func() { cfg.CrashRate = k.CrashRate }, "pause-rate": func() { cfg.PauseRate = k.PauseRate },
		"fail-rate": func() { cfg.FailRate = k.FailRate },
	} {
		if o.changed(flag) {
			set()
		}
	}
	cfg.Reaper = cfg.Reaper && !o.noReaper
	if err := cfg.Validate(); err != nil {
		return usageError{err}
	}
	if err := checkVacuumOff(g, cfg); err != nil {
		return err
	}
	if o.maxConns == 0 {
		o.maxConns = min(cfg.Workers+2, 64)
	}
	if o.maxConns < 1 || o.maxConns > 256 {
		return usageError{fmt.Errorf("--max-conns %d: between 1 and 256", o.maxConns)}
	}
	o.cfg = cfg
	return nil
}

// workSummary is what work prints when it ends.
type workSummary struct {
	Name      string  `json:"name"`
	Scenario  string  `json:"scenario"`
	DurationS float64 `json:"duration_s"`
	Cycles    int64   `json:"cycles"`
	Committed int64   `json:"committed"`
	Released  int64   `json:"released"`
	Fenced    int64   `json:"fenced_rejections"`
	Errors    int64   `json:"errors"`
	Held      int     `json:"held"` // leases still held when it stopped (0 after a drain)
}

func (o *workOptions) run(ctx context.Context, g *globals) error {
	var eng workload.Engine
	var fleet []*engine.Engine // where the process registers
	var where string
	{
		d, err := g.open(ctx, openOptions{appName: "pooltop-work", maxConns: int32(o.maxConns), write: true, migrate: true, load: true})
		if err != nil {
			return err
		}
		defer d.Close()
		eng, fleet, where = d.eng, []*engine.Engine{d.eng}, g.redact(d.dsn)
		if o.toNodes {
			citus, _, err := d.eng.Citus(ctx)
			if err != nil {
				return err
			}
			if !citus {
				return usageError{errors.New("--to-nodes: the pool is not on Citus: there are no nodes to send the calls to")}
			}
			defer d.eng.RouteToNodes(engine.ConnOptions{DSN: d.dsn, From: "--dsn", Schema: g.schema, AppName: "pooltop-work", MaxConns: int32(o.maxConns)})()
			where += ", calls sent to the nodes of the shards"
		}
		if o.history != "" {
			// Written as each operation happens, unbuffered: a process killed
			// in the middle of a commit leaves the call behind.
			f, err := os.OpenFile(o.history, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
			if err != nil {
				return fmt.Errorf("--history: %w", err)
			}
			defer f.Close()
			d.eng.Record(engine.NewHistory(f))
		}
	}
	wl, err := workload.New(eng, o.cfg)
	if err != nil {
		return usageError{err}
	}
	host, _ := os.Hostname()
	p := engine.Process{Name: o.name, Host: host, PID: os.Getpid(), RunID: wl.RunID(), Workers: o.cfg.Workers, Heartbeat: o.heartbeat}
	registered := 0
	for _, e := range fleet {
		err := e.Register(ctx, p)
		if errors.Is(err, engine.ErrNameTaken) || err != nil && len(fleet) == 1 {
			return err
		}
		if err == nil {
			registered++
		}
	}
	if registered == 0 {
		return fmt.Errorf("work: no server of the pool answered to register the process")
	}
	fmt.Fprintf(g.stderr, "work: %s: %d workers (%s) on %s; SIGTERM drains\n", o.name, o.cfg.Workers, o.scenario, where)
	start := time.Now()
	runCtx := ctx
	if o.duration > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, o.duration)
		defer cancel()
	}
	wl.Start(runCtx)
	beat := time.NewTicker(o.heartbeat)
	defer beat.Stop()
	fill := func(p *engine.Process) {
		s := wl.Snapshot()
		p.Workers, p.Cycles, p.Committed, p.Held = s.Workers, s.Cycles, s.Committed, wl.Held()
	}
	failing := false
	for runCtx.Err() == nil {
		select {
		case <-runCtx.Done():
		case <-beat.C:
			if _, err := wl.RefreshLeaked(runCtx); err != nil && runCtx.Err() == nil && !failing {
				fmt.Fprintf(g.stderr, "work: %s: leaked leases not checked: %s\n", o.name, g.redact(err.Error()))
			}
			fill(&p)
			// A heartbeat that fails (the server restarts, the network is
			// cut) is said once and retried at the next beat; the workers
			// reconnect through their pool on their own.
			var err error
			for _, e := range fleet {
				if herr := e.Heartbeat(runCtx, p); herr != nil && err == nil {
					err = herr
				}
			}
			switch {
			case err != nil && runCtx.Err() == nil && !failing:
				fmt.Fprintf(g.stderr, "work: %s: heartbeat failed, retrying: %s\n", o.name, g.redact(err.Error()))
				failing = true
			case err == nil && failing:
				fmt.Fprintf(g.stderr, "work: %s: heartbeat back\n", o.name)
				failing = false
			}
		}
	}
	// Drain: every worker finishes its cycle or releases its leases.
	wl.Stop()
	fill(&p)
	end, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	for _, e := range fleet {
		if err := e.Deregister(end, p); err != nil {
			fmt.Fprintf(g.stderr, "work: %s: could not mark the process stopped: %s\n", o.name, g.redact(err.Error()))
		}
	}
	s := wl.Snapshot()
	var errs int64
	for _, n := range s.Errors {
		errs += n
	}
	sum := workSummary{Name: o.name, Scenario: o.scenario, DurationS: time.Since(start).Seconds(), Cycles: s.Cycles,
		Committed: s.Committed, Released: s.Released, Fenced: s.FencedRejections, Errors: errs, Held: p.Held}
	return g.emit(sum, func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s: %d cycles, %d committed, %d released, %d fenced, %d errors in %.0fs; %d leases held at exit\n",
			sum.Name, sum.Cycles, sum.Committed, sum.Released, sum.Fenced, sum.Errors, sum.DurationS, sum.Held)
		return err
	})
}
