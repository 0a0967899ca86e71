package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A pool migrated on a Citus coordinator (see package migrations) is
// distributed by a shard column, one value of it per Citus shard, and its
// lease operations are functions that Citus delegates to the node holding
// the shard. The engine reads the shard values once, with the pool's
// layout; each operation then names its shard: a claim one shard at a time
// from a random one (as on partitions), an operation on a lease the shard
// of its id (id mod the number of shards is the shard's slot).

// sqlCitusShards reads the shard values migrate recorded, in slot order.
const sqlCitusShards = `SELECT coalesce((SELECT string_to_array(value, ',')::int[] FROM pooltop_meta WHERE key = 'citus_shards'), '{}')`

// sqlCitusNodes names the node holding each shard value (host:port), in
// the values' order.
const sqlCitusNodes = `
SELECT coalesce(array_agg(p.nodename || ':' || p.nodeport ORDER BY v.ord), '{}')
FROM unnest($1::int[]) WITH ORDINALITY AS v(value, ord)
JOIN pg_dist_shard_placement AS p ON p.shardid = get_shard_id_for_distribution_column('resource_pool'::regclass, v.value)`

// citusShards returns the shard values of a pool laid out on Citus and the
// node holding each, none for any other pool.
func citusShards(ctx context.Context, db DBTX) ([]int32, []string, error) {
	var meta bool
	if err := db.QueryRow(ctx, `SELECT to_regclass('pooltop_meta') IS NOT NULL`).Scan(&meta); err != nil || !meta {
		return nil, nil, err
	}
	var shards []int32
	if err := db.QueryRow(ctx, sqlCitusShards).Scan(&shards); err != nil || len(shards) == 0 {
		return nil, nil, err
	}
	var nodes []string
	if err := db.QueryRow(ctx, sqlCitusNodes, shards).Scan(&nodes); err != nil {
		return nil, nil, err
	}
	if len(nodes) != len(shards) {
		return nil, nil, fmt.Errorf("%d shard values placed on %d nodes: is a shard being moved?", len(shards), len(nodes))
	}
	return shards, nodes, nil
}

// nodeDown says err is Citus failing to reach the node of a shard (or the
// engine failing to reach the coordinator): SQLSTATE class 08.
func nodeDown(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "08")
}

// nodeHealth remembers the Citus nodes that did not answer: their shards
// are skipped by claims and reaps until a backoff has passed (doubling
// from nodeRetry at each failure, up to nodeRetryMax), then tried again.
type nodeHealth struct {
	mu    sync.Mutex
	nodes map[string]*nodeState
}

type nodeState struct {
	until time.Time     // skipped until then
	wait  time.Duration // the next backoff
	err   error         // the failure that marked it down
}

const (
	nodeRetry    = 100 * time.Millisecond
	nodeRetryMax = 5 * time.Second
)

// down marks node as not answering with err.
func (h *nodeHealth) down(node string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nodes == nil {
		h.nodes = map[string]*nodeState{}
	}
	n := h.nodes[node]
	if n == nil {
		n = &nodeState{wait: nodeRetry}
		h.nodes[node] = n
	}
	n.until, n.err = time.Now().Add(n.wait), err
	n.wait = min(2*n.wait, nodeRetryMax)
}

// up forgets a node's failures.
func (h *nodeHealth) up(node string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.nodes, node)
}

// skipped returns the failure of node while it is to be skipped, nil when
// it is to be tried.
func (h *nodeHealth) skipped(node string, now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := h.nodes[node]; n != nil && now.Before(n.until) {
		return n.err
	}
	return nil
}

// onShard runs op on shard k of sh unless its node is being skipped. A
// node that does not answer is marked down, and the pool's layout is read
// again at the next call (its shards may have moved). It returns the
// node's error when the shard was skipped or its node failed.
func (e *Engine) onShard(ctx context.Context, sh *shape, k int, now time.Time, op func(db DBTX, value int32) error) error {
	node := sh.nodes[k]
	if err := e.nodes.skipped(node, now); err != nil {
		return err
	}
	db, err := e.on(ctx, node)
	if err == nil {
		err = op(db, sh.shards[k])
	}
	if err != nil && e.router.Load() != nil && lostNode(err) {
		err = &pgconn.PgError{Code: "08006", Message: "node " + node + " does not answer: " + err.Error()}
	}
	switch {
	case err == nil:
		e.nodes.up(node)
	case nodeDown(err):
		e.nodes.down(node, err)
		e.stats.nodeFailures.Add(1)
		e.shape.Store(nil)
	}
	return err
}

// Citus says whether the pool is laid out on Citus, and in how many shards.
func (e *Engine) Citus(ctx context.Context) (bool, int, error) {
	sh, err := e.poolShape(ctx)
	if err != nil {
		return false, 0, dbError("read the pool's layout", err)
	}
	return len(sh.shards) > 0, len(sh.shards), nil
}

// shardOf is the shard value of id.
func (sh *shape) shardOf(id int64) int32 { return sh.shards[sh.slotOf(id)] }

// slotOf is the slot of id: the index of its shard value and its node.
func (sh *shape) slotOf(id int64) int {
	n := int64(len(sh.shards))
	return int(((id % n) + n) % n)
}

// leaseDB is the database a call on the lease of id goes to: the node of
// its shard when the engine routes to nodes, else the engine's. A call
// that finds the node gone makes the engine read the layout again.
func (e *Engine) leaseDB(ctx context.Context, sh *shape, id int64) (DBTX, error) {
	if len(sh.shards) == 0 {
		return e.db, nil
	}
	return e.on(ctx, sh.nodes[sh.slotOf(id)])
}

// The statements of the lease operations on Citus: a call of the
// delegated function, alone in its statement so that Citus passes it to
// the node holding the shard.
const (
	sqlCitusClaim   = `SELECT id, identifier, lease_token, leased_until FROM pooltop_claim($1::int, $2::text, $3::bigint, $4::int)`
	sqlCitusCommit  = `SELECT ledger_id, resource_id, lease_token, created_at, 0 FROM pooltop_commit($1::int, $2::bigint, $3::bigint, $4::text, $5::text, $6::text)`
	sqlCitusRenew   = `SELECT id, identifier, lease_token, leased_until, holder FROM pooltop_renew($1::int, $2::bigint, $3::bigint, $4::bigint)`
	sqlCitusRelease = `SELECT id, identifier, lease_token, leased_until, holder FROM pooltop_release($1::int, $2::bigint, $3::bigint)`
	sqlCitusReap    = `SELECT id, expired, at, held FROM pooltop_reap($1::int, $2::bigint, $3::int)`
	// The ledger's row of a request, on the shard of the id it names.
	sqlCitusLedgerByRequest = `
SELECT id, resource_id, lease_token, payload, created_at
FROM business_ledger WHERE shard = $2 AND request_id = $1`
	// The seed: ids from the schema's own sequence, each id's identifier
	// from it as on one server, its shard from the identifier, and the id
	// made to carry the shard's slot. Through the coordinator, which sends
	// each row to its shard.
	sqlCitusSeed = `
INSERT INTO resource_pool (shard, id, identifier)
SELECT m.v[x.slot + 1], x.n * cardinality(m.v) + x.slot, x.identifier
FROM (SELECT string_to_array(value, ',')::int[] AS v FROM pooltop_meta WHERE key = 'citus_shards') AS m,
     LATERAL (SELECT i.n, i.identifier, (hashtext(i.identifier) & 2147483647) % cardinality(m.v) AS slot
              FROM (SELECT s.n, 'res-' || lpad(s.n::text, greatest(10, length(s.n::text)), '0') AS identifier
                    FROM (SELECT nextval('pooltop_seed_seq') AS n FROM generate_series(1, $1::bigint)) AS s) AS i) AS x
ON CONFLICT DO NOTHING`
)

// errCitus is returned for what the Citus layout does not offer yet.
func errCitus(what string) error {
	return invalid("%s is not available on a pool laid out on Citus: claim with skip-locked, commit with the fence", what)
}

// acquireCitus claims up to n ids from one shard, trying the shards in
// turn from a random one until one hands out rows (seed 001 §6.2). A shard
// whose node does not answer is passed over, and so are the other shards
// of that node for a while (see nodeHealth). When no shard handed out
// rows and some could not be reached, the claim fails with the node's
// error, not ErrPoolEmpty: the pool is not known to be empty.
func (e *Engine) acquireCitus(ctx context.Context, sh *shape, p *LeaseAcquireParams, ttl any) ([]Lease, error) {
	if p.Strategy != SkipLocked {
		return nil, errCitus("the " + p.Strategy.String() + " strategy")
	}
	now := time.Now()
	start := rand.IntN(len(sh.shards))
	var unreached error
	for i := range sh.shards {
		k := (start + i) % len(sh.shards)
		var leases []Lease
		err := e.onShard(ctx, sh, k, now, func(db DBTX, v int32) (err error) {
			leases, err = e.acquireRows(ctx, db, sqlCitusClaim, v, p.Holder, ttl, p.N)
			return err
		})
		switch {
		case err != nil && nodeDown(err) && ctx.Err() == nil:
			unreached = cmp.Or(unreached, err)
			continue
		case err != nil:
			return nil, err
		case len(leases) > 0:
			return leases, nil
		}
		e.stats.fallthroughs.Add(1)
	}
	return nil, unreached
}

// reapCitus runs the reap on every shard, one delegated call per shard,
// each of up to p.Batch rows. Reclaimed is the total, so it reaches p.Batch
// whenever one shard's batch was full. The calls go one after the other,
// not in one pipeline: a pipeline is one transaction, and one that wrote
// on two nodes would be committed in two phases.
func (e *Engine) reapCitus(ctx context.Context, sh *shape, p *LeaseReapParams) (ReapResult, error) {
	if p.Now != nil {
		return ReapResult{}, errCitus("a reap at a given time")
	}
	var res ReapResult
	now := time.Now()
	reached := false
	var unreached error
	for k := range sh.shards {
		err := e.onShard(ctx, sh, k, now, func(db DBTX, v int32) error { return e.reapShard(ctx, db, &res, v, p) })
		switch {
		case err != nil && nodeDown(err) && ctx.Err() == nil:
			unreached = cmp.Or(unreached, err)
		case err != nil:
			return ReapResult{}, dbError("reap", err)
		default:
			reached = true
		}
	}
	if !reached && unreached != nil {
		return ReapResult{}, dbError("reap", unreached)
	}
	res.Reclaimed = len(res.IDs)
	return res, nil
}

// reapShard runs the reap on the shard of value v and adds what it
// reclaimed and passed over to res.
func (e *Engine) reapShard(ctx context.Context, db DBTX, res *ReapResult, v int32, p *LeaseReapParams) error {
	rows, err := db.Query(ctx, sqlCitusReap, v, durationMicros(p.Grace), p.Batch)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := res.scan(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// seedCitus adds n ids in one statement and returns how many.
func (e *Engine) seedCitus(ctx context.Context, n int64) (int64, error) {
	tag, err := e.db.Exec(ctx, sqlCitusSeed, n)
	return tag.RowsAffected(), err
}

// isCitusRequestTaken says err is the unique violation of a request id on
// Citus, where each shard names its constraint after the shard
// (business_ledger_request_id_key_102008).
func isCitusRequestTaken(err error) bool {
	var pgErr interface{ SQLState() string }
	if !errors.As(err, &pgErr) || pgErr.SQLState() != "23505" {
		return false
	}
	return strings.Contains(err.Error(), "business_ledger_request_id_key")
}

// onShards rewrites a statement that joins the ledger to the pool by id so
// that it joins them by shard and id: Citus runs a join of two distributed
// tables shard by shard only when it is on their distribution column.
func onShards(sql string) string {
	return strings.NewReplacer(
		"b.resource_id = r.id", "b.shard = r.shard AND b.resource_id = r.id",
		"r.id = b.resource_id", "r.shard = b.shard AND r.id = b.resource_id",
	).Replace(sql)
}

// citusLease is the call of a lease operation on id's shard.
func citusLease(sh *shape, sql string, id int64, args ...any) (string, []any) {
	return sql, append([]any{sh.shardOf(id), id}, args...)
}

// commitBatchCitus commits items one by one on their shards: a pipeline is
// one transaction, and one that wrote on two nodes would be committed in
// two phases.
func (e *Engine) commitBatchCitus(ctx context.Context, holder string, items []CommitItem, results []CommitResult, errs []error) {
	for i, it := range items {
		results[i], errs[i] = e.commit(ctx, &LeaseCommitParams{ID: it.ID, Token: it.Token, Holder: holder, RequestID: it.RequestID, Payload: it.Payload})
	}
}

// refillCitus adds count ids in chunks of seedChunk.
func (e *Engine) refillCitus(ctx context.Context, count int) (int64, error) {
	var inserted int64
	for left := int64(count); left > 0; {
		n := min(left, seedChunk)
		added, err := e.seedCitus(ctx, n)
		inserted += added
		if err != nil {
			return inserted, dbError("seed", err)
		}
		if added < n {
			return inserted, fmt.Errorf("%w: %d of %d: identifiers made from new ids are taken by rows named otherwise: seed the rest with the producer that named them", ErrSeedShort, inserted, count)
		}
		left -= n
	}
	return inserted, nil
}

// nodeRouter sends the lease calls of a Citus pool to the node that holds
// the shard, on a pool of its own per node, instead of through the
// coordinator: since Citus 11 every node holds the metadata and accepts
// the calls, and runs a delegated call on its own shard locally. It saves
// the coordinator's hop and CPU (docs/citus.md). Should the shard have
// moved, the node Citus finds it on still runs the call: Citus passes it
// on; the engine reads the layout again after any failure.
type nodeRouter struct {
	opts  ConnOptions
	mu    sync.Mutex
	pools map[string]*Pool
}

// RouteToNodes makes the engine send each lease call of a Citus pool to the
// node holding its shard, connecting there with opts (the coordinator's,
// with the node's host and port). It returns what closes those
// connections. On a pool not laid out on Citus it changes nothing.
func (e *Engine) RouteToNodes(opts ConnOptions) (closeAll func()) {
	r := &nodeRouter{opts: opts, pools: map[string]*Pool{}}
	e.router.Store(r)
	return func() {
		e.router.Store(nil)
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, p := range r.pools {
			p.Close()
		}
		r.pools = map[string]*Pool{}
	}
}

// on returns the database a call on node goes to: the node's own pool
// when the engine routes to nodes, else the engine's.
func (e *Engine) on(ctx context.Context, node string) (DBTX, error) {
	r := e.router.Load()
	if r == nil {
		return e.db, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if p, ok := r.pools[node]; ok {
		return p, nil
	}
	host, port, ok := strings.Cut(node, ":")
	if !ok {
		return nil, fmt.Errorf("node %q: no port", node)
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("node %q: %w", node, err)
	}
	cfg, settings, err := poolConfig(r.opts)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(n), nil
	p, err := NewPool(ctx, cfg, PoolOptions{Settings: settings})
	if err != nil {
		return nil, err
	}
	r.pools[node] = p
	return p, nil
}

// lostNode says err is the engine's own connection to a node failing, when
// it routes to nodes: refused, cut, or ended by the node's shutdown.
func lostNode(err error) bool {
	var ce *pgconn.ConnectError
	var pgErr *pgconn.PgError
	var ne net.Error
	return errors.As(err, &ce) || errors.As(err, &ne) || pgconn.SafeToRetry(err) ||
		(errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "57P0")) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
