package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
)

// seedOptions are the flags of pooltop seed.
type seedOptions struct {
	count int
}

func newSeedCmd(g *globals) *cobra.Command {
	return g.command(&seedOptions{}, &cobra.Command{
		Use:   "seed",
		Short: "Add --count free ids to the pool",
		Long: `Add --count UNUSED ids to the pool, as a producer decoupled from the
consumers would, then ANALYZE the table. Each new row takes its id from the
pool's id sequence and is named after it (res-NNNNNNNNNN, at least 10 digits),
so seeding again adds more, and seeds running at once never make the same
identifier. A seed adds exactly --count ids or fails saying how many it added
and why.

On a pool over several servers (--dsn once per server), ids are numbered on
from the highest of any server and each is placed on the server a stable
hash of its identifier picks; every server must answer.`,
	})
}

func (o *seedOptions) addFlags(c *cobra.Command, g *globals) {
	c.Flags().IntVar(&o.count, "count", 0, "how many ids to add (required)")
	g.jsonFlag(c, "print JSON")
	g.allowWritesFlag(c, "write even if the database lacks the pooltop marker")
}

func (o *seedOptions) validate(*globals) error {
	if o.count <= 0 || o.count > engine.MaxSeed {
		return usageError{fmt.Errorf("--count %d: give between 1 and %d", o.count, engine.MaxSeed)}
	}
	return nil
}

func (o *seedOptions) run(ctx context.Context, g *globals) error {
	d, err := g.open(ctx, openOptions{appName: "pooltop-seed", write: true, wholePool: true})
	if err != nil {
		return err
	}
	defer d.Close()
	start := time.Now()
	n, err := d.eng.Seed(ctx, o.count)
	if err != nil {
		return err
	}
	el := time.Since(start)
	return g.emit(map[string]any{"inserted": n, "seconds": el.Seconds()}, func(w io.Writer) error {
		fmt.Fprintf(w, "seeded %d ids in %.2fs (%.0f ids/s)\n", n, el.Seconds(), float64(n)/el.Seconds())
		return nil
	})
}
