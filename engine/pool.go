package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// seedChunk is how many ids one INSERT adds; Seed commits per chunk so a
// cancelled seed keeps what it made and a big seed does not hold one huge
// transaction.
const seedChunk = 250_000

// MaxSeed bounds one Seed call.
const MaxSeed = 100_000_000

// Seed adds count UNUSED ids to the pool, as a producer decoupled from the
// consumers would. Identifiers are "res-" and a number
// past the highest id, so repeated seeds never collide; an identifier that
// already exists is skipped. It returns how many rows were inserted.
func (e *Engine) Seed(ctx context.Context, count int) (int64, error) {
	inserted, err := e.Refill(ctx, count)
	if err != nil {
		return inserted, err
	}
	// The claim's plan depends on fresh statistics for the partial index.
	if _, err := e.db.Exec(ctx, "ANALYZE resource_pool"); err != nil {
		return inserted, fmt.Errorf("seed: analyze: %w", err)
	}
	return inserted, nil
}

// Refill is Seed without the ANALYZE, for a producer topping the pool up
// several times a second (autovacuum keeps the statistics fresh).
func (e *Engine) Refill(ctx context.Context, count int) (int64, error) {
	if count <= 0 || count > MaxSeed {
		return 0, invalid("count %d: seed between 1 and %d ids", count, MaxSeed)
	}
	sh, err := e.poolShape(ctx)
	if err != nil {
		return 0, dbError("seed", err)
	}
	sql := sqlRefill
	if len(sh.parts) > 0 {
		// A partitioned pool's identifier is unique per (identifier, id)
		// only (a unique index must hold the partition key): no conflict
		// target to name; the identifiers made here are new by construction.
		sql = strings.Replace(sql, "ON CONFLICT (identifier) DO NOTHING", "ON CONFLICT DO NOTHING", 1)
	}
	var inserted int64
	for left := count; left > 0; {
		n := min(left, seedChunk)
		tag, err := e.db.Exec(ctx, sql, n)
		if err != nil {
			return inserted, dbError("seed", err)
		}
		inserted += tag.RowsAffected()
		left -= n
	}
	return inserted, nil
}

const sqlRefill = `
INSERT INTO resource_pool (identifier)
SELECT 'res-' || lpad((base.m + g)::text, 10, '0')
FROM (SELECT coalesce(max(id), 0) AS m FROM resource_pool) AS base,
     generate_series(1, $1::bigint) AS g
ON CONFLICT (identifier) DO NOTHING`

// CheckSchema verifies that the connection's schema holds pooltop's tables
// and, when requireMarker is set, the marker that pooltop created them. It
// returns ErrNoSchema or ErrNotPooltop (wrapped, with what to do).
func (e *Engine) CheckSchema(ctx context.Context, requireMarker bool) error {
	var schema string
	var pool, ledger, meta, holder bool
	err := e.db.QueryRow(ctx, `
SELECT coalesce(current_schema(), ''),
       to_regclass('resource_pool') IS NOT NULL,
       to_regclass('business_ledger') IS NOT NULL,
       to_regclass('pooltop_meta') IS NOT NULL,
       EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = to_regclass('resource_pool') AND attname = 'holder' AND NOT attisdropped)`).
		Scan(&schema, &pool, &ledger, &meta, &holder)
	if err != nil {
		return fmt.Errorf("check schema: %w", err)
	}
	if schema == "" {
		schema = "(none: the --schema does not exist)"
	}
	if !pool || !ledger || !holder {
		return fmt.Errorf("%w in schema %s (resource_pool with holder, business_ledger): run `pooltop migrate` first", ErrNoSchema, schema)
	}
	if !requireMarker {
		return nil
	}
	marked := false
	if meta {
		err := e.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pooltop_meta WHERE key = 'created_by' AND value = 'pooltop')`).Scan(&marked)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("check schema: %w", err)
		}
	}
	if !marked {
		return fmt.Errorf("%w (no pooltop_meta marker in schema %s): refusing to write; pass --allow-writes if you mean to change this pool", ErrNotPooltop, schema)
	}
	return nil
}
