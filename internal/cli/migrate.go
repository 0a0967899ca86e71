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
	return g.command(&migrateOptions{}, &cobra.Command{
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

On a Citus coordinator (the citus extension in the database, active
workers) it lays the pool out for Citus: resource_pool and
business_ledger distributed by a shard column derived from the
identifier, 32 colocated shards, and the lease operations as functions
delegated to the node of each shard (docs/citus.md). --dry-run prints the
Citus calls too.`,
	})
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
