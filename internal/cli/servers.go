package cli

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
)

// serversAnnotation marks a command that works on a pool over several
// servers (--dsn given more than once, or --dsn-file).
const serversAnnotation = "pooltop/servers"

// onServers marks c as taking several servers.
func onServers(c *cobra.Command) *cobra.Command {
	if c.Annotations == nil {
		c.Annotations = map[string]string{}
	}
	c.Annotations[serversAnnotation] = "yes"
	return c
}

// settleDSNs reads --dsn-file, then sets g.dsn (one server) or g.servers
// (several). Several servers go only to the commands that take them; a
// DSN given twice is refused.
func (g *globals) settleDSNs(cmd *cobra.Command) error {
	dsns := append([]string(nil), g.dsns...)
	if g.dsnFile != "" {
		lines, err := readDSNFile(g.dsnFile)
		if err != nil {
			return usageError{err}
		}
		dsns = append(dsns, lines...)
	}
	g.dsns, g.dsn, g.servers = dsns, "", nil
	switch len(dsns) {
	case 0:
		if g.dsnFile != "" {
			return usageError{fmt.Errorf("--dsn-file %s: no DSN in it: write one per line", g.dsnFile)}
		}
		return nil
	case 1:
		g.dsn = dsns[0]
		return nil
	}
	seen := map[string]int{}
	for i, d := range dsns {
		if j, ok := seen[d]; ok {
			return usageError{fmt.Errorf("the server %s is given twice (DSNs %d and %d): give each server of the pool once", serverAddr(d), j+1, i+1)}
		}
		seen[d] = i
		if _, err := pgx.ParseConfig(d); err != nil {
			return usageError{fmt.Errorf("DSN %d: %s: write a PostgreSQL URL or key=value string", i+1, g.redact(err.Error()))}
		}
	}
	for c := cmd; c != nil; c = c.Parent() {
		// The root (the demo) takes several for itself, not for its commands.
		if c.Annotations[serversAnnotation] == "yes" && (c == cmd || c.HasParent()) {
			g.servers = dsns
			return nil
		}
	}
	return usageError{fmt.Errorf("%s takes one server; %d were given: a pool over several servers is set up and worked with migrate, seed, verify, lease, work, watch, doctor, bench, chaos and the demo",
		cmd.CommandPath(), len(dsns))}
}

// readDSNFile returns the DSNs of a file, one per line; blank lines and
// lines that start with # are skipped.
func readDSNFile(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--dsn-file: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, line)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("--dsn-file %s: %w", path, err)
	}
	return out, nil
}

// serverAddr names a server by user@host:port/database, never its
// password nor a piece of it (engine.Addr).
func serverAddr(dsn string) string { return engine.Addr(dsn) }

// serversDB is a pool over several servers, opened.
type serversDB struct {
	s     *engine.Servers
	pools []*engine.Pool
}

func (d *serversDB) Close() {
	for _, p := range d.pools {
		p.Close()
	}
}

// openServers connects to every server of g.servers and checks that they
// make one pool (engine.OpenServers). A server that does not answer is
// left to be tried again, as long as one does, when later is set; a
// command that needs every server (seed, verify) does not set it.
func (g *globals) openServers(ctx context.Context, appName string, maxConns int32, later bool) (*serversDB, error) {
	if err := engine.ValidSchema(g.schema); err != nil {
		return nil, usageError{fmt.Errorf("--schema: %w", err)}
	}
	d := &serversDB{}
	var targets []engine.Target
	for _, dsn := range g.servers {
		opts := engine.ConnOptions{DSN: dsn, From: "--dsn", Schema: g.schema, AppName: appName, MaxConns: maxConns}
		pool, err := engine.Connect(ctx, opts)
		if err != nil {
			if !later || !engine.Unreachable(err) || ctx.Err() != nil {
				d.Close()
				if !later {
					err = fmt.Errorf("%w (%s needs every server of the pool to answer)", err, strings.TrimPrefix(appName, "pooltop-"))
				}
				return nil, err
			}
			if pool, err = engine.ConnectLater(opts); err != nil {
				d.Close()
				return nil, err
			}
			fmt.Fprintf(g.stderr, "pooltop: %s does not answer: going on with the other servers, and trying it again\n", serverAddr(dsn))
		}
		d.pools = append(d.pools, pool)
		targets = append(targets, engine.Target{Addr: serverAddr(dsn), Eng: engine.New(pool)})
	}
	s, err := engine.OpenServers(ctx, targets)
	if err != nil {
		d.Close()
		return nil, err
	}
	d.s = s
	return d, nil
}
