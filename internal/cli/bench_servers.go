package cli

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/servercost"
	"github.com/pooltop-dev/pooltop/migrations"
	"github.com/pooltop-dev/pooltop/workload"
)

// serversBenchRow is one row of bench --servers: a strategy at a worker
// count on a pool over Servers servers, with each server's share.
type serversBenchRow struct {
	Servers int `json:"servers"`
	workload.BenchResult
	// ServerCPU is each server's CPU (all its processes) over the window,
	// in cores: 1.0 is one core busy for the whole window.
	ServerCPU []float64 `json:"server_cpu_cores"`
	// ClientCPU is pooltop's own CPU over the window, in cores.
	ClientCPU float64 `json:"client_cpu_cores"`
	// Share is each server's part of the ids claimed in the window.
	Share []float64 `json:"claim_share"`
}

// runServers measures each strategy at each worker count on pools over
// each number of servers in --servers, every pool on servers of its own;
// or, given --dsn once per server, on a pool over those servers.
func (o *benchOptions) runServers(ctx context.Context, g *globals) error {
	var rows []serversBenchRow
	if len(g.servers) > 0 {
		for _, dsn := range g.servers {
			if _, err := g.migrate(ctx, dsn, "--dsn", migrations.Options{Partitions: o.partitions}); err != nil {
				return fmt.Errorf("%s: %w", serverAddr(dsn), err)
			}
		}
		r, err := o.measureOn(ctx, g, g.servers, "--dsn")
		rows = append(rows, r...)
		if err != nil {
			return err
		}
	}
	for _, n := range o.serverCounts {
		r, err := o.measureServers(ctx, g, n)
		rows = append(rows, r...)
		if err != nil {
			return err
		}
	}
	if err := g.emit(rows, func(w io.Writer) error { return printServersBench(w, rows) }); err != nil {
		return err
	}
	for _, r := range rows {
		if r.Invalid != "" {
			return fmt.Errorf("no figure for %s at %d workers on %d servers: %s", r.Strategy, r.Workers, r.Servers, r.Invalid)
		}
	}
	return nil
}

func (o *benchOptions) measureServers(ctx context.Context, g *globals, n int) ([]serversBenchRow, error) {
	srvs, err := startServers(ctx, g, n, o.partitions, nil)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, s := range srvs {
			_ = s.Stop()
		}
	}()
	dsns := make([]string, len(srvs))
	for i, s := range srvs {
		dsns[i] = s.DSN()
	}
	return o.measureOn(ctx, g, dsns, "--servers")
}

// measureOn measures each strategy at each worker count on a pool over the
// servers dsns name, in --schema (a pooltop_ scratch schema, migrated on
// each): marked as one new pool, emptied and seeded for each run.
func (o *benchOptions) measureOn(ctx context.Context, g *globals, dsns []string, from string) ([]serversBenchRow, error) {
	n := len(dsns)
	maxConns := int32(min(slices.Max(o.counts), o.maxConns))
	var targets []engine.Target
	var samplers []*servercost.Sampler
	for _, dsn := range dsns {
		pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: dsn, From: from, Schema: g.schema, AppName: "pooltop-bench", MaxConns: maxConns, RTT: o.rtt})
		if err != nil {
			return nil, err
		}
		defer pool.Close()
		sm, err := servercost.Open(ctx, dsn, false)
		if err != nil {
			return nil, err
		}
		defer sm.Close()
		targets, samplers = append(targets, engine.Target{Addr: serverAddr(dsn), Eng: engine.New(pool)}), append(samplers, sm)
	}
	servers, err := engine.MarkNew(ctx, targets)
	if err != nil {
		return nil, err
	}
	// A scratch schema of your servers may hold a pool of an earlier run.
	if err := servers.ResetPool(ctx, ""); err != nil {
		return nil, err
	}
	if _, err := servers.Seed(ctx, o.poolSize); err != nil {
		return nil, err
	}
	var rows []serversBenchRow
	peak := 0.0 // the fastest claims so far, ids/s: the next run's pool is sized for it
	for _, workers := range o.counts {
		for _, m := range o.modes {
			// The free ids a run starts with: enough for the warm-up and the
			// window at the fastest rate seen, since topping up while the
			// workers run (the seed on several servers is slower than a
			// batched claim) loses the race. A run that still runs dry is
			// run again once on three times the pool.
			want := max(int64(o.poolSize), int64(peak*(o.warmup+o.duration+2*time.Second).Seconds()*1.5))
			row, err := o.serversRun(ctx, servers, samplers, m, workers, want)
			if err == nil && row.EmptyPool > 0 {
				fmt.Fprintf(g.stderr, "bench: %d server(s) %-12s %3d workers  ran dry; again on a larger pool\n", n, m.Name, workers)
				row, err = o.serversRun(ctx, servers, samplers, m, workers, min(3*want, engine.MaxSeed))
			}
			if err != nil {
				return rows, err
			}
			peak = max(peak, row.AcquiresPerS)
			row.Servers = n
			if row.Invalid != "" {
				fmt.Fprintf(g.stderr, "bench: %d server(s) %-12s %3d workers  invalid: %s\n", n, m.Name, workers, row.Invalid)
			} else {
				fmt.Fprintf(g.stderr, "bench: %d server(s) %-12s %3d workers  %9.0f cycles/s  server CPU %s cores\n",
					n, m.Name, workers, row.CyclesPerS, cores(row.ServerCPU))
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// serversRun is one run: the pool topped up after the warm-up so that the
// window cannot empty it, each server's CPU and claims read at the edges.
func (o *benchOptions) serversRun(ctx context.Context, s *engine.Servers, samplers []*servercost.Sampler,
	m workload.BenchMode, workers int, want int64) (serversBenchRow, error) {
	row := serversBenchRow{}
	// Every run starts with at least want free ids: the runs before it
	// consumed some.
	var free int64
	for _, m := range s.Members() {
		n, err := m.Eng.CountStatus(ctx, engine.StatusUnused)
		if err != nil {
			return row, err
		}
		free += n
	}
	if short := want - free; short > 0 {
		if _, err := s.Refill(ctx, int(short)); err != nil {
			return row, err
		}
	}
	before := make([]servercost.Sample, len(samplers))
	var claimed0 []int64
	var t0 time.Time
	var self0 time.Duration
	w := workload.BenchWindow{
		AfterWarmup: func(ctx context.Context, rate float64, dry bool) error {
			need := int(rate*(o.duration.Seconds()+1)*1.5) + 10_000
			if dry {
				need = max(need, 4*o.poolSize)
			}
			_, err := s.Refill(ctx, min(need, engine.MaxSeed))
			return err
		},
		Begin: func(ctx context.Context) error {
			for i, sm := range samplers {
				x, err := sm.Take(ctx)
				if err != nil {
					return err
				}
				before[i] = x
			}
			claimed0 = claimedOn(ctx, s)
			t0, self0 = time.Now(), servercost.SelfCPU()
			return nil
		},
		End: func(ctx context.Context) error {
			el := time.Since(t0).Seconds()
			row.ClientCPU = (servercost.SelfCPU() - self0).Seconds() / el
			for i, sm := range samplers {
				x, err := sm.Take(ctx)
				if err != nil {
					return err
				}
				row.ServerCPU = append(row.ServerCPU, (x.ServerCPU-before[i].ServerCPU).Seconds()/el)
			}
			claimed1 := claimedOn(ctx, s)
			var total int64
			for i := range claimed1 {
				total += claimed1[i] - claimed0[i]
			}
			for i := range claimed1 {
				row.Share = append(row.Share, float64(claimed1[i]-claimed0[i])/float64(max(total, 1)))
			}
			return nil
		},
	}
	r, err := workload.BenchRun(ctx, s, m, workers, o.warmup, o.duration, w)
	switch {
	case err == nil && r.EmptyPool > 0:
		r.Invalid = fmt.Sprintf("the pool ran dry %d times in the window: run again with a larger --pool-size", r.EmptyPool)
	case err == nil && r.CyclesPerS == 0:
		r.Invalid = "no cycle completed in the window: each claim took longer than the window (a machine too busy, or claims scanning dead index entries: see the servers' dead tuples)"
	}
	row.BenchResult = r
	return row, err
}

// claimedOn reads how many ids each server has handed out (not UNUSED): a
// window's difference is the ids it claimed there.
func claimedOn(ctx context.Context, s *engine.Servers) []int64 {
	var out []int64
	for _, m := range s.Members() {
		var n int64
		p, _ := m.Eng.CountStatus(ctx, engine.StatusPending)
		c, _ := m.Eng.CountStatus(ctx, engine.StatusConsumed)
		n = p + c
		out = append(out, n)
	}
	return out
}

func cores(v []float64) string {
	var parts []string
	for _, c := range v {
		parts = append(parts, fmt.Sprintf("%.2f", c))
	}
	return strings.Join(parts, " + ")
}

func printServersBench(w io.Writer, rows []serversBenchRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVERS\tSTRATEGY\tWORKERS\tCYCLES/S\tPER SERVER\tP50 MS\tP99 MS\tSERVER CPU (CORES)\tPOOLTOP CPU\tCLAIM SHARE\tERRORS")
	for _, r := range rows {
		if r.Invalid != "" {
			fmt.Fprintf(tw, "%d\t%s\t%d\tinvalid: %s\n", r.Servers, r.Strategy, r.Workers, r.Invalid)
			continue
		}
		var share []string
		for _, s := range r.Share {
			share = append(share, fmt.Sprintf("%.0f%%", 100*s))
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%s\t%.2f\t%s\t%d\n", r.Servers, r.Strategy, r.Workers, r.CyclesPerS,
			r.CyclesPerS/float64(r.Servers), r.P50MS, r.P99MS, cores(r.ServerCPU), r.ClientCPU, strings.Join(share, " "), r.Errors)
	}
	return tw.Flush()
}
