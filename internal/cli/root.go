// Package cli is pooltop's command line: one file per command, each an
// options struct that binds its flags, validates them before anything is
// opened or written, and runs (see options). This file holds the command
// tree and wires the packages together; the work is done in engine/,
// workload/, collector/, tui/ and internal/demo.
package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/termtext"
	"github.com/pooltop-dev/pooltop/workload"
)

// Main runs pooltop with the process's arguments and returns its exit code.
// A closed terminal (SIGHUP) ends pooltop as Ctrl-C does: the deferred
// cleanup stops the embedded server and removes its directory before Main
// returns.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	return run(ctx, os.Args[1:], os.Stdout, os.Stderr)
}

// run executes one command line and returns the exit code. Deferred cleanup
// (the embedded server above all) has run by the time it returns.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRootCmd(g)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "pooltop: "+termtext.Escape(oneLine(g.redact(err.Error()))))
	return exitCode(err)
}

// options is the contract of every command: its flags live in a struct that
// implements it. addFlags binds them (and those of globals the command
// takes), validate checks them (a usageError for bad input) before anything
// is opened or written, and run does the work.
type options interface {
	addFlags(c *cobra.Command, g *globals)
	validate(g *globals) error
	run(ctx context.Context, g *globals) error
}

// command completes c, which holds the help texts, into the command whose
// work is o: o's flags are bound, and RunE validates, then runs.
func (g *globals) command(o options, c *cobra.Command) *cobra.Command {
	o.addFlags(c, g)
	c.RunE = func(cmd *cobra.Command, _ []string) error {
		if err := g.settleDSNs(cmd); err != nil {
			return err
		}
		if err := o.validate(g); err != nil {
			return err
		}
		return o.run(cmd.Context(), g)
	}
	return c
}

// jsonFlag adds --json, described by help.
func (g *globals) jsonFlag(c *cobra.Command, help string) {
	c.Flags().BoolVar(&g.jsonOut, "json", false, help)
}

// allowWritesFlag adds --allow-writes, described by help.
func (g *globals) allowWritesFlag(c *cobra.Command, help string) {
	c.Flags().BoolVar(&g.allowWrites, "allow-writes", false, help)
}

// globals are the flags every command shares.
type globals struct {
	dsn string // the one server named (--dsn once), else ""
	// dsns are the --dsn flags and the lines of --dsn-file as given;
	// servers are they when there are several: a pool over several servers.
	dsns, servers []string
	dsnFile       string
	schema        string
	jsonOut       bool
	allowWrites   bool
	stdout        io.Writer
	stderr        io.Writer
}

// redact removes the password of the DSN in use from any text we print.
func (g *globals) redact(s string) string {
	s = engine.RedactDSN(s)
	for _, p := range []string{passwordOf(g.resolvedDSN()), os.Getenv("PGPASSWORD")} {
		s = engine.Redact(s, p)
	}
	for _, d := range g.dsns {
		s = engine.Redact(s, passwordOf(d))
	}
	return s
}

func passwordOf(dsn string) string {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return ""
	}
	return cfg.Password
}

// scenarioList names the scenarios, a line each, for --help.
func scenarioList() string {
	var b strings.Builder
	for _, sc := range workload.Scenarios {
		fmt.Fprintf(&b, "  %s %-20s %s\n", sc.Key, sc.Name, sc.Expect)
	}
	return strings.TrimRight(b.String(), "\n")
}

// version is the module version and VCS revision the binary was built
// from, as far as the build recorded them.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "(unknown)"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v += " " + s.Value[:min(len(s.Value), 12)]
		case "vcs.modified":
			if s.Value == "true" {
				v += " (modified)"
			}
		}
	}
	return v + " " + info.GoVersion
}

func newRootCmd(g *globals) *cobra.Command {
	root := g.command(&demoOptions{}, &cobra.Command{
		Use:   "pooltop",
		Short: "A lease engine and live dashboard for a PostgreSQL resource pool",
		Long: `pooltop runs and shows a PostgreSQL resource pool: workers claim ids with
FOR UPDATE SKIP LOCKED, hold them under a time lease and commit their effect
through a fencing token; a reaper returns expired leases to the pool.

With no command, pooltop starts the demo: a private PostgreSQL (unless --dsn
is given), the schema, a pool of ids, a simulated fleet of workers with its
reaper, and the dashboard (keys: ? for help, 1-8 and ! @ # $ % ^ & (shift+1
to shift+7) scenarios, q to quit).
pooltop watch shows an existing pool read-only. --servers N runs the demo
on a pool over N throwaway servers (or --dsn once per server of yours).

Scenarios (their key in the demo, --scenario here and in chaos):
` + scenarioList() + `

Which server: the demo, bench and chaos generate load, so they never take
their server from the environment. Without --dsn they start a throwaway
PostgreSQL on 127.0.0.1 from the system's binaries (removed on exit); with
--dsn they run only where pooltop created the pool (pooltop migrate), unless
--allow-writes. watch, verify and lease show read; migrate, seed and the
other lease commands write what you name. They take the database from
--dsn, else DATABASE_URL, else the PG* variables (PGHOST, PGUSER, …), like
psql.

` + exitCodesHelp,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{DisableDefaultCmd: true},
		SilenceErrors:     true,
		Args:              cobra.NoArgs,
	})
	root.Version = version()
	root.SetVersionTemplate("pooltop {{.Version}}\n")
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError{fmt.Errorf("%w: see '%s --help'", err, cmd.CommandPath())}
	})
	pf := root.PersistentFlags()
	pf.StringArrayVar(&g.dsns, "dsn", nil, "PostgreSQL URL or key=value string; watch, verify, doctor, migrate, seed and lease default to $DATABASE_URL, then the PG* variables; the demo, bench and chaos never read those: without --dsn they start an embedded server (work needs --dsn); give it once per server for a pool over several servers (every command: migrate, seed, verify, lease, work, watch, doctor, bench, chaos, the demo)")
	pf.StringVar(&g.dsnFile, "dsn-file", "", "a file of DSNs, one per line (# starts a comment): the servers of a pool over several, as --dsn given once for each")
	pf.StringVar(&g.schema, "schema", "public", "schema that holds the pool")
	root.AddCommand(newMigrateCmd(g), newSeedCmd(g), newLeaseCmd(g), newBenchCmd(g), newChaosCmd(g), newVerifyCmd(g), newWatchCmd(g), newDoctorCmd(g), newWorkCmd(g), newReplayCmd(g), newReportCmd(g), newAlertsCmd(g))
	for _, c := range root.Commands() {
		wrapArgs(c)
	}
	return root
}

// wrapArgs turns cobra's argument errors into usage errors, recursively.
func wrapArgs(c *cobra.Command) {
	if c.Args == nil {
		c.Args = cobra.NoArgs
	}
	inner := c.Args
	c.Args = func(cmd *cobra.Command, args []string) error {
		if err := inner(cmd, args); err != nil {
			return usageError{fmt.Errorf("%s: %w: see '%s --help'", cmd.CommandPath(), err, cmd.CommandPath())}
		}
		return nil
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}
