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
	// shards are the shard column's values of a pool laid out on Citus,
	// one per Citus shard in slot order (see citus.go); none otherwise.
	shards []int32
	nodes  []string // the node of each shard, host:port
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
	shards, nodes, err := citusShards(ctx, e.db)
	if err != nil {
		return nil, err
	}
	sh := &shape{parts: parts, shards: shards, nodes: nodes}
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

// plainPool is the one table an unpartitioned pool's claims read.
var plainPool = []string{"resource_pool"}

// OnPartition is a statement written for resource_pool, rewritten to run on
// table, one partition of it (or the pool itself, unchanged).
func OnPartition(sql, table string) string {
	if table == "resource_pool" {
		return sql
	}
	return strings.ReplaceAll(sql, "resource_pool", table)
}

// onPartitions runs a claim on the tables a pool's rows live in: for a
// hash-partitioned pool, its partitions, each named directly (its own
// partial index, no pruning or merge of N index scans): first one chosen at
// random for this attempt, then the following ones in turn from there,
// until one hands out rows. A partition that hands out none is empty, or
// its free rows are all taken by other claimers (locked, or lost to them);
// either way the next one may have rows. No worker is bound to a
// partition, so workers spread over all of them, and a drained partition
// costs one empty statement to the attempts that draw it. The rows of a
// claim come from one partition, in id order within it; fewer than n when
// that partition had fewer free: a claim of n promises at most n. On a
// plain table, claim runs once on it.
func (e *Engine) onPartitions(tables []string, claim func(table string) ([]Lease, error)) ([]Lease, error) {
	start := 0
	if len(tables) > 1 {
		start = rand.IntN(len(tables))
	}
	for i := range tables {
		leases, err := claim(tables[(start+i)%len(tables)])
		if err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
				e.shape.Store(nil) // a partition was dropped or detached: read the layout again
			}
			return nil, err
		}
		if len(leases) > 0 || len(tables) == 1 {
			return leases, nil
		}
		e.stats.fallthroughs.Add(1)
	}
	return nil, nil
}
