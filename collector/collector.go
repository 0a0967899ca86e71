package collector

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/workload"
)

// WorkloadSource is what the collector reads from a workload running in the
// same process. Reading must not slow the workers (workload.Snapshot takes
// no lock they share).
type WorkloadSource interface {
	Snapshot() workload.Snapshot
	RefreshLeaked(ctx context.Context) (int, error)
}

// AlertConfig holds the alert thresholds; a zero field takes the default,
// the same as pooltop watch's flags.
type AlertConfig struct {
	LockWait time.Duration // a session waits on a lock longer than this (50 ms: a claim should never wait)
	// LockWaitFor: one wait this long raises lock_wait at once (3 s);
	// shorter ones must recur, over LockWait at 3 of the last 5 polls: a
	// commit that waits 100 ms once on a saturated server is not a page,
	// claims that keep waiting are.
	LockWaitFor     time.Duration
	DepletionWithin time.Duration // UNUSED runs out sooner than this at the current burn (15 min)
	// DepletionFor is how long the time to empty must stay under
	// DepletionWithin before the alert is raised (5 s): a burst of claims,
	// or the first seconds of a workload, is not a page. An empty pool
	// raises it at once.
	DepletionFor time.Duration
	ExpiredAfter time.Duration // a lease expired longer ago than this is still PENDING (one reaper interval)
	DeadRatio    float64       // dead / (live + dead) tuples above this
	Connections  float64       // connections above this fraction of max_connections
	// LWLockWaiters: this many sessions or more on the pool wait on an
	// LWLock, the mean of the last 5 polls (4): page-latch contention,
	// which hash partitioning spreads.
	LWLockWaiters int
	// LWLockFor is how long that mean must stay at the threshold before the
	// alert is raised (1 min): a busy but healthy pool queues on its head
	// page in bursts; a queue that lasts a minute is worth a ticket.
	LWLockFor time.Duration
	// NoLeaseFor is how long PENDING ids without a lease must be held
	// before the no_lease alert is raised (10 s): a claim and its first
	// renewal in two statements is not a leak.
	NoLeaseFor time.Duration
	// Starvation: a free id that claims have passed over for this long
	// (the poll intervals in which they took newer ids; 10 s), and by at
	// least StarvationClaims newer claims, raises the starvation alert.
	Starvation time.Duration
	// Hold is how long a raised alert's figure must stay calm (under a
	// lower threshold: half the lock wait, three quarters of the dead
	// ratio, a third more time to depletion, 10 points of connections)
	// before the alert clears (10 s).
	Hold time.Duration
}

// WithDefaults fills the zero thresholds with their defaults.
func (a AlertConfig) WithDefaults() AlertConfig {
	a.LockWait = cmp.Or(a.LockWait, 50*time.Millisecond)
	a.LockWaitFor = cmp.Or(a.LockWaitFor, 3*time.Second)
	a.DepletionWithin = cmp.Or(a.DepletionWithin, 15*time.Minute)
	a.DepletionFor = cmp.Or(a.DepletionFor, 5*time.Second)
	a.ExpiredAfter = cmp.Or(a.ExpiredAfter, time.Second)
	a.DeadRatio = cmp.Or(a.DeadRatio, 0.2)
	a.Connections = cmp.Or(a.Connections, 0.9)
	a.Hold = cmp.Or(a.Hold, 10*time.Second)
	a.LWLockWaiters = cmp.Or(a.LWLockWaiters, 4)
	a.LWLockFor = cmp.Or(a.LWLockFor, time.Minute)
	a.NoLeaseFor = cmp.Or(a.NoLeaseFor, 10*time.Second)
	a.Starvation = cmp.Or(a.Starvation, 10*time.Second)
	return a
}

// Config configures a Collector. Zero fields take defaults.
type Config struct {
	DSN   string
	From  string // where DSN came from, for errors: "--dsn" (default) or "DATABASE_URL"
	Table string // "schema.table" or "table" (public); default public.resource_pool
	// StuckAfter: PENDING rows unchanged for longer count as stuck; default 5 min.
	StuckAfter time.Duration
	// History is how many points each series keeps as polled; default 900
	// (15 minutes at 1 Hz). Older ones are kept coarser, for an hour (History).
	History int
	// CountBudget paces the work done in turn (the UNUSED sweep, the
	// PENDING recounts and walks, the table scan without a PENDING index):
	// while a statement's own time on the server stays under it, its share
	// doubles; past twice that, it halves. Default 400 µs: on a busy server
	// a statement that needs more CPU than the slice its backend gets on
	// waking waits behind every runnable process for a second one. The
	// table scan keeps at least 1 ms: it is the only count of PENDING
	// there, and its pace is the age of those figures. (Measured in
	// docs/benchmarks.md, "The collector's choices".)
	CountBudget time.Duration
	Alerts      AlertConfig
	Workload    WorkloadSource
}

// DefaultHistory is Config.History's default: 15 minutes at 1 Hz.
const DefaultHistory = 900

// Limits of the poll interval the callers (watch, the dashboard) offer.
const (
	MinInterval = 250 * time.Millisecond
	MaxInterval = 60 * time.Second
)

func (c *Config) defaults() error {
	c.Table = cmp.Or(c.Table, "public.resource_pool")
	c.StuckAfter = cmp.Or(c.StuckAfter, 5*time.Minute)
	c.History = cmp.Or(c.History, DefaultHistory)
	c.CountBudget = cmp.Or(c.CountBudget, 400*time.Microsecond)
	c.Alerts = c.Alerts.WithDefaults()
	a := &c.Alerts
	switch {
	case c.StuckAfter < 0 || c.History < 1 || c.CountBudget < 0:
		return fmt.Errorf("collector: StuckAfter %v, History %d, CountBudget %v: out of range", c.StuckAfter, c.History, c.CountBudget)
	case a.LWLockWaiters < 1:
		return fmt.Errorf("collector: LWLock waiters %d: at least 1", a.LWLockWaiters)
	case a.LockWait < 0 || a.DepletionWithin < 0 || a.ExpiredAfter < 0:
		return fmt.Errorf("collector: alert durations must not be negative (lock wait %v, depletion %v, expired %v)", a.LockWait, a.DepletionWithin, a.ExpiredAfter)
	case math.IsNaN(a.DeadRatio) || a.DeadRatio < 0 || a.DeadRatio > 1:
		return fmt.Errorf("collector: dead ratio %v: a fraction between 0 and 1", a.DeadRatio)
	case math.IsNaN(a.Connections) || a.Connections <= 0 || a.Connections > 1:
		return fmt.Errorf("collector: connections %v: a fraction above 0 and at most 1", a.Connections)
	}
	return nil
}

var ident = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_$]{0,62}$`)

// ParseTable splits "schema.table" (or "table", in public) and checks both
// parts are plain identifiers.
func ParseTable(s string) (schema, table string, err error) {
	schema, table, found := strings.Cut(s, ".")
	if !found {
		schema, table = "public", s
	}
	if !ident.MatchString(schema) || !ident.MatchString(table) {
		return "", "", fmt.Errorf("table %q: give schema.table with plain identifiers (letters, digits, _)", s)
	}
	return schema, table, nil
}

// target is what the collector learned about the table once, at start.
type target struct {
	oid          uint32
	leaves       []uint32 // the table, or its partitions: where rows and statistics live
	leafNames    []string
	leafQuoted   []string // the leaves schema-qualified and quoted, for statements
	partitioned  bool
	ledgerOID    uint32 // 0 when there is no business_ledger beside it
	fleet        string // quoted pooltop_worker beside it, "" when there is none (or it cannot be read)
	qualified    string // quoted schema.table
	schema, name string
	hasLeased    bool // leased_until column
	hasUpdated   bool // updated_at column
	hasHolder    bool // holder column
	idIndex      bool // an index whose first column is id, not partial: the rows are counted through it
	unusedIndex  string
	pendingIndex string
	// pendingPages is the size of the PENDING index when watch started,
	// tablePages the table's (of every partition).
	pendingPages, tablePages int64
	version                  int  // server_version_num
	monitor                  bool // pg_monitor or superuser
	versionText              string
	citus                    bool // Citus distributes the table (see citus.go)
}

// Collector polls one pool. Poll is safe to call from one goroutine at a
// time (the dashboard keeps one poll in flight); Series, Events and Info
// may be read from any goroutine.
type Collector struct {
	cfg  Config
	pool *engine.Pool
	t    target

	unused   unusedCounter
	passOver passOver
	// lockWaits: at the last poll a session of the database waited on a
	// lock, so this one reads the lock waits with the server statement.
	// lockReads counts the polls that read them.
	lockWaits bool
	lockReads int
	// On Citus (see citus.go): UNUSED and the rows at the last poll every
	// node answered, and the nodes that did not answer at the last poll.
	citusPrev *Pool
	citusDown map[string]bool
	total     totalCounter
	pending   pendingCounter
	census    census
	// leaseless counts the PENDING rows without a lease by ranges of the
	// table while there are too many to count from the index (see
	// pendingCounter.ranged).
	leaseless census
	holders   holderSample
	claims    claimReader
	fleet     fleetReader

	mu     sync.Mutex // guards what follows
	series map[string]*History
	notes  []Event // noted since the last poll recorded (see Note)
	events *eventLog
	// gen counts the resets: a poll begun before the last one is not recorded.
	gen int
	// rebuilt: the pool was made anew, the counts kept between polls are void.
	rebuilt bool
	// suspended: the pool is being rebuilt; polls are not recorded.
	suspended bool
	prev      *raw
	burn      float64 // smoothed
	// burnSamples counts the burn samples so far, for the warm-up.
	burnSamples int
	alerts      map[string]*alertState
	lastTotal   int64 // the pool's rows at the last poll: small pools are counted whole (exactRows)
	// rowsCounted: the pool's rows were counted at a poll (a whole count,
	// or a pass of the total): from then on lastTotal decides whether a
	// poll counts the pool whole (see exactSmall).
	rowsCounted bool
	// rows estimates the pool's rows until they are counted.
	rows         rowEstimate
	lwHighSince  time.Time // since when the LWLock waiters' mean has been at the threshold
	noLeaseSince time.Time // since when PENDING ids without a lease have been held
	lockRecent   []bool    // the last polls' longest lock wait over the threshold
	empty        bool      // the pool was empty at the last poll
	// parts count the UNUSED ids of each partition (empty on a plain
	// table, or one of more than MaxPartitionCounts partitions).
	parts partitionCounts
	// drainingSince is when the time to empty fell under the threshold.
	drainingSince time.Time
	// lwRecent holds the LWLock waiters of the last lwlockPolls polls: the
	// alert weighs their mean, not one sample.
	lwRecent []int
	// sampleFrom is the start of the interval the latest rates cover.
	sampleFrom time.Time
	polls      int // polls that returned
	// seat is the backend that ran the last poll (0: none yet; see
	// session).
	seat uint32
}

// New connects with its own small read-only pool and resolves the table.
func New(ctx context.Context, cfg Config) (*Collector, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	schema, table, err := ParseTable(cfg.Table)
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		from := cfg.From
		if from == "" {
			from = "--dsn"
		}
		return nil, engine.ParseError(cfg.DSN, from, err)
	}
	pcfg.MaxConns = 3
	// pgxpool pings a connection idle for over a second before handing it
	// out: at a poll a second that is one more round trip per poll. A broken
	// connection fails one poll instead, which the caller shows and retries.
	pcfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > time.Minute }
	// Watch mode must never write: every transaction of this pool is
	// read-only. Behind a pooler the settings travel with each statement
	// (engine.Pool), so this holds per transaction, not per session.
	settings := []engine.Setting{
		{Name: "application_name", Value: "pooltop-collector"},
		{Name: "statement_timeout", Value: "2000"},
		{Name: "lock_timeout", Value: strconv.Itoa(lockTimeoutMS)},
		{Name: "idle_in_transaction_session_timeout", Value: "5000"},
		{Name: "default_transaction_read_only", Value: "on"},
		// Plan each statement once: custom plans of these catalog and
		// statistics joins cost more to plan at every bind than they take
		// to run.
		{Name: "plan_cache_mode", Value: "force_generic_plan"},
		// Never compile these small statements: a plan whose estimated cost
		// passes jit_above_cost (a generic plan's estimates are rough) would
		// spend hundreds of milliseconds in LLVM at every execution.
		{Name: "jit", Value: "off"},
		// Nor start parallel workers: a generic plan may choose a parallel
		// aggregate for a count that finds nothing, and pay for the workers'
		// start (milliseconds, and processes on the server) at every poll.
		{Name: "max_parallel_workers_per_gather", Value: "0"},
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 {
		pcfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	// Every statement names the table with its schema.
	pool, err := engine.NewPool(ctx, pcfg, engine.PoolOptions{Settings: settings, QualifiedNames: true})
	if err != nil {
		return nil, err
	}
	c := &Collector{cfg: cfg, pool: pool, series: map[string]*History{}, events: newEventLog(200), alerts: map[string]*alertState{}}
	for _, s := range allSeries {
		c.series[s] = NewHistory(cfg.History)
	}
	if err := c.namingLockHolders(ctx, func() error { return c.resolve(ctx, schema, table) }); err != nil {
		pool.Close()
		return nil, err
	}
	c.unused.seeks = true
	c.census.byTID, c.census.parts = c.t.version >= 140000, int64(len(c.t.leaves))
	c.leaseless = census{byTID: c.census.byTID, parts: c.census.parts, leaseless: true}
	c.pending.canRange = c.census.byTID || c.t.idIndex
	c.pending.large = c.t.pendingPages > largePending
	if c.startsInStages() {
		c.pending.firstWalk, c.pending.walkLater = minPending, true
	}
	c.claims.probe(ctx, pool, c.t.name, c.t.version)
	// The session that resolved the table has read some of the catalog the
	// first poll needs: the polls run on it (see session).
	for _, conn := range pool.Raw().AcquireAllIdle(ctx) {
		c.seat = conn.Conn().PgConn().PID()
		conn.Release()
	}
	return c, nil
}

// Close releases the collector's connections.
func (c *Collector) Close() { c.pool.Close() }

// Config returns the configuration in force (with defaults applied).
func (c *Collector) Config() Config { return c.cfg }

// ErrNoTable is returned when the table does not exist or is not visible.
var ErrNoTable = errors.New("table not found")

func (c *Collector) resolve(ctx context.Context, schema, table string) error {
	t := &c.t
	t.schema, t.name = schema, table
	t.qualified = pgx.Identifier{schema, table}.Sanitize()
	err := c.pool.QueryRow(ctx, `
SELECT current_setting('server_version_num')::int, current_setting('server_version'),
       pg_has_role(current_user, 'pg_monitor', 'MEMBER') OR (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)`).
		Scan(&t.version, &t.versionText, &t.monitor)
	if err != nil {
		return err
	}
	if t.version < 120000 {
		return fmt.Errorf("PostgreSQL %s is too old: pooltop watch needs 12 or newer", t.versionText)
	}
	var kind string
	var usage bool
	err = c.pool.QueryRow(ctx, `
SELECT c.oid, c.relkind::text, has_schema_privilege(n.oid, 'USAGE') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`, schema, table).Scan(&t.oid, &kind, &usage)
	if errors.Is(err, pgx.ErrNoRows) {
		var exists bool
		if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)`, schema).Scan(&exists); err != nil {
			return err
		}
		if !exists {
			return fmt.Errorf("%w: schema %s does not exist: check --table (schema.table)", ErrNoTable, schema)
		}
		return fmt.Errorf("%w: %s.%s does not exist or this role cannot see it: check --table (schema.table) and the role's privileges", ErrNoTable, schema, table)
	}
	if err != nil {
		return err
	}
	if !usage {
		return fmt.Errorf("this role has no USAGE on schema %s: grant it (GRANT USAGE ON SCHEMA %s TO …)", schema, pgx.Identifier{schema}.Sanitize())
	}
	if kind != "r" && kind != "p" {
		what := map[string]string{"v": "a view", "m": "a materialized view", "f": "a foreign table", "S": "a sequence", "i": "an index", "c": "a type"}[kind]
		if what == "" {
			what = "not a table (relkind " + kind + ")"
		}
		return fmt.Errorf("%s.%s is %s: point --table at the pool's table itself (pooltop reads its indexes and statistics)", schema, table, what)
	}
	if t.citus, err = c.citusDistributed(ctx, t.oid); err != nil {
		return err
	}
	t.partitioned = kind == "p"
	t.leaves, t.leafNames, t.leafQuoted = []uint32{t.oid}, []string{table}, []string{t.qualified}
	if t.partitioned {
		// Rows, statistics and vacuum live in the partitions; the parent has
		// none. In partition order: by name, shorter first (p2 before p10).
		rows, err := c.pool.Query(ctx, `SELECT t.relid::oid, c.relname, format('%I.%I', n.nspname, c.relname) FROM pg_partition_tree($1::oid::regclass) t
JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace WHERE t.isleaf ORDER BY length(c.relname), c.relname`, t.oid)
		if err != nil {
			return err
		}
		t.leaves, t.leafNames, t.leafQuoted = nil, nil, nil
		for rows.Next() {
			var oid uint32
			var name, quoted string
			if err := rows.Scan(&oid, &name, &quoted); err != nil {
				rows.Close()
				return err
			}
			t.leaves, t.leafNames, t.leafQuoted = append(t.leaves, oid), append(t.leafNames, name), append(t.leafQuoted, quoted)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
	}
	cols := map[string]string{}
	rows, err := c.pool.Query(ctx, `SELECT attname, format_type(atttypid, NULL) FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped`, t.oid)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name, typ string
		if err := rows.Scan(&name, &typ); err != nil {
			rows.Close()
			return err
		}
		cols[name] = typ
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if cols["id"] == "" || cols["status"] == "" {
		return fmt.Errorf("%s.%s has no id and status columns: it is not a resource pool", schema, table)
	}
	// Every poll compares these columns: a type pooltop cannot compare would
	// fail every poll, forever. Say so once, at start.
	for _, want := range []struct {
		col   string
		types []string
		as    string
	}{
		{"id", []string{"bigint", "integer", "smallint"}, "an integer"},
		{"status", []string{"text", "character varying", "character"}, "text ('UNUSED', 'PENDING', 'CONSUMED')"},
		{"leased_until", []string{"timestamp with time zone", "timestamp without time zone"}, "a timestamp"},
		{"updated_at", []string{"timestamp with time zone", "timestamp without time zone"}, "a timestamp"},
	} {
		typ, ok := cols[want.col]
		if !ok {
			continue
		}
		good := false
		for _, w := range want.types {
			good = good || typ == w
		}
		if !good {
			return fmt.Errorf("%s.%s: column %s is %s, and pooltop reads it as %s: this is not a pool it can watch", schema, table, want.col, typ, want.as)
		}
	}
	t.hasLeased, t.hasUpdated, t.hasHolder = cols["leased_until"] != "", cols["updated_at"] != "", cols["holder"] != ""
	var can bool
	if err := c.pool.QueryRow(ctx, `SELECT has_table_privilege($1::oid, 'SELECT')`, t.oid).Scan(&can); err != nil {
		return err
	}
	if !can {
		return fmt.Errorf("this role has no SELECT on %s.%s: grant it (GRANT SELECT ON %s TO …)", schema, table, t.qualified)
	}
	// Indexes the fast paths rely on: partial ones on id for UNUSED rows,
	// on leased_until for PENDING rows (the one the claim uses, the one the
	// reaper needs), and one on id for all rows (the pool's rows are
	// counted through it).
	rows, err = c.pool.Query(ctx, `
SELECT i.indexrelid::regclass::text, coalesce(pg_get_expr(i.indpred, i.indrelid), ''),
       coalesce((SELECT attname FROM pg_attribute WHERE attrelid = i.indrelid AND attnum = i.indkey[0]), '')
FROM pg_index i WHERE i.indrelid = $1 AND i.indisvalid`, t.oid)
	if err != nil {
		return err
	}
	for rows.Next() {
		var name, pred, first string
		if err := rows.Scan(&name, &pred, &first); err != nil {
			rows.Close()
			return err
		}
		switch {
		case pred == "" && first == "id":
			t.idIndex = true
		case strings.Contains(pred, "'UNUSED'") && first == "id" && t.unusedIndex == "":
			t.unusedIndex = name
		case strings.Contains(pred, "'PENDING'") && first == "leased_until" && t.pendingIndex == "":
			t.pendingIndex = name
		}
	}
	rows.Close()
	// Sizes from the files (of every partition's index or table): the
	// statistics' count of a partial index's entries is not kept by a
	// VACUUM that finds nothing to remove from it. (pg_partition_tree
	// lists nothing for a relation of no partition.)
	const sqlPages = `SELECT coalesce((SELECT sum(pg_relation_size(relid)) FROM pg_partition_tree($1::regclass) WHERE isleaf),
	pg_relation_size($1::regclass))::bigint / current_setting('block_size')::bigint`
	if err := c.pool.QueryRow(ctx, sqlPages, t.qualified).Scan(&t.tablePages); err != nil {
		return err
	}
	if t.pendingIndex != "" {
		if err := c.pool.QueryRow(ctx, sqlPages, t.pendingIndex).Scan(&t.pendingPages); err != nil {
			return err
		}
	}
	if err := c.pool.QueryRow(ctx, sqlRowsEstimate, t.leaves).Scan(&c.rows.base, &c.rows.mark); err != nil {
		return err
	}
	c.rows.last, c.rows.ok = c.rows.base, true
	var ledger *uint32
	if err := c.pool.QueryRow(ctx, `SELECT to_regclass($1)::oid`, pgx.Identifier{schema, "business_ledger"}.Sanitize()).Scan(&ledger); err != nil {
		return err
	}
	if ledger != nil {
		t.ledgerOID = *ledger
	}
	fleet := pgx.Identifier{schema, "pooltop_worker"}.Sanitize()
	var readable *bool
	if err := c.pool.QueryRow(ctx, `SELECT has_table_privilege(to_regclass($1), 'SELECT')`, fleet).Scan(&readable); err != nil {
		return err
	}
	if readable != nil && *readable {
		t.fleet = fleet
	}
	return nil
}

// Info describes the server and table for the dashboard's header.
type Info struct {
	Host     string `json:"host"`
	Database string `json:"database"`
	User     string `json:"user"`
	Version  string `json:"server_version"`
	Table    string `json:"table"`
	Monitor  bool   `json:"pg_monitor"`
}

// Info returns what the header shows. It never includes the password.
func (c *Collector) Info() Info {
	cc := c.pool.Config().ConnConfig
	return Info{Host: fmt.Sprintf("%s:%d", cc.Host, cc.Port), Database: cc.Database, User: cc.User,
		Version: c.t.versionText, Table: c.t.schema + "." + c.t.name, Monitor: c.t.monitor}
}

// raw is what one poll read, before rates.
type raw struct {
	at                  time.Time
	consumed            int64
	acquired, committed int64
	fenced, double      int64
	crashes, reclaimed  int64
	conflicts           int64
	leaseLost, empty    int64
	errors              int64
	haveWorkload        bool
}

// stage is how far a large pool's start has come, a poll a stage after
// the first: 0 the server (at the first poll) and the PENDING walk (from
// the second), 1 and UNUSED, 2 and the PENDING count's two looks (the rows
// without a lease, the lowest live lease: a heap fetch each) and, one a
// poll, each partition's UNUSED, 3 and the count of the rows; 3 for any
// other pool (see startsInStages). Until a figure is counted it is the
// statistics', marked estimated.
func (c *Collector) stage() int {
	if !c.startsInStages() {
		return 3
	}
	return min(max(c.polls-1, 0), 3)
}

// largeTable is the size in pages (16 MB, some 150,000 rows of the
// article's table) past which a pool starts in stages.
const largeTable = 2_000

// startsInStages: the table is large, or its PENDING index is larger than
// the first walk. A new backend's first run of each statement plans it
// with a cold catalog cache (each function, operator, index and
// partition it names is read from the catalog once), and on such a pool
// reads its pages cold as well: a 1 M-row ordered pool's first poll cost
// 37-63 ms of the server's CPU, three quarters of it parsing, planning
// and starting the statements, where its second cost 3-6. A stage a poll
// pays each statement's first run in a poll of its own; a small pool's
// first poll pays them all and counts it whole. The server statement and
// the walk, the two costliest first runs (17-21 ms each on a new
// backend), come first, a poll each: the PENDING index is what the
// on-call engineer looks at. Such a pool's first walk starts at the
// pace's floor.
func (c *Collector) startsInStages() bool {
	return c.pending.large || c.t.tablePages > largeTable
}

// Poll reads every signal once and returns the snapshot. All queries go in
// one batch, a single round trip: on a busy server each round trip waits for
// a CPU, so their number, more than their cost, decides how long a poll
// takes. On error the collector keeps its history; the caller shows the
// error and polls again.
func (c *Collector) Poll(ctx context.Context) (Snapshot, error) {
	var s Snapshot
	err := c.namingLockHolders(ctx, func() (err error) {
		if c.t.citus {
			s, err = c.pollCitus(ctx)
			return err
		}
		s, err = c.poll(ctx)
		return err
	})
	return s, err
}

// namingLockHolders runs read; when it fails on lock_timeout, the error
// names who holds the lock.
func (c *Collector) namingLockHolders(ctx context.Context, read func() error) error {
	err := read()
	if err != nil && lockTimedOut(err) && ctx.Err() == nil {
		return c.lockHolders(ctx, err)
	}
	return err
}

// lockTimeoutMS is the collector's lock_timeout. A read waits out a brief
// ACCESS EXCLUSIVE lock — autovacuum truncating the empty pages at the end
// of the pool's table or of a catalog (pg_class, pg_attribute) holds one
// for milliseconds, longer when the server's CPUs are busy, and a poll
// that failed on it showed an error for nothing — while a lock held longer
// (a DDL, a LOCK TABLE) fails the poll with the name of who holds it. A
// read waiting for ACCESS SHARE makes no session wait but another one
// asking for ACCESS EXCLUSIVE, which waits for the holder anyway. (A poll
// sent again after a shorter timeout would find its counters' plans
// advanced by the attempt that failed.)
const lockTimeoutMS = 1000

// lockTimedOut says err is a statement canceled by lock_timeout.
func lockTimedOut(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// lockHolders is err, a read's lock timeout, with the sessions that hold
// an ACCESS EXCLUSIVE lock on a relation of this database or a shared
// catalog: who the on-call engineer must look at. Their queries are
// masked as the dashboard's are.
func (c *Collector) lockHolders(ctx context.Context, err error) error {
	rows, qerr := c.pool.Query(ctx, `SELECT l.pid, coalesce(nullif(a.backend_type, 'client backend'), a.application_name, ''),
       coalesce(l.relation::regclass::text, l.relation::text), coalesce(a.query, '')
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'relation' AND l.mode = 'AccessExclusiveLock' AND l.granted
  AND l.database IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
ORDER BY l.pid, l.relation LIMIT 3`)
	var held []string
	if qerr == nil {
		for rows.Next() {
			var pid int32
			var who, rel, query string
			if rows.Scan(&pid, &who, &rel, &query) != nil {
				break
			}
			h := fmt.Sprintf("pid %d", pid)
			if who != "" {
				h += " (" + who + ")"
			}
			h += " holds " + rel
			if query = strings.Join(strings.Fields(engine.MaskQuery(query)), " "); query != "" {
				if r := []rune(query); len(r) > 120 {
					query = string(r[:119]) + "…"
				}
				h += ": " + query
			}
			held = append(held, h)
		}
		rows.Close()
	}
	what := "no ACCESS EXCLUSIVE lock is held now"
	if len(held) > 0 {
		what = strings.Join(held, "; ")
	}
	return fmt.Errorf("%w (waited %d ms on a lock; %s)", err, lockTimeoutMS, what)
}

// poll is one attempt of Poll.
func (c *Collector) poll(ctx context.Context) (Snapshot, error) {
	start := time.Now()
	gen := c.startPoll()
	s := Snapshot{Time: start, Waiters: []Waiter{}, Blockers: []Blocker{}, Alerts: []Alert{}, Pool: Pool{Estimated: []string{}}}
	if !c.t.monitor {
		s.Limits = append(s.Limits, "no pg_monitor: lock waits, queries and xmin of other roles' sessions are hidden")
	}
	// Every poll runs on one session, the same at every poll (see session).
	conn, err := c.session(ctx)
	if err != nil {
		c.backOff(err)
		return s, fmt.Errorf("poll: %w", err)
	}
	if conn != nil {
		defer conn.Release()
	}
	// One batch: the server statement, the counts, and the UNUSED count's
	// sweep, all in one round trip.
	b := &pgx.Batch{}
	// The session of the UNUSED count, which also learns the id range: a
	// new backend has not read the head of the index yet (see
	// unusedCounter.seek).
	var unusedOn engine.DBTX = c.pool
	if conn != nil {
		unusedOn = conn
		c.unused.onSession(conn.Conn().PgConn().PID())
	}
	// A large pool's first polls read the server and walk the PENDING
	// index; UNUSED and the count of the rows wait for later polls (see
	// stage).
	staged := c.stage() == 0
	if c.unused.width == 0 && !staged {
		if err := c.unused.init(ctx, c, unusedOn); err != nil {
			c.backOff(err)
			return s, fmt.Errorf("poll: %w", err)
		}
	}
	// The lock waits are read with the server statement while the last
	// poll saw a session wait on a lock, else only once this one sees one
	// (a second round trip, below).
	var waiting bool
	c.queueServer(b, &s, &waiting)
	locksSent := c.lockWaits
	if locksSent {
		c.queueLocks(b, &s)
	}
	var unusedQ *unusedQuery
	if staged {
		unusedQ = &unusedQuery{skip: true, seekOnly: true}
		c.unused.est = -1
		b.Queue(sqlUnusedEstimate, c.t.leaves).QueryRow(func(r pgx.Row) error { return r.Scan(&c.unused.est) })
	} else {
		unusedQ = c.unused.plan(start)
	}
	unusedQ.queue(b, b, c.t.qualified, c.unused.width, c.unused.seekN, c.unused.seekTime)
	windowFrom := unusedQ.floor
	if windowFrom == math.MinInt64 && len(c.passOver.prev) > 0 {
		// The UNUSED count looks from the start of the index this poll
		// (see unusedCounter.plan); the window need not walk the dead
		// entries at its head a second time: ids returned below the last
		// window join it at the next poll, from the new floor.
		windowFrom = c.passOver.prev[0].id
	}
	var passQ *passQuery
	if !unusedQ.seekOnly { // from the start, the window would read what the seek spreads over polls
		passQ = c.passOver.queue(b, c.t.qualified, windowFrom)
	}
	partsQ := c.queueParts(b, start, c.polls == 0 || c.stage() < 2)
	alerts := c.cfg.Alerts
	var pendingQ *pendingQuery
	var censusQ, noneQ *censusQuery
	if c.byIndex() {
		pendingQ = c.pending.plan(start, alerts.ExpiredAfter, c.cfg.StuckAfter)
		if c.stage() < 2 { // the looks wait for their stage
			pendingQ.none, pendingQ.askLow = false, false
		}
		pendingQ.queue(b, c.t.qualified, c.t.pendingIndex, c.t.hasUpdated, c.pending.slices)
		// The table's ranges wait for the walk to cover the index: the two
		// on one session at once made a poll of the first pass cost both.
		if c.pending.ranged && !c.pending.discovering() {
			noneQ = c.leaseless.plan()
			c.leaseless.per.ceiling = true
			noneQ.queue(b, &c.leaseless, c.t.qualified, c.t.leaves, true, c.t.hasUpdated, alerts.ExpiredAfter, c.cfg.StuckAfter)
		}
	} else {
		censusQ = c.census.plan()
		censusQ.queue(b, &c.census, c.t.qualified, c.t.leaves, c.t.hasLeased, c.t.hasUpdated, alerts.ExpiredAfter, c.cfg.StuckAfter)
	}
	var totalQ *totalQuery
	if c.t.idIndex && c.stage() == 3 {
		totalQ = c.total.plan()
		totalQ.queue(b, c.t.qualified)
	}
	holdersQ := c.holders.plan(c.byIndex() && c.t.hasHolder && c.t.hasLeased)
	holdersQ.queue(b, c.t.qualified, c.t.hasUpdated)
	claimsQ := c.claims.plan(start)
	claimsQ.queue(b)
	fleetQ := c.fleet.plan(c.t.fleet, c.byIndex() && c.t.hasHolder)
	fleetQ.queue(b, c.t.fleet, c.t.qualified)
	exactQ := c.queueExact(b)
	send := func(b *pgx.Batch) error {
		if conn != nil {
			return conn.SendBatch(ctx, b).Close()
		}
		return c.pool.SendBatch(ctx, b).Close()
	}
	err = send(b)
	if err == nil && waiting && !locksSent {
		lb := &pgx.Batch{}
		c.queueLocks(lb, &s)
		err = send(lb)
	} else if !locksSent {
		locks(nil, &s)
	}
	if err != nil {
		c.backOff(err)
		return s, fmt.Errorf("poll: %w", err)
	}
	c.lockWaits = waiting
	s.Holders, s.HoldersRead = c.holders.absorb(holdersQ)
	s.Claims = c.claims.absorb(claimsQ, start)
	s.Fleet = c.fleet.absorb(fleetQ)
	if !c.t.hasHolder {
		s.Limits = append(s.Limits, "no holder column: who holds the PENDING ids is unknown (pooltop lease list shows them by id and age)")
	}
	var pendingFig pendingFigures
	now := start
	if pendingQ != nil {
		if noneQ != nil {
			// Its first pass under the walk's budget, then a census's.
			budget := max(c.cfg.CountBudget, censusBudget)
			if !c.leaseless.whole() {
				budget = discoveryBudgetMS * time.Millisecond
			}
			c.pending.takeRanged(c.leaseless.absorb(noneQ, start, budget), start, c.leaseless.whole())
			if !c.pending.ranged { // few again: forget the ranges
				c.leaseless = census{byTID: c.leaseless.byTID, parts: c.leaseless.parts, leaseless: true}
			}
		}
		pendingFig = c.pending.absorb(pendingQ, start, c.cfg.CountBudget)
		if c.pending.ranged {
			pendingFig.covered = min(pendingFig.covered, c.leaseless.covered())
		}
		if !pendingQ.server.IsZero() {
			now = pendingQ.server
		}
	} else {
		pendingFig = c.census.absorb(censusQ, start, max(c.cfg.CountBudget, censusBudget))
		s.Limits = append(s.Limits, fmt.Sprintf("no partial index on PENDING rows: pending, expired and stuck come from reading the table in turn (oldest part %s old); for exact counts at every poll, CREATE INDEX CONCURRENTLY ON %s (leased_until) WHERE status = 'PENDING' (the reaper needs it too)",
			(time.Duration(pendingFig.ageS)*time.Second).String(), c.t.qualified))
	}
	counts := &s.Pool
	estRows := c.rows.at(deref(s.insDel), s.insDel != nil, s.LiveTuples)
	totalFig := totalFigures{total: estRows, estimated: true}
	if totalQ != nil {
		totalQ.insDel, totalQ.haveStat, totalQ.top = deref(s.insDel), s.insDel != nil, unusedQ.top
		totalFig = c.total.absorb(totalQ, c.cfg.CountBudget, estRows)
	} else if !c.t.idIndex {
		s.Limits = append(s.Limits, fmt.Sprintf("no index on id: consumed is the catalog's estimate of the rows less UNUSED and PENDING, an estimate; CREATE INDEX CONCURRENTLY ON %s (id)", c.t.qualified))
	}
	counts.Total, counts.totalShift = totalFig.total, totalFig.shift
	unusedFig := c.unused.absorb(unusedQ, start, c.cfg.CountBudget, max(counts.Total-pendingFig.pending, 0))
	if pendingQ != nil {
		c.unused.lowerFloor(pendingFig.low, pendingFig.lowKnown, pendingFig.freed)
	} else {
		c.unused.lowerFloor(nil, false, false)
	}
	counts.Unused, counts.UnusedAgeS, counts.unusedDelta, counts.haveDelta = unusedFig.unused, unusedFig.ageS, unusedFig.delta, unusedFig.haveDelta
	fell := int64(0)
	if unusedFig.haveDelta {
		fell = max(0, -unusedFig.delta)
	}
	if sf := c.passOver.absorb(passQ, start, fell); sf.known {
		n, secs := sf.ids, sf.oldest.Seconds()
		counts.PassedOver, counts.PassedOverFull, counts.PassedOverS, counts.PassedOverBy = &n, sf.full, &secs, sf.by
	}
	c.unused.setFront(c.passOver.front())
	s.Partitions = c.absorbParts(partsQ, start, pendingQ != nil && pendingFig.freed, counts.Total, counts.Unused)
	if unusedFig.estimated {
		counts.Estimated = append(counts.Estimated, "unused")
	}
	counts.Pending, counts.Expired, counts.ExpiredOld, counts.Stuck = pendingFig.pending, pendingFig.expired, pendingFig.expiredOld, pendingFig.stuck
	counts.PendingAgeS = pendingFig.ageS
	counted := min(unusedFig.covered, pendingFig.covered)
	counts.Counted = &counted
	if pendingFig.oldest != nil {
		age := now.Sub(*pendingFig.oldest).Seconds()
		counts.OldestPendingS = &age
	}
	if pendingFig.estimated {
		counts.Estimated = append(counts.Estimated, "pending", "expired", "stuck")
	}
	if pendingQ != nil && pendingFig.noLeaseKnown {
		n := pendingFig.noLease
		counts.NoLease = &n
	}
	if c.t.unusedIndex == "" {
		s.Limits = append(s.Limits, fmt.Sprintf("no partial index on UNUSED rows: UNUSED is counted through the primary key, slowly; claims need it too: CREATE INDEX CONCURRENTLY ON %s (id) WHERE status = 'UNUSED'", c.t.qualified))
	}
	// CONSUMED is what the other two leave of the rows (see totalCounter).
	counts.Consumed = max(0, counts.Total-counts.Unused-counts.Pending)
	if totalFig.estimated || unusedFig.estimated || pendingFig.estimated {
		counts.Estimated = append(counts.Estimated, "consumed")
	}
	absorbExact(exactQ, counts, s.Partitions, c.t.leaves, c.t.leafNames)
	c.lastTotal = counts.Total
	c.rowsCounted = c.rowsCounted || (exactQ != nil && exactQ.ok) || !totalFig.estimated
	s.PollMS = float64(time.Since(start).Microseconds()) / 1000
	if c.cfg.Workload != nil {
		if _, err := c.cfg.Workload.RefreshLeaked(ctx); err != nil && !errors.Is(err, context.Canceled) {
			s.Limits = append(s.Limits, "workload: leaked ids not checked: "+err.Error())
		}
		ws := c.cfg.Workload.Snapshot()
		s.Workload = &ws
	}
	c.record(&s, gen)
	if conn != nil {
		c.seat = conn.Conn().PgConn().PID()
	}
	c.polls++
	return s, nil
}

// session returns the session of a poll: the backend that ran the last
// poll, where it is still open. A backend's first run of a statement
// costs it far more than the next ones (its catalog caches, the plan, a
// page fault at its first touch of each shared buffer), and a poll that
// moved to another backend would pay that again. Polls once ran on three
// sessions, a batch each: each backend paid its first statements (polls
// 2 and 3 of a 10 M-row leak cost 43-71 ms), and the three together cost
// the server more at every poll (the median of that leak's first minute
// 10.4-12.9 ms of CPU over eight runs, 7.2-8.6 over four on one;
// docs/benchmarks.md). Behind a transaction pooler the backends are not
// the collector's to choose: it returns nil and the poll takes a
// session from the pool.
func (c *Collector) session(ctx context.Context) (*pgxpool.Conn, error) {
	if scoped, _ := c.pool.Scoped(); scoped {
		return nil, nil
	}
	raw := c.pool.Raw()
	var seat, other *pgxpool.Conn
	for _, conn := range raw.AcquireAllIdle(ctx) {
		switch {
		case conn.Conn().IsClosed():
			conn.Release() // the pool drops it
		case seat == nil && c.seat != 0 && conn.Conn().PgConn().PID() == c.seat:
			seat = conn
		case other == nil:
			other = conn
		default:
			conn.Release()
		}
	}
	switch {
	case seat != nil:
		if other != nil {
			other.Release()
		}
		return seat, nil
	case other != nil:
		return other, nil
	}
	return raw.Acquire(ctx)
}

// backOff makes the next poll read less after one failed: a statement
// that ran into statement_timeout (the walk of a large leak on a cold,
// busy server) failed before its time could pace the counters, and the
// same poll would be sent again and fail again while the dashboard showed
// nothing but the error. A lock timeout is another session's lock, not
// the poll's size: the counters keep their pace.
func (c *Collector) backOff(err error) {
	if lockTimedOut(err) {
		return // another session's lock, not this poll's size
	}
	c.pending.backOff()
	c.census.backOff()
	c.leaseless.backOff()
	c.unused.backOff()
	c.total.backOff()
	for i := range c.parts.counters {
		c.parts.counters[i].backOff()
	}
}

// censusBudget is the least budget of the table scan without a PENDING
// index (see Config.CountBudget).
const censusBudget = time.Millisecond

// MaxPartitionCounts bounds the partitions whose UNUSED ids the collector
// counts.
const MaxPartitionCounts = 64

// partitionCounts keeps a count of UNUSED ids per partition, each an
// unusedCounter on the partition's own partial index. The first poll counts
// every partition (one a poll on a pool that starts in stages: each first
// count plans and reads a partition's index cold, 3-5 ms of the server's
// time on a 10 M-row pool); after that each poll counts one, in turn, so
// that the poll costs little more than on a plain table whatever the
// number of partitions (counting all of them at every poll doubled the
// poll's time under the demo's load on two cores). The others keep their
// last figures, marked estimated; one never counted, the pool's share.
type partitionCounts struct {
	counters []unusedCounter
	last     []PartitionUnused
	freed    []bool // PENDING rows were freed since the partition's last count
	turn     int
	primed   bool
}

// partQuery is the count of one partition queued in a poll.
type partQuery struct {
	i int
	q *unusedQuery
}

// queueParts adds this poll's partition counts to the batch, on a
// partitioned pool of at most MaxPartitionCounts partitions.
func (c *Collector) queueParts(b *pgx.Batch, now time.Time, first bool) []partQuery {
	if !c.t.partitioned || len(c.t.leaves) > MaxPartitionCounts || c.t.unusedIndex == "" {
		return nil
	}
	pc := &c.parts
	if n := len(c.t.leaves); len(pc.counters) != n {
		*pc = partitionCounts{counters: make([]unusedCounter, n), last: make([]PartitionUnused, n), freed: make([]bool, n)}
		for i := range pc.last {
			pc.last[i] = PartitionUnused{Name: c.t.leafNames[i], Estimated: true}
		}
	}
	// The first poll, on one new session, counts none: a statement a
	// partition (see absorbParts); the second counts them all.
	if first {
		return []partQuery{}
	}
	which := []int{pc.turn % len(pc.counters)}
	if !pc.primed && !c.startsInStages() {
		which = which[:0]
		for i := range pc.counters {
			which = append(which, i)
		}
	}
	pc.turn++
	qs := make([]partQuery, 0, len(which))
	for _, i := range which {
		q := pc.counters[i].plan(now)
		q.queue(b, b, c.t.leafQuoted[i], pc.counters[i].width, 0, 0)
		qs = append(qs, partQuery{i, q})
	}
	return qs
}

// absorbParts takes the partitions' counts; freed says PENDING rows were
// returned to the pool since the last poll (below a partition's head, as
// likely as not), so a partition looks for its lowest UNUSED id from the
// start of its index at its next count. total, the pool's rows by the
// statistics, caps the estimate of ranges never counted yet at a
// partition's share (the hash spreads ids evenly), since a partition holds
// only one id in N of its id range.
//
// Before the first count of each, a partition's UNUSED ids are the pool's
// share, marked estimated.
func (c *Collector) absorbParts(qs []partQuery, now time.Time, freed bool, total, unused int64) []PartitionUnused {
	if qs == nil {
		return nil
	}
	pc := &c.parts
	if len(qs) == 0 && !pc.primed {
		for i := range pc.last {
			pc.last[i].Unused = unused / int64(len(pc.last))
		}
		return append([]PartitionUnused(nil), pc.last...)
	}
	for i := range pc.freed {
		pc.freed[i] = pc.freed[i] || freed
		pc.last[i].Estimated = true
		if !pc.counters[i].polled {
			pc.last[i].Unused = unused / int64(len(pc.last))
		}
	}
	for _, pq := range qs {
		u := &pc.counters[pq.i]
		f := u.absorb(pq.q, now, c.cfg.CountBudget, max(total/int64(len(pc.counters)), 1))
		u.lowerFloor(nil, false, pc.freed[pq.i])
		pc.freed[pq.i] = false
		pc.last[pq.i] = PartitionUnused{Name: c.t.leafNames[pq.i], Unused: f.unused, Estimated: f.estimated}
	}
	pc.primed = true
	return append([]PartitionUnused(nil), pc.last...)
}

// byIndex says whether PENDING rows are counted through the partial index
// on leased_until; without it (or without the column) the table is read in turn.
func (c *Collector) byIndex() bool { return c.t.pendingIndex != "" && c.t.hasLeased }

// lockRow is one session touching the pool or ledger, as the poll's JSON
// returns it; WaitMS is null for sessions that do not wait on a lock.
type lockRow struct {
	Waiter
	WaitMS *float64 `json:"wait_ms"`
}

// locks builds the blocking tree and the wait figures from the sessions
// touching the pool and ledger tables.
func locks(rows []lockRow, s *Snapshot) {
	all := map[int32]*Waiter{}
	waiting := map[int32]bool{}
	for i := range rows {
		w := &rows[i].Waiter
		// Masked here, at the source, so that the screen, the JSON, the
		// metrics and the recordings all show the same masked text.
		w.Query = engine.MaskQuery(w.Query)
		if ms := rows[i].WaitMS; ms != nil {
			waiting[w.PID], w.WaitMS = true, math.Max(*ms, 0)
		} else {
			w.BlockedBy = nil
		}
		all[w.PID] = w
	}
	blocks := map[int32][]int32{}
	var waits []float64
	for pid, w := range all {
		if !waiting[pid] {
			continue
		}
		s.Waiters = append(s.Waiters, *w)
		waits = append(waits, w.WaitMS)
		for _, by := range w.BlockedBy {
			blocks[by] = append(blocks[by], w.PID)
		}
	}
	sort.Slice(s.Waiters, func(i, j int) bool { return s.Waiters[i].WaitMS > s.Waiters[j].WaitMS })
	for pid, ws := range blocks {
		bl := Blocker{PID: pid, Blocks: ws}
		if w, ok := all[pid]; ok {
			bl.App, bl.State, bl.Query = w.App, w.State, w.Query
		}
		sort.Slice(bl.Blocks, func(i, j int) bool { return bl.Blocks[i] < bl.Blocks[j] })
		s.Blockers = append(s.Blockers, bl)
	}
	sort.Slice(s.Blockers, func(i, j int) bool {
		if len(s.Blockers[i].Blocks) != len(s.Blockers[j].Blocks) {
			return len(s.Blockers[i].Blocks) > len(s.Blockers[j].Blocks)
		}
		return s.Blockers[i].PID < s.Blockers[j].PID
	})
	s.LockWaiters = len(waits)
	unplanned := 0.0
	for _, w := range s.Waiters {
		if planned(all[w.PID]) {
			continue
		}
		behind := false
		for _, by := range w.BlockedBy {
			behind = behind || planned(all[by])
		}
		if !behind {
			unplanned = math.Max(unplanned, w.WaitMS)
		}
	}
	s.LockWaitUnplannedMaxMS = &unplanned
	if len(waits) > 0 {
		sort.Float64s(waits)
		s.LockWaitMaxMS = waits[len(waits)-1]
		s.LockWaitP95MS = waits[min(len(waits)-1, int(0.95*float64(len(waits))))]
	}
}

// queueServer reads the table statistics, a running vacuum, the session
// holding back the xmin horizon and the connection count in one statement;
// waiting is whether a session of this database waits on a lock.
func (c *Collector) queueServer(b *pgx.Batch, s *Snapshot, waiting *bool) {
	b.Queue(sqlServer, c.serverArgs()...).QueryRow(func(row pgx.Row) error {
		var live, dead, autovac *int64
		var phase *string
		var total, scanned, vacuumed *int64
		var xpid *int32
		var xapp, xstate *string
		var xage *int64
		var xs *float64
		var worst *uint32
		var wlive, wdead *int64
		var lwn *int32
		var lwtop *string
		if err := row.Scan(&live, &dead, &autovac, &s.LastAutovacuum, &s.insDel, &phase, &total, &scanned, &vacuumed,
			&xpid, &xapp, &xstate, &xage, &xs, &s.Connections, &s.MaxConnections, waiting, &worst, &wlive, &wdead, &lwn, &lwtop); err != nil {
			return fmt.Errorf("server statistics: %w", err)
		}
		if lwn != nil && lwtop != nil {
			s.LWLockWaits, s.LWLockWaitEvent = int(*lwn), lwlockName(c.t.version, *lwtop)
		}
		if worst != nil {
			p := &PartitionDead{Partitions: len(c.t.leaves), Dead: deref(wdead), Live: deref(wlive)}
			for i, o := range c.t.leaves {
				if o == *worst {
					p.Name = c.t.leafNames[i]
				}
			}
			if tot := p.Dead + p.Live; tot > 0 {
				p.DeadRatio = float64(p.Dead) / float64(tot)
			}
			s.WorstPartition = p
		}
		if live != nil {
			s.LiveTuples, s.DeadTuples, s.AutovacuumCount = *live, *dead, *autovac
		}
		if tot := s.LiveTuples + s.DeadTuples; tot > 0 {
			s.DeadRatio = float64(s.DeadTuples) / float64(tot)
		}
		s.Pool.Total = s.LiveTuples
		if phase != nil {
			v := &VacuumProgress{Phase: *phase, HeapTotal: deref(total), HeapScanned: deref(scanned), HeapVacuumed: deref(vacuumed)}
			if v.HeapTotal > 0 {
				v.Percent = 100 * float64(v.HeapScanned) / float64(v.HeapTotal)
			}
			s.Vacuum = v
		}
		if xpid != nil {
			s.Xmin = &XminHolder{PID: *xpid, App: *xapp, State: *xstate, Age: deref(xage), XactS: xs}
		}
		return nil
	})
}

// serverArgs are the arguments of the server statement (see sqlServer).
func (c *Collector) serverArgs() []any {
	// One pass over pg_stat_activity serves the connection count, the xmin
	// holder, the LWLock waits and whether to read the lock waits.
	names := []string{c.t.name}
	if c.t.partitioned {
		names = append(names, c.t.leafNames...)
	}
	return []any{c.t.leaves, c.t.partitioned, names}
}

// queueLocks reads the pool's lock waits and who blocks them (see
// sqlLocksTemplate) into s.
func (c *Collector) queueLocks(b *pgx.Batch, s *Snapshot) {
	b.Queue(locksQuery(c.t.version), c.lockRelations()).QueryRow(func(row pgx.Row) error {
		var waits []byte
		if err := row.Scan(&waits); err != nil {
			return fmt.Errorf("lock waits: %w", err)
		}
		var rows []lockRow
		if len(waits) > 0 {
			if err := json.Unmarshal(waits, &rows); err != nil {
				return fmt.Errorf("lock waits: %w", err)
			}
		}
		for i := range rows {
			rows[i].WaitEvent = waitEventName(c.t.version, rows[i].WaitEvent)
		}
		locks(rows, s)
		c.lockReads++
		return nil
	})
}

// lockRelations are the relations whose locks make a session the pool's:
// the table, its partitions, the ledger.
func (c *Collector) lockRelations() []uint32 {
	rels := []uint32{c.t.oid}
	if c.t.partitioned {
		rels = append(rels, c.t.leaves...)
	}
	if c.t.ledgerOID != 0 {
		rels = append(rels, c.t.ledgerOID)
	}
	return rels
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// plannedStatement matches the statements of a planned change to the
// pool: a migration's DDL, an explicit LOCK, a TRUNCATE (the demo's fresh
// pool), VACUUM FULL or CLUSTER, REINDEX.
var plannedStatement = regexp.MustCompile(`(?i)^\s*(CREATE|ALTER|DROP|TRUNCATE|LOCK|REINDEX|CLUSTER|VACUUM\s+\(?\s*FULL|COMMENT|GRANT|REVOKE)\b`)

// planned says whether a session (nil: unknown) runs a planned change: a
// migration's statement, pooltop's own set-up, or a session of pooltop
// migrate. Its lock waits, and the waits behind it, are shown but do not
// raise lock_wait: a schema change takes its locks on purpose and for a
// moment, and paging for it would teach the on-call engineer to ignore
// the alert.
func planned(w *Waiter) bool {
	return w != nil && (w.App == "pooltop-migrate" || plannedStatement.MatchString(w.Query))
}
