package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaseAcquireParams are the inputs of LeaseAcquire.
type LeaseAcquireParams struct {
	Holder   string        // who claims; recorded on the row and in the ledger
	TTL      time.Duration // lease length from the database clock; ignored with NoLease
	N        int           // how many ids to claim, 1..MaxBatch
	Strategy Strategy
	// NoLease claims rows PENDING without an expiry, as a first design
	// often does: a crashed holder leaks the id forever.
	NoLease bool
	// LockHeld applies to the Blocking strategy only: how long the claim
	// keeps its row locks between the SELECT … FOR UPDATE and the UPDATE,
	// as application code between the two would (an ORM's hooks, a call to
	// another service). The demo uses it so that the queue the anti-pattern
	// builds does not depend on how fast the machine is. Zero elsewhere.
	LockHeld time.Duration
}

// The claim: the CTE locks up to n free rows, skipping locked ones, and the
// UPDATE changes exactly those rows. MATERIALIZED makes the CTE run once, so
// no plan can re-evaluate the LIMIT and claim more than n rows (PostgreSQL
// BUG #15715 hit `WHERE id IN (SELECT … LIMIT n FOR UPDATE SKIP LOCKED)`).
// FOR NO KEY UPDATE, not FOR UPDATE: it does not conflict with the FOR KEY
// SHARE lock a ledger insert takes on its foreign key. ORDER BY id keeps the
// planner on the partial index. $2 NULL gives no expiry (NoLease).
//
// The LIMIT is written into the text (see withLimit), not passed as a
// parameter: with LIMIT $n the cached generic plan assumes a large limit and
// hash-joins a sequential scan of the whole table, so PostgreSQL replans
// the statement on every call; with a literal it plans once.
const sqlAcquireSkipLocked = `
WITH locked AS MATERIALIZED (
    SELECT id FROM resource_pool
    WHERE status = 'UNUSED' AND lease_token < 9223372036854775807
    ORDER BY id
    LIMIT %d
    FOR NO KEY UPDATE SKIP LOCKED
)` + sqlClaim + `
FROM locked
WHERE r.id = locked.id AND r.status = 'UNUSED'
` + sqlClaimReturning

// sqlClaim is what every strategy's claim writes to the rows it takes:
// PENDING for holder $1, the token raised, and a lease of $2 microseconds
// from now by the database clock ($2 NULL: no expiry). The statements that
// use it add the rows (FROM, WHERE) and end with sqlClaimReturning, the
// lease handed back.
const sqlClaim = `
UPDATE resource_pool AS r
SET status = 'PENDING',
    holder = $1,
    lease_token = r.lease_token + 1,
    leased_until = clock_timestamp() + $2::bigint * interval '1 microsecond',
    updated_at = clock_timestamp()`

const sqlClaimReturning = `RETURNING r.id, r.identifier, r.lease_token, r.leased_until`

// The blocking anti-pattern, as an ORM writes it: lock the
// first free rows (waiting for any that another transaction holds), load
// them (findById), then update them, in one transaction: the row locks are
// held across all of its round trips.
const sqlAcquireBlockingSelect = `
SELECT id FROM resource_pool
WHERE status = 'UNUSED' AND lease_token < 9223372036854775807
ORDER BY id
LIMIT %d
FOR NO KEY UPDATE`

// Second half of both the blocking and the optimistic strategies: update the
// chosen rows if they are still free at the token that was read ($4 NULL
// skips the version check: the blocking strategy already holds the locks).
//
// The LIMIT, written into the text as the number of ids (see chosenSQL),
// changes nothing in what the statement does: it tells the planner how many
// rows the arrays hold. Without it, the plan cached for a prepared statement
// assumes 100 rows from unnest() and costs 100 times a custom plan for one
// id, so PostgreSQL plans the statement again at every execution (pgbench,
// blocking claim, 1 client: 2,133 cycles/s with the cached plan, 1,046
// planned every time). Past chosenPrepared ids the statement is sent
// unprepared and planned for its arrays, like every statement over large
// unnest() arrays.
const sqlAcquireChosen = sqlClaim + `
FROM (SELECT * FROM unnest($3::bigint[], $4::bigint[]) LIMIT %d) AS c(id, token)
WHERE r.id = c.id AND r.status = 'UNUSED' AND (c.token IS NULL OR r.lease_token = c.token) AND r.lease_token < 9223372036854775807
` + sqlClaimReturning

// chosenPrepared is the most ids for which sqlAcquireChosen and the load of
// the blocking claim run as prepared statements with their plans cached.
const chosenPrepared = 16

// chosenSQL is sqlAcquireChosen for n ids, and its arguments, led by the
// unprepared mode past chosenPrepared.
func chosenSQL(n int, args ...any) (string, []any) {
	sql := withLimit(sqlAcquireChosen, n)
	if n <= chosenPrepared {
		return sql, args
	}
	return sql, append([]any{pgx.QueryExecModeExec}, args...)
}

// The optimistic read: no lock at all.
const sqlAcquireOptimisticRead = `
SELECT id, lease_token FROM resource_pool
WHERE status = 'UNUSED' AND lease_token < 9223372036854775807
ORDER BY id
LIMIT %d`

// The ORM's findById between the lock and the update. The LIMIT (the number
// of ids, which it does not change) lets the cached plan be used, as for
// sqlAcquireChosen.
const sqlAcquireBlockingLoad = `SELECT id, identifier, status, lease_token FROM resource_pool WHERE id = ANY($1) LIMIT %d`

// optimisticAttempts bounds the retries of one optimistic claim.
const optimisticAttempts = 16

// LeaseAcquire claims up to p.N free ids for p.Holder and returns their
// leases, each with a token one higher than the row had. It returns
// ErrPoolEmpty when nothing could be claimed.
func (e *Engine) LeaseAcquire(ctx context.Context, p *LeaseAcquireParams) ([]Lease, error) {
	op := e.begin("acquire", 0, 0, p.Holder, "")
	leases, err := e.acquire(ctx, p)
	if op != nil && err == nil {
		for _, l := range leases {
			one := *op
			one.ID = l.ID
			e.end(&one, l.Token, nil)
		}
	}
	return leases, err
}

func (e *Engine) acquire(ctx context.Context, p *LeaseAcquireParams) ([]Lease, error) {
	if p.N <= 0 || p.N > MaxBatch {
		return nil, invalid("n %d: claim between 1 and %d ids at a time", p.N, MaxBatch)
	}
	if p.LockHeld < 0 || p.LockHeld > time.Second {
		return nil, invalid("lock held %v: between 0 and 1s", p.LockHeld)
	}
	var ttl any
	if !p.NoLease {
		if err := checkTTL(p.TTL); err != nil {
			return nil, err
		}
		ttl = durationMicros(p.TTL)
	}
	if p.Holder == "" {
		return nil, invalid("holder is empty: name who holds the lease")
	}
	sh, err := e.poolShape(ctx)
	if err != nil {
		return nil, dbError(fmt.Sprintf("acquire (%s)", p.Strategy), err)
	}
	// The tables a claim takes rows from: the pool, or its partitions, one
	// at a time from a random one (see onPartitions); on Citus, its shards.
	if len(sh.shards) > 0 {
		leases, err := e.acquireCitus(ctx, sh, p, ttl)
		if err != nil {
			return nil, dbError(fmt.Sprintf("acquire (%s)", p.Strategy), err)
		}
		return e.claimed(leases, p)
	}
	tables := sh.parts
	if len(tables) == 0 {
		tables = plainPool
	}
	var leases []Lease
	switch p.Strategy {
	case SkipLocked:
		claim := withLimit(sqlAcquireSkipLocked, p.N)
		leases, err = e.onPartitions(tables, func(table string) ([]Lease, error) {
			return e.acquireRows(ctx, e.db, OnPartition(claim, table), p.Holder, ttl)
		})
	case Blocking:
		leases, err = e.onPartitions(tables, func(table string) ([]Lease, error) {
			return e.acquireBlocking(ctx, p, ttl, table)
		})
	case Optimistic:
		leases, err = e.acquireOptimistic(ctx, p, ttl, tables)
	default:
		return nil, invalid("strategy %d unknown", p.Strategy)
	}
	if err != nil {
		return nil, dbError(fmt.Sprintf("acquire (%s)", p.Strategy), err)
	}
	return e.claimed(leases, p)
}

// claimed checks and completes the leases of a claim.
func (e *Engine) claimed(leases []Lease, p *LeaseAcquireParams) ([]Lease, error) {
	if len(leases) == 0 {
		return nil, ErrPoolEmpty
	}
	if len(leases) > p.N {
		// Would be a bug in the SQL above; never hand out more than asked.
		return nil, fmt.Errorf("acquire (%s): claimed %d rows for n=%d", p.Strategy, len(leases), p.N)
	}
	for i := range leases {
		leases[i].Holder = p.Holder
	}
	return leases, nil
}

// ClaimSQL is the single-statement claim of n ids, with $1 the holder and $2
// the lease in microseconds, exactly as LeaseAcquire runs it; `pooltop bench`
// gives it to pgbench to measure the ceiling.
func ClaimSQL(n int) string { return withLimit(sqlAcquireSkipLocked, n) }

// CommitSQL is the fenced commit as LeaseCommit runs it: $1 id, $2 token,
// $3 request_id, $4 holder, $5 payload.
const CommitSQL = sqlCommitFenced

// BlockingSQL is the blocking claim of n ids as LeaseAcquire runs it, in one
// transaction: lock (no parameters), load ($1 the ids locked) and update
// (ChosenSQL with $4 all NULL).
func BlockingSQL(n int) (lock, load string) {
	return withLimit(sqlAcquireBlockingSelect, n), withLimit(sqlAcquireBlockingLoad, n)
}

// OptimisticReadSQL is the optimistic claim's lock-free read of n ids; the
// update is ChosenSQL with $4 the tokens read.
func OptimisticReadSQL(n int) string { return withLimit(sqlAcquireOptimisticRead, n) }

// ChosenSQL updates n chosen rows if still free: $1 holder, $2 lease in
// microseconds, $3 ids, $4 tokens read (NULL: no version check).
func ChosenSQL(n int) string { return withLimit(sqlAcquireChosen, n) }

// CommitBatchSQL is LeaseCommitBatch's statement: $1 ids, $2 tokens,
// $3 request ids, $4 payloads, $5 holder.
const CommitBatchSQL = sqlCommitBatch

// withLimit writes a validated row count into a statement's LIMIT.
func withLimit(sql string, n int) string { return fmt.Sprintf(sql, n) }

func (e *Engine) acquireRows(ctx context.Context, db DBTX, sql string, args ...any) ([]Lease, error) {
	rows, err := db.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, scanLease)
}

func scanLease(row pgx.CollectableRow) (Lease, error) {
	var l Lease
	err := row.Scan(&l.ID, &l.Identifier, &l.Token, &l.LeasedUntil)
	return l, err
}

// acquireBlocking runs the blocking claim on table (the pool, or one
// partition: the rows are then locked, loaded and updated in that partition).
func (e *Engine) acquireBlocking(ctx context.Context, p *LeaseAcquireParams, ttl any, table string) ([]Lease, error) {
	var leases []Lease
	err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, OnPartition(withLimit(sqlAcquireBlockingSelect, p.N), table))
		if err != nil {
			return err
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(ids) == 0 {
			return err
		}
		load := []any{ids}
		if len(ids) > chosenPrepared {
			load = []any{pgx.QueryExecModeExec, ids}
		}
		if _, err := tx.Exec(ctx, OnPartition(withLimit(sqlAcquireBlockingLoad, len(ids)), table), load...); err != nil {
			return err
		}
		if err := sleepCtx(ctx, p.LockHeld); err != nil {
			return err
		}
		tokens := make([]*int64, len(ids))
		sql, args := chosenSQL(len(ids), p.Holder, ttl, ids, tokens)
		leases, err = e.acquireRows(ctx, tx, OnPartition(sql, table), args...)
		return err
	})
	return leases, err
}

// acquireOptimistic reads free rows without locks and updates them if their
// token has not moved, retrying the rows it lost. On a partitioned pool each
// attempt reads and updates one partition (from a random one, moving on
// when a partition has no free row or every row read was lost), so that the
// update's row locks follow the ids' order as on a plain table: an update
// through the parent may lock the rows partition by partition in one
// session and in id order in another, and deadlock.
func (e *Engine) acquireOptimistic(ctx context.Context, p *LeaseAcquireParams, ttl any, tables []string) ([]Lease, error) {
	for attempt := 0; attempt < optimisticAttempts; attempt++ {
		if attempt > 0 {
			e.stats.retries.Add(1)
		}
		read := false
		leases, err := e.onPartitions(tables, func(table string) ([]Lease, error) {
			rows, err := e.db.Query(ctx, OnPartition(withLimit(sqlAcquireOptimisticRead, p.N), table))
			if err != nil {
				return nil, err
			}
			var ids, tokens []int64
			for rows.Next() {
				var id, tok int64
				if err := rows.Scan(&id, &tok); err != nil {
					rows.Close()
					return nil, err
				}
				ids = append(ids, id)
				tokens = append(tokens, tok)
			}
			if err := rows.Err(); err != nil {
				return nil, err
			}
			if len(ids) == 0 {
				return nil, nil
			}
			read = true
			sql, args := chosenSQL(len(ids), p.Holder, ttl, ids, tokens)
			leases, err := e.acquireRows(ctx, e.db, OnPartition(sql, table), args...)
			if err != nil {
				return nil, err
			}
			e.stats.conflicts.Add(int64(len(ids) - len(leases)))
			return leases, nil
		})
		if err != nil || len(leases) > 0 {
			return leases, err
		}
		if !read {
			return nil, nil // no free row anywhere
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
	return nil, ErrContended
}

// LeaseRenewParams are the inputs of LeaseRenew.
type LeaseRenewParams struct {
	ID    int64
	Token int64
	TTL   time.Duration // the new lease runs TTL from now on the database clock
}

// Renew extends a live lease. The token does not change: the owner does not.
// An expired lease cannot be renewed, even if nobody reaped it yet.
const sqlRenew = `
UPDATE resource_pool
SET leased_until = clock_timestamp() + $3::bigint * interval '1 microsecond',
    updated_at = clock_timestamp()
WHERE id = $1 AND lease_token = $2 AND status = 'PENDING'
  AND (leased_until IS NULL OR leased_until > clock_timestamp())
RETURNING id, identifier, lease_token, leased_until, coalesce(holder, '')`

// LeaseRenew extends the lease (ID, Token) by TTL from now.
func (e *Engine) LeaseRenew(ctx context.Context, p *LeaseRenewParams) (Lease, error) {
	if err := checkLeaseRef(p.ID, p.Token); err != nil {
		return Lease{}, err
	}
	if err := checkTTL(p.TTL); err != nil {
		return Lease{}, err
	}
	sh, err := e.poolShape(ctx)
	if err != nil {
		return Lease{}, dbError(fmt.Sprintf("renew id %d", p.ID), err)
	}
	if len(sh.shards) > 0 {
		db, err := e.leaseDB(ctx, sh, p.ID)
		if err != nil {
			return Lease{}, dbError(fmt.Sprintf("renew id %d", p.ID), err)
		}
		sql, args := citusLease(sh, sqlCitusRenew, p.ID, p.Token, durationMicros(p.TTL))
		return e.casLease(ctx, db, "renew", p.ID, p.Token, sql, args...)
	}
	return e.casLease(ctx, e.db, "renew", p.ID, p.Token, sqlRenew, p.ID, p.Token, durationMicros(p.TTL))
}

// LeaseReleaseParams are the inputs of LeaseRelease.
type LeaseReleaseParams struct {
	ID    int64
	Token int64
}

// Release returns the id to the pool and bumps the token, so that the old
// holder's token is stale from now on. A lease that expired but was not yet
// reaped may still be released by its holder: nobody else owns it.
const sqlRelease = `
UPDATE resource_pool
SET status = 'UNUSED', holder = NULL, leased_until = NULL,
    lease_token = lease_token + 1, updated_at = clock_timestamp()
WHERE id = $1 AND lease_token = $2 AND status = 'PENDING' AND lease_token < 9223372036854775807
RETURNING id, identifier, lease_token, leased_until, ''`

// LeaseRelease gives the id back to the pool; the returned lease carries the
// new (bumped) token and no holder.
func (e *Engine) LeaseRelease(ctx context.Context, p *LeaseReleaseParams) (Lease, error) {
	if err := checkLeaseRef(p.ID, p.Token); err != nil {
		return Lease{}, err
	}
	sh, err := e.poolShape(ctx)
	if err != nil {
		return Lease{}, dbError(fmt.Sprintf("release id %d", p.ID), err)
	}
	sql, args := sqlRelease, []any{p.ID, p.Token}
	if len(sh.shards) > 0 {
		sql, args = citusLease(sh, sqlCitusRelease, p.ID, p.Token)
	}
	db, err := e.leaseDB(ctx, sh, p.ID)
	if err != nil {
		return Lease{}, dbError(fmt.Sprintf("release id %d", p.ID), err)
	}
	op := e.begin("release", p.ID, p.Token, "", "")
	l, err := e.casLease(ctx, db, "release", p.ID, p.Token, sql, args...)
	e.end(op, l.Token, err)
	return l, err
}

// LeaseTransferParams are the inputs of LeaseTransfer.
type LeaseTransferParams struct {
	ID    int64
	Token int64
	To    string        // the new holder
	TTL   time.Duration // 0 keeps the current expiry; otherwise a fresh lease of TTL
}

// Transfer hands a live lease to another holder with a higher token: the
// old holder's token is stale from now on.
const sqlTransfer = `
UPDATE resource_pool
SET holder = $3, lease_token = lease_token + 1,
    leased_until = CASE WHEN $4::bigint IS NULL THEN leased_until
                        ELSE clock_timestamp() + $4::bigint * interval '1 microsecond' END,
    updated_at = clock_timestamp()
WHERE id = $1 AND lease_token = $2 AND status = 'PENDING' AND lease_token < 9223372036854775807
  AND (leased_until IS NULL OR leased_until > clock_timestamp())
RETURNING id, identifier, lease_token, leased_until, coalesce(holder, '')`

// LeaseTransfer moves a live lease to p.To and returns it with its new token.
func (e *Engine) LeaseTransfer(ctx context.Context, p *LeaseTransferParams) (Lease, error) {
	if err := checkLeaseRef(p.ID, p.Token); err != nil {
		return Lease{}, err
	}
	if p.To == "" {
		return Lease{}, invalid("transfer to an empty holder")
	}
	if sh, err := e.poolShape(ctx); err != nil {
		return Lease{}, dbError(fmt.Sprintf("transfer id %d", p.ID), err)
	} else if len(sh.shards) > 0 {
		return Lease{}, errCitus("transfer")
	}
	var ttl any
	if p.TTL != 0 {
		if err := checkTTL(p.TTL); err != nil {
			return Lease{}, err
		}
		ttl = durationMicros(p.TTL)
	}
	op := e.begin("transfer", p.ID, p.Token, p.To, "")
	l, err := e.casLease(ctx, e.db, "transfer", p.ID, p.Token, sqlTransfer, p.ID, p.Token, p.To, ttl)
	e.end(op, l.Token, err)
	return l, err
}

func (e *Engine) casLease(ctx context.Context, db DBTX, op string, id, token int64, sql string, args ...any) (Lease, error) {
	var l Lease
	err := db.QueryRow(ctx, sql, args...).Scan(&l.ID, &l.Identifier, &l.Token, &l.LeasedUntil, &l.Holder)
	if errors.Is(err, pgx.ErrNoRows) {
		return Lease{}, e.whyLost(ctx, op, id, token)
	}
	if err != nil {
		return Lease{}, dbError(fmt.Sprintf("%s id %d", op, id), err)
	}
	return l, nil
}

// Row is one resource_pool row as `pooltop lease show` prints it.
type Row struct {
	ID          int64      `json:"id"`
	Identifier  string     `json:"identifier"`
	Status      string     `json:"status"`
	Token       int64      `json:"token"`
	LeasedUntil *time.Time `json:"leased_until"`
	Holder      *string    `json:"holder"`
	UpdatedAt   *time.Time `json:"updated_at"`
	Expired     bool       `json:"expired"`        // PENDING with a lease that has passed (database clock)
	Effects     int        `json:"effects"`        // rows in business_ledger for this id
	Note        string     `json:"note,omitempty"` // what in the row is outside the contract
}

// Rows outside the contract (no status, no updated_at, an infinite lease)
// are shown as they are, with a note, not refused.
const sqlShow = `
SELECT id, identifier, coalesce(status, ''), lease_token, CASE WHEN isfinite(leased_until) THEN leased_until END, holder,
       CASE WHEN isfinite(updated_at) THEN updated_at END,
       coalesce(status = 'PENDING' AND leased_until IS NOT NULL AND leased_until <= clock_timestamp(), false),
       (SELECT count(*) FROM business_ledger b WHERE b.resource_id = r.id),
       concat_ws('; ', CASE WHEN status IS NULL THEN 'status is NULL'
                            WHEN status NOT IN ('UNUSED', 'PENDING', 'CONSUMED') THEN 'status ' || quote_literal(status) || ' is none of UNUSED, PENDING, CONSUMED' END,
                 CASE WHEN NOT isfinite(leased_until) THEN 'leased_until is ' || leased_until::text END,
                 CASE WHEN updated_at IS NULL THEN 'updated_at is NULL' WHEN NOT isfinite(updated_at) THEN 'updated_at is ' || updated_at::text END,
                 CASE WHEN lease_token = 9223372036854775807 THEN 'the token is the largest a bigint holds: the id cannot change owner again' END)
FROM resource_pool r WHERE id = $1`

// Show reads one row with its lease state and number of ledger effects.
func (e *Engine) Show(ctx context.Context, id int64) (Row, error) {
	if id <= 0 {
		return Row{}, invalid("id %d: ids are positive", id)
	}
	var r Row
	sh, err := e.poolShape(ctx)
	if err != nil {
		return Row{}, dbError(fmt.Sprintf("show id %d", id), err)
	}
	sql, args := sqlShow, []any{id}
	if len(sh.shards) > 0 {
		sql, args = onShards(strings.Replace(sqlShow, "WHERE id = $1", "WHERE r.shard = $2 AND r.id = $1", 1)), []any{id, sh.shardOf(id)}
	}
	err = e.db.QueryRow(ctx, sql, args...).Scan(&r.ID, &r.Identifier, &r.Status, &r.Token,
		&r.LeasedUntil, &r.Holder, &r.UpdatedAt, &r.Expired, &r.Effects, &r.Note)
	if errors.Is(err, pgx.ErrNoRows) {
		return Row{}, &LeaseError{Op: "show", ID: id, Err: ErrNotFound}
	}
	if err != nil {
		return Row{}, dbError(fmt.Sprintf("show id %d", id), err)
	}
	return r, nil
}

const sqlWhy = `
SELECT coalesce(status, 'NULL'), lease_token, CASE WHEN isfinite(leased_until) THEN leased_until END, coalesce(holder, ''),
       leased_until IS NOT NULL AND leased_until <= clock_timestamp()
FROM resource_pool WHERE id = $1`

// whyLost reads the row after a compare-and-set changed nothing and says why.
// It is only an explanation: the decision was already made by the statement.
func (e *Engine) whyLost(ctx context.Context, op string, id, token int64) error {
	le := &LeaseError{Op: op, ID: id, Token: token}
	var expired bool
	err := e.db.QueryRow(ctx, sqlWhy, id).Scan(&le.Status, &le.CurrentToken, &le.LeasedUntil, &le.Holder, &expired)
	if errors.Is(err, pgx.ErrNoRows) {
		le.Err = ErrNotFound
		return le
	}
	if err != nil {
		return dbError(fmt.Sprintf("%s id %d: lease not changed; reading why failed", op, id), err)
	}
	switch {
	case token == le.CurrentToken && le.CurrentToken == math.MaxInt64 && op != "renew":
		le.Err = ErrTokenExhausted
		le.Reason = "its token is the largest a bigint holds, so no new owner can be fenced: take the id out of the pool (set it CONSUMED by hand)"
	case token < le.CurrentToken:
		le.Err = ErrStaleToken
		le.Reason = fmt.Sprintf("the id has moved on to token %d (%s)", le.CurrentToken, describe(le))
	case token > le.CurrentToken:
		le.Err = ErrStaleToken
		le.Reason = fmt.Sprintf("token %d was never issued; the id is at token %d", token, le.CurrentToken)
	case le.Status == StatusConsumed:
		le.Err = ErrLeaseLost
		le.Reason = "the id is already consumed"
	case le.Status == StatusPending && expired:
		le.Err = ErrLeaseLost
		le.Reason = fmt.Sprintf("the lease expired at %s and awaits the reaper", le.LeasedUntil.UTC().Format(time.RFC3339Nano))
	default:
		le.Err = ErrLeaseLost
		le.Reason = fmt.Sprintf("the id is %s", describe(le))
	}
	return le
}

func describe(le *LeaseError) string {
	if le.Holder != "" {
		return fmt.Sprintf("%s, held by %q", le.Status, le.Holder)
	}
	return le.Status
}

// sleepCtx waits d, or until ctx ends (its error is returned).
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
