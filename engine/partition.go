package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// shape is the pool's layout as the engine read it on its first claim: the
// leaf partitions of a hash-partitioned pool, none for a plain table.
type shape struct {
	parts []string // schema-qualified, quoted
}

// sqlPartitions lists the leaves of a partitioned pool (pg_partition_tree
// gives a plain table alone, at level 0), in the order migrate numbers them.
const sqlPartitions = `
SELECT format('%I.%I', n.nspname, c.relname)
FROM pg_partition_tree('resource_pool'::regclass) t
JOIN pg_class c ON c.oid = t.relid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE t.isleaf AND t.level > 0
ORDER BY length(c.relname), c.relname`

// poolShape returns the pool's layout, reading it once. A failed read is
// not kept: the next call tries again.
func (e *Engine) poolShape(ctx context.Context) (*shape, error) {
	if sh := e.shape.Load(); sh != nil {
		return sh, nil
	}
	rows, err := e.db.Query(ctx, sqlPartitions)
	if err != nil {
		return nil, err
	}
	parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	sh := &shape{parts: parts}
	e.shape.Store(sh)
	return sh, nil
}

// Partitions lists the pool's leaf partitions, schema-qualified and quoted,
// as the engine claims from them; none for an unpartitioned pool.
func (e *Engine) Partitions(ctx context.Context) ([]string, error) {
	sh, err := e.poolShape(ctx)
	if err != nil {
		return nil, dbError("read the pool's partitions", err)
	}
	return append([]string(nil), sh.parts...), nil
}

// onPartition is a statement written for resource_pool, rewritten to run on
// one partition of it.
func onPartition(sql, part string) string { return strings.ReplaceAll(sql, "resource_pool", part) }

// acquirePartitioned runs the SKIP LOCKED claim on the partitions of a
// hash-partitioned pool, naming each partition directly (its own partial
// index, no pruning or merge of N index scans): first a partition chosen at
// random for this attempt, then the following ones in turn from there, until
// one hands out rows. A partition that returns none is empty or all its free
// rows are locked by other claimers; either way the next one may have rows.
// No worker is bound to a partition, so workers spread over all of them and
// a drained partition costs one empty statement per attempt that draws it.
// The rows come from one partition, in id order within it; fewer than n when
// that partition had fewer free: a claim of n promises at most n.
func (e *Engine) acquirePartitioned(ctx context.Context, parts []string, sql, holder string, ttl any) ([]Lease, error) {
	start := rand.IntN(len(parts))
	for i := range parts {
		leases, err := e.acquireRows(ctx, e.db, onPartition(sql, parts[(start+i)%len(parts)]), holder, ttl)
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
				e.shape.Store(nil) // a partition was dropped or detached: read the layout again
			}
			return nil, err
		}
		if len(leases) > 0 {
			return leases, nil
		}
		e.stats.fallthroughs.Add(1)
	}
	return nil, nil
}
