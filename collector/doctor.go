package collector

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
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
// PENDING index where there is one, and are the cost of the PENDING rows.
func (c *Collector) Doctor(ctx context.Context) ([]Check, error) {
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
		var pending, unleased, expiredOld int64
		var longest *float64
		err := c.pool.QueryRow(ctx, fmt.Sprintf(`
SELECT count(*), count(*) FILTER (WHERE leased_until IS NULL),
       count(*) FILTER (WHERE leased_until < clock_timestamp() - $1::bigint * interval '1 microsecond'),
       extract(epoch FROM max(leased_until) FILTER (WHERE isfinite(leased_until)) - clock_timestamp())::float8
FROM %s WHERE status = 'PENDING'`, q), c.cfg.Alerts.ExpiredAfter.Microseconds()).Scan(&pending, &unleased, &expiredOld, &longest)
		if err != nil {
			return nil, fmt.Errorf("doctor: PENDING rows: %w", err)
		}
		if unleased > 0 {
			add("unleased_pending", CheckFail, fmt.Sprintf("%d of %d PENDING rows have no lease (leased_until IS NULL): no reaper will ever free them", unleased, pending),
				fmt.Sprintf("claim with a lease; free these with UPDATE %s SET status = 'UNUSED', holder = NULL, lease_token = lease_token + 1 WHERE status = 'PENDING' AND leased_until IS NULL (after checking their holders are gone: pooltop lease list)", q))
		} else {
			add("unleased_pending", CheckOK, fmt.Sprintf("every one of %d PENDING rows has a lease", pending), "")
		}
		switch {
		case longest != nil && *longest > 3600:
			add("lease_length", CheckWarn, fmt.Sprintf("a lease runs %.0f s more: a worker that dies holds its ids that long", *longest),
				"lease for about the time the work takes and renew while it runs")
		default:
			add("lease_length", CheckOK, "no lease runs more than an hour ahead", "")
		}
		if expiredOld > 0 {
			add("reaper_lag", CheckFail, fmt.Sprintf("%d leases expired more than %v ago are still PENDING", expiredOld, c.cfg.Alerts.ExpiredAfter),
				"the reaper is down, blocked or too slow: start it, raise its batch (pooltop lease reap frees them once)")
		} else {
			add("reaper_lag", CheckOK, "no lease waits for the reaper", "")
		}
	} else {
		add("unleased_pending", CheckFail, "no leased_until column: a worker that dies keeps its ids for good",
			"pooltop migrate --allow-writes adds the lease columns")
	}

	var deadRatio float64
	var dead int64
	var avOff bool
	var opts []string
	err := c.pool.QueryRow(ctx, `
SELECT coalesce(sum(s.n_dead_tup), 0)::bigint,
       coalesce(sum(s.n_dead_tup)::float8 / nullif(sum(s.n_dead_tup + s.n_live_tup), 0), 0),
       coalesce(bool_or(c.reloptions::text[] @> ARRAY['autovacuum_enabled=false']), false),
       coalesce((SELECT reloptions::text[] FROM pg_class WHERE oid = $1), '{}')
FROM pg_class c LEFT JOIN pg_stat_all_tables s ON s.relid = c.oid
WHERE c.oid = ANY($2)`, t.oid, t.leaves).Scan(&dead, &deadRatio, &avOff, &opts)
	if err != nil {
		return nil, fmt.Errorf("doctor: dead tuples: %w", err)
	}
	switch {
	case avOff:
		add("autovacuum", CheckFail, "autovacuum is off for the pool table: dead tuples of every claim pile up",
			fmt.Sprintf("ALTER TABLE %s RESET (autovacuum_enabled)", q))
	case deadRatio > c.cfg.Alerts.DeadRatio:
		add("autovacuum", CheckWarn, fmt.Sprintf("%d dead tuples, %.0f%% of the table (options %s)", dead, 100*deadRatio, strings.Join(opts, ", ")),
			fmt.Sprintf("ALTER TABLE %s SET (autovacuum_vacuum_scale_factor = 0.01); look for the xmin holder", q))
	default:
		add("autovacuum", CheckOK, fmt.Sprintf("%d dead tuples, %.0f%% of the table", dead, 100*deadRatio), "")
	}

	var xminPID *int32
	var xminAge *int64
	var xminApp, xminState *string
	err = c.pool.QueryRow(ctx, `
SELECT pid, age(backend_xmin)::bigint, application_name, state FROM pg_stat_activity
WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
ORDER BY age(backend_xmin) DESC LIMIT 1`).Scan(&xminPID, &xminAge, &xminApp, &xminState)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("doctor: xmin: %w", err)
	}
	if xminAge != nil && *xminAge > 1_000_000 {
		add("xmin_horizon", CheckWarn, fmt.Sprintf("backend %d (%s, %s) holds the xmin horizon %d transactions back: vacuum cannot remove what it might see", *xminPID, *xminApp, *xminState, *xminAge),
			fmt.Sprintf("end it if it is stuck: SELECT pg_terminate_backend(%d)", *xminPID))
	} else {
		add("xmin_horizon", CheckOK, "no session holds the xmin horizon far back", "")
	}

	var conns, maxConns int
	if err := c.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_activity)::int, current_setting('max_connections')::int`).Scan(&conns, &maxConns); err != nil {
		return nil, fmt.Errorf("doctor: connections: %w", err)
	}
	if float64(conns) > c.cfg.Alerts.Connections*float64(maxConns) {
		add("connections", CheckWarn, fmt.Sprintf("%d of %d connections in use", conns, maxConns), "queue in the application (a smaller pool per worker), not in PostgreSQL")
	} else {
		add("connections", CheckOK, fmt.Sprintf("%d of %d connections in use", conns, maxConns), "")
	}

	// pg_stat_statements, where it is installed and readable.
	var calls int64
	var mean, worst float64
	var locking int64
	err = c.pool.QueryRow(ctx, `
SELECT coalesce(sum(calls) FILTER (WHERE query ILIKE '%FOR UPDATE%' AND query NOT ILIKE '%SKIP LOCKED%'), 0)::bigint,
       coalesce(sum(calls) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), 0)::bigint,
       coalesce(sum(total_exec_time) FILTER (WHERE query ILIKE '%SKIP LOCKED%') / nullif(sum(calls) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), 0), 0),
       coalesce(max(max_exec_time) FILTER (WHERE query ILIKE '%SKIP LOCKED%'), 0)
FROM pg_stat_statements WHERE query ILIKE '%resource_pool%'`).Scan(&locking, &calls, &mean, &worst)
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
       EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
               WHERE i.indrelid = $2 AND i.indisunique AND i.indnatts = 1 AND a.attname = 'request_id')`, t.oid, t.ledgerOID).Scan(&hasToken, &uniqueRequest)
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
	return out, nil
}
