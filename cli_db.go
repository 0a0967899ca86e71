package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/migrations"
)

// pgEnv are the libpq variables that, when set, name a server to use.
var pgEnv = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE"}

// resolvedDSN is --dsn, else DATABASE_URL, else "" (which pgx fills from the
// PG* variables).
func (g *globals) resolvedDSN() string {
	if g.dsn != "" {
		return g.dsn
	}
	return os.Getenv("DATABASE_URL")
}

// wantsEmbedded reports whether no server was named at all.
func (g *globals) wantsEmbedded() bool {
	if g.resolvedDSN() != "" {
		return false
	}
	for _, v := range pgEnv {
		if os.Getenv(v) != "" {
			return false
		}
	}
	return true
}

// database is an open connection to the pool's database, and the embedded
// server behind it when pooltop started one.
type database struct {
	pool     *pgxpool.Pool
	eng      *engine.Engine
	dsn      string
	embedded *pgembed.Server
}

func (d *database) Close() {
	if d.pool != nil {
		d.pool.Close()
	}
	if d.embedded != nil {
		_ = d.embedded.Stop()
	}
}

// openOptions say what a command needs of its database.
type openOptions struct {
	appName  string
	maxConns int32
	// seedEmbedded fills a freshly started embedded database with this many ids.
	seedEmbedded int
	// write: the command changes the pool, so the marker is required unless --allow-writes.
	write bool
	// migrate: the command creates the schema itself (migrate, the demo).
	migrate bool
	// rtt: a simulated network round trip on every exchange (bench --rtt).
	rtt time.Duration
}

// open connects to the named server, or starts the embedded one, migrates it
// when asked or when it is ours, and checks the schema. The caller must
// Close the result, which also stops an embedded server.
func (g *globals) open(ctx context.Context, o openOptions) (*database, error) {
	if err := engine.ValidSchema(g.schema); err != nil {
		return nil, usageError{fmt.Errorf("--schema: %w", err)}
	}
	d := &database{dsn: g.resolvedDSN()}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	if g.wantsEmbedded() {
		srv, err := pgembed.Start(ctx, pgembed.Options{})
		if err != nil {
			if errors.Is(err, pgembed.ErrNoBinaries) {
				return nil, err
			}
			return nil, fmt.Errorf("start embedded PostgreSQL: %w", err)
		}
		d.embedded = srv
		d.dsn = srv.DSN()
		o.migrate = true
		fmt.Fprintf(g.stderr, "pooltop: no --dsn, DATABASE_URL or PG* variables: started a throwaway PostgreSQL on 127.0.0.1:%d in %.2fs (removed on exit)\n",
			srv.Port(), srv.StartupTime().Seconds())
	}
	if o.migrate {
		if _, err := g.migrate(ctx, d.dsn); err != nil {
			return nil, err
		}
	}
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: d.dsn, Schema: g.schema, AppName: o.appName, MaxConns: o.maxConns, RTT: o.rtt})
	if err != nil {
		return nil, err
	}
	d.pool = pool
	d.eng = engine.New(pool)
	if err := d.eng.CheckSchema(ctx, o.write && !g.allowWrites); err != nil {
		return nil, err
	}
	if d.embedded != nil && o.seedEmbedded > 0 {
		if _, err := d.eng.Seed(ctx, o.seedEmbedded); err != nil {
			return nil, err
		}
	}
	ok = true
	return d, nil
}

// migrate applies the schema on dsn and returns the version reached.
func (g *globals) migrate(ctx context.Context, dsn string) (int64, error) {
	pcfg, err := engine.PoolConfig(engine.ConnOptions{DSN: dsn, Schema: g.schema, AppName: "pooltop-migrate"})
	if err != nil {
		return 0, err
	}
	cc := pcfg.ConnConfig
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return 0, engine.ConnectError(cc, err)
	}
	conn.Close(ctx)
	delete(cc.RuntimeParams, "search_path")
	return migrations.Apply(ctx, cc, g.schema)
}

func newMigrateCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Create or upgrade the pooltop schema (idempotent, safe to run concurrently)",
		Long: `Create or upgrade the pooltop schema in --schema: resource_pool (the seed's
columns plus holder), its partial indexes, business_ledger and the pooltop
marker. Running it again does nothing; two processes running it at once take
turns on an advisory lock. A resource_pool created by hand after the article
is upgraded in place.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := engine.ValidSchema(g.schema); err != nil {
				return usageError{fmt.Errorf("--schema: %w", err)}
			}
			d, err := g.open(ctx, openOptions{appName: "pooltop-migrate", migrate: true})
			if err != nil {
				return err
			}
			defer d.Close()
			v, err := g.migrate(ctx, d.dsn)
			if err != nil {
				return err
			}
			if g.jsonOut {
				return writeJSON(g.stdout, map[string]any{"schema": g.schema, "version": v})
			}
			fmt.Fprintf(g.stdout, "schema %s is at version %d\n", g.schema, v)
			return nil
		},
	}
	cmd.Flags().BoolVar(&g.jsonOut, "json", false, "print JSON")
	return cmd
}

func newSeedCmd(g *globals) *cobra.Command {
	var count int
	cmd := &cobra.Command{
		Use:   "seed",
		Short: "Add --count free ids to the pool",
		Long: `Add --count UNUSED ids to the pool, as the decoupled producer of the seed
articles would, then ANALYZE the table. Identifiers are res-NNNNNNNNNN past
the highest id, so seeding again adds more.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if count <= 0 || count > engine.MaxSeed {
				return usageError{fmt.Errorf("--count %d: give between 1 and %d", count, engine.MaxSeed)}
			}
			d, err := g.open(ctx, openOptions{appName: "pooltop-seed", write: true})
			if err != nil {
				return err
			}
			defer d.Close()
			start := time.Now()
			n, err := d.eng.Seed(ctx, count)
			if err != nil {
				return err
			}
			el := time.Since(start)
			if g.jsonOut {
				return writeJSON(g.stdout, map[string]any{"inserted": n, "seconds": el.Seconds()})
			}
			fmt.Fprintf(g.stdout, "seeded %d ids in %.2fs (%.0f ids/s)\n", n, el.Seconds(), float64(n)/el.Seconds())
			return nil
		},
	}
	cmd.Flags().IntVar(&count, "count", 0, "how many ids to add (required)")
	cmd.Flags().BoolVar(&g.jsonOut, "json", false, "print JSON")
	cmd.Flags().BoolVar(&g.allowWrites, "allow-writes", false, "write even if the database lacks the pooltop marker")
	return cmd
}
