package cli

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
)

// serversAnnotation marks a command that looks at several pools at once,
// each on its server (--dsn given more than once, or --dsn-file): watch,
// doctor and verify.
const serversAnnotation = "pooltop/servers"

// onServers marks c as taking several servers, each a pool of its own.
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
	return usageError{fmt.Errorf("%s works on one pool, on one server or on a Citus cluster; %d --dsn were given: to scale a pool past one machine, run it on Citus (pooltop migrate --dsn on its coordinator; docs/citus.md); watch, doctor and verify take several --dsn to look at several pools at once",
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
