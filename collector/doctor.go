package collector

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Check is one finding of the pool doctor: what was checked, its status
// (ok, warn or fail), the figure from the database it rests on, and what to
// do about it. The JSON names are a contract (pooltop doctor --json).
type Check struct {
	Check    string `json:"check"`
	Status   string `json:"status"`
	Evidence string `json:"evidence"`
	Remedy   string `json:"remedy,omitempty"`
}

// Statuses of a check.
const (
	CheckOK   = "ok"
	CheckWarn = "warn"
	CheckFail = "fail"
)

// Doctor checks the live pool against the production checklist of a lease
// pool: the partial indexes the claim and the reaper need, PENDING rows no
// lease will free, leases far longer than work takes, a reaper that lags,
// autovacuum and dead tuples, the xmin horizon, connections, claims that
// lock without SKIP LOCKED (where pg_stat_statements is readable), and the
// fencing columns and ledger. It only reads; its counts go through the
// PENDING index where there is one, and are the cost of the PENDING rows;
// without it they are read from the table, whole only when it is small,
// else from a sample of its pages (see doctorPending).
// Dead tuples, the xmin holder and connections are a poll's: s, the latest
// snapshot of this collector (the caller polls; Doctor does not, so it may
// run beside the dashboard's polls).
func (c *Collector) Doctor(ctx context.Context, s Snapshot) ([]Check, error) {
	t := &c.t
	var out []Check
	add := func(check, status, evidence, remedy string) {
		if status == CheckOK {
			remedy = ""
		}
		out = append(out, Check{check, status, evidence, remedy})
	}
	q := t.qualified

	if t.unusedIndex != "" {
		add("unused_index", CheckOK, "claims use "+t.unusedIndex, "")
	} else {
		add("unused_index", CheckFail, "no partial index on id WHERE status = 'UNUSED': every claim walks the primary key past the CONSUMED ids",
			fmt.Sprintf("CREATE INDEX CONCURRENTLY ON %s (id) WHERE status = 'UNUSED'", q))
	}
	if t.pendingIndex != "" {
		add("reaper_index", CheckOK, "the reaper's expired-lease scan uses "+t.pendingIndex, "")
	} else {
		add("reaper_index", CheckFail, "no partial index on leased_until WHERE status = 'PENDING': each reaper pass reads the whole table",
			fmt.Sprintf("CREATE INDEX CONCURRENTLY ON %s (leased_until) WHERE status = 'PENDING'", q))
	}

	if t.hasLeased {
		f, err := c.doctorPending(ctx)
		if t.citus {
			f, err = c.citusPendingFigures(ctx, s)
		}
		if err != nil {
			return nil, fmt.Errorf("doctor: PENDING rows: %w", err)
		}
		pending, unleased, expiredOld, longest := f.pending, f.unleased, f.expiredOld, f.longest
		if unleased > 0 {
			add("unleased_pending", CheckFail, fmt.Sprintf("%s of %s PENDING rows have no lease (leased_until IS NULL): no reaper will ever free them%s", f.fig(unleased), f.fig(pending), f.note()),
				fmt.Sprintf("claim with a lease; free these with UPDATE %s SET status = 'UNUSED', holder = NULL, lease_token = lease_token + 1 WHERE status = 'PENDING' AND leased_until IS NULL (after checking their holders are gone: pooltop lease list)", q))
		} else {
			add("unleased_pending", CheckOK, fmt.Sprintf("every one of %s PENDING rows has a lease%s", f.fig(pending), f.note()), "")
		}
		switch {
		case longest != nil && *longest > 3600:
			add("lease_length", CheckWarn, fmt.Sprintf("a lease runs %.0f s more: a worker that dies holds its ids that long", *longest),
				"lease for about the time the work takes and renew while it runs")
		default:
			add("lease_length", CheckOK, "no lease runs more than an hour ahead"+f.note(), "")
		}
		if expiredOld > 0 {
			add("reaper_lag", CheckFail, fmt.Sprintf("%s leases expired more than %v ago are still PENDING%s", f.fig(expiredOld), c.cfg.Alerts.ExpiredAfter, f.note()),
				"the reaper is down, blocked or too slow: start it, raise its batch (pooltop lease reap frees them once)")
		} else {
			add("reaper_lag", CheckOK, "no lease waits for the reaper"+f.note(), "")
		}
	} else {
		add("unleased_pending", CheckFail, "no leased_until column: a worker that dies keeps its ids for good",
			"pooltop migrate --allow-writes adds the lease columns")
	}

	var avOff bool
	var opts []string
	err := c.pool.QueryRow(ctx, `
SELECT coalesce(bool_or(c.reloptions::text[] @> ARRAY['autovacuum_enabled=false']), false),
       coalesce((SELECT reloptions::text[] FROM pg_class WHERE oid = $1), '{}')
FROM pg_class c WHERE c.oid = ANY($2)`, t.oid, t.leaves).Scan(&avOff, &opts)
	if err != nil {
		return nil, fmt.Errorf("doctor: autovacuum settings: %w", err)
	}
	dead := fmt.Sprintf("%d dead tuples, %.0f%% of the table", s.DeadTuples, 100*s.DeadRatio)
	if w := s.WorstPartition; w != nil {
		dead += fmt.Sprintf(" (worst partition %s: %.0f%%)", w.Name, 100*w.DeadRatio)
	}
	switch {
	case avOff:
		add("autovacuum", CheckFail, "autovacuum is off for the pool table: dead tuples of every claim pile up ("+dead+")",
			fmt.Sprintf("ALTER TABLE %s RESET (autovacuum_enabled)", q))
	case s.DeadRatio > c.cfg.Alerts.DeadRatio:
		add("autovacuum", CheckWarn, fmt.Sprintf("%s (options %s)", dead, strings.Join(opts, ", ")),
			fmt.Sprintf("ALTER TABLE %s SET (autovacuum_vacuum_scale_factor = 0.01); look for the xmin holder", q))
	default:
		add("autovacuum", CheckOK, dead, "")
	}

	if x := s.Xmin; x != nil && x.Age > 1_000_000 {
		add("xmin_horizon", CheckWarn, fmt.Sprintf("backend %d (%s, %s) holds the xmin horizon %d transactions back: vacuum cannot remove what it might see", x.PID, x.App, x.State, x.Age),
			fmt.Sprintf("end it if it is stuck: SELECT pg_terminate_backend(%d)", x.PID))
	} else {
		add("xmin_horizon", CheckOK, "no session holds the xmin horizon far back", "")
	}

	conns := fmt.Sprintf("%d of %d connections in use", s.Connections, s.MaxConnections)
	if s.MaxConnections > 0 && float64(s.Connections) > c.cfg.Alerts.Connections*float64(s.MaxConnections) {
		add("connections", CheckWarn, conns, "queue in the application (a smaller pool per worker), not in PostgreSQL")
	} else {
		add("connections", CheckOK, conns, "")
	}

	// pg_stat_statements, where it is installed and readable.
	var calls, locking int64
	var total, worst float64
	err = c.pool.QueryRow(ctx, statementsSQL(sqlClaimStatements, c.t.version), claimPattern(c.t.name)).Scan(&calls, &total, &worst, &locking, nil, nil) // nil: the queryids are not needed here
	mean := 0.0
	if calls > 0 {
		mean = total / float64(calls)
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		add("claim_statements", CheckOK, "pg_stat_statements is not readable here ("+pgErr.Message+"): claim statements not checked", "")
	case err != nil:
		return nil, fmt.Errorf("doctor: pg_stat_statements: %w", err)
	case locking > 0:
		add("claim_statements", CheckWarn, fmt.Sprintf("%d calls of statements on resource_pool lock FOR UPDATE without SKIP LOCKED (claims queue behind each other)", locking),
			"claim with FOR UPDATE SKIP LOCKED")
	default:
		add("claim_statements", CheckOK, fmt.Sprintf("%d SKIP LOCKED claims, mean %.2f ms, worst %.1f ms", calls, mean, worst), "")
	}

	// The fence: a token column, and a ledger with one effect per request.
	var hasToken, uniqueRequest bool
	err = c.pool.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1 AND attname = 'lease_token' AND NOT attisdropped),
       EXISTS (SELECT 1 FROM pg_index i
               WHERE i.indrelid = $2 AND i.indisunique
                 AND (SELECT array_agg(a.attname::text ORDER BY a.attname) FROM pg_attribute a
                      WHERE a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey)) IN (ARRAY['request_id'], $3::text[]))`,
		t.oid, t.ledgerOID, citusRequestKey(t.citus)).Scan(&hasToken, &uniqueRequest)
	if err != nil {
		return nil, fmt.Errorf("doctor: fencing: %w", err)
	}
	switch {
	case !hasToken:
		add("fencing", CheckFail, "no lease_token column: a worker that wakes after its lease commits over the next owner", "pooltop migrate --allow-writes adds it; commit only where the token is still the one claimed")
	case t.ledgerOID == 0 || !uniqueRequest:
		add("fencing", CheckWarn, "lease_token is there, but no business_ledger with a unique request_id: a retried commit may record its effect twice",
			"a ledger with UNIQUE (request_id), written in the commit statement (pooltop migrate creates it)")
	default:
		add("fencing", CheckOK, "lease_token and a ledger with a unique request_id", "")
	}
	if t.citus {
		if err := c.doctorCitus(ctx, s, add); err != nil {
			return nil, fmt.Errorf("doctor: Citus: %w", err)
		}
	}
	pooler, err := c.pooler(ctx)
	if err != nil {
		return nil, fmt.Errorf("doctor: pooler: %w", err)
	}
	add("pooler", CheckOK, pooler, "")
	return out, nil
}

// poolerChanges is what pooltop does differently through a pooler.
const poolerChanges = "pooltop sends its settings (read-only for watch, statement and lock timeouts, the schema) inside every transaction, " +
	"prepares no statement by name, drops a connection instead of sending a cancel request; " +
	"migrate must run against PostgreSQL itself; lock waits and sessions are the server connections behind the pooler, not pooltop's clients"

// pooler says whether a connection pooler or a proxy sits between pooltop
// and PostgreSQL: it refused or dropped the startup parameters (the pool is
// scoped), or the server listens on another port than the one dialled.
func (c *Collector) pooler(ctx context.Context) (string, error) {
	if scoped, why := c.pool.Scoped(); scoped {
		return "connected through a pooler: " + why + "; " + poolerChanges, nil
	}
	var port *int32
	if err := c.pool.QueryRow(ctx, "SELECT inet_server_port()").Scan(&port); err != nil {
		return "", err
	}
	dialled := c.pool.Config().ConnConfig.Port
	if port != nil && uint16(*port) != dialled {
		return fmt.Sprintf("a proxy or pooler forwards port %d to the server's %d, passing pooltop's session settings on (session mode): each connection is a session of its own", dialled, *port), nil
	}
	return "connected to PostgreSQL itself, no pooler in between", nil
}

// Without a PENDING index the doctor's PENDING figures come from the table
// itself: read whole up to doctorExactPages (8 MB, a few tens of
// milliseconds), past that from a TABLESAMPLE SYSTEM of about
// doctorSamplePages pages scaled up to the table. The doctor runs on the
// pools that lack the index, and a scan of the whole of a large one costs
// about a second per 10 M rows: past a few tens of millions it would pass
// the collector's statement timeout and the doctor would report nothing.
const (
	doctorExactPages  = 1024
	doctorSamplePages = 1024
)

// doctorFigures are the doctor's PENDING figures; sample is the fraction of
// the table's pages they were read from (1: counted exactly).
type doctorFigures struct {
	pending, unleased, expiredOld int64
	longest                       *float64
	sample                        float64
	pages                         int64
}

// fig is a count as the evidence shows it: "~" marks an estimate.
func (f doctorFigures) fig(n int64) string {
	if f.sample < 1 {
		return fmt.Sprintf("~%d", n)
	}
	return fmt.Sprint(n)
}

// note says where estimated figures come from ("" for exact ones).
func (f doctorFigures) note() string {
	if f.sample >= 1 {
		return ""
	}
	return fmt.Sprintf(" (estimated from a sample of %.2g%% of the table's %d pages: there is no PENDING index to count them by)", 100*f.sample, f.pages)
}

// doctorPending reads the PENDING figures: exactly through the PENDING
// index or on a small table, else from a sample of pages. The table's size
// is read from its files (pg_relation_size), not from statistics a table
// never analysed does not have.
func (c *Collector) doctorPending(ctx context.Context) (doctorFigures, error) {
	t := &c.t
	f := doctorFigures{sample: 1}
	from := t.qualified
	if t.pendingIndex == "" {
		err := c.pool.QueryRow(ctx, `SELECT coalesce(sum(pg_relation_size(o)), 0)::bigint / current_setting('block_size')::bigint FROM unnest($1::oid[]) AS o`, t.leaves).Scan(&f.pages)
		if err != nil {
			return f, err
		}
		if f.pages > doctorExactPages {
			f.sample = float64(doctorSamplePages) / float64(f.pages)
			from += fmt.Sprintf(" TABLESAMPLE SYSTEM (%g)", 100*f.sample)
		}
	}
	var pending, unleased, expiredOld int64
	err := c.pool.QueryRow(ctx, fmt.Sprintf(`
SELECT count(*), count(*) FILTER (WHERE leased_until IS NULL),
       count(*) FILTER (WHERE leased_until < clock_timestamp() - $1::bigint * interval '1 microsecond'),
       extract(epoch FROM max(leased_until) FILTER (WHERE isfinite(leased_until)) - clock_timestamp())::float8
FROM %s WHERE status = 'PENDING'`, from), c.cfg.Alerts.ExpiredAfter.Microseconds()).Scan(&pending, &unleased, &expiredOld, &f.longest)
	if err != nil {
		return f, err
	}
	scale := func(n int64) int64 { return int64(math.Round(float64(n) / f.sample)) }
	f.pending, f.unleased, f.expiredOld = scale(pending), scale(unleased), scale(expiredOld)
	return f, nil
}
