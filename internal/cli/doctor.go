package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/termtext"
)

// doctorOptions are the flags of pooltop doctor.
type doctorOptions struct {
	table   string
	expired time.Duration
	cfg     collector.Config
}

func newDoctorCmd(g *globals) *cobra.Command {
	return onServers(g.command(&doctorOptions{}, &cobra.Command{
		Use:   "doctor",
		Short: "Check a live pool against the production checklist; exit 6 if a check fails",
		Long: `Check a live pool, read-only, and print each finding with its evidence (a
figure from the database) and the remedy (the SQL or setting): the partial
index on UNUSED rows the claim needs and the one on PENDING rows the reaper
needs, PENDING rows without a lease (nothing will ever free them), leases
far longer than work takes, leases expired longer than --expired ago (the
reaper is down or too slow), autovacuum and dead tuples, the session holding
the xmin horizon back, connections near max_connections, claims that lock
without SKIP LOCKED and the claim's latency (where pg_stat_statements is
readable), and the fencing token and ledger. Works with SELECT on the table
and pg_monitor. Exit 0 unless a check fails (6).

  pooltop doctor --dsn postgres://… --table public.resource_pool

Given --dsn once per server (or --dsn-file), it checks each server in
turn and prints its findings under its name (--json: an object per server
with its checks); a server that cannot be checked is reported as such and
fails the run (exit 1) after the others are checked.`,
	}))
}

func (o *doctorOptions) addFlags(c *cobra.Command, g *globals) {
	c.Flags().StringVar(&o.table, "table", "", "the pool table as schema.table (default: --schema's resource_pool)")
	c.Flags().DurationVar(&o.expired, "expired", 10*time.Second, "a lease expired longer ago than this means the reaper lags")
	g.jsonFlag(c, "print the checks as JSON")
}

func (o *doctorOptions) validate(g *globals) error {
	if len(g.servers) == 0 && g.wantsEmbedded() {
		return usageError{errors.New("doctor needs a database to check: pass --dsn (or set DATABASE_URL or PGHOST)")}
	}
	table, err := tableFlag(g, o.table)
	if err != nil {
		return err
	}
	if o.expired <= 0 {
		return usageError{fmt.Errorf("--expired %v: give a positive duration (e.g. 10s)", o.expired)}
	}
	o.cfg = collector.Config{DSN: g.resolvedDSN(), From: g.dsnFrom(), Table: table, Alerts: collector.AlertConfig{ExpiredAfter: o.expired}}
	return nil
}

// check runs the doctor on one server: a poll (dead tuples, the xmin
// holder, connections), then its checks.
func check(ctx context.Context, cfg collector.Config) ([]collector.Check, error) {
	col, err := collector.New(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer col.Close()
	snap, err := col.Poll(ctx)
	if err != nil {
		return nil, err
	}
	return col.Doctor(ctx, snap)
}

// failedChecks names the checks that failed.
func failedChecks(checks []collector.Check) []string {
	var failed []string
	for _, c := range checks {
		if c.Status == collector.CheckFail {
			failed = append(failed, c.Check)
		}
	}
	return failed
}

// printChecks prints checks as a table, each remedy under its finding.
func printChecks(w io.Writer, checks []collector.Check) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range checks {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(c.Status), c.Check, termtext.Escape(c.Evidence))
		if c.Remedy != "" {
			fmt.Fprintf(tw, "\t\t→ %s\n", termtext.Escape(c.Remedy))
		}
	}
	return tw.Flush()
}

func (o *doctorOptions) run(ctx context.Context, g *globals) error {
	if len(g.servers) > 0 {
		return o.runServers(ctx, g)
	}
	checks, err := check(ctx, o.cfg)
	if err != nil {
		return err
	}
	if err := g.emit(checks, func(w io.Writer) error { return printChecks(w, checks) }); err != nil {
		return err
	}
	if failed := failedChecks(checks); len(failed) > 0 {
		return violationError{fmt.Errorf("doctor: %d check(s) failed: %s", len(failed), strings.Join(failed, ", "))}
	}
	return nil
}

// serverChecks are one server's findings, in doctor --json over several.
type serverChecks struct {
	Server    string            `json:"server"`
	Addr      string            `json:"addr"`
	Reachable bool              `json:"reachable"`
	Error     string            `json:"error,omitempty"`
	Checks    []collector.Check `json:"checks"`
}

// runServers checks each server in turn, named by its mark (else its
// place in the list), and fails if one does not answer or a check fails.
func (o *doctorOptions) runServers(ctx context.Context, g *globals) error {
	var all []serverChecks
	var failed, down []string
	for i, dsn := range g.servers {
		r := serverChecks{Server: markName(ctx, g, dsn, i), Addr: serverAddr(dsn), Checks: []collector.Check{}}
		cfg := o.cfg
		cfg.DSN = dsn
		checks, err := check(ctx, cfg)
		if err != nil {
			r.Error = oneLine(g.redact(err.Error()))
			down = append(down, r.Server)
		} else {
			r.Reachable, r.Checks = true, checks
			for _, f := range failedChecks(checks) {
				failed = append(failed, r.Server+":"+f)
			}
		}
		all = append(all, r)
	}
	err := g.emit(all, func(w io.Writer) error {
		for i, r := range all {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "== %s %s\n", r.Server, r.Addr)
			if !r.Reachable {
				fmt.Fprintf(w, "not checked: %s\n", termtext.Escape(r.Error))
				continue
			}
			if err := printChecks(w, r.Checks); err != nil {
				return err
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return err
	case len(down) > 0:
		return fmt.Errorf("doctor: %s could not be checked (see above): check it is up and the DSN is right, then run doctor again", strings.Join(down, ", "))
	case len(failed) > 0:
		return violationError{fmt.Errorf("doctor: %d check(s) failed: %s", len(failed), strings.Join(failed, ", "))}
	}
	return nil
}
