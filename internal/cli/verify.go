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

Given --dsn more than once (or --dsn-file) it audits each of those pools
alone, a line each: several pools, each on its server.`,
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

// poolAudit is one pool's audit in a verify of several.
type poolAudit struct {
	Server string              `json:"server"` // its place in the list: #1, #2 …
	Addr   string              `json:"addr"`   // user@host:port/database, never a password
	Error  string              `json:"error,omitempty"`
	Report *engine.AuditReport `json:"report,omitempty"`
}

func (o *verifyOptions) run(ctx context.Context, g *globals) error {
	if len(g.servers) > 0 {
		return o.runPools(ctx, g)
	}
	d, err := g.open(ctx, openOptions{appName: "pooltop-verify", maxConns: 2, wholePool: true})
	if err != nil {
		return err
	}
	defer d.Close()
	a, err := d.eng.Audit(ctx, o.grace)
	if err != nil {
		return err
	}
	err = g.emit(&a, func(w io.Writer) error {
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

// runPools audits each pool that --dsn names, alone: several pools, each
// on its server. A pool that does not answer is said in its line and
// fails the run; a violation in any fails it too (exit 6).
func (o *verifyOptions) runPools(ctx context.Context, g *globals) error {
	var out []poolAudit
	violated, unanswered := 0, 0
	for i, dsn := range g.servers {
		p := poolAudit{Server: fmt.Sprintf("#%d", i+1), Addr: serverAddr(dsn)}
		pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: dsn, From: "--dsn", Schema: g.schema, AppName: "pooltop-verify", MaxConns: 2})
		if err == nil {
			var a engine.AuditReport
			if err = engine.New(pool).CheckSchema(ctx, false); err == nil {
				a, err = engine.New(pool).Audit(ctx, o.grace)
			}
			pool.Close()
			if err == nil {
				p.Report = &a
				if len(a.Violations) > 0 {
					violated++
				}
			}
		}
		if err != nil {
			p.Error = g.redact(err.Error())
			unanswered++
		}
		out = append(out, p)
	}
	err := g.emit(map[string]any{"pools": out}, func(w io.Writer) error {
		for _, p := range out {
			if p.Report == nil {
				fmt.Fprintf(w, "%s %s: not audited: %s\n", p.Server, p.Addr, p.Error)
				continue
			}
			a := p.Report
			fmt.Fprintf(w, "%s %s: %d ids: %d UNUSED, %d PENDING, %d CONSUMED; %d effects\n", p.Server, p.Addr, a.Total, a.Unused, a.Pending, a.Consumed, a.Effects)
			for _, v := range a.Violations {
				fmt.Fprintf(w, "%s VIOLATION: %s\n", p.Server, v)
			}
		}
		if violated == 0 && unanswered == 0 {
			fmt.Fprintf(w, "ok: every invariant holds in each of the %d pools\n", len(out))
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case violated > 0:
		return violationError{fmt.Errorf("verify: invariants violated in %d of %d pools", violated, len(out))}
	case unanswered > 0:
		return fmt.Errorf("verify: %d of %d pools not audited (see their lines)", unanswered, len(out))
	}
	return nil
}
