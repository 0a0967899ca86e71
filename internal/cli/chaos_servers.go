package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/migrations"
	"github.com/pooltop-dev/pooltop/workload"
)

// startServers starts n throwaway servers at once, migrates each and marks
// them as the servers of one pool. The caller stops them.
func startServers(ctx context.Context, g *globals, n, partitions int, settings map[string]string) ([]*pgembed.Server, error) {
	srvs := make([]*pgembed.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range srvs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			srvs[i], errs[i] = pgembed.Start(ctx, pgembed.Options{Settings: settings})
		}()
	}
	wg.Wait()
	stop := func() {
		for _, s := range srvs {
			if s != nil {
				_ = s.Stop()
			}
		}
	}
	for _, err := range errs {
		if err != nil {
			stop()
			return nil, fmt.Errorf("start %d throwaway servers: %w", n, err)
		}
	}
	var ports []string
	for _, s := range srvs {
		cc, err := pgx.ParseConfig(s.DSN())
		if err == nil {
			_, err = migrations.Apply(ctx, cc, g.schema, migrations.Options{Partitions: partitions})
		}
		if err != nil {
			stop()
			return nil, fmt.Errorf("migrate a throwaway server: %w", err)
		}
		ports = append(ports, fmt.Sprint(s.Port()))
	}
	fmt.Fprintf(g.stderr, "pooltop: started %d throwaway PostgreSQL servers on 127.0.0.1 ports %s (removed on exit)\n", n, strings.Join(ports, ", "))
	return srvs, nil
}

// runServers runs the scenario over a pool on o.servers throwaway servers
// and stops the last one hard for the middle third of the run; or, given
// --dsn once per server, over a pool on those servers, in the scratch
// schema on each, stopping none.
func (o *chaosOptions) runServers(ctx context.Context, g *globals) error {
	dsns, from := g.servers, "--dsn"
	stop := workload.ServerStop{Stopped: -1, Scenario: o.sc, Duration: o.duration, Seed: o.seed, Override: o.override,
		Progress: func(line string) { fmt.Fprintf(g.stderr, "  %s\n", line) }}
	if o.servers > 0 {
		// A server stopped hard must lose nothing acknowledged: commits wait for their WAL.
		srvs, err := startServers(ctx, g, o.servers, o.partitions, map[string]string{"synchronous_commit": "on"})
		if err != nil {
			return err
		}
		defer func() {
			for _, s := range srvs {
				_ = s.Stop()
			}
		}()
		dsns, from = nil, "--servers"
		for _, s := range srvs {
			dsns = append(dsns, s.DSN())
		}
		last := len(srvs) - 1
		stop.Stopped, stop.Halt, stop.Resume = last, srvs[last].Halt, srvs[last].Resume
	} else {
		for _, dsn := range dsns {
			if _, err := g.migrate(ctx, dsn, "--dsn", migrations.Options{Partitions: o.partitions}); err != nil {
				return fmt.Errorf("%s: %w", serverAddr(dsn), err)
			}
		}
	}
	var targets []engine.Target
	for _, dsn := range dsns {
		pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: dsn, From: from, Schema: g.schema, AppName: "pooltop-chaos", MaxConns: 16})
		if err != nil {
			return err
		}
		defer pool.Close()
		targets = append(targets, engine.Target{Addr: serverAddr(dsn), Eng: engine.New(pool)})
	}
	servers, err := engine.MarkNew(ctx, targets)
	if err != nil {
		return err
	}
	// A scratch schema of your servers may hold a pool of an earlier run.
	if err := servers.ResetPool(ctx, ""); err != nil {
		return err
	}
	if _, err := servers.Seed(ctx, o.poolSize); err != nil {
		return err
	}
	stop.Servers = servers
	if stop.Halt != nil {
		fmt.Fprintf(g.stderr, "chaos: %s for %v on %d ids over %d servers; server %s stopped hard from %v to %v\n",
			o.sc.Name, o.duration, o.poolSize, len(dsns), engine.ServerName(stop.Stopped+1), (o.duration / 3).Round(time.Millisecond), (2 * o.duration / 3).Round(time.Millisecond))
	} else {
		fmt.Fprintf(g.stderr, "chaos: %s for %v on %d ids over %d servers of yours (schema %s on each); none is stopped\n",
			o.sc.Name, o.duration, o.poolSize, len(dsns), g.schema)
	}
	sum, err := stop.Run(ctx)
	if err != nil {
		return err
	}
	if err := g.emit(sum, func(w io.Writer) error { return printServerStop(w, sum) }); err != nil {
		return err
	}
	if len(sum.Violations) > 0 {
		return violationError{fmt.Errorf("chaos %s over %d servers: %d invariant(s) violated: %s", o.sc.Name, len(sum.Servers), len(sum.Violations), strings.Join(sum.Violations, "; "))}
	}
	return nil
}

func printServerStop(w io.Writer, s workload.ServerStopSummary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "scenario\t%s (%.0fs)\n", s.Scenario, s.DurationS)
	fmt.Fprintf(tw, "cycles\t%d\ncommitted\t%d\nfenced rejections\t%d\ndouble finalizations\t%d\ncrashes\t%d\nlost ids\t%d\nreclaimed\t%d\nexpired pending\t%d\n",
		s.Cycles, s.Committed, s.FencedRejections, s.DoubleFinalizations, s.Crashes, s.LostIDs, s.Reclaimed, s.ExpiredPending)
	if s.StoppedServer != "" {
		fmt.Fprintf(tw, "server stopped\t%s, down %.1fs; %d ids committed on the others meanwhile\n", s.StoppedServer, s.DownS, s.CommittedWhileDown)
		if s.ReclaimedAfterS >= 0 {
			fmt.Fprintf(tw, "its leases back\t%.1fs after it came back\n", s.ReclaimedAfterS)
		}
	}
	_ = tw.Flush()
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SERVER\tADDR\tIDS\tCONSUMED\tWHILE ONE WAS DOWN")
	for _, f := range s.Servers {
		while := fmt.Sprint(f.ConsumedWhileDown)
		if f.Stopped {
			while = "(stopped)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", f.Server, f.Addr, f.Total, f.Consumed, while)
	}
	_ = tw.Flush()
	for _, v := range s.Violations {
		fmt.Fprintf(w, "VIOLATION: %s\n", v)
	}
	switch {
	case len(s.Violations) > 0:
	case s.StoppedServer != "":
		fmt.Fprintln(w, "ok: claims went on while a server was down, and every invariant holds on every server")
	default:
		fmt.Fprintln(w, "ok: every invariant holds on every server")
	}
	return nil
}
