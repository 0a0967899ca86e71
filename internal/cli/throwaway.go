package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/migrations"
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

// cores writes CPU figures in cores, one per server, joined by " + ".
func cores(v []float64) string {
	var parts []string
	for _, c := range v {
		parts = append(parts, fmt.Sprintf("%.2f", c))
	}
	return strings.Join(parts, " + ")
}

// startCitus starts a throwaway Citus cluster (a coordinator and two
// workers on loopback, with settings) and migrates g.schema on its
// coordinator. Where Citus is not installed it says in one line how to get
// it. The caller stops the cluster.
func startCitus(ctx context.Context, g *globals, settings map[string]string) (*pgembed.Cluster, error) {
	fmt.Fprintln(g.stderr, "pooltop: starting a throwaway Citus cluster: a coordinator and two workers")
	cluster, err := pgembed.StartCitus(ctx, pgembed.Options{Settings: settings}, 2)
	if errors.Is(err, pgembed.ErrNoCitus) {
		return nil, fmt.Errorf("--citus: %w: %s", err, pgembed.CitusAdvice)
	}
	if err != nil {
		return nil, fmt.Errorf("--citus: start the cluster: %w", err)
	}
	if _, err := g.migrate(ctx, cluster.DSN(), "--citus", migrations.Options{}); err != nil {
		_ = cluster.Stop()
		return nil, err
	}
	return cluster, nil
}
