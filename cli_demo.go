package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
)

// demoOptions are the flags of the demo (pooltop with no command).
type demoOptions struct {
	poolSize int
	reaper   engine.ReaperConfig
}

func (o *demoOptions) addFlags(c *cobra.Command) {
	f := c.Flags()
	f.IntVar(&o.poolSize, "pool-size", 100_000, "ids to create when the pool is empty")
	f.DurationVar(&o.reaper.Interval, "reaper-interval", time.Second, "time between reaper passes")
	f.IntVar(&o.reaper.Batch, "reaper-batch", 1000, "rows per reaper statement")
	f.DurationVar(&o.reaper.Grace, "reaper-grace", 0, "reclaim only leases expired for longer than this")
}

// runDemo starts (or connects to) the database, creates the schema and a
// pool, runs the reaper and waits for Ctrl-C, reporting what the reaper does.
func runDemo(ctx context.Context, g *globals, o *demoOptions) error {
	if o.poolSize <= 0 || o.poolSize > engine.MaxSeed {
		return usageError{fmt.Errorf("--pool-size %d: give between 1 and %d", o.poolSize, engine.MaxSeed)}
	}
	d, err := g.open(ctx, openOptions{appName: "pooltop-demo", write: true, migrate: true})
	if err != nil {
		return err
	}
	defer d.Close()

	var existing int64
	if err := d.pool.QueryRow(ctx, "SELECT count(*) FROM resource_pool").Scan(&existing); err != nil {
		return fmt.Errorf("count the pool: %w", err)
	}
	if existing == 0 {
		start := time.Now()
		if _, err := d.eng.Seed(ctx, o.poolSize); err != nil {
			return err
		}
		fmt.Fprintf(g.stderr, "pooltop: created %d ids in %.2fs\n", o.poolSize, time.Since(start).Seconds())
		existing = int64(o.poolSize)
	}

	cfg := o.reaper
	cfg.OnReap = func(r engine.ReapResult) {
		fmt.Fprintf(g.stdout, "%s reaper reclaimed %d expired leases (longest %.0f ms past expiry)\n",
			time.Now().Format("15:04:05"), r.Reclaimed, float64(r.MaxLag)/float64(time.Millisecond))
	}
	reaper, err := d.eng.NewReaper(cfg)
	if err != nil {
		return usageError{err}
	}
	reaper.Start(ctx)
	defer reaper.Stop()

	var version string
	if err := d.pool.QueryRow(ctx, "SHOW server_version").Scan(&version); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	fmt.Fprintf(g.stdout, `pooltop demo: PostgreSQL %s, schema %s, %d ids, reaper every %v (batch %d, grace %v)
Drive the lease lifecycle from another terminal:
  export DATABASE_URL='%s'
  pooltop lease acquire --holder alice --ttl 30s
  pooltop lease transfer --id ID --token TOKEN --to bob
  pooltop lease commit --id ID --token TOKEN --request-id pay-1
  pooltop lease show --id ID
Press Ctrl-C to stop%s.
`, version, g.schema, existing, reaper.Config().Interval, reaper.Config().Batch, reaper.Config().Grace,
		g.redact(d.dsn), embeddedNote(d))
	<-ctx.Done()
	fmt.Fprintln(g.stdout, "\npooltop: stopping")
	return nil
}

func embeddedNote(d *database) string {
	if d.embedded != nil {
		return " (the embedded PostgreSQL and its files are removed)"
	}
	return ""
}
