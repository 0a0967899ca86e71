package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/demo"
	"github.com/pooltop-dev/pooltop/workload"
)

// validateServers checks the demo's flags over several servers: --servers
// N throwaway ones, or the --dsn of each server of a pool pooltop made.
func (o *demoOptions) validateServers(g *globals) error {
	switch {
	case o.citus && (o.servers != 0 || g.dsn != "" || len(g.servers) > 0):
		return usageError{errors.New("--citus starts a throwaway Citus cluster of its own: drop --servers and --dsn (on a cluster of yours: pooltop migrate and pooltop work on its coordinator, pooltop watch to see it)")}
	case o.citus && o.partitions > 0:
		return usageError{errors.New("--citus spreads the pool over 32 shards of its own: drop --partitions")}
	case o.servers != 0 && (o.servers < 2 || o.servers > 8):
		return usageError{fmt.Errorf("--servers %d: between 2 and 8", o.servers)}
	case o.servers != 0 && (g.dsn != "" || len(g.servers) > 0):
		return usageError{errors.New("--servers starts throwaway servers of its own: drop --dsn, or give the --dsn of each server of your pool without --servers")}
	case o.partitions > 0 && len(g.servers) > 0:
		return usageError{errors.New("--partitions makes a new pool: on a pool over your servers, partition it with pooltop migrate --partitions, then start the demo on it")}
	}
	return nil
}

// runServers runs the demo on a pool over several servers: --servers N
// throwaway ones, or the pool the --dsn list names. The workload claims
// over all of them with one reaper, and the dashboard shows the sums with
// a row per server. A scenario's fresh pool empties and seeds every server.
func (o *demoOptions) runServers(ctx context.Context, g *globals, metrics *metricsServer) error {
	cfg := o.cfg
	var dsns []string
	var servers *engine.Servers
	var outage *demo.Outage
	on := fmt.Sprintf("on %d servers", len(g.servers))
	header := ""
	if o.servers > 0 {
		srvs, err := startServers(ctx, g, o.servers, o.partitions, nil)
		if err != nil {
			return err
		}
		defer func() {
			for _, s := range srvs {
				_ = s.Stop()
			}
		}()
		var targets []engine.Target
		var ports []string
		for _, s := range srvs {
			pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: s.DSN(), From: "--servers", Schema: g.schema, AppName: "pooltop-workload", MaxConns: int32(o.maxConns)})
			if err != nil {
				return err
			}
			defer pool.Close()
			targets = append(targets, engine.Target{Addr: fmt.Sprintf("127.0.0.1:%d", s.Port()), Eng: engine.New(pool)})
			dsns, ports = append(dsns, s.DSN()), append(ports, fmt.Sprint(s.Port()))
		}
		if servers, err = engine.MarkNew(ctx, targets); err != nil {
			return err
		}
		last := srvs[len(srvs)-1]
		outage = &demo.Outage{Name: engine.ServerName(len(srvs)), Halt: last.Halt, Resume: last.Resume}
		header = fmt.Sprintf("%d throwaway servers 127.0.0.1:%s", o.servers, strings.Join(ports, ","))
		on = fmt.Sprintf("on %d throwaway servers (DATABASE_URL=%s …)", o.servers, dsns[0])
	} else {
		d, err := g.openServers(ctx, "pooltop-workload", int32(o.maxConns), true)
		if err != nil {
			return err
		}
		defer d.Close()
		servers, dsns = d.s, g.servers
	}

	existing, err := servers.Size(ctx)
	if err != nil {
		return err
	}
	st := &demo.Stage{Pool: demo.SeveralServers(servers), Size: o.poolSize, Rebuild: o.servers > 0 || !g.allowWrites}
	if err := st.Check(cfg); err != nil {
		return usageError{err}
	}
	rest := 0
	if existing == 0 {
		size := st.PoolSize(o.sc)
		first := min(size, demoFirstSeed)
		if _, err := servers.Seed(ctx, first); err != nil {
			return err
		}
		rest = size - first
	}
	wl, err := workload.New(servers, cfg)
	if err != nil {
		return usageError{err}
	}
	defer wl.Stop()
	alerts := collector.AlertConfig{ExpiredAfter: cfg.ReaperInterval + cfg.ReaperGrace}
	members := make([]collector.Member, len(dsns))
	for i, dsn := range dsns {
		members[i] = collector.Member{Addr: serverAddr(dsn), Open: func(ctx context.Context) (*collector.Collector, string, error) {
			col, err := collector.New(ctx, collector.Config{DSN: dsn, From: "--dsn", Table: g.schema + ".resource_pool", Alerts: alerts})
			if err != nil {
				return nil, "", err
			}
			return col, readMarkName(ctx, g, dsn), nil
		}}
	}
	col := collector.NewServers(members, collector.ServersConfig{Workload: wl})
	defer col.Close()
	if err := col.Open(ctx); err != nil {
		return err
	}
	st.Workload, st.Collector = wl, col
	show := demoShow{stage: st, col: col, metrics: metrics, rest: rest, server: header, on: on}
	if outage != nil {
		show.knobs = demo.OutageStage{Stage: st, Outage: outage}
	}
	return o.show(ctx, g, show)
}
