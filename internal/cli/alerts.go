package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.yaml.in/yaml/v3"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/catalogue"
)

// alertsOptions are the flags of pooltop alerts.
type alertsOptions struct {
	alerts     collector.AlertConfig
	prometheus bool
	markdown   bool
	output     string   // write to this file instead of stdout
	names      []string // only these alerts (the text and JSON catalogue)
}

func newAlertsCmd(g *globals) *cobra.Command {
	return g.command(&alertsOptions{}, &cobra.Command{
		Use:   "alerts [NAME...]",
		Short: "Print the alert catalogue: meaning, thresholds, runbooks; or Prometheus rules",
		Long: `Print every alert pooltop raises: what it means, the figure and threshold
(with the flag that sets it), when it is raised and when it clears, its
severity (page or ticket) and its runbook. The dashboard, --json, the
metrics and docs/alerts.md take theirs from the same catalogue.

--prometheus prints an alerting rules file for pooltop's metrics with the
thresholds given (contrib/prometheus/pooltop-alerts.yml is its output with
the defaults), plus rules that need no dashboard: the scrape is down, the
poll fails or slows, an alert is active. Connects to nothing.`,
		Example: `  pooltop alerts
  pooltop alerts starvation lock_wait
  pooltop alerts --prometheus -o /etc/prometheus/rules/pooltop.yml
  pooltop alerts --json | jq '.[] | select(.severity == "page") | .name'
  pooltop alerts --prometheus --alert-lock-wait 200ms > /etc/prometheus/rules/pooltop.yml`,
	})
}

// addAlertFlags binds the alert thresholds, shared by watch, the demo and alerts.
func addAlertFlags(f *pflag.FlagSet, a *collector.AlertConfig) {
	f.DurationVar(&a.LockWait, "alert-lock-wait", 50*time.Millisecond, "alert when a session waits on a lock longer than this")
	f.DurationVar(&a.DepletionWithin, "alert-depletion", 15*time.Minute, "alert when UNUSED runs out sooner than this at the current burn")
	f.DurationVar(&a.ExpiredAfter, "alert-expired", time.Second, "alert when a lease expired longer ago than this is still PENDING (one reaper interval)")
	f.Float64Var(&a.DeadRatio, "alert-dead-ratio", 0.2, "alert when dead tuples exceed this fraction of the table")
	f.Float64Var(&a.Connections, "alert-connections", 0.9, "alert when connections exceed this fraction of max_connections")
	f.DurationVar(&a.Starvation, "alert-starvation", 10*time.Second, "alert when claims have passed over a free id, taking newer ones, this long (and by 100 claims or more)")
	f.IntVar(&a.LWLockWaiters, "alert-lwlock-waiters", 4, "alert when this many sessions on the pool wait on an LWLock (page latches), the mean of the last 5 polls, for a minute")
}

// checkAlertConfig validates the thresholds by flag: a zero would silently
// mean the default, and NaN would never fire.
func checkAlertConfig(a collector.AlertConfig) error {
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--alert-lock-wait", a.LockWait}, {"--alert-depletion", a.DepletionWithin}, {"--alert-expired", a.ExpiredAfter}, {"--alert-starvation", a.Starvation}} {
		if d.v <= 0 {
			return usageError{fmt.Errorf("%s %v: give a positive duration (e.g. 50ms, 15m)", d.flag, d.v)}
		}
	}
	for _, r := range []struct {
		flag string
		v    float64
	}{{"--alert-dead-ratio", a.DeadRatio}, {"--alert-connections", a.Connections}} {
		if math.IsNaN(r.v) || r.v <= 0 || r.v > 1 {
			return usageError{fmt.Errorf("%s %v: give a fraction above 0 and at most 1 (e.g. 0.2)", r.flag, r.v)}
		}
	}
	if a.LWLockWaiters < 1 {
		return usageError{fmt.Errorf("--alert-lwlock-waiters %d: give a number of sessions, at least 1 (e.g. 4)", a.LWLockWaiters)}
	}
	return nil
}

func (o *alertsOptions) addFlags(c *cobra.Command, g *globals) {
	addAlertFlags(c.Flags(), &o.alerts)
	c.Flags().BoolVar(&o.prometheus, "prometheus", false, "print a Prometheus alerting rules file with these thresholds")
	c.Flags().BoolVar(&o.markdown, "markdown", false, "print the catalogue as the docs page (docs/alerts.md)")
	c.Flags().StringVarP(&o.output, "output", "o", "", "write to `FILE` (whole, or not at all) instead of printing")
	c.Args = func(_ *cobra.Command, args []string) error {
		o.names = args
		return nil
	}
	_ = c.Flags().MarkHidden("markdown")
	g.jsonFlag(c, "print the catalogue as JSON")
}

func (o *alertsOptions) validate(g *globals) error {
	n := 0
	for _, on := range []bool{o.prometheus, o.markdown, g.jsonOut} {
		if on {
			n++
		}
	}
	if n > 1 {
		return usageError{fmt.Errorf("--prometheus, --json and --markdown: give one of them")}
	}
	if len(o.names) > 0 && (o.prometheus || o.markdown) {
		return usageError{fmt.Errorf("alert names %v: they choose what the catalogue prints; the rules file and the docs page hold every alert (leave the names out)", o.names)}
	}
	known := map[string]bool{}
	var all []string
	for _, s := range catalogue.Alerts(o.alerts) {
		known[s.Name] = true
		all = append(all, s.Name)
	}
	for _, n := range o.names {
		if !known[n] {
			return usageError{fmt.Errorf("alert %q: no such alert; the alerts are %s", n, strings.Join(all, ", "))}
		}
	}
	return checkAlertConfig(o.alerts)
}

func (o *alertsOptions) run(_ context.Context, g *globals) error {
	if o.output == "" {
		return o.write(g, g.stdout)
	}
	// Written beside the file, then renamed over it: a rules file that
	// Prometheus reloads is never seen half written.
	dir := filepath.Dir(o.output)
	f, err := os.CreateTemp(dir, ".pooltop-alerts-*")
	if err != nil {
		return usageError{fmt.Errorf("--output %s: cannot write there (%v); give a path in a directory you can write", o.output, err)}
	}
	defer os.Remove(f.Name()) // after the rename: nothing to remove
	werr := o.write(g, f)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Rename(f.Name(), o.output)
	}
	if werr != nil {
		return usageError{fmt.Errorf("--output %s: cannot write it (%v); give a path in a directory you can write", o.output, werr)}
	}
	return nil
}

// write prints what the flags ask for to w.
func (o *alertsOptions) write(g *globals, w io.Writer) error {
	switch {
	case o.prometheus:
		return writePrometheusRules(w, o.alerts)
	case o.markdown:
		return writeAlertsPage(w, o.alerts)
	}
	var cat []catalogue.Alert
	for _, s := range catalogue.Alerts(o.alerts) {
		if len(o.names) == 0 || slices.Contains(o.names, s.Name) {
			cat = append(cat, s)
		}
	}
	out := *g
	out.stdout = w
	return out.emit(cat, func(w io.Writer) error {
		for i, s := range cat {
			if i > 0 {
				fmt.Fprintln(w)
			}
			fmt.Fprintf(w, "%s (%s): %s\n", s.Name, s.Severity, s.Meaning)
			fmt.Fprintf(w, "  figure:    %s\n", s.Figure)
			fmt.Fprintf(w, "  threshold: %s (%s)\n", s.Threshold, s.Flag)
			fmt.Fprintf(w, "  raised:    %s\n", s.Raise)
			fmt.Fprintf(w, "  cleared:   %s\n", s.Clear)
			fmt.Fprintf(w, "  look at:   %s\n", s.Runbook.First)
			fmt.Fprintf(w, "  causes:    %s\n", s.Runbook.Causes)
			fmt.Fprintf(w, "  do:        %s\n", s.Runbook.Do)
			fmt.Fprintf(w, "  pooltop:   %s\n", s.Runbook.Tools)
		}
		return nil
	})
}

// writePrometheusRules prints the rules file for the thresholds a.
func writePrometheusRules(w io.Writer, a collector.AlertConfig) error {
	type group struct {
		Name  string           `yaml:"name"`
		Rules []catalogue.Rule `yaml:"rules"`
	}
	fmt.Fprintln(w, "# Prometheus alerting rules for pooltop's metrics (watch --listen).")
	fmt.Fprintln(w, "# Made by `pooltop alerts --prometheus`; regenerate rather than edit.")
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(struct {
		Groups []group `yaml:"groups"`
	}{[]group{{Name: "pooltop", Rules: catalogue.Rules(a)}}}); err != nil {
		return err
	}
	return enc.Close()
}

// writeAlertsPage prints docs/alerts.md from the catalogue.
func writeAlertsPage(w io.Writer, a collector.AlertConfig) error {
	fmt.Fprint(w, `# Alerts

Every alert pooltop raises, from the catalogue in the code: `+"`pooltop alerts`"+` prints
the same (`+"`--json`"+` too), and the dashboard shows the runbook of a
raised alert on `+"`m`"+`. This page is generated by
`+"`go run . alerts --markdown > docs/alerts.md`"+`; a test fails when it is stale.

An alert is raised by the dashboard's poll (watch, the demo) with the
thresholds of its flags, shown in the header and the events, exported as
`+"`pooltop_alert_active{alert}`"+`, and listed in `+"`--json`"+`'s `+"`alerts`"+`.
For paging when no dashboard runs, load the Prometheus rules (see
[metrics.md](metrics.md#alerting-rules)).

| alert | severity | threshold (default) | flag |
|---|---|---|---|
`)
	cat := catalogue.Alerts(a)
	for _, s := range cat {
		fmt.Fprintf(w, "| [`%s`](#%s) | %s | %s | `%s` |\n", s.Name, s.Name, s.Severity, s.Threshold, s.Flag)
	}
	for _, s := range cat {
		fmt.Fprintf(w, "\n## %s\n\n%s\n\n", s.Name, s.Meaning)
		fmt.Fprintf(w, "- **Figure**: %s.\n", s.Figure)
		fmt.Fprintf(w, "- **Raised** %s; **cleared** %s.\n", s.Raise, s.Clear)
		fmt.Fprintf(w, "- **Severity**: %s. Prometheus: `%s`, `%s` for %s.\n", s.Severity, s.Rule, s.Expr, s.For)
		fmt.Fprintf(w, "- **Look at first**: %s.\n", s.Runbook.First)
		fmt.Fprintf(w, "- **Likely causes**: %s.\n", s.Runbook.Causes)
		fmt.Fprintf(w, "- **Do**: %s.\n", s.Runbook.Do)
		fmt.Fprintf(w, "- **With pooltop**: %s.\n", s.Runbook.Tools)
	}
	return nil
}
