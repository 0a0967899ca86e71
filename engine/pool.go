package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// seedChunk is how many ids one INSERT adds; Seed commits per chunk so a
// cancelled seed keeps what it made and a big seed does not hold one huge
// transaction.
const seedChunk = 250_000

// MaxSeed bounds one Seed call.
const MaxSeed = 100_000_000

// Seed adds count UNUSED ids to the pool, as a producer decoupled from the
// consumers would. Each new row takes its id from the pool's id sequence and
// its identifier from that id ("res-" and the id, zero-padded to at least 10
// digits, never cut), so seeds running at once never make the same
// identifier, on a plain table or a partitioned one (whose unique index must
// hold the partition key, so cannot keep identifiers unique by itself). It
// adds exactly count rows or returns an error saying how many it added.
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

// ErrSeedShort is returned when a seed could not add every id it was asked for.
var ErrSeedShort = errors.New("seed added fewer ids than asked")

// seedRetries bounds the statements a chunk may take when identifiers made
// from new ids are already taken (rows a producer named otherwise).
const seedRetries = 3

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
	if len(sh.shards) > 0 {
		return e.refillCitus(ctx, count)
	}
	var seq *string
	if err := e.db.QueryRow(ctx, "SELECT pg_get_serial_sequence('resource_pool', 'id')").Scan(&seq); err != nil {
		return 0, dbError("seed", err)
	}
	// Into an empty pool with a sequence the first chunk goes without ON
	// CONFLICT: the speculative insertion it asks for is a third of a
	// seed's time, and no row can be in the way but one a producer inserts
	// meanwhile, which fails the statement; the chunk is then seeded the
	// careful way.
	plain := false
	if seq != nil {
		if err := e.db.QueryRow(ctx, "SELECT NOT EXISTS (SELECT FROM resource_pool)").Scan(&plain); err != nil {
			return 0, dbError("seed", err)
		}
	}
	var inserted int64
	for left := count; left > 0; {
		n := min(left, seedChunk)
		got := int64(0)
		if plain {
			plain = false
			tag, err := e.db.Exec(ctx, sqlSeedEmpty, *seq, n)
			switch {
			case err == nil:
				got = tag.RowsAffected()
			case !isUniqueViolation(err, ""):
				return inserted, dbError("seed", err)
			}
		}
		for try := 0; try < seedRetries && got < int64(n); try++ {
			added, err := e.seedChunk(ctx, seq, int64(n)-got)
			if err != nil {
				return inserted + got, dbError("seed", err)
			}
			got += added
		}
		inserted += got
		if got < int64(n) {
			return inserted, e.seedShort(ctx, seq, inserted, count)
		}
		left -= n
	}
	return inserted, nil
}

// seedShort says why a seed added fewer ids than asked: the id sequence is
// behind ids inserted by hand (the new ids are taken), or identifiers made
// from new ids are taken by rows named otherwise.
func (e *Engine) seedShort(ctx context.Context, seq *string, inserted int64, count int) error {
	if seq != nil {
		var top, last *int64
		err := e.db.QueryRow(ctx, "SELECT (SELECT max(id) FROM resource_pool), pg_sequence_last_value($1::regclass)", *seq).Scan(&top, &last)
		if err == nil && top != nil && (last == nil || *last < *top) {
			return fmt.Errorf("%w: %d of %d: the id sequence %s is behind the pool's ids (highest id %d), which rows inserted with ids of their own took: move it past them with SELECT setval('%s', %d), then seed the rest",
				ErrSeedShort, inserted, count, *seq, *top, *seq, *top)
		}
	}
	return fmt.Errorf("%w: %d of %d: the identifiers made from new ids are taken by rows named otherwise: seed the rest with the producer that named them", ErrSeedShort, inserted, count)
}

// seedChunk inserts up to n rows in one statement and returns how many. With
// a sequence behind id (pooltop's identity, or a serial), each row's id is
// its own nextval: concurrent seeds take disjoint ids without waiting on
// each other. A pool whose id has no sequence numbers rows past the highest
// id, its seeds taking turns on a transaction-level advisory lock (nothing
// held past the statement's transaction, so this works through a pooler).
func (e *Engine) seedChunk(ctx context.Context, seq *string, n int64) (int64, error) {
	if seq != nil {
		tag, err := e.db.Exec(ctx, sqlSeedFromSequence, *seq, n)
		return tag.RowsAffected(), err
	}
	var added int64
	err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('pooltop.seed'), hashtext(current_schema()))"); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sqlSeedPastMax, n)
		added = tag.RowsAffected()
		return err
	})
	return added, err
}

// The identifier is "res-" and the id, zero-padded to 10 digits and never
// cut past them. ON CONFLICT DO NOTHING without a target: a partitioned
// pool's unique index is on (identifier, id), and a row named otherwise may
// hold an identifier made here; the caller seeds again for what was skipped.
const (
	sqlSeedFromSequence = `
INSERT INTO resource_pool (id, identifier)
SELECT n, 'res-' || lpad(n::text, greatest(10, length(n::text)), '0')
FROM (SELECT nextval($1::regclass) AS n FROM generate_series(1, $2::bigint)) AS ids
ON CONFLICT DO NOTHING`

	sqlSeedEmpty = `
INSERT INTO resource_pool (id, identifier)
SELECT n, 'res-' || lpad(n::text, greatest(10, length(n::text)), '0')
FROM (SELECT nextval($1::regclass) AS n FROM generate_series(1, $2::bigint)) AS ids`

	sqlSeedPastMax = `
INSERT INTO resource_pool (id, identifier)
SELECT n, 'res-' || lpad(n::text, greatest(10, length(n::text)), '0')
FROM (SELECT base.m + g AS n
      FROM (SELECT coalesce(max(id), 0) AS m FROM resource_pool) AS base,
           generate_series(1, $1::bigint) AS g) AS ids
ON CONFLICT DO NOTHING`
)

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
