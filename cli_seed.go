package main

import (
	"fmt"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/spf13/cobra"
)

func newSeedCmd(g *globals) *cobra.Command {
	var count int
	cmd := &cobra.Command{
		Use:   "seed",
		Short: "Add --count free ids to the pool",
		Long: `Add --count UNUSED ids to the pool, as a producer decoupled from the
consumers would, then ANALYZE the table. Identifiers are res-NNNNNNNNNN past
the highest id, so seeding again adds more.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if count <= 0 || count > engine.MaxSeed {
				return usageError{fmt.Errorf("--count %d: give between 1 and %d", count, engine.MaxSeed)}
			}
			d, err := g.open(ctx, openOptions{appName: "pooltop-seed", write: true})
			if err != nil {
				return err
			}
			defer d.Close()
			start := time.Now()
			n, err := d.eng.Seed(ctx, count)
			if err != nil {
				return err
			}
			el := time.Since(start)
			if g.jsonOut {
				return writeJSON(g.stdout, map[string]any{"inserted": n, "seconds": el.Seconds()})
			}
			fmt.Fprintf(g.stdout, "seeded %d ids in %.2fs (%.0f ids/s)\n", n, el.Seconds(), float64(n)/el.Seconds())
			return nil
		},
	}
	cmd.Flags().IntVar(&count, "count", 0, "how many ids to add (required)")
	cmd.Flags().BoolVar(&g.jsonOut, "json", false, "print JSON")
	cmd.Flags().BoolVar(&g.allowWrites, "allow-writes", false, "write even if the database lacks the pooltop marker")
	return cmd
}
