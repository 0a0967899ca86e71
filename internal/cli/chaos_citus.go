package cli

import (
	"context"
	"fmt"

	"github.com/pooltop-dev/pooltop/engine"
)

// runCitus runs the scenario on a throwaway Citus cluster: a coordinator
// and two workers, the pool migrated on the coordinator and seeded with
// --pool-size ids, the workload and its reaper through the coordinator,
// then the audit of every shard.
func (o *chaosOptions) runCitus(ctx context.Context, g *globals) error {
	// A node stopped hard must lose nothing acknowledged: commits wait for their WAL.
	cluster, err := startCitus(ctx, g, map[string]string{"synchronous_commit": "on"})
	if err != nil {
		return err
	}
	defer func() { _ = cluster.Stop() }()
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: cluster.DSN(), From: "--citus", Schema: g.schema, AppName: "pooltop-chaos", MaxConns: 16})
	if err != nil {
		return err
	}
	defer pool.Close()
	eng := engine.New(pool)
	defer eng.RouteToNodes(engine.ConnOptions{DSN: cluster.DSN(), From: "--citus", Schema: g.schema, AppName: "pooltop-chaos", MaxConns: 16})()
	if _, err := eng.Seed(ctx, o.poolSize); err != nil {
		return err
	}
	return o.chaosOn(ctx, g, eng, fmt.Sprintf(" on a throwaway Citus cluster (coordinator 127.0.0.1:%d, 2 workers)", cluster.Coordinator.Port()))
}
