package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
)

// verifyOptions are the flags of pooltop verify.
type verifyOptions struct {
	grace time.Duration
}

func newVerifyCmd(g *globals) *cobra.Command {
	return onServers(g.command(&verifyOptions{}, &cobra.Command{
		Use:   "verify",
		Short: "Audit a pooltop database's invariants; exit 6 on a violation",
		Long: `Audit any pooltop database: conservation (every id UNUSED, PENDING or
CONSUMED), at most one effect per id, no effect with a stale token, no
CONSUMED id without its effect, no PENDING id without a lease, and no lease
expired for longer than --grace (the reaper lags or is off). Reads only, but
scans both tables. Exit 0 when all hold, 6 on a violation.

On a pool over several servers (--dsn once per server) it audits each
server and adds the figures up; every server must answer, and each
violation names its server.`,
	}))
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
	var a engine.AuditReport
	var result any = &a
	var per []engine.ServerAudit
	if len(g.servers) > 0 {
		d, err := g.openServers(ctx, "pooltop-verify", 2, false)
		if err != nil {
			return err
		}
		defer d.Close()
		if a, per, err = d.s.Audit(ctx, o.grace); err != nil {
			return err
		}
		result = struct {
			*engine.AuditReport
			Servers []engine.ServerAudit `json:"servers"`
		}{&a, per}
	} else {
		d, err := g.open(ctx, openOptions{appName: "pooltop-verify", maxConns: 2, wholePool: true})
		if err != nil {
			return err
		}
		defer d.Close()
		if a, err = d.eng.Audit(ctx, o.grace); err != nil {
			return err
		}
	}
	err := g.emit(result, func(w io.Writer) error {
		for _, p := range per {
			r := p.Report
			fmt.Fprintf(w, "server %s (%s): %d ids: %d UNUSED, %d PENDING, %d CONSUMED; %d effects\n", p.Server, p.Addr, r.Total, r.Unused, r.Pending, r.Consumed, r.Effects)
		}
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
