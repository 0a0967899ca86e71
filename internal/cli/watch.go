package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/demo"
	"github.com/pooltop-dev/pooltop/tui"
)

// watchOptions are the flags of pooltop watch, and the collector's
// configuration validate makes of them.
type watchOptions struct {
	table    string
	headless bool
	count    int
	interval time.Duration
	stuck    time.Duration
	alerts   collector.AlertConfig
	// actions: the dashboard may cancel or terminate sessions and release
	// a holder's expired leases (each confirmed first).
	actions bool
	sink    sinkOptions // --listen, --record

	cfg collector.Config // the collector's, made by validate
}

func (o *watchOptions) addFlags(c *cobra.Command, g *globals) {
	f := c.Flags()
	f.StringVar(&o.table, "table", "", "the pool table as schema.table (default: --schema's resource_pool)")
	if c.Name() == "watch" {
		f.BoolVar(&o.actions, "allow-actions", false, "let the dashboard cancel or terminate a blocking session (x, X) and release a holder's expired leases, each after a y: the one session of watch that writes")
	}
	f.BoolVar(&o.headless, "headless", false, "print one snapshot per poll instead of the dashboard")
	f.IntVar(&o.count, "count", 0, "with --headless: stop after this many polls (0: until Ctrl-C)")
	f.DurationVar(&o.interval, "interval", time.Second, "time between polls (0.25s to 60s)")
	f.DurationVar(&o.stuck, "stuck", 5*time.Minute, "PENDING rows unchanged for longer count as stuck")
	addAlertFlags(f, &o.alerts)
	g.jsonFlag(c, "with --headless: one JSON object per line")
	o.sink.addFlags(c)
}

func (o *watchOptions) config(g *globals, dsn string) (collector.Config, error) {
	table, err := tableFlag(g, o.table)
	if err != nil {
		return collector.Config{}, err
	}
	if err := o.checkCount(); err != nil {
		return collector.Config{}, err
	}
	if err := checkInterval(o.interval); err != nil {
		return collector.Config{}, err
	}
	if o.count < 0 {
		return collector.Config{}, usageError{fmt.Errorf("--count %d: must not be negative", o.count)}
	}
	if err := o.checkAlerts(); err != nil {
		return collector.Config{}, err
	}
	return collector.Config{DSN: dsn, From: g.dsnFrom(), Table: table, StuckAfter: o.stuck, Alerts: o.alerts}, nil
}

// checkAlerts validates the alert thresholds and --stuck by name.
func (o *watchOptions) checkAlerts() error {
	if o.stuck <= 0 {
		return usageError{fmt.Errorf("--stuck %v: give a positive duration (e.g. 50ms, 15m)", o.stuck)}
	}
	return checkAlertConfig(o.alerts)
}

// tableFlag is the pool table a --table flag names: schema.table, or the
// --schema's resource_pool when not given.
func tableFlag(g *globals, table string) (string, error) {
	if table == "" {
		table = g.schema + ".resource_pool"
	}
	if _, _, err := collector.ParseTable(table); err != nil {
		return "", usageError{fmt.Errorf("--table: %w", err)}
	}
	return table, nil
}

// checkCount refuses --count where it would mean nothing: the dashboard
// runs until q, so a count needs --headless (or output that is not a
// terminal, which is headless anyway).
func (o *watchOptions) checkCount() error {
	if o.count != 0 && !o.headless && isTerminal() {
		return usageError{fmt.Errorf("--count %d goes with --headless: the dashboard runs until q", o.count)}
	}
	return nil
}

// checkInterval validates a --interval flag.
func checkInterval(d time.Duration) error {
	if d < collector.MinInterval || d > collector.MaxInterval {
		return usageError{fmt.Errorf("--interval %v: between %v and %v", d, collector.MinInterval, collector.MaxInterval)}
	}
	return nil
}

func newWatchCmd(g *globals) *cobra.Command {
	return onServers(g.command(&watchOptions{}, &cobra.Command{
		Use:   "watch",
		Short: "Watch an existing pool, read-only (dashboard, or --headless snapshots)",
		Long: `Watch an existing pool without writing anything: counts by status, lock
waits and who blocks whom, dead tuples and vacuum, burn rate and depletion
ETA, alerts. Works with a role that has only SELECT on the table and
pg_monitor (without pg_monitor it says what it cannot see), and on a table
with only the basic columns (id, identifier, status, leased_until,
lease_token, updated_at). Sessions are read-only (application_name
pooltop-collector).

A pool of at most 10,000 rows is counted whole at every poll: its figures
are exact. On a larger pool, figures listed under "estimated" (~ on the
dashboard) come from statistics or a rolling recount spread over several
polls instead of one exact count: an exact count of a ten-million-row pool
takes seconds and slows the workers.

  pooltop watch --dsn postgres://… --table public.resource_pool
  pooltop watch --dsn … --headless --json --count 10 --interval 1s
  pooltop watch --dsn … --listen 9187          # Prometheus at 127.0.0.1:9187/metrics
  pooltop watch --dsn … --record pool.ndjson   # then: pooltop replay pool.ndjson

Given --dsn once per server (or --dsn-file), watch polls them all at once:
the dashboard shows the sums with a row per server, --headless prints the
sums and a line per server (--json: the sums as the snapshot's fields, each
server's own snapshot under "servers"), alerts name their server, a server
that does not answer is shown as such and tried again every 5 s while the
others go on, --listen labels each server's metrics with server="s1"…, and
--record records it all for replay. The servers may be one pool's or
separate pools (different databases or tables).`,
	}))
}

func (o *watchOptions) validate(g *globals) error {
	if len(g.servers) > 0 {
		return o.validateServers(g)
	}
	if g.wantsEmbedded() {
		return usageError{errors.New("watch needs a database to watch: pass --dsn (or set DATABASE_URL or PGHOST); run pooltop with no command for the demo")}
	}
	cfg, err := o.config(g, g.resolvedDSN())
	o.cfg = cfg
	if err == nil {
		err = o.sink.validate()
	}
	if err == nil && o.actions && o.headless {
		return usageError{errors.New("--allow-actions is for the dashboard: drop --headless, or drop --allow-actions")}
	}
	if err == nil && o.actions && g.dsn == "" {
		// Actions write (cancel, terminate, release): never on a database
		// picked up from the environment, which is often production.
		return usageError{errors.New("--allow-actions cancels, terminates and releases: name the database with --dsn (it is not taken from DATABASE_URL or PG* for that)")}
	}
	return err
}

func (o *watchOptions) run(ctx context.Context, g *globals) error {
	metrics, err := o.sink.serveMetrics(g)
	if err != nil {
		return err
	}
	defer metrics.close()
	var col tui.Source
	if len(g.servers) > 0 {
		several := o.watchServers(g)
		defer several.Close()
		if err := several.Open(ctx); err != nil {
			return err
		}
		col = several
	} else {
		one, err := collector.New(ctx, o.cfg)
		if err != nil {
			return err
		}
		defer one.Close()
		col = one
	}
	src, err := o.sink.tap(g, col, metrics, "watch", o.interval)
	if err != nil {
		return err
	}
	defer src.close()
	if o.headless || !isTerminal() {
		return runHeadless(ctx, g, src, o)
	}
	opts := tui.Options{Source: src.source(), Mode: "watch", Interval: o.interval, Color: useColor(), Report: o.sink.report()}
	if o.actions {
		a, err := demo.WatchActor(ctx, o.cfg, g.dsnFrom(), col.(*collector.Collector))
		if err != nil {
			return err
		}
		defer a.DB.Close()
		opts.Actions = a
	}
	return tui.Run(ctx, opts)
}

// runHeadless polls every interval and prints one line per poll.
func runHeadless(ctx context.Context, g *globals, col poller, o *watchOptions) error {
	tick := time.NewTicker(o.interval)
	defer tick.Stop()
	var lastErr error
	for n := 0; o.count == 0 || n < o.count; n++ {
		if n > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
		}
		pctx, cancel := context.WithTimeout(ctx, o.interval+5*time.Second)
		s, err := col.Poll(pctx)
		cancel()
		if errors.Is(err, context.Canceled) && ctx.Err() != nil {
			return nil
		}
		lastErr = err
		if err != nil {
			fmt.Fprintf(g.stderr, "pooltop: poll failed (retrying): %s\n", oneLine(g.redact(err.Error())))
			continue
		}
		if err := printSnapshot(g, s); err != nil {
			return err
		}
	}
	if lastErr != nil {
		return fmt.Errorf("last poll failed: %w", lastErr)
	}
	return nil
}

// printSnapshot prints one poll's snapshot: a line of JSON with --json,
// else its text line, and over several servers a line per server.
func printSnapshot(g *globals, s collector.Snapshot) error {
	if !g.jsonOut {
		_, err := fmt.Fprintln(g.stdout, snapshotText(g, s))
		return err
	}
	line, err := snapshotJSON(g, s)
	if err == nil {
		_, err = g.stdout.Write(line)
	}
	return err
}

// snapshotText is a snapshot's text: its line, and over several servers a
// line per server after it.
func snapshotText(g *globals, s collector.Snapshot) string {
	if len(s.Servers) == 0 {
		return snapshotLine(s)
	}
	return strings.Join(append([]string{snapshotLine(s)}, serverRows(redacted(g, s))...), "\n")
}

// snapshotLine is the text form of a snapshot: one line for a terminal or a log.
func snapshotLine(s collector.Snapshot) string {
	est := ""
	if len(s.Pool.Estimated) > 0 {
		est = " (~" + strings.Join(s.Pool.Estimated, ",~") + ")"
	}
	eta := "-"
	if s.DepletionETAS != nil {
		eta = (time.Duration(*s.DepletionETAS) * time.Second).String()
	}
	var alerts []string
	for _, a := range s.Alerts {
		if a.Active {
			alerts = append(alerts, a.Name)
		}
	}
	line := fmt.Sprintf("%s unused %d pending %d expired %d consumed %d%s | lock waiters %d max %.0fms | dead %d (%.1f%%) | burn %.1f/s eta %s | poll %.1fms",
		s.Time.Format("15:04:05"), s.Pool.Unused, s.Pool.Pending, s.Pool.Expired, s.Pool.Consumed, est,
		s.LockWaiters, s.LockWaitMaxMS, s.DeadTuples, 100*s.DeadRatio, s.BurnPerS, eta, s.PollMS)
	if len(s.Fleet) > 0 {
		n := map[string]int{}
		for _, p := range s.Fleet {
			n[p.State]++
		}
		line += fmt.Sprintf(" | fleet %d alive %d gone %d stopped", n[collector.ProcessAlive], n[collector.ProcessGone], n[collector.ProcessStopped])
	}
	if len(alerts) > 0 {
		line += " | ALERT " + strings.Join(alerts, ",")
	}
	return line
}
