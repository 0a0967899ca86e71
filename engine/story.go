package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// LeaseCheckParams are the inputs of LeaseCheck.
type LeaseCheckParams struct {
	ID    int64
	Token int64
}

// sqlLeaseCheck reads whether (id, token) is the live lease right now, by
// the database clock. It changes nothing.
const sqlLeaseCheck = `
SELECT lease_token = $2 AND status = 'PENDING' AND (leased_until IS NULL OR leased_until > clock_timestamp())
FROM resource_pool WHERE id = $1`

// LeaseCheck reports whether the lease (ID, Token) is still current. It is
// a read, not a fence: the answer may be stale by the time the caller acts
// on it (a pause between the check and the write lets a zombie through).
// The workload uses it to show why the fence belongs in the write itself.
func (e *Engine) LeaseCheck(ctx context.Context, p *LeaseCheckParams) (bool, error) {
	return e.leaseQuestion(ctx, "check", sqlLeaseCheck, p)
}

// leaseQuestion asks sql, a yes or no about the row of the lease p names
// ($1 its id, $2 its token); op names the question in errors.
func (e *Engine) leaseQuestion(ctx context.Context, op, sql string, p *LeaseCheckParams) (bool, error) {
	if err := checkLeaseRef(p.ID, p.Token); err != nil {
		return false, err
	}
	var ok bool
	err := e.db.QueryRow(ctx, sql, p.ID, p.Token).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, &LeaseError{Op: op, ID: p.ID, Err: ErrNotFound}
	}
	if err != nil {
		return false, dbError(fmt.Sprintf("%s id %d", op, p.ID), err)
	}
	return ok, nil
}

const sqlLeaseSuperseded = `
SELECT status = 'CONSUMED' AND lease_token > $2 FROM resource_pool WHERE id = $1`

// LeaseSuperseded reports whether another holder has committed the id under
// a later lease than (ID, Token): the lease was reaped or handed over, the
// id claimed again and consumed. A holder of the old lease that wakes now
// is a zombie. The workload's staged pause waits for it, so that the zombie
// it shows always finds its id taken.
func (e *Engine) LeaseSuperseded(ctx context.Context, p *LeaseCheckParams) (bool, error) {
	return e.leaseQuestion(ctx, "superseded", sqlLeaseSuperseded, p)
}

// sqlPoolLeaves lists the tables that hold the pool's rows: the pool itself,
// or its partitions when it is partitioned (storage parameters such as
// autovacuum_enabled live on the leaves).
const sqlPoolLeaves = `SELECT oid::regclass::text FROM pg_class WHERE oid IN (` + sqlLeafOIDs + `)`

// sqlLeafOIDs are the oids of the tables that hold rows: pg_partition_tree
// lists the leaves of a partitioned pool and nothing for a plain table.
const sqlLeafOIDs = `
SELECT oid FROM pg_class WHERE oid = 'resource_pool'::regclass AND relkind = 'r'
UNION SELECT relid FROM pg_partition_tree('resource_pool'::regclass) WHERE isleaf`

// SetAutovacuum turns autovacuum off (on = false) or back to the server's
// setting (on = true, by resetting the table's own) for the pool table and
// its partitions. Only for a pool pooltop made: the callers check.
func (e *Engine) SetAutovacuum(ctx context.Context, on bool) error {
	rows, err := e.db.Query(ctx, sqlPoolLeaves)
	if err != nil {
		return fmt.Errorf("autovacuum: list the pool's tables: %w", err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("autovacuum: list the pool's tables: %w", err)
	}
	set := "SET (autovacuum_enabled = false)"
	if on {
		set = "RESET (autovacuum_enabled)"
	}
	for _, t := range tables {
		// t comes from regclass output: already quoted as an identifier.
		if _, err := e.db.Exec(ctx, "ALTER TABLE "+t+" "+set); err != nil {
			return fmt.Errorf("autovacuum: ALTER TABLE %s %s: %w", t, set, err)
		}
	}
	return nil
}

// sqlVacuumState reads, over the pool's tables, whether autovacuum is off
// for any of them and how many dead tuples the statistics count.
const sqlVacuumState = `
SELECT coalesce(bool_or(c.reloptions::text[] @> ARRAY['autovacuum_enabled=false']), false),
       coalesce(sum(pg_stat_get_dead_tuples(c.oid)), 0)::bigint
FROM pg_class c WHERE c.oid IN (` + sqlLeafOIDs + `)`

// VacuumState is what the vacuum-off story reads from the pool's tables.
type VacuumState struct {
	AutovacuumOff bool  `json:"autovacuum_off"`
	DeadTuples    int64 `json:"dead_tuples"`
}

// Vacuum reads whether autovacuum is off for the pool and its dead tuples
// (from the statistics, which lag the writes by up to a second or so).
func (e *Engine) Vacuum(ctx context.Context) (VacuumState, error) {
	var v VacuumState
	if err := e.db.QueryRow(ctx, sqlVacuumState).Scan(&v.AutovacuumOff, &v.DeadTuples); err != nil {
		return v, fmt.Errorf("read the pool's vacuum state: %w", err)
	}
	return v, nil
}

// sqlHoldFree is a report's read of the lowest free ids, locking them
// FOR SHARE. In READ COMMITTED a row that a claim changes between the
// statement's snapshot and its lock is locked in its new version, then
// rechecked and dropped, and the lock stays: the report would hold the
// row the claim just made PENDING and block its holder's commit for the
// whole hold. So HoldFree reads in REPEATABLE READ, where that row is a
// serialization failure and the read is tried again, and SKIP LOCKED, so
// that it never waits on a claim in flight.
const sqlHoldFree = `SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT %d FOR SHARE SKIP LOCKED`

// HoldFree reads the n lowest free ids FOR SHARE, as a report or an audit
// might, calls held with them while it holds them, and keeps its
// transaction open for hold (or until ctx ends), then ends it. Claims
// (SKIP LOCKED) pass over the rows it holds and take newer ids:
// starvation, which the demo's scenario shows with it. It changes no row,
// and returns how many it held.
func (e *Engine) HoldFree(ctx context.Context, n int, hold time.Duration, held func(ids []int64)) (int, error) {
	if n < 1 || n > MaxBatch {
		return 0, invalid("n %d: hold between 1 and %d ids", n, MaxBatch)
	}
	for attempt := 0; ; attempt++ {
		count := 0
		err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, fmt.Sprintf(sqlHoldFree, n))
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				return err
			}
			count = len(ids)
			if held != nil {
				held(ids)
			}
			return sleepCtx(ctx, hold)
		})
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "40001" && attempt < 100 {
			continue // a claim took one of the rows since the snapshot
		}
		if err != nil {
			return count, dbError("hold free ids", err)
		}
		return count, nil
	}
}
