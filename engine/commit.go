package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// LeaseCommitParams are the inputs of LeaseCommit.
type LeaseCommitParams struct {
	ID        int64
	Token     int64
	Holder    string // recorded with the effect
	RequestID string // idempotency key: one effect per request_id, ever
	Payload   string
	// NoFence commits without checking the token or the lease: the
	// split-brain demo. Two holders of one id can then both record effects.
	NoFence bool
}

// CommitResult describes the accepted effect.
type CommitResult struct {
	LedgerID    int64     `json:"ledger_id"`
	ResourceID  int64     `json:"id"`
	Token       int64     `json:"token"`
	RequestID   string    `json:"request_id"`
	CommittedAt time.Time `json:"committed_at"`
	// Replayed is true when request_id had already been committed with the
	// same id and payload: the original result is returned, nothing is written.
	Replayed bool `json:"replayed"`
	// PriorEffects counts the effects the id already had when this one was
	// written. Always 0 with the fence; above 0 is a double finalization.
	PriorEffects int `json:"prior_effects,omitempty"`
}

// The fenced commit: the row moves PENDING→CONSUMED only if it is still at
// the caller's token with a live lease, and the effect is inserted from the
// rows that moved, all in one statement. A stale token changes nothing and
// writes nothing: the fence is at the system of record, not in Go.
const sqlCommitFenced = `
WITH fenced AS (
    UPDATE resource_pool
    SET status = 'CONSUMED', leased_until = NULL, updated_at = clock_timestamp()
    WHERE id = $1 AND lease_token = $2 AND status = 'PENDING'
      AND (leased_until IS NULL OR leased_until > clock_timestamp())
    RETURNING id, lease_token
)
INSERT INTO business_ledger (resource_id, lease_token, request_id, holder, payload, fenced)
SELECT id, lease_token, $3, $4, $5, true FROM fenced
RETURNING id, resource_id, lease_token, created_at, 0`

// The unfenced commit records the effect whatever state the row is in. It
// exists to show what fencing prevents, and counts the effects the id
// already had (the subquery sees the ledger as it was before this statement).
const sqlCommitUnfenced = `
WITH consumed AS (
    UPDATE resource_pool
    SET status = 'CONSUMED', leased_until = NULL, updated_at = clock_timestamp()
    WHERE id = $1
    RETURNING id
)
INSERT INTO business_ledger (resource_id, lease_token, request_id, holder, payload, fenced)
SELECT id, $2, $3, $4, $5, false FROM consumed
RETURNING id, resource_id, lease_token, created_at,
          (SELECT count(*) FROM business_ledger b WHERE b.resource_id = $1)::int`

const sqlLedgerByRequest = `
SELECT id, resource_id, lease_token, payload, created_at
FROM business_ledger WHERE request_id = $1`

// LeaseCommit writes the effect for the lease (ID, Token) to business_ledger
// and marks the id CONSUMED, in one statement fenced on the token. Replaying
// a committed request_id returns the original result; reusing it for another
// id or payload fails with ErrRequestConflict.
func (e *Engine) LeaseCommit(ctx context.Context, p *LeaseCommitParams) (CommitResult, error) {
	op := e.begin("commit", p.ID, p.Token, p.Holder, p.RequestID)
	res, err := e.commit(ctx, p)
	e.end(op, 0, err)
	return res, err
}

func (e *Engine) commit(ctx context.Context, p *LeaseCommitParams) (CommitResult, error) {
	if err := checkLeaseRef(p.ID, p.Token); err != nil {
		return CommitResult{}, err
	}
	if p.RequestID == "" {
		return CommitResult{}, invalid("request_id is empty: every effect needs an idempotency key")
	}
	sh, err := e.poolShape(ctx)
	if err != nil {
		return CommitResult{}, dbError(fmt.Sprintf("commit id %d", p.ID), err)
	}
	sql, args := sqlCommitFenced, []any{p.ID, p.Token, p.RequestID, p.Holder, p.Payload}
	switch {
	case len(sh.shards) > 0 && p.NoFence:
		return CommitResult{}, errCitus("the unfenced commit")
	case len(sh.shards) > 0:
		sql, args = citusLease(sh, sqlCitusCommit, p.ID, p.Token, p.RequestID, p.Holder, p.Payload)
	case p.NoFence:
		sql = sqlCommitUnfenced
	}
	db, err := e.leaseDB(ctx, sh, p.ID)
	if err != nil {
		return CommitResult{}, dbError(fmt.Sprintf("commit id %d", p.ID), err)
	}
	res := CommitResult{RequestID: p.RequestID}
	err = db.QueryRow(ctx, sql, args...).
		Scan(&res.LedgerID, &res.ResourceID, &res.Token, &res.CommittedAt, &res.PriorEffects)
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, pgx.ErrNoRows), isUniqueViolation(err, "business_ledger_request_id_key"), len(sh.shards) > 0 && isCitusRequestTaken(err):
		// Nothing was written. Either this request was already committed
		// (a replay), or the fence refused the token.
		if prior, found, lerr := e.ledgerByRequest(ctx, sh, p); lerr != nil {
			return CommitResult{}, lerr
		} else if found {
			return prior, nil
		}
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			// The unique violation came from a request committed by
			// someone else and then removed; report it as it is.
			return CommitResult{}, fmt.Errorf("commit id %d: %w", p.ID, err)
		}
		return CommitResult{}, e.whyLost(ctx, "commit", p.ID, p.Token)
	default:
		return CommitResult{}, dbError(fmt.Sprintf("commit id %d", p.ID), err)
	}
}

func (e *Engine) ledgerByRequest(ctx context.Context, sh *shape, p *LeaseCommitParams) (CommitResult, bool, error) {
	res := CommitResult{RequestID: p.RequestID, Replayed: true}
	var payload string
	sql, args := sqlLedgerByRequest, []any{p.RequestID}
	if len(sh.shards) > 0 {
		sql, args = sqlCitusLedgerByRequest, []any{p.RequestID, sh.shardOf(p.ID)}
	}
	db, err := e.leaseDB(ctx, sh, p.ID)
	if err != nil {
		return CommitResult{}, false, fmt.Errorf("commit id %d: look up request_id: %w", p.ID, err)
	}
	err = db.QueryRow(ctx, sql, args...).
		Scan(&res.LedgerID, &res.ResourceID, &res.Token, &payload, &res.CommittedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return CommitResult{}, false, nil
	}
	if err != nil {
		return CommitResult{}, false, fmt.Errorf("commit id %d: look up request_id: %w", p.ID, err)
	}
	if res.ResourceID != p.ID || payload != p.Payload {
		return CommitResult{}, false, fmt.Errorf("commit id %d: %w: %q was committed for id %d with token %d and a different payload or id",
			p.ID, ErrRequestConflict, p.RequestID, res.ResourceID, res.Token)
	}
	return res, true, nil
}
