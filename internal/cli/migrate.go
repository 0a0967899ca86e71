package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/migrations"
)

// migrateOptions are the flags of pooltop migrate.
type migrateOptions struct {
	dryRun     bool
	partitions int
}

func newMigrateCmd(g *globals) *cobra.Command {
	return onServers(g.command(&migrateOptions{}, &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the pooltop schema (idempotent, safe to run concurrently)",
		Long: `Create or upgrade the pooltop schema in --schema: resource_pool (the basic
columns id, identifier, status, leased_until, lease_token and updated_at,
plus holder), its partial indexes, business_ledger and the pooltop marker.
Running it again does nothing; two processes running it at once take turns
on an advisory lock.

A resource_pool that pooltop did not create (built by hand, perhaps in
production) is left alone unless --allow-writes is given; then it is adopted
in place: missing lease columns and holder are added, the partial indexes on
UNUSED and PENDING rows are built CONCURRENTLY (claims go on while they
build), autovacuum settings for a queue-like table are set, and
business_ledger and pooltop_meta are created. --dry-run prints every
statement without running any.

--partitions N creates resource_pool hash-partitioned on id in N partitions
(2..256; same table name and columns; the partial indexes on every
partition; identifier unique per (identifier, id) only). It only creates: a
schema that already holds an unpartitioned pool is refused.

The database comes from --dsn, else DATABASE_URL, else the PG* variables.

Given --dsn once per server (or --dsn-file), it sets up a pool over several
servers: the schema on each, and a mark in each one's pooltop_meta naming
the pool, the server (s1, s2, …) and how many servers the pool has. Every
server must answer. Run it again with a new server added to the list to
add capacity: the others keep their names and rows, and seed places new
ids on every server, the new one included (docs/servers.md).`,
	}))
}

func (o *migrateOptions) addFlags(c *cobra.Command, g *globals) {
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "print the statements without running any")
	c.Flags().IntVar(&o.partitions, "partitions", 0, fmt.Sprintf("create the pool hash-partitioned on id in N partitions (%d..%d)", migrations.MinPartitions, migrations.MaxPartitions))
	g.jsonFlag(c, "print JSON")
	g.allowWritesFlag(c, "adopt a resource_pool that pooltop did not create")
}

func (o *migrateOptions) validate(g *globals) error {
	if err := engine.ValidSchema(g.schema); err != nil {
		return usageError{fmt.Errorf("--schema: %w", err)}
	}
	if err := checkPartitionsFlag(o.partitions); err != nil {
		return err
	}
	if g.wantsEmbedded() {
		return usageError{errors.New("migrate needs a database: pass --dsn (or set DATABASE_URL or PGHOST); the demo migrates its throwaway server itself")}
	}
	return nil
}

func (o *migrateOptions) run(ctx context.Context, g *globals) error {
	if len(g.servers) > 0 {
		return o.runServers(ctx, g)
	}
	res, err := g.migrate(ctx, g.resolvedDSN(), g.dsnFrom(), migrations.Options{Adopt: g.allowWrites, DryRun: o.dryRun, Partitions: o.partitions})
	if err != nil {
		return err
	}
	v := map[string]any{"schema": g.schema, "version": res.Version, "dry_run": o.dryRun, "adopted": res.Adopted, "statements": res.Statements, "partitions": o.partitions}
	return g.emit(v, func(w io.Writer) error {
		if o.dryRun {
			if res.Adopted && !g.allowWrites {
				fmt.Fprintf(w, "-- schema %s holds a resource_pool pooltop did not create: these statements adopt it, and run only with --allow-writes\n\n", g.schema)
			}
			if len(res.Statements) == 0 {
				fmt.Fprintf(w, "-- schema %s is at version %d: nothing to do\n", g.schema, res.Version)
			}
			for _, s := range res.Statements {
				fmt.Fprintf(w, "%s;\n\n", strings.TrimRight(s, ";\n "))
			}
			return nil
		}
		verb := "is"
		if res.Adopted {
			verb = "adopted its resource_pool and is"
		}
		fmt.Fprintf(w, "schema %s %s at version %d\n", g.schema, verb, res.Version)
		return nil
	})
}

// checkPartitionsFlag checks a --partitions value (0: not partitioned).
func checkPartitionsFlag(n int) error {
	if n != 0 && (n < migrations.MinPartitions || n > migrations.MaxPartitions) {
		return usageError{fmt.Errorf("--partitions %d: out of range: give between %d and %d partitions (or leave it out for an unpartitioned pool)", n, migrations.MinPartitions, migrations.MaxPartitions)}
	}
	return nil
}

// serverPlan is migrate's result for one server of a pool over several.
type serverPlan struct {
	Server     string   `json:"server"`
	Addr       string   `json:"addr"`
	Pool       string   `json:"pool"`
	Servers    int      `json:"servers"`
	Joined     bool     `json:"joined"` // the server was not part of the pool before
	Version    int64    `json:"version"`
	Statements []string `json:"statements"`
}

// runServers migrates every server of a pool over several and marks each.
// It reads every server's mark before it writes anything, so that a list
// mixing pools, naming a server twice or leaving one out changes nothing.
func (o *migrateOptions) runServers(ctx context.Context, g *globals) error {
	d := &serversDB{}
	defer d.Close()
	var engines []*engine.Engine
	var have []engine.ServerMark
	var addrs []string
	for _, dsn := range g.servers {
		pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: dsn, From: "--dsn", Schema: g.schema, AppName: "pooltop-migrate", MaxConns: 1})
		if err != nil {
			return fmt.Errorf("%w (migrate needs every server of the pool to answer)", err)
		}
		d.pools = append(d.pools, pool)
		e := engine.New(pool)
		m, err := e.ReadMark(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", serverAddr(dsn), err)
		}
		engines, have, addrs = append(engines, e), append(have, m), append(addrs, serverAddr(dsn))
	}
	marks, err := engine.PlanMarks(have, addrs)
	if err != nil {
		return err
	}
	var out []serverPlan
	for i, dsn := range g.servers {
		res, err := g.migrate(ctx, dsn, "--dsn", migrations.Options{Adopt: g.allowWrites, DryRun: o.dryRun, Partitions: o.partitions})
		if err != nil {
			return fmt.Errorf("%s: %w", addrs[i], err)
		}
		out = append(out, serverPlan{Server: marks[i].Name, Addr: addrs[i], Pool: marks[i].Pool, Servers: marks[i].Servers,
			Joined: have[i].Pool == "", Version: res.Version, Statements: res.Statements})
		if o.dryRun {
			continue
		}
		// Two DSNs that reach one database: the first wrote its mark there.
		now, err := engines[i].ReadMark(ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", addrs[i], err)
		}
		if now != have[i] {
			return fmt.Errorf("%w: %s reaches the same database as a server listed before it (it now says %s of pool %s): list each server once",
				engine.ErrServers, addrs[i], now.Name, now.Pool)
		}
		if err := engines[i].WriteMark(ctx, marks[i]); err != nil {
			return fmt.Errorf("%s: %w", addrs[i], err)
		}
	}
	return g.emit(map[string]any{"schema": g.schema, "dry_run": o.dryRun, "partitions": o.partitions, "servers": out}, func(w io.Writer) error {
		for _, p := range out {
			what := "is"
			if p.Joined {
				what = "joined the pool and is"
			}
			if o.dryRun {
				fmt.Fprintf(w, "-- %s (%s) would be server %s of %d in pool %s\n", p.Addr, g.schema, p.Server, p.Servers, p.Pool)
				for _, s := range p.Statements {
					fmt.Fprintf(w, "%s;\n\n", strings.TrimRight(s, ";\n "))
				}
				continue
			}
			fmt.Fprintf(w, "server %s (%s, schema %s) %s at version %d: %d servers in pool %s\n", p.Server, p.Addr, g.schema, what, p.Version, p.Servers, p.Pool)
		}
		return nil
	})
}
