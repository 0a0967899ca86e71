package migrations

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// On a Citus coordinator the pool is laid out for Citus: resource_pool and
// business_ledger are distributed tables on a column named shard and
// colocated, so that an id's row and its effects live on one node. The
// layout keeps two promises of the single server:
//
//   - an identifier is unique in the whole cluster. Citus accepts a unique
//     constraint only when it holds the distribution column, so the shard
//     is derived from the identifier: UNIQUE (shard, identifier) is then
//     global, and a check constraint refuses a row whose shard is not its
//     identifier's;
//   - a lease is still (id, token). The id carries its shard: id mod
//     CitusShards is the shard's slot, so a commit of (id, token) is routed
//     without the caller naming a shard.
//
// Each of the CitusShards Citus shards holds one value of the shard column
// (chosen at migrate, recorded in pooltop_meta under "citus_shards"): a
// statement with shard = that value runs on that one shard, and the shard
// can move to another node (citus_rebalance_start) with its rows.
//
// The lease operations are PL/pgSQL functions distributed with the pool
// (create_distributed_function, force_delegation): the coordinator passes
// the call to the node holding the shard, which runs it locally in one
// round trip, without two-phase commit. That node's clock judges the
// leases of its shards: every function reads clock_timestamp() there.

// CitusShards is the number of Citus shards of a pool migrated on Citus:
// enough to spread over 32 nodes later (citus_rebalance_start moves whole
// shards).
const CitusShards = 32

// MinCitus is the oldest Citus major pooltop lays a pool out on: from 11
// every node holds the metadata, and a distributed function can be
// delegated inside a transaction (force_delegation).
const MinCitus = 11

// CitusCluster is what a server says about Citus, read without writing.
type CitusCluster struct {
	// Installed: the citus extension exists in this database.
	Installed bool
	// Coordinator: this node holds the cluster's metadata as its
	// coordinator (group 0).
	Coordinator bool
	// Workers is the number of active primary worker nodes.
	Workers int
	// Version is the extension's version.
	Version string
}

// ErrCitus means the Citus cluster cannot hold the pool as it is.
var ErrCitus = errors.New("cannot lay out the pool on Citus")

// InspectCitus reads whether the database conn is on has Citus, and its place
// in the cluster.
func InspectCitus(ctx context.Context, conn *pgx.Conn) (CitusCluster, error) {
	var c CitusCluster
	var version *string
	if err := conn.QueryRow(ctx, `SELECT extversion FROM pg_extension WHERE extname = 'citus'`).Scan(&version); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return c, fmt.Errorf("inspect Citus: %w", err)
	}
	if version == nil {
		return c, nil
	}
	c.Installed, c.Version = true, *version
	err := conn.QueryRow(ctx, `SELECT coalesce((SELECT groupid = 0 FROM pg_dist_local_group), true),
       (SELECT count(*) FROM pg_dist_node WHERE noderole = 'primary' AND isactive AND groupid <> 0)::int`).Scan(&c.Coordinator, &c.Workers)
	if err != nil {
		return c, fmt.Errorf("inspect Citus: %w", err)
	}
	return c, nil
}

// checkCitus says why the pool cannot be laid out on the cluster st
// describes, or nil.
func checkCitus(st *State, o Options) error {
	c := st.Citus
	quoted := pgx.Identifier{st.Schema}.Sanitize()
	major, _, _ := strings.Cut(c.Version, ".")
	if n, err := strconv.Atoi(major); err != nil || n < MinCitus {
		return fmt.Errorf("%w: Citus %s lacks what pooltop needs (every node holding the metadata, delegation inside a transaction, citus_lock_waits): upgrade to Citus %d or later", ErrCitus, c.Version, MinCitus)
	}
	switch {
	case !c.Coordinator:
		return fmt.Errorf("%w: this server is a worker node of a Citus cluster: run migrate on its coordinator", ErrCitus)
	case c.Workers == 0:
		return fmt.Errorf("%w: this Citus coordinator has no active worker node: add them first (SELECT citus_add_node('host', port) for each), then migrate", ErrCitus)
	case o.Partitions > 0:
		return fmt.Errorf("%w: --partitions: on Citus the pool is spread over %d shards, not partitions: migrate without --partitions", ErrCitus, CitusShards)
	case st.Pool && st.Distribution != "shard":
		how := "a local table, not distributed"
		if st.Distribution != "" {
			how = "distributed by column " + st.Distribution
		}
		return fmt.Errorf("%w: %s.resource_pool is %s; pooltop needs it distributed by shard, derived from the identifier: create the pool in another --schema and move the rows", ErrCitus, quoted, how)
	}
	return nil
}

// citusPool creates the pool's tables and distributes them, records the
// shard column's values in pooltop_meta and marks the schema as pooltop's,
// in one transaction. 00001 then finds the tables and adds the partial
// indexes, the autovacuum settings and the marker's missing keys; pooltop_meta,
// pooltop_worker and the version table stay on the coordinator.
func citusPool(schema string) string {
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	pool, ledger, meta := q("resource_pool"), q("business_ledger"), q("pooltop_meta")
	lit := func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
	return fmt.Sprintf(`-- resource_pool and business_ledger distributed by Citus on shard, in %[1]d shards, in schema %[2]s:
CREATE TABLE IF NOT EXISTS %[3]s (
    shard        int NOT NULL,
    id           bigint NOT NULL,
    identifier   text NOT NULL,
    status       text NOT NULL DEFAULT 'UNUSED',
    leased_until timestamptz,
    lease_token  bigint NOT NULL DEFAULT 0,
    updated_at   timestamptz NOT NULL DEFAULT now(),
    holder       text,
    CONSTRAINT resource_pool_pkey PRIMARY KEY (shard, id),
    CONSTRAINT resource_pool_identifier_key UNIQUE (shard, identifier),
    CONSTRAINT resource_pool_status_check CHECK (status IN ('UNUSED', 'PENDING', 'CONSUMED')),
    CONSTRAINT resource_pool_token_check CHECK (lease_token >= 0),
    CONSTRAINT resource_pool_unused_check CHECK (status <> 'UNUSED' OR (leased_until IS NULL AND holder IS NULL))
);
CREATE TABLE IF NOT EXISTS %[4]s (
    shard       int NOT NULL,
    id          bigserial,
    resource_id bigint NOT NULL,
    lease_token bigint NOT NULL CHECK (lease_token >= 0),
    request_id  text NOT NULL,
    holder      text NOT NULL DEFAULT '',
    payload     text NOT NULL DEFAULT '',
    fenced      boolean NOT NULL DEFAULT true,
    created_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT business_ledger_pkey PRIMARY KEY (shard, id),
    CONSTRAINT business_ledger_request_id_key UNIQUE (shard, request_id),
    CONSTRAINT business_ledger_resource_fkey FOREIGN KEY (shard, resource_id) REFERENCES %[3]s (shard, id)
);
SELECT create_distributed_table(%[6]s, 'shard', shard_count => %[1]d);
SELECT create_distributed_table(%[7]s, 'shard', colocate_with => %[6]s);
CREATE TABLE IF NOT EXISTS %[5]s (key text PRIMARY KEY, value text NOT NULL);
CREATE SEQUENCE IF NOT EXISTS %[8]s;
DO $citus$
DECLARE
    v int[];
BEGIN
    -- One value of the shard column per Citus shard, in the shards' hash order.
    SELECT array_agg(x.g ORDER BY s.shardminvalue::int) INTO v
    FROM pg_dist_shard s
    CROSS JOIN LATERAL (SELECT g FROM generate_series(0, 100000) AS g
                        WHERE get_shard_id_for_distribution_column(%[6]s::regclass, g) = s.shardid LIMIT 1) AS x
    WHERE s.logicalrelid = %[6]s::regclass;
    EXECUTE format('ALTER TABLE %%s ADD CONSTRAINT resource_pool_shard_check CHECK (shard = (%%L::int[])[(hashtext(identifier) & 2147483647) %%%% %%s + 1] AND shard = (%%L::int[])[id %%%% %%s + 1])',
                   %[6]s::regclass, v, cardinality(v), v, cardinality(v));
    INSERT INTO %[5]s (key, value) VALUES ('created_by', 'pooltop'), ('origin', 'created'), ('citus_shards', array_to_string(v, ','))
    ON CONFLICT (key) DO NOTHING;
END
$citus$`, CitusShards, pgx.Identifier{schema}.Sanitize(), pool, ledger, meta, lit(pool), lit(ledger), q("pooltop_seed_seq"))
}

// citusFunctions are the lease operations as functions delegated to the node
// that holds the shard (see the package's note on Citus). Each reads the
// clock once, into t, on that node: Citus refuses a volatile function in an
// UPDATE of a distributed table, and one value keeps a statement's
// judgement of a lease and what it writes consistent.
func citusFunctions(schema string) []string {
	q := func(name string) string { return pgx.Identifier{schema, name}.Sanitize() }
	pool, ledger := q("resource_pool"), q("business_ledger")
	// Each function plans its statements for their arguments at every call
	// (plan_cache_mode): a PL/pgSQL statement's cached generic plan takes
	// LIMIT p_n for a large limit and joins a sequential scan of the whole
	// shard, and a claim took 6 to 10 ms instead of 0.6.
	fn := func(name, args, returns, body string) string {
		return fmt.Sprintf(`CREATE OR REPLACE FUNCTION %s(%s) RETURNS %s LANGUAGE plpgsql SET plan_cache_mode = force_custom_plan AS $fn$
DECLARE
    t timestamptz := clock_timestamp();
BEGIN
%s
END
$fn$`, q(name), args, returns, body)
	}
	distribute := func(name, signature string) string {
		return fmt.Sprintf(`SELECT create_distributed_function('%s(%s)', distribution_arg_name => 'p_shard', colocate_with => '%s', force_delegation => true)`,
			strings.ReplaceAll(q(name), "'", "''"), signature, strings.ReplaceAll(pool, "'", "''"))
	}
	lease := "TABLE (id bigint, identifier text, lease_token bigint, leased_until timestamptz, holder text)"
	return []string{
		// The claim of sqlAcquireSkipLocked, on one shard.
		fn("pooltop_claim", "p_shard int, p_holder text, p_lease_us bigint, p_n int", lease, fmt.Sprintf(`    RETURN QUERY
    WITH locked AS MATERIALIZED (
        SELECT p.id FROM %[1]s AS p
        WHERE p.shard = p_shard AND p.status = 'UNUSED' AND p.lease_token < 9223372036854775807
        ORDER BY p.id
        LIMIT p_n
        FOR NO KEY UPDATE SKIP LOCKED
    )
    UPDATE %[1]s AS r
    SET status = 'PENDING', holder = p_holder, lease_token = r.lease_token + 1,
        leased_until = t + p_lease_us * interval '1 microsecond', updated_at = t
    FROM locked
    WHERE r.shard = p_shard AND r.id = locked.id AND r.status = 'UNUSED'
    RETURNING r.id, r.identifier, r.lease_token, r.leased_until, r.holder;`, pool)),
		distribute("pooltop_claim", "int,text,bigint,int"),
		// The fenced commit of sqlCommitFenced, in two statements: the row
		// moves at the caller's token with a live lease, then the effect is
		// written; a unique violation of the request id undoes both.
		fn("pooltop_commit", "p_shard int, p_id bigint, p_token bigint, p_request text, p_holder text, p_payload text",
			"TABLE (ledger_id bigint, resource_id bigint, lease_token bigint, created_at timestamptz)", fmt.Sprintf(`    UPDATE %[1]s AS r
    SET status = 'CONSUMED', leased_until = NULL, updated_at = t
    WHERE r.shard = p_shard AND r.id = p_id AND r.lease_token = p_token AND r.status = 'PENDING'
      AND (r.leased_until IS NULL OR r.leased_until > t);
    IF NOT FOUND THEN
        RETURN;
    END IF;
    RETURN QUERY
    INSERT INTO %[2]s AS b (shard, resource_id, lease_token, request_id, holder, payload, fenced, created_at)
    VALUES (p_shard, p_id, p_token, p_request, p_holder, p_payload, true, t)
    RETURNING b.id, b.resource_id, b.lease_token, b.created_at;`, pool, ledger)),
		distribute("pooltop_commit", "int,bigint,bigint,text,text,text"),
		// sqlRenew.
		fn("pooltop_renew", "p_shard int, p_id bigint, p_token bigint, p_lease_us bigint", lease, fmt.Sprintf(`    RETURN QUERY
    UPDATE %[1]s AS r
    SET leased_until = t + p_lease_us * interval '1 microsecond', updated_at = t
    WHERE r.shard = p_shard AND r.id = p_id AND r.lease_token = p_token AND r.status = 'PENDING'
      AND (r.leased_until IS NULL OR r.leased_until > t)
    RETURNING r.id, r.identifier, r.lease_token, r.leased_until, coalesce(r.holder, '');`, pool)),
		distribute("pooltop_renew", "int,bigint,bigint,bigint"),
		// sqlRelease.
		fn("pooltop_release", "p_shard int, p_id bigint, p_token bigint", lease, fmt.Sprintf(`    RETURN QUERY
    UPDATE %[1]s AS r
    SET status = 'UNUSED', holder = NULL, leased_until = NULL, lease_token = r.lease_token + 1, updated_at = t
    WHERE r.shard = p_shard AND r.id = p_id AND r.lease_token = p_token AND r.status = 'PENDING'
      AND r.lease_token < 9223372036854775807
    RETURNING r.id, r.identifier, r.lease_token, r.leased_until, ''::text;`, pool)),
		distribute("pooltop_release", "int,bigint,bigint"),
		// sqlReap, on one shard: the leases expired by grace, reclaimed,
		// and those passed over because their holder had the row locked.
		fn("pooltop_reap", "p_shard int, p_grace_us bigint, p_n int",
			"TABLE (id bigint, expired timestamptz, at timestamptz, held boolean)", fmt.Sprintf(`    RETURN QUERY
    WITH expired AS MATERIALIZED (
        SELECT p.id, p.leased_until FROM %[1]s AS p
        WHERE p.shard = p_shard AND p.status = 'PENDING' AND p.lease_token < 9223372036854775807
          AND p.leased_until < t - p_grace_us * interval '1 microsecond'
        ORDER BY p.leased_until
        LIMIT p_n
        FOR NO KEY UPDATE SKIP LOCKED
    ), reclaimed AS (
        UPDATE %[1]s AS r
        SET status = 'UNUSED', holder = NULL, leased_until = NULL, lease_token = r.lease_token + 1, updated_at = t
        FROM expired
        WHERE r.shard = p_shard AND r.id = expired.id AND r.status = 'PENDING'
          AND r.leased_until < t - p_grace_us * interval '1 microsecond'
        RETURNING r.id, expired.leased_until
    ), reached AS (
        SELECT CASE WHEN count(*) < p_n THEN 'infinity'::timestamptz ELSE max(e.leased_until) END AS upto FROM expired AS e
    ), held AS (
        SELECT p.id FROM %[1]s AS p
        WHERE p.shard = p_shard AND p.status = 'PENDING' AND p.lease_token < 9223372036854775807
          AND p.leased_until < t - p_grace_us * interval '1 microsecond'
          AND p.leased_until <= (SELECT upto FROM reached)
          AND NOT EXISTS (SELECT FROM expired AS e WHERE e.id = p.id)
        ORDER BY p.leased_until
        LIMIT p_n
    )
    SELECT x.id, CASE WHEN isfinite(x.leased_until) THEN x.leased_until END, t, false FROM reclaimed AS x
    UNION ALL
    SELECT h.id, NULL::timestamptz, t, true FROM held AS h;`, pool)),
		distribute("pooltop_reap", "int,bigint,int"),
	}
}
