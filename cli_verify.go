package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

func newVerifyCmd(g *globals) *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Audit a pooltop database's invariants; exit 6 on a violation",
		Long: `Audit any pooltop database: conservation (every id UNUSED, PENDING or
CONSUMED), at most one effect per id, no effect with a stale token, no
CONSUMED id without its effect, no PENDING id without a lease, and no lease
expired for longer than --grace (the reaper lags or is off). Reads only, but
scans both tables. Exit 0 when all hold, 6 on a violation.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if grace < 0 {
				return usageError{fmt.Errorf("--grace %v: must not be negative", grace)}
			}
			d, err := g.open(ctx, openOptions{appName: "pooltop-verify", maxConns: 2})
			if err != nil {
				return err
			}
			defer d.Close()
			a, err := d.eng.Audit(ctx, grace)
			if err != nil {
				return err
			}
			if g.jsonOut {
				if err := writeJSON(g.stdout, a); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(g.stdout, "%d ids: %d UNUSED, %d PENDING, %d CONSUMED; %d effects\n", a.Total, a.Unused, a.Pending, a.Consumed, a.Effects)
				for _, v := range a.Violations {
					fmt.Fprintf(g.stdout, "VIOLATION: %s\n", v)
				}
				if len(a.Violations) == 0 {
					fmt.Fprintln(g.stdout, "ok: every invariant holds")
				}
			}
			if len(a.Violations) > 0 {
				return violationError{fmt.Errorf("verify: %d invariant(s) violated", len(a.Violations))}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&grace, "grace", 10*time.Second, "how long past expiry a lease may wait for the reaper")
	cmd.Flags().BoolVar(&g.jsonOut, "json", false, "print JSON")
	return cmd
}
