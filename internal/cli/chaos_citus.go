package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/migrations"
)

// runCitus runs the scenario on a throwaway Citus cluster: a coordinator
// and two workers, the pool migrated on the coordinator and seeded with
// --pool-size ids, the workload and its reaper through the coordinator,
// then the audit of every shard.
func (o *chaosOptions) runCitus(ctx context.Context, g *globals) error {
	fmt.Fprintln(g.stderr, "chaos: starting a throwaway Citus cluster: a coordinator and two workers")
	// A node stopped hard must lose nothing acknowledged: commits wait for their WAL.
	cluster, err := pgembed.StartCitus(ctx, pgembed.Options{Settings: map[string]string{"synchronous_commit": "on"}}, 2)
	if errors.Is(err, pgembed.ErrNoCitus) {
		return fmt.Errorf("--citus: %w: %s", err, pgembed.CitusAdvice)
	}
	if err != nil {
		return fmt.Errorf("--citus: start the cluster: %w", err)
	}
	defer func() { _ = cluster.Stop() }()
	if _, err := g.migrate(ctx, cluster.DSN(), "--citus", migrations.Options{}); err != nil {
		return err
	}
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
