package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Holder is one holder's share of the PENDING rows: what an on-call
// engineer asks first (which pod sits on the ids). Holder is "" for PENDING
// rows with no holder.
type Holder struct {
	Holder  string  `json:"holder"`
	Pending int64   `json:"pending"`
	Expired int64   `json:"expired"`  // of them, leases that have passed (database clock)
	OldestS float64 `json:"oldest_s"` // how long its longest-held row has been PENDING
}

// Both statements read PENDING rows only, through the partial index on
// PENDING rows where there is one: their cost is that of the PENDING rows
// (a leak of a million rows is a million heap fetches, about a second), not
// of the table.
const sqlHolders = `
SELECT coalesce(holder, ''), count(*),
       count(*) FILTER (WHERE leased_until <= clock_timestamp()),
       coalesce(extract(epoch FROM clock_timestamp() - min(updated_at)), 0)::float8
FROM resource_pool WHERE status = 'PENDING'
GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT $1`

// Holders lists the holders of PENDING rows, most held first, at most limit.
func (e *Engine) Holders(ctx context.Context, limit int) ([]Holder, error) {
	if limit < 1 || limit > MaxSeed {
		return nil, invalid("limit %d: between 1 and %d", limit, MaxSeed)
	}
	return collect(ctx, e.db, "list holders", pgx.RowToStructByPos[Holder], sqlHolders, limit)
}

// LeaseRow is a PENDING row as lease list prints it.
type LeaseRow struct {
	ID          int64      `json:"id"`
	Identifier  string     `json:"identifier"`
	Status      string     `json:"status"`
	Token       int64      `json:"token"`
	Holder      *string    `json:"holder"`
	LeasedUntil *time.Time `json:"leased_until"`
	UpdatedAt   *time.Time `json:"updated_at"`
}

// ListParams select the PENDING rows of List.
type ListParams struct {
	Holder  string // "" for any holder
	Expired bool   // only leases that have passed
	Limit   int
}

const sqlList = `
SELECT id, identifier, status, lease_token, holder,
       CASE WHEN isfinite(leased_until) THEN leased_until END, CASE WHEN isfinite(updated_at) THEN updated_at END
FROM resource_pool
WHERE status = 'PENDING' AND ($1::text = '' OR holder = $1)
  AND (NOT $2::bool OR leased_until <= clock_timestamp())
ORDER BY leased_until LIMIT $3`

// List lists PENDING rows, the longest expired first and the never leased
// last: in the order of the PENDING index, which it reads only until it has
// Limit rows.
func (e *Engine) List(ctx context.Context, p ListParams) ([]LeaseRow, error) {
	if p.Limit < 1 || p.Limit > MaxSeed {
		return nil, invalid("limit %d: between 1 and %d", p.Limit, MaxSeed)
	}
	return collect(ctx, e.db, "list leases", pgx.RowToStructByPos[LeaseRow], sqlList, p.Holder, p.Expired, p.Limit)
}

// ReleaseHolderParams select the leases of a bulk release.
type ReleaseHolderParams struct {
	Holder  string
	Expired bool // only leases that have passed
	DryRun  bool // count what would be released, change nothing
	Batch   int  // rows per statement (and so row locks held at once); default 500
	// Table is the pool table to release in, as schema and name (quoted
	// here); empty: resource_pool on the connection's search_path.
	Table pgx.Identifier
}

// ReleaseResult is what a bulk release did (or, dry, would do).
type ReleaseResult struct {
	Released     int64 `json:"released"`
	TokensRaised int64 `json:"tokens_raised"`
	DryRun       bool  `json:"dry_run,omitempty"`
}

// A bulk release first reads the holder's ids through the PENDING index
// (one statement, the cost of the PENDING rows), then releases them in
// batches by primary key, each its own short statement that locks at most
// Batch rows and skips the rows someone is changing now (a live holder
// committing one of them wins, and its commit stands). Every released row
// gets a higher token, so the old holder's late commits are rejected by the
// fence, as after the reaper. (Batches that each searched the table for the
// holder's rows would walk the index again every time: eight minutes for
// 150,000 leases in a leak of a million.)
const sqlHolderIDs = `
SELECT id FROM resource_pool
WHERE status = 'PENDING' AND holder = $1 AND (NOT $2::bool OR leased_until <= clock_timestamp())
  AND lease_token < 9223372036854775807`

const sqlReleaseIDs = `
WITH picked AS MATERIALIZED (
    SELECT id FROM resource_pool
    WHERE id = ANY($3::bigint[]) AND status = 'PENDING' AND holder = $1
      AND (NOT $2::bool OR leased_until <= clock_timestamp()) AND lease_token < 9223372036854775807
    FOR NO KEY UPDATE SKIP LOCKED
)
UPDATE resource_pool AS r
SET status = 'UNUSED', holder = NULL, leased_until = NULL,
    lease_token = r.lease_token + 1, updated_at = clock_timestamp()
FROM picked
WHERE r.id = picked.id`

// ReleaseHolder frees the PENDING rows of one holder (a dead pod's ids).
func (e *Engine) ReleaseHolder(ctx context.Context, p ReleaseHolderParams) (ReleaseResult, error) {
	if p.Holder == "" {
		return ReleaseResult{}, invalid("release of an empty holder: name the holder whose ids to free")
	}
	if p.Batch == 0 {
		p.Batch = 500
	}
	if p.Batch < 1 || p.Batch > MaxBatch {
		return ReleaseResult{}, invalid("batch %d: between 1 and %d rows per statement", p.Batch, MaxBatch)
	}
	holderIDs, releaseIDs := sqlHolderIDs, sqlReleaseIDs
	if len(p.Table) > 0 {
		table := p.Table.Sanitize()
		holderIDs, releaseIDs = OnPartition(holderIDs, table), OnPartition(releaseIDs, table)
	}
	if p.DryRun {
		var n int64
		if err := e.db.QueryRow(ctx, "SELECT count(*) FROM ("+holderIDs+") AS h", p.Holder, p.Expired).Scan(&n); err != nil {
			return ReleaseResult{}, holderError("count the holder's leases", err)
		}
		return ReleaseResult{Released: n, DryRun: true}, nil
	}
	ids, err := collect(ctx, e.db, "find the holder's leases", pgx.RowTo[int64], holderIDs, p.Holder, p.Expired)
	if err != nil {
		return ReleaseResult{}, err
	}
	var res ReleaseResult
	for len(ids) > 0 {
		n := min(p.Batch, len(ids))
		tag, err := e.db.Exec(ctx, releaseIDs, p.Holder, p.Expired, ids[:n])
		if err != nil {
			return res, dbError("release the holder's leases", err)
		}
		ids = ids[n:]
		res.Released += tag.RowsAffected()
		res.TokensRaised += tag.RowsAffected()
	}
	return res, nil
}

// collect runs a query and scans every row with scan; errors name op.
func collect[T any](ctx context.Context, db DBTX, op string, scan pgx.RowToFunc[T], sql string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, holderError(op, err)
	}
	out, err := pgx.CollectRows(rows, scan)
	if err != nil {
		return nil, holderError(op, err)
	}
	return out, nil
}

// holderError names a pool built by hand without a holder column for what
// it is, and what shows the PENDING rows instead.
func holderError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42703" && strings.Contains(pgErr.Message, "holder") {
		return fmt.Errorf("%s: resource_pool has no holder column, so who holds which id is not recorded: pooltop migrate --allow-writes adds it; meanwhile pooltop watch shows the PENDING rows, their expired leases and their ages", op)
	}
	return dbError(op, err)
}
