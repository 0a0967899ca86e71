package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
)

// verifyOptions are the flags of pooltop verify.
type verifyOptions struct {
	grace time.Duration
}

func newVerifyCmd(g *globals) *cobra.Command {
	return g.command(&verifyOptions{}, &cobra.Command{
		Use:   "verify",
		Short: "Audit a pooltop database's invariants; exit 6 on a violation",
		Long: `Audit any pooltop database: conservation (every id UNUSED, PENDING or
CONSUMED), at most one effect per id, no effect with a stale token, no
CONSUMED id without its effect, no PENDING id without a lease, and no lease
expired for longer than --grace (the reaper lags or is off). Reads only, but
scans both tables. Exit 0 when all hold, 6 on a violation.`,
	})
}

func (o *verifyOptions) addFlags(c *cobra.Command, g *globals) {
	c.Flags().DurationVar(&o.grace, "grace", 10*time.Second, "how long past expiry a lease may wait for the reaper")
	g.jsonFlag(c, "print JSON")
}

func (o *verifyOptions) validate(*globals) error {
	if o.grace < 0 {
		return usageError{fmt.Errorf("--grace %v: must not be negative", o.grace)}
	}
	return nil
}

func (o *verifyOptions) run(ctx context.Context, g *globals) error {
	d, err := g.open(ctx, openOptions{appName: "pooltop-verify", maxConns: 2})
	if err != nil {
		return err
	}
	defer d.Close()
	a, err := d.eng.Audit(ctx, o.grace)
	if err != nil {
		return err
	}
	err = g.emit(a, func(w io.Writer) error {
		fmt.Fprintf(w, "%d ids: %d UNUSED, %d PENDING, %d CONSUMED; %d effects\n", a.Total, a.Unused, a.Pending, a.Consumed, a.Effects)
		for _, v := range a.Violations {
			fmt.Fprintf(w, "VIOLATION: %s\n", v)
		}
		if len(a.Violations) == 0 {
			fmt.Fprintln(w, "ok: every invariant holds")
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(a.Violations) > 0 {
		return violationError{fmt.Errorf("verify: %d invariant(s) violated", len(a.Violations))}
	}
	return nil
}
