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
	return g.command(&doctorOptions{}, &cobra.Command{
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

  pooltop doctor --dsn postgres://… --table public.resource_pool`,
	})
}

func (o *doctorOptions) addFlags(c *cobra.Command, g *globals) {
	c.Flags().StringVar(&o.table, "table", "", "the pool table as schema.table (default: --schema's resource_pool)")
	c.Flags().DurationVar(&o.expired, "expired", 10*time.Second, "a lease expired longer ago than this means the reaper lags")
	g.jsonFlag(c, "print the checks as JSON")
}

func (o *doctorOptions) validate(g *globals) error {
	if g.wantsEmbedded() {
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

func (o *doctorOptions) run(ctx context.Context, g *globals) error {
	col, err := collector.New(ctx, o.cfg)
	if err != nil {
		return err
	}
	defer col.Close()
	snap, err := col.Poll(ctx) // dead tuples, the xmin holder, connections
	if err != nil {
		return err
	}
	checks, err := col.Doctor(ctx, snap)
	if err != nil {
		return err
	}
	var failed []string
	for _, c := range checks {
		if c.Status == collector.CheckFail {
			failed = append(failed, c.Check)
		}
	}
	err = g.emit(checks, func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, c := range checks {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", strings.ToUpper(c.Status), c.Check, termtext.Escape(c.Evidence))
			if c.Remedy != "" {
				fmt.Fprintf(tw, "\t\t→ %s\n", termtext.Escape(c.Remedy))
			}
		}
		return tw.Flush()
	})
	if err != nil {
		return err
	}
	if len(failed) > 0 {
		return violationError{fmt.Errorf("doctor: %d check(s) failed: %s", len(failed), strings.Join(failed, ", "))}
	}
	return nil
}
