package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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

// dsnFrom names where resolvedDSN came from, for error messages.
func (g *globals) dsnFrom() string {
	if g.dsn == "" && os.Getenv("DATABASE_URL") != "" {
		return "DATABASE_URL"
	}
	return "--dsn"
}

// wantsEmbedded reports whether no server was named at all.
func (g *globals) wantsEmbedded() bool {
	return g.dsn == "" && len(g.servers) == 0 && g.environmentServer() == ""
}

// database is an open connection to the pool's database, and the embedded
// server behind it when pooltop started one.
type database struct {
	pool     *engine.Pool
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
	// migrate: the command creates the schema itself (the demo, bench, chaos).
	migrate bool
	// load: the command generates load or injects faults (the demo, bench,
	// chaos). It never takes its database from the environment, and with
	// --dsn it runs only where pooltop created the pool (or --allow-writes).
	load bool
	// rtt: a simulated network round trip on every exchange (bench --rtt).
	rtt time.Duration
	// settings for the embedded server, over its defaults.
	settings map[string]string
	// partitions: with migrate, create the pool hash-partitioned on id in
	// this many partitions (0: a plain table).
	partitions int
	// wholePool: the command adds ids (seed, the producer of the demo and
	// work), which on a pool over several servers must be placed by the
	// hash over all of them, or answers for the whole pool (verify): one
	// server of such a pool alone is refused.
	wholePool bool
	// direct: the command needs PostgreSQL itself, not a pooler (VACUUM,
	// pgbench, a server restart), and says so through one.
	direct string
}

// open connects to the named server, or starts the embedded one, migrates it
// when asked, and checks the schema. The caller must Close the result, which
// also stops an embedded server.
func (g *globals) open(ctx context.Context, o openOptions) (*database, error) {
	if err := engine.ValidSchema(g.schema); err != nil {
		return nil, usageError{fmt.Errorf("--schema: %w", err)}
	}
	d := &database{dsn: g.resolvedDSN()}
	embedded, from := g.wantsEmbedded(), g.dsnFrom()
	if o.load {
		d.dsn, embedded, from = g.dsn, g.dsn == "", "--dsn"
	}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	if o.direct != "" && !embedded {
		if err := refusePooler(ctx, d.dsn, from, o); err != nil {
			return nil, err
		}
	}
	if embedded {
		srv, err := pgembed.Start(ctx, pgembed.Options{Settings: o.settings})
		if err != nil {
			if errors.Is(err, pgembed.ErrNoBinaries) {
				return nil, err
			}
			return nil, fmt.Errorf("start embedded PostgreSQL: %w", err)
		}
		d.embedded = srv
		d.dsn = srv.DSN()
		o.migrate = true
		why := "no --dsn, DATABASE_URL or PG* variables"
		if o.load {
			why = "no --dsn"
			if set := g.environmentServer(); set != "" {
				why = fmt.Sprintf("no --dsn (%s is set, but commands that generate load never take their server from the environment)", set)
			}
		}
		fmt.Fprintf(g.stderr, "pooltop: %s: started a throwaway PostgreSQL on 127.0.0.1:%d in %.2fs (removed on exit)\n",
			why, srv.Port(), srv.StartupTime().Seconds())
	} else if o.load && !g.allowWrites {
		if err := g.checkLoadTarget(ctx, d.dsn, o.appName); err != nil {
			return nil, err
		}
	}
	if o.migrate {
		if _, err := g.migrate(ctx, d.dsn, from, migrations.Options{Adopt: g.allowWrites, Partitions: o.partitions}); err != nil {
			return nil, err
		}
	}
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: d.dsn, From: from, Schema: g.schema, AppName: o.appName, MaxConns: o.maxConns, RTT: o.rtt})
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

// refusePooler fails, in one line, a command that cannot run through a
// connection pooler when dsn reaches one.
func refusePooler(ctx context.Context, dsn, from string, o openOptions) error {
	pcfg, err := engine.PoolConfig(engine.ConnOptions{DSN: dsn, From: from, AppName: o.appName})
	if err != nil {
		return err
	}
	cc := pcfg.ConnConfig
	pooler, err := engine.DetectPooler(ctx, cc)
	if err != nil {
		return engine.ConnectError(cc, err)
	}
	if pooler == "" {
		return nil
	}
	where := fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
	return fmt.Errorf("%s: %s is a connection pooler, not PostgreSQL itself (%s): %s; point --dsn at the PostgreSQL server behind it: %w",
		strings.TrimPrefix(o.appName, "pooltop-"), where, pooler, o.direct, engine.ErrPooler)
}

// environmentServer names the variables that point at a server, or "".
func (g *globals) environmentServer() string {
	var set []string
	if os.Getenv("DATABASE_URL") != "" {
		set = append(set, "DATABASE_URL")
	}
	for _, v := range pgEnv {
		if os.Getenv(v) != "" {
			set = append(set, v)
		}
	}
	return strings.Join(set, ", ")
}

// checkLoadTarget refuses, before anything is written, to generate load on a
// database pooltop did not set up: the schema must hold a pool pooltop
// created, or hold no pool in a database where pooltop created one.
func (g *globals) checkLoadTarget(ctx context.Context, dsn, appName string) error {
	pcfg, err := engine.PoolConfig(engine.ConnOptions{DSN: dsn, From: "--dsn", Schema: g.schema, AppName: appName})
	if err != nil {
		return err
	}
	cc := pcfg.ConnConfig
	// Inspect names its schema: no setting is needed, and with none this
	// check runs through a pooler as well.
	conn, err := pgx.ConnectConfig(ctx, engine.PoolerConnConfig(cc))
	if err != nil {
		return engine.ConnectError(cc, err)
	}
	defer conn.Close(context.Background())
	st, err := migrations.Inspect(ctx, conn, g.schema)
	if err != nil {
		return err
	}
	what := strings.TrimPrefix(appName, "pooltop-")
	if what == "workload" {
		what = "the demo"
	}
	where := fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
	schema := pgx.Identifier{g.schema}.Sanitize()
	switch {
	case st.Origin == migrations.OriginCreated:
		return nil
	case st.Origin == migrations.OriginAdopted:
		return fmt.Errorf("%s generates load and consumes ids: refusing %s schema %s, a pool pooltop adopted but did not create; pass --allow-writes if its ids are yours to burn", what, where, schema)
	case st.Pool:
		return fmt.Errorf("%s generates load and consumes ids: refusing %s schema %s, whose resource_pool pooltop did not create (no pooltop marker); run without --dsn for a throwaway server, or pass --allow-writes if its ids are yours to burn", what, where, schema)
	}
	ours, err := migrations.CreatedSchema(ctx, conn)
	if err != nil {
		return err
	}
	if ours == "" {
		return fmt.Errorf("%s generates load: refusing %s, where pooltop set nothing up (no pooltop_meta marker in any schema); run without --dsn for a throwaway server, create a pooltop schema first with `pooltop migrate --dsn … --schema %s`, or pass --allow-writes", what, where, g.schema)
	}
	return nil
}

// migrate applies the schema on dsn (from names where dsn came from).
func (g *globals) migrate(ctx context.Context, dsn, from string, o migrations.Options) (migrations.Result, error) {
	pcfg, err := engine.PoolConfig(engine.ConnOptions{DSN: dsn, From: from, Schema: g.schema, AppName: "pooltop-migrate"})
	if err != nil {
		return migrations.Result{}, err
	}
	cc := pcfg.ConnConfig
	delete(cc.RuntimeParams, "search_path")
	pooler, err := engine.DetectPooler(ctx, cc)
	if err != nil {
		return migrations.Result{}, engine.ConnectError(cc, err)
	}
	if pooler != "" {
		return g.migrateThroughPooler(ctx, cc, pooler, o)
	}
	res, err := migrations.Apply(ctx, cc, g.schema, o)
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return res, engine.ConnectError(cc, err) // one line: refused, wrong password, no such database
	}
	return res, err
}

// migrateThroughPooler is migrate where a pooler sits in front of the
// server. Migrating needs one session from start to end (an advisory lock,
// DDL over several transactions, a concurrent index build), which a pooler
// in transaction mode does not keep: a schema that is up to date passes,
// anything else is refused with where to run the migration instead.
func (g *globals) migrateThroughPooler(ctx context.Context, cc *pgx.ConnConfig, pooler string, o migrations.Options) (migrations.Result, error) {
	conn, err := pgx.ConnectConfig(ctx, engine.PoolerConnConfig(cc))
	if err != nil {
		return migrations.Result{}, engine.ConnectError(cc, err)
	}
	defer conn.Close(context.Background())
	st, err := migrations.Inspect(ctx, conn, g.schema)
	if err != nil {
		return migrations.Result{}, fmt.Errorf("migrate: %w", err)
	}
	steps, adopt, err := migrations.Plan(st, o)
	if err != nil {
		return migrations.Result{}, err
	}
	res := migrations.Result{Version: st.Version, Adopted: adopt}
	for _, s := range steps {
		res.Statements = append(res.Statements, s.SQL)
	}
	if len(steps) == 0 || o.DryRun {
		return res, nil
	}
	where := fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
	return res, fmt.Errorf("migrate: %s is a connection pooler, not PostgreSQL itself (%s), and schema %s needs migrating, which takes one session from start to end: run `pooltop migrate` against the PostgreSQL server behind it (its own host and port), then use the pooler for everything else: %w",
		where, pooler, pgx.Identifier{g.schema}.Sanitize(), engine.ErrPooler)
}

// loadFlags adds the flags of the commands that generate load (bench,
// chaos): --json, described by jsonHelp, and --allow-writes.
func (g *globals) loadFlags(c *cobra.Command, jsonHelp string) {
	g.jsonFlag(c, jsonHelp)
	g.allowWritesFlag(c, "with --dsn: run even in a database where pooltop created no pool")
}

// scratchDefault gives bench and chaos a schema of their own, pooltop_ and
// the command's name, when --schema is not given; with --partitions N, a
// schema for that layout (pooltop_bench_p4), so that a plain scratch pool
// and a partitioned one never stand in each other's way.
func scratchDefault(g *globals, c *cobra.Command, name string) {
	if f := c.Flag("schema"); f == nil || !f.Changed {
		g.schema = "pooltop_" + name
		if f := c.Flag("partitions"); f != nil && f.Value.String() != "0" {
			g.schema += "_p" + f.Value.String()
		}
	}
}

// partitionsFlag adds --partitions to a command that creates its pool.
func partitionsFlag(c *cobra.Command, n *int) {
	c.Flags().IntVar(n, "partitions", 0, fmt.Sprintf("create the pool hash-partitioned on id in N partitions (%d..%d; 0: a plain table)", migrations.MinPartitions, migrations.MaxPartitions))
}

// checkScratch checks that bench and chaos work in a schema of their own:
// they empty it, so it must be one pooltop made for the purpose.
func checkScratch(schema, name string) error {
	if !strings.HasPrefix(schema, "pooltop_") {
		return usageError{fmt.Errorf("%s empties the pool it runs on: give it a --schema starting with pooltop_ (default pooltop_%s), never a pool you keep", name, name)}
	}
	return nil
}

// freshPool empties the schema's pool and ledger and fills it with size ids.
// ours is the run id of the caller's last workload, whose leases left live
// when it stopped do not refuse the reset ("" for none).
func freshPool(ctx context.Context, d *database, size int, ours string) error {
	if err := d.eng.ResetPool(ctx, ours); err != nil {
		return err
	}
	if _, err := d.eng.Seed(ctx, size); err != nil {
		return err
	}
	_, err := d.pool.Exec(ctx, "VACUUM ANALYZE resource_pool")
	return err
}
