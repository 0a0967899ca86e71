package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/demo"
	"github.com/pooltop-dev/pooltop/workload"
)

// runCitus runs the demo on a throwaway Citus cluster: a coordinator and
// two workers on loopback, the pool migrated on the coordinator (32
// shards), the workload and its reaper through the coordinator, and the
// dashboard with a row per node. The key S stops the first worker hard and
// starts it again.
func (o *demoOptions) runCitus(ctx context.Context, g *globals, metrics *metricsServer) error {
	cfg := o.cfg
	start := time.Now()
	cluster, err := startCitus(ctx, g, nil)
	if err != nil {
		return err
	}
	defer func() { _ = cluster.Stop() }()
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: cluster.DSN(), From: "--citus", Schema: g.schema, AppName: "pooltop-workload", MaxConns: int32(o.maxConns)})
	if err != nil {
		return err
	}
	defer pool.Close()
	eng := engine.New(pool)
	// The lease calls go to the node of each shard: on loopback every node
	// is reachable, and the coordinator's hop costs half the claim's time.
	defer eng.RouteToNodes(engine.ConnOptions{DSN: cluster.DSN(), From: "--citus", Schema: g.schema, AppName: "pooltop-workload", MaxConns: int32(o.maxConns)})()
	st := &demo.Stage{Pool: demo.OneServer(pool, eng), Size: o.poolSize, Rebuild: true, Citus: true}
	if err := st.Check(cfg); err != nil {
		return usageError{err}
	}
	size := st.PoolSize(o.sc)
	first := min(size, demoFirstSeed)
	if _, err := eng.Seed(ctx, first); err != nil {
		return err
	}
	fmt.Fprintf(g.stderr, "pooltop: cluster started and %d ids created in %.1fs; the other %d follow while the dashboard starts\n", first, time.Since(start).Seconds(), size-first)
	wl, err := workload.New(eng, cfg)
	if err != nil {
		return usageError{err}
	}
	col, err := collector.New(ctx, collector.Config{DSN: cluster.DSN(), Table: g.schema + ".resource_pool",
		Alerts: collector.AlertConfig{ExpiredAfter: cfg.ReaperInterval + cfg.ReaperGrace}, Workload: wl})
	if err != nil {
		return err
	}
	defer col.Close()
	defer wl.Stop()
	st.Workload, st.Collector = wl, col
	w := cluster.Workers[0]
	outage := &demo.Outage{Name: fmt.Sprintf("(Citus worker 127.0.0.1:%d)", w.Port()), Halt: w.Halt, Resume: w.Resume}
	show := demoShow{stage: st, col: col, metrics: metrics, rest: size - first,
		knobs:  demo.OutageStage{Stage: st, Outage: outage},
		server: fmt.Sprintf("Citus 127.0.0.1:%d + 2 workers", cluster.Coordinator.Port()),
		on:     "on a throwaway Citus cluster, DATABASE_URL=" + cluster.DSN()}
	return o.show(ctx, g, show)
}
