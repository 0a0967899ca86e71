// Package migrations holds pooltop's schema as embedded SQL and applies it
// with goose, so that `pooltop migrate`, the demo, bench, chaos and the tests
// all create exactly the same tables.
//
// A schema that already holds a resource_pool pooltop did not create (a pool
// built by hand, often in production) is adopted only when the
// caller allows it: Inspect reads what is there without writing, Plan says
// every statement Apply would run (migrate --dry-run prints them), and on a
// table that holds rows the partial indexes are built CONCURRENTLY, so that
// the workers' claims never queue behind the build.
package migrations

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
)

//go:embed *.sql
var files embed.FS

// VersionTable is the table goose records applied versions in, kept beside
// the pool in the same schema.
const VersionTable = "pooltop_migrations"

// lockClass is the first key of the advisory lock a migration of a schema
// takes; the second is a hash of the schema's name. Two processes migrating
// one schema at once run one after the other instead of colliding on
// CREATE SCHEMA or the version table; other schemas do not wait.
const lockClass = 0x706f6f6c // "pool"

// lockSchema takes schema's migration lock on conn and returns its release.
// It waits for as long as ctx allows, not the session's lock_timeout or
// statement_timeout: a migration that builds indexes on a big table holds
// it for minutes, and the next one should take its turn, not fail.
func lockSchema(ctx context.Context, conn *pgx.Conn, schema string) (func(), error) {
	if err := untimed(ctx, conn, "SELECT pg_advisory_lock($1, hashtext($2))", lockClass, schema); err != nil {
		return nil, err
	}
	return func() {
		conn.Exec(context.Background(), "SELECT pg_advisory_unlock($1, hashtext($2))", lockClass, schema) //nolint:errcheck // the lock also ends with the session
	}, nil
}

// untimed runs one statement that may rightly wait or run for minutes (the
// turn of a migration, a concurrent index build) bounded by ctx only, then
// gives the session back its own lock_timeout and statement_timeout, under
// which the other DDL runs. On an error the session is left as it is: Apply
// ends it.
func untimed(ctx context.Context, conn *pgx.Conn, sql string, args ...any) error {
	if _, err := conn.Exec(ctx, "SELECT set_config('lock_timeout', '0', false), set_config('statement_timeout', '0', false)"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, sql, args...); err != nil {
		return err
	}
	for _, reset := range []string{"RESET lock_timeout", "RESET statement_timeout"} {
		if _, err := conn.Exec(ctx, reset); err != nil {
			return err
		}
	}
	return nil
}

// Origin says how a schema came to hold a pooltop pool; it is kept in
// pooltop_meta under the key "origin".
type Origin string

const (
	// OriginNone means no pooltop marker: pooltop did not set this schema up.
	OriginNone Origin = ""
	// OriginCreated means pooltop created the pool table (or a version of pooltop
	// that did not yet record the origin set the schema up).
	OriginCreated Origin = "created"
	// OriginAdopted means the pool existed and `migrate --allow-writes` adopted it.
	// Commands that generate load refuse it unless told otherwise.
	OriginAdopted Origin = "adopted"
)

// Names of the partial indexes pooltop creates.
const (
	UnusedIndex  = "idx_resource_unused"
	PendingIndex = "idx_resource_pending_expiry"
)

var (
	// ErrForeignPool means the schema holds a resource_pool that pooltop did not
	// create, and the caller did not allow adopting it.
	ErrForeignPool = errors.New("resource_pool was not created by pooltop")
	// ErrIncompatible means the existing resource_pool cannot be adopted as it is.
	ErrIncompatible = errors.New("resource_pool cannot be adopted")
)

// State is what a schema holds, read without writing anything.
type State struct {
	Schema       string
	SchemaExists bool
	Pool         bool // resource_pool exists (a table or a partitioned table)
	PoolRows     bool // and holds at least one row
	Partitioned  bool
	Partitions   []string // leaf partitions, schema-qualified and quoted
	Origin       Origin
	Version      int64             // newest goose version applied, 0 for none
	Columns      map[string]string // column name → format_type of resource_pool
	UniqueID     bool              // id has a unique index (the ledger's foreign key needs one)
	UnusedIndex  string            // a valid partial index on id WHERE status = 'UNUSED', if any
	PendingIndex string            // a valid partial index on leased_until WHERE status = 'PENDING', if any
	Invalid      []string          // pooltop's index names left invalid by an interrupted build
	// Citus: what the server says of Citus (nothing when not installed).
	Citus CitusCluster
	// Distribution is the column Citus distributes resource_pool by, "" for
	// a table Citus does not distribute.
	Distribution string
}

// Marked reports whether pooltop set the schema up (created or adopted it).
func (s *State) Marked() bool { return s.Origin != OriginNone }

// Inspect reads the state of schema on conn. It writes nothing and takes no lock.
func Inspect(ctx context.Context, conn *pgx.Conn, schema string) (*State, error) {
	st := &State{Schema: schema, Columns: map[string]string{}}
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	var poolOID *uint32
	var kind *string
	err := conn.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1),
       c.oid, c.relkind::text
FROM (SELECT 1) AS one
LEFT JOIN pg_class c ON c.relname = 'resource_pool' AND c.relkind IN ('r', 'p')
     AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&st.SchemaExists, &poolOID, &kind)
	if err != nil {
		return nil, fmt.Errorf("inspect schema %s: %w", schema, err)
	}
	if st.Citus, err = InspectCitus(ctx, conn); err != nil {
		return nil, err
	}
	if poolOID != nil {
		st.Pool, st.Partitioned = true, *kind == "p"
		if err := inspectPool(ctx, conn, st, *poolOID, q("resource_pool")); err != nil {
			return nil, err
		}
		if st.Citus.Installed {
			err := conn.QueryRow(ctx, `SELECT coalesce((SELECT column_to_column_name(logicalrelid, partkey) FROM pg_dist_partition WHERE logicalrelid = $1::oid::regclass), '')`, *poolOID).Scan(&st.Distribution)
			if err != nil {
				return nil, fmt.Errorf("inspect the distribution of resource_pool: %w", err)
			}
		}
	}
	var meta, versions bool
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL, to_regclass($2) IS NOT NULL`,
		q("pooltop_meta"), q(VersionTable)).Scan(&meta, &versions); err != nil {
		return nil, fmt.Errorf("inspect schema %s: %w", schema, err)
	}
	if meta {
		rows, err := conn.Query(ctx, "SELECT key, value FROM "+q("pooltop_meta"))
		if err != nil {
			return nil, fmt.Errorf("read the pooltop marker: %w", err)
		}
		kv := map[string]string{}
		var k, v string
		if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { kv[k] = v; return nil }); err != nil {
			return nil, fmt.Errorf("read the pooltop marker: %w", err)
		}
		if kv["created_by"] == "pooltop" {
			st.Origin = OriginCreated
			if kv["origin"] == string(OriginAdopted) {
				st.Origin = OriginAdopted
			}
		}
	}
	if versions {
		if err := conn.QueryRow(ctx, "SELECT coalesce(max(version_id), 0) FROM "+q(VersionTable)+" WHERE is_applied").Scan(&st.Version); err != nil {
			return nil, fmt.Errorf("read the migration version: %w", err)
		}
	}
	return st, nil
}

func inspectPool(ctx context.Context, conn *pgx.Conn, st *State, oid uint32, qualified string) error {
	rows, err := conn.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, oid)
	if err != nil {
		return fmt.Errorf("inspect resource_pool: %w", err)
	}
	var column, typ string
	if _, err := pgx.ForEachRow(rows, []any{&column, &typ}, func() error { st.Columns[column] = typ; return nil }); err != nil {
		return fmt.Errorf("inspect resource_pool: %w", err)
	}
	// Indexes: a valid partial index with the claim's (or the reaper's)
	// predicate on the right column serves, whatever its name.
	rows, err = conn.Query(ctx, `
SELECT c.relname, i.indisvalid, i.indisunique, i.indnatts,
       coalesce(pg_get_expr(i.indpred, i.indrelid), ''),
       coalesce((SELECT attname FROM pg_attribute WHERE attrelid = i.indrelid AND attnum = i.indkey[0]), '')
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
WHERE i.indrelid = $1`, oid)
	if err != nil {
		return fmt.Errorf("inspect the indexes of resource_pool: %w", err)
	}
	var name, pred, first string
	var valid, unique bool
	var natts int
	_, err = pgx.ForEachRow(rows, []any{&name, &valid, &unique, &natts, &pred, &first}, func() error {
		switch {
		case !valid:
			if name == UnusedIndex || name == PendingIndex {
				st.Invalid = append(st.Invalid, name)
			}
		case unique && natts == 1 && first == "id" && pred == "":
			st.UniqueID = true
		case first == "id" && strings.Contains(pred, "'UNUSED'") && st.UnusedIndex == "":
			st.UnusedIndex = name
		case first == "leased_until" && strings.Contains(pred, "'PENDING'") && st.PendingIndex == "":
			st.PendingIndex = name
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("inspect the indexes of resource_pool: %w", err)
	}
	if st.Partitioned {
		parts, err := conn.Query(ctx, `
SELECT format('%I.%I', n.nspname, c.relname), c.relkind::text
FROM pg_partition_tree($1::regclass) t JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE t.level > 0 ORDER BY c.relname`, qualified)
		if err != nil {
			return fmt.Errorf("list the partitions of resource_pool: %w", err)
		}
		var part, kind string
		_, err = pgx.ForEachRow(parts, []any{&part, &kind}, func() error {
			if kind == "p" {
				return fmt.Errorf("%w: %s is partitioned again (several levels of partitions): create the partial indexes by hand", ErrIncompatible, part)
			}
			st.Partitions = append(st.Partitions, part)
			return nil
		})
		if err != nil {
			return err
		}
	}
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM "+qualified+")").Scan(&st.PoolRows); err != nil {
		return fmt.Errorf("inspect resource_pool: %w", err)
	}
	return nil
}

// Options say what Apply may do.
type Options struct {
	// Adopt allows upgrading a resource_pool that pooltop did not create
	// (migrate --allow-writes); without it Apply returns ErrForeignPool.
	Adopt bool
	// DryRun makes Apply plan and return the statements without running any.
	DryRun bool
	// Partitions, when not 0, creates resource_pool hash-partitioned on id
	// in that many partitions (MinPartitions..MaxPartitions). It only
	// creates: a schema whose pool exists with another shape is refused
	// (ErrPartitions), one with the same number of partitions is upgraded
	// as usual.
	Partitions int
}

// Bounds of Options.Partitions. One partition is a plain table with extra
// planning; past a few hundred, every statement on the parent pays for
// planning over all of them.
const (
	MinPartitions = 2
	MaxPartitions = 256
)

// ErrPartitions means the partitioning asked for cannot be had on this schema.
var ErrPartitions = errors.New("cannot partition resource_pool")

// Result is what Apply did (or, with DryRun, would do).
type Result struct {
	Version    int64
	Adopted    bool     // a foreign resource_pool was (or would be) adopted
	Statements []string // every statement run, in order (with DryRun: planned)
}

// Step is one statement of a plan. Concurrent steps run outside any
// transaction and may wait, without blocking anyone, for older
// transactions to end.
type Step struct {
	SQL        string
	Concurrent bool
	// Goose: the step is an embedded migration, applied by goose (SQL is
	// its text, for the dry run).
	Goose bool
}

// contract lists the basic columns, the types pooltop works with, and how a
// missing one is added (the migration adds them all with IF NOT EXISTS).
var contract = []struct {
	name  string
	types []string
	add   string // "" when the column cannot be added: the table is no pool without it
}{
	{"id", []string{"bigint", "integer", "smallint"}, ""},
	{"identifier", []string{"text", "character varying", "character", "uuid"}, ""},
	{"status", []string{"text", "character varying", "character"}, ""},
	{"leased_until", []string{"timestamp with time zone"}, "timestamptz"},
	{"lease_token", []string{"bigint"}, "bigint NOT NULL DEFAULT 0"},
	{"updated_at", []string{"timestamp with time zone"}, "timestamptz DEFAULT now()"},
	{"holder", []string{"text", "character varying"}, "text"},
}

// checkAdoptable says why an existing resource_pool cannot be adopted as it is.
func checkAdoptable(st *State) error {
	for _, c := range contract {
		typ, ok := st.Columns[c.name]
		if !ok {
			if c.add == "" {
				return fmt.Errorf("%w: it has no %s column: pooltop needs the basic columns (id, identifier, status, leased_until, lease_token, updated_at)", ErrIncompatible, c.name)
			}
			continue
		}
		base, _, _ := strings.Cut(typ, "(")
		okType := false
		for _, want := range c.types {
			okType = okType || base == want
		}
		if !okType {
			return fmt.Errorf("%w: column %s is %s, pooltop needs %s (ALTER TABLE %s.resource_pool ALTER COLUMN %s TYPE %s)",
				ErrIncompatible, c.name, typ, strings.Join(c.types, " or "), pgx.Identifier{st.Schema}.Sanitize(), c.name, c.types[0])
		}
	}
	if !st.UniqueID {
		return fmt.Errorf("%w: id has no unique index, and the ledger's foreign key needs one (ALTER TABLE … ADD PRIMARY KEY (id))", ErrIncompatible)
	}
	return nil
}

// Plan returns the statements that bring the schema described by st to the
// newest version, in order, and whether they adopt a foreign pool. It
// returns ErrForeignPool when the schema holds a resource_pool pooltop did
// not create and neither o.Adopt nor o.DryRun is set, and ErrIncompatible
// when that table cannot be adopted as it is.
func Plan(st *State, o Options) ([]Step, bool, error) {
	var steps []Step
	quoted := pgx.Identifier{st.Schema}.Sanitize()
	if !st.Pool && st.Version > 0 {
		return nil, false, fmt.Errorf("%w: schema %s records pooltop migrations but has no resource_pool (it was dropped): drop %s.%s, or the schema, and migrate again",
			ErrIncompatible, quoted, quoted, VersionTable)
	}
	if st.Citus.Installed {
		if err := checkCitus(st, o); err != nil {
			return nil, false, err
		}
	} else if err := checkPartitions(st, o.Partitions); err != nil {
		return nil, false, err
	}
	if !st.SchemaExists {
		steps = append(steps, Step{SQL: "CREATE SCHEMA IF NOT EXISTS " + quoted})
	}
	switch {
	case !st.Pool && st.Citus.Installed:
		steps = append(steps, Step{SQL: citusPool(st.Schema)})
	case !st.Pool && o.Partitions > 0:
		steps = append(steps, Step{SQL: partitionedPool(st.Schema, o.Partitions)})
	}
	adopt := st.Pool && !st.Marked()
	if adopt {
		if err := checkAdoptable(st); err != nil {
			return nil, false, err
		}
		if !o.Adopt && !o.DryRun {
			return nil, false, fmt.Errorf("%w: schema %s holds a resource_pool without the pooltop marker (a pool built by hand, perhaps in production); adopting it adds the holder column, partial indexes built CONCURRENTLY, autovacuum settings, business_ledger and pooltop_meta: review them with `pooltop migrate --dry-run`, then pass --allow-writes",
				ErrForeignPool, quoted)
		}
		meta := pgx.Identifier{st.Schema, "pooltop_meta"}.Sanitize()
		// Recorded first: an adoption cut short is still not a pool pooltop
		// created, and the next run asks for --allow-writes again.
		steps = append(steps,
			Step{SQL: "CREATE TABLE IF NOT EXISTS " + meta + " (key text PRIMARY KEY, value text NOT NULL)"},
			Step{SQL: "INSERT INTO " + meta + " (key, value) VALUES ('origin', 'adopted') ON CONFLICT (key) DO UPDATE SET value = 'adopted'"})
		for _, name := range st.Invalid {
			steps = append(steps, Step{SQL: "DROP INDEX CONCURRENTLY IF EXISTS " + pgx.Identifier{st.Schema, name}.Sanitize(), Concurrent: true})
		}
		pool := pgx.Identifier{st.Schema, "resource_pool"}.Sanitize()
		if st.UnusedIndex == "" {
			steps = append(steps, indexSteps(st, pool, UnusedIndex, "(id) WHERE status = 'UNUSED'")...)
		}
		if st.PendingIndex == "" {
			if _, ok := st.Columns["leased_until"]; !ok {
				steps = append(steps, Step{SQL: "ALTER TABLE " + pool + " ADD COLUMN IF NOT EXISTS leased_until timestamptz"})
			}
			steps = append(steps, indexSteps(st, pool, PendingIndex, "(leased_until) WHERE status = 'PENDING'")...)
		}
	}
	srcs, err := sources()
	if err != nil {
		return nil, false, err
	}
	for _, s := range srcs {
		if s.version > st.Version {
			steps = append(steps, Step{SQL: fmt.Sprintf("-- migration %d (%s), in schema %s:\n%s", s.version, s.name, quoted, s.up), Goose: true})
		}
	}
	if st.Citus.Installed {
		for _, f := range citusFunctions(st.Schema) {
			steps = append(steps, Step{SQL: f})
		}
	}
	if !st.Pool {
		meta := pgx.Identifier{st.Schema, "pooltop_meta"}.Sanitize()
		steps = append(steps, Step{SQL: "INSERT INTO " + meta + " (key, value) VALUES ('origin', 'created') ON CONFLICT (key) DO NOTHING"})
	}
	return steps, adopt, nil
}

// checkPartitions says why a pool of n partitions (0: not partitioned, no
// demand) cannot be had on the schema st describes.
func checkPartitions(st *State, n int) error {
	quoted := pgx.Identifier{st.Schema}.Sanitize()
	switch {
	case n == 0:
		return nil
	case n < MinPartitions || n > MaxPartitions:
		return fmt.Errorf("%w: --partitions %d is out of range: give between %d and %d partitions", ErrPartitions, n, MinPartitions, MaxPartitions)
	case st.Pool && !st.Partitioned:
		return fmt.Errorf("%w: schema %s already holds an unpartitioned resource_pool, and migrate only creates partitions, it does not move rows into them: migrate without --partitions, or create the partitioned pool in another --schema", ErrPartitions, quoted)
	case st.Pool && len(st.Partitions) != n:
		return fmt.Errorf("%w: schema %s already holds resource_pool in %d partitions, not %d: migrate with --partitions %d (or without), or create the pool in another --schema", ErrPartitions, quoted, len(st.Partitions), n, len(st.Partitions))
	}
	return nil
}

// partitionedPool creates resource_pool hash-partitioned on id in n
// partitions, with 00001's columns and checks, and marks the schema as
// pooltop's, in one statement run as one transaction (a migration cut short
// leaves either nothing or a marked pool that the next run completes).
// 00001 then finds the table and adds the partial indexes on the parent,
// which creates them on every partition, the autovacuum settings on each
// partition, the ledger and the marker. A unique constraint on a partitioned
// table must contain the partition key, so identifier is unique per
// (identifier, id) only: the seed's identifiers are unique by construction,
// and nothing in the database enforces it for rows inserted by hand.
func partitionedPool(schema string, n int) string {
	pool := pgx.Identifier{schema, "resource_pool"}.Sanitize()
	var b strings.Builder
	fmt.Fprintf(&b, `-- resource_pool hash-partitioned on id in %d partitions, in schema %s:
CREATE TABLE IF NOT EXISTS %s (
    id           bigint GENERATED BY DEFAULT AS IDENTITY,
    identifier   text NOT NULL,
    status       text NOT NULL DEFAULT 'UNUSED',
    leased_until timestamptz,
    lease_token  bigint NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    holder       text,
    CONSTRAINT resource_pool_pkey PRIMARY KEY (id),
    CONSTRAINT resource_pool_identifier_id_key UNIQUE (identifier, id),
    CONSTRAINT resource_pool_status_check CHECK (status IN ('UNUSED', 'PENDING', 'CONSUMED')),
    CONSTRAINT resource_pool_token_check CHECK (lease_token >= 0),
    CONSTRAINT resource_pool_unused_check CHECK (status <> 'UNUSED' OR (leased_until IS NULL AND holder IS NULL))
) PARTITION BY HASH (id);
`, n, pgx.Identifier{schema}.Sanitize(), pool)
	for i := range n {
		fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s PARTITION OF %s FOR VALUES WITH (MODULUS %d, REMAINDER %d);\n",
			pgx.Identifier{schema, PartitionName(i)}.Sanitize(), pool, n, i)
	}
	meta := pgx.Identifier{schema, "pooltop_meta"}.Sanitize()
	fmt.Fprintf(&b, "CREATE TABLE IF NOT EXISTS %s (key text PRIMARY KEY, value text NOT NULL);\n", meta)
	fmt.Fprintf(&b, "INSERT INTO %s (key, value) VALUES ('created_by', 'pooltop'), ('origin', 'created'), ('partitions', '%d') ON CONFLICT (key) DO NOTHING", meta, n)
	return b.String()
}

// PartitionName is the name migrate gives the i-th partition of the pool
// (the one holding the ids whose hash leaves remainder i).
func PartitionName(i int) string { return fmt.Sprintf("resource_pool_p%d", i) }

// indexSteps builds a partial index without blocking writes: CONCURRENTLY on
// a plain table; on a partitioned one, CONCURRENTLY on each partition, then
// the parent's index on ONLY the parent with each partition's attached.
func indexSteps(st *State, pool, name, def string) []Step {
	if !st.Partitioned {
		return []Step{{SQL: fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s %s", pgx.Identifier{name}.Sanitize(), pool, def), Concurrent: true}}
	}
	steps := []Step{}
	var children []string
	for i := range st.Partitions {
		child := fmt.Sprintf("%s_p%d", name, i)
		children = append(children, child)
		steps = append(steps, Step{SQL: fmt.Sprintf("CREATE INDEX CONCURRENTLY IF NOT EXISTS %s ON %s %s", pgx.Identifier{child}.Sanitize(), st.Partitions[i], def), Concurrent: true})
	}
	steps = append(steps, Step{SQL: fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON ONLY %s %s", pgx.Identifier{name}.Sanitize(), pool, def)})
	for _, child := range children {
		steps = append(steps, Step{SQL: fmt.Sprintf("ALTER INDEX %s ATTACH PARTITION %s", pgx.Identifier{st.Schema, name}.Sanitize(), pgx.Identifier{st.Schema, child}.Sanitize())})
	}
	return steps
}

// source is one embedded migration.
type source struct {
	version int64
	name    string
	up      string
}

func sources() ([]source, error) {
	entries, err := fs.Glob(files, "*.sql")
	if err != nil {
		return nil, err
	}
	var out []source
	for _, e := range entries {
		v, err := strconv.ParseInt(strings.SplitN(e, "_", 2)[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migration %s: no version prefix", e)
		}
		b, err := files.ReadFile(e)
		if err != nil {
			return nil, err
		}
		text := string(b)
		_, up, _ := strings.Cut(text, "-- +goose Up\n")
		up, _, _ = strings.Cut(up, "-- +goose Down")
		out = append(out, source{version: v, name: e, up: strings.TrimSpace(up)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].version < out[j].version })
	return out, nil
}

// Apply brings schema to the newest version. It is idempotent and safe to
// run from several processes at once. cfg is not modified; its search_path
// is set to schema on a copy. A foreign resource_pool is adopted only with
// o.Adopt; with o.DryRun nothing is written and the plan is returned.
func Apply(ctx context.Context, cfg *pgx.ConnConfig, schema string, o Options) (Result, error) {
	if schema == "" {
		schema = "public"
	}
	conn, err := pgx.ConnectConfig(ctx, cfg.Copy())
	if err != nil {
		return Result{}, fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close(context.Background())

	if !o.DryRun {
		unlock, err := lockSchema(ctx, conn, schema)
		if err != nil {
			return Result{}, fmt.Errorf("migrate: take the migration lock of schema %s: %w", pgx.Identifier{schema}.Sanitize(), err)
		}
		defer unlock()
	}
	st, err := Inspect(ctx, conn, schema)
	if err != nil {
		return Result{}, fmt.Errorf("migrate: %w", err)
	}
	steps, adopt, err := Plan(st, o)
	if err != nil {
		return Result{}, err
	}
	res := Result{Version: st.Version, Adopted: adopt}
	for _, s := range steps {
		res.Statements = append(res.Statements, s.SQL)
	}
	if o.DryRun {
		return res, nil
	}
	quoted := pgx.Identifier{schema}.Sanitize()
	gooseDone := false
	for _, s := range steps {
		if s.Goose {
			if !gooseDone {
				if err := runGoose(ctx, cfg, schema); err != nil {
					return res, err
				}
			}
			gooseDone = true
			continue
		}
		if err := runStep(ctx, conn, s); err != nil {
			return res, fmt.Errorf("migrate schema %s: %s: %w", quoted, firstLine(s.SQL), err)
		}
	}
	st, err = Inspect(ctx, conn, schema)
	if err != nil {
		return res, fmt.Errorf("migrate: %w", err)
	}
	res.Version = st.Version
	return res, nil
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// runStep runs one planned statement. A concurrent build waits for the
// transactions older than it without blocking anyone, then reads the whole
// table: it may take as long as they run and the table needs, so neither
// timeout applies to it.
func runStep(ctx context.Context, conn *pgx.Conn, s Step) error {
	if s.Concurrent {
		return untimed(ctx, conn, s.SQL)
	}
	_, err := conn.Exec(ctx, s.SQL)
	return err
}

// runGoose applies the embedded migrations that schema lacks.
func runGoose(ctx context.Context, cfg *pgx.ConnConfig, schema string) error {
	quoted := pgx.Identifier{schema}.Sanitize()
	mcfg := cfg.Copy()
	if mcfg.RuntimeParams == nil {
		mcfg.RuntimeParams = map[string]string{}
	}
	mcfg.RuntimeParams["search_path"] = quoted
	// DDL may wait behind a long claim; do not let a short workload timeout cut it.
	mcfg.RuntimeParams["statement_timeout"] = "0"
	db := stdlib.OpenDB(*mcfg)
	defer db.Close()
	// The version table is named without its schema: goose puts it in the
	// session's search_path (the schema), and would otherwise write the
	// schema's name unquoted into its SQL.
	provider, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithTableName(VersionTable),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("migrate schema %s: %w", quoted, err)
	}
	return nil
}

// CreatedSchema names a schema of the database where pooltop created the
// pool (marker present, not adopted), or "" when there is none: a database
// that has one is pooltop's to generate load in. It writes nothing.
func CreatedSchema(ctx context.Context, conn *pgx.Conn) (string, error) {
	rows, err := conn.Query(ctx, `
SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = 'pooltop_meta' AND c.relkind = 'r' AND has_table_privilege(c.oid, 'SELECT')
ORDER BY 1`)
	if err != nil {
		return "", fmt.Errorf("look for pooltop schemas: %w", err)
	}
	candidates, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return "", fmt.Errorf("look for pooltop schemas: %w", err)
	}
	for _, schema := range candidates {
		st, err := Inspect(ctx, conn, schema)
		if err != nil {
			return "", err
		}
		if st.Origin == OriginCreated && st.Pool {
			return schema, nil
		}
	}
	return "", nil
}
