package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// CommitItem is one effect of a batched commit.
type CommitItem struct {
	ID        int64
	Token     int64
	RequestID string
	Payload   string
}

// The batched fenced commit: every row is still checked on its own token and
// lease, and only the rows that pass get an effect, all in one statement.
// Requests already in the ledger are left out, so a replay inside a batch
// cannot consume a row without writing its effect.
const sqlCommitBatch = `
WITH input AS (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[]) AS t(id, token, request_id, payload)
), fenced AS (
    UPDATE resource_pool AS r
    SET status = 'CONSUMED', leased_until = NULL, updated_at = clock_timestamp()
    FROM input AS i
    WHERE r.id = i.id AND r.lease_token = i.token AND r.status = 'PENDING'
      AND (r.leased_until IS NULL OR r.leased_until > clock_timestamp())
      AND NOT EXISTS (SELECT 1 FROM business_ledger b WHERE b.request_id = i.request_id)
    RETURNING r.id, r.lease_token, i.request_id, i.payload
)
INSERT INTO business_ledger (resource_id, lease_token, request_id, holder, payload, fenced)
SELECT id, lease_token, request_id, $5, payload, true FROM fenced
RETURNING id, resource_id, lease_token, created_at, request_id`

// LeaseCommitBatch commits many fenced effects in one statement. results[i]
// and errs[i] describe items[i]: a rejected lease gets its own error
// (ErrStaleToken, ErrLeaseLost, ErrRequestConflict), and one the batch did
// not commit whose reason could not be read ErrOutcomeUnknown, while the
// others are committed. The returned error is for the call as a whole (the
// statement itself failed: none of it is known).
func (e *Engine) LeaseCommitBatch(ctx context.Context, holder string, items []CommitItem) ([]CommitResult, []error, error) {
	var ops []*HistoryOp
	if e.history.Load() != nil {
		for _, it := range items {
			ops = append(ops, e.begin("commit", it.ID, it.Token, holder, it.RequestID))
		}
	}
	results, errs, err := e.commitBatch(ctx, holder, items)
	for i, op := range ops {
		switch {
		case err != nil:
			e.end(op, 0, err)
		default:
			e.end(op, 0, errs[i])
		}
	}
	return results, errs, err
}

func (e *Engine) commitBatch(ctx context.Context, holder string, items []CommitItem) ([]CommitResult, []error, error) {
	if len(items) == 0 || len(items) > MaxBatch {
		return nil, nil, invalid("batch of %d: commit between 1 and %d effects at a time", len(items), MaxBatch)
	}
	ids := make([]int64, len(items))
	tokens := make([]int64, len(items))
	reqs := make([]string, len(items))
	payloads := make([]string, len(items))
	seen := make(map[int64]bool, len(items))
	seenReq := make(map[string]bool, len(items))
	for i, it := range items {
		if err := checkLeaseRef(it.ID, it.Token); err != nil {
			return nil, nil, err
		}
		if it.RequestID == "" {
			return nil, nil, invalid("item %d: request_id is empty", i)
		}
		if seen[it.ID] || seenReq[it.RequestID] {
			return nil, nil, invalid("item %d: id %d or request %q appears twice in one batch", i, it.ID, it.RequestID)
		}
		seen[it.ID], seenReq[it.RequestID] = true, true
		ids[i], tokens[i], reqs[i], payloads[i] = it.ID, it.Token, it.RequestID, it.Payload
	}
	results := make([]CommitResult, len(items))
	errs := make([]error, len(items))
	sh, err := e.poolShape(ctx)
	if err != nil {
		return nil, nil, dbError("commit batch", err)
	}
	if len(sh.shards) > 0 {
		e.commitBatchCitus(ctx, holder, items, results, errs)
		return results, errs, nil
	}
	// Planned with the actual arrays every time: the cached generic plan of
	// this statement misjudges unnest() and runs ten times slower.
	rows, err := e.db.Query(ctx, sqlCommitBatch, pgx.QueryExecModeExec, ids, tokens, reqs, payloads, holder)
	if err != nil {
		return nil, nil, dbError("commit batch", err)
	}
	done := make(map[string]CommitResult, len(items))
	for rows.Next() {
		var r CommitResult
		if err := rows.Scan(&r.LedgerID, &r.ResourceID, &r.Token, &r.CommittedAt, &r.RequestID); err != nil {
			rows.Close()
			return nil, nil, dbError("commit batch", err)
		}
		done[r.RequestID] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		if !isUniqueViolation(err, "business_ledger_request_id_key") {
			return nil, nil, dbError("commit batch", err)
		}
		// Another session committed one of these request ids at the same
		// moment; the statement changed nothing. Commit one by one.
		for i, it := range items {
			results[i], errs[i] = e.commit(ctx, &LeaseCommitParams{ID: it.ID, Token: it.Token, Holder: holder, RequestID: it.RequestID, Payload: it.Payload})
		}
		return results, errs, nil
	}
	for i, it := range items {
		if r, ok := done[it.RequestID]; ok {
			results[i] = r
			continue
		}
		// Rejected or a replay: explain this one item.
		p := &LeaseCommitParams{ID: it.ID, Token: it.Token, Holder: holder, RequestID: it.RequestID, Payload: it.Payload}
		prior, found, lerr := e.ledgerByRequest(ctx, sh, p)
		switch {
		case lerr != nil:
			errs[i] = lerr
		case found:
			results[i] = prior
		default:
			errs[i] = e.whyLost(ctx, "commit", it.ID, it.Token)
		}
		// The lookup broke (the connection was cut): this item was not
		// committed by the batch, but whether it is a replay or a rejection
		// is not known. The items the batch did commit stay reported as
		// committed.
		if errs[i] != nil && !IsRejected(errs[i]) && !errors.Is(errs[i], ErrRequestConflict) && !errors.Is(errs[i], ErrNotFound) {
			errs[i] = fmt.Errorf("%w: request %q: %w", ErrOutcomeUnknown, it.RequestID, errs[i])
		}
	}
	return results, errs, nil
}

// AuditReport is what Audit found. Counts are exact (it scans the tables).
type AuditReport struct {
	Total    int64 `json:"total"`
	Unused   int64 `json:"unused"`
	Pending  int64 `json:"pending"`
	Consumed int64 `json:"consumed"`
	Effects  int64 `json:"effects"`
	// ConsumedWithoutEffect: CONSUMED ids with no ledger row.
	ConsumedWithoutEffect int64 `json:"consumed_without_effect"`
	// DoubleFinalizations: ids with more than one effect.
	DoubleFinalizations int64 `json:"double_finalizations"`
	// StaleEffects: effects written with a token older than the id's final one.
	StaleEffects int64 `json:"stale_effects"`
	// UnissuedEffects: effects written with a token the id never had (a
	// commit without the fence, with a made-up token).
	UnissuedEffects int64 `json:"unissued_effects"`
	// EffectsOnUnconsumed: effects whose id is not CONSUMED.
	EffectsOnUnconsumed int64 `json:"effects_on_unconsumed"`
	// PendingUnleased: PENDING ids with no expiry, which nothing will reclaim.
	PendingUnleased int64 `json:"pending_unleased"`
	// PendingPastGrace: leases expired for longer than the grace (the reaper lags or is off).
	PendingPastGrace int64 `json:"pending_past_grace"`
	// OldestPastGraceMS: how long the oldest of those has been expired (leases at -infinity aside).
	OldestPastGraceMS float64 `json:"oldest_past_grace_ms"`
	// Rows outside the contract: leases that never expire (infinity), a
	// status that is NULL or none of the three, updated_at NULL or infinite,
	// and ids not consumed whose token cannot be raised any more.
	PendingForever int64 `json:"pending_forever"`
	BadStatus      int64 `json:"bad_status"`
	BadUpdatedAt   int64 `json:"bad_updated_at"`
	TokenExhausted int64 `json:"token_exhausted"`
	// DuplicateIdentifiers: identifiers held by more than one row, which
	// nothing in the database prevents on a partitioned pool (its unique
	// index holds the id) and a check constraint prevents on Citus; two
	// holders could hold one identifier.
	DuplicateIdentifiers int64 `json:"duplicate_identifiers"`
	// Violations lists, in words, every invariant that does not hold;
	// Findings gives the same with their kind and count, for programs.
	Violations []string  `json:"violations"`
	Findings   []Finding `json:"findings"`
}

// FindingKind names an invariant an audit found broken. Callers decide
// by kind, never by the wording of the text.
type FindingKind string

// The kinds of audit findings.
const (
	FindingBadStatus             FindingKind = "bad_status"
	FindingLeaseForever          FindingKind = "lease_forever"
	FindingBadUpdatedAt          FindingKind = "bad_updated_at"
	FindingTokenExhausted        FindingKind = "token_exhausted"
	FindingConsumedWithoutEffect FindingKind = "consumed_without_effect"
	FindingDoubleFinalization    FindingKind = "double_finalization"
	FindingStaleEffect           FindingKind = "stale_effect"
	FindingUnissuedEffect        FindingKind = "unissued_effect"
	FindingEffectOnUnconsumed    FindingKind = "effect_on_unconsumed"
	FindingPendingUnleased       FindingKind = "pending_unleased"
	FindingReaperLag             FindingKind = "reaper_lag"
	FindingDuplicateIdentifier   FindingKind = "duplicate_identifier"
)

// Finding is one broken invariant: its kind, how many rows, and in words.
type Finding struct {
	Kind  FindingKind `json:"kind"`
	Count int64       `json:"count"`
	Text  string      `json:"text"`
}

const sqlAudit = `
WITH pool AS (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE status = 'UNUSED') AS unused,
           count(*) FILTER (WHERE status = 'PENDING') AS pending,
           count(*) FILTER (WHERE status = 'CONSUMED') AS consumed,
           count(*) FILTER (WHERE status = 'PENDING' AND leased_until IS NULL) AS unleased,
           count(*) FILTER (WHERE status = 'PENDING' AND leased_until < clock_timestamp() - $1::bigint * interval '1 microsecond') AS past_grace,
           coalesce(extract(epoch FROM clock_timestamp() - min(leased_until) FILTER (
               WHERE status = 'PENDING' AND isfinite(leased_until)
                 AND leased_until < clock_timestamp() - $1::bigint * interval '1 microsecond')) * 1000, 0)::float8 AS oldest_ms,
           count(*) FILTER (WHERE status = 'PENDING' AND leased_until = 'infinity') AS forever,
           count(*) FILTER (WHERE status IS NULL OR status NOT IN ('UNUSED', 'PENDING', 'CONSUMED')) AS no_status,
           count(*) FILTER (WHERE updated_at IS NULL OR NOT isfinite(updated_at)) AS no_updated,
           count(*) FILTER (WHERE lease_token = 9223372036854775807 AND status <> 'CONSUMED') AS exhausted,
           count(*) FILTER (WHERE status = 'CONSUMED' AND NOT EXISTS (
               SELECT 1 FROM business_ledger b WHERE b.resource_id = r.id)) AS consumed_without
    FROM resource_pool r
), ledger AS (
    SELECT count(*) AS effects,
           count(*) FILTER (WHERE b.lease_token < r.lease_token) AS stale,
           count(*) FILTER (WHERE b.lease_token > r.lease_token) AS unissued,
           count(*) FILTER (WHERE r.status <> 'CONSUMED') AS on_unconsumed
    FROM business_ledger b JOIN resource_pool r ON r.id = b.resource_id
), doubles AS (
    SELECT count(*) AS doubles FROM (
        SELECT resource_id FROM business_ledger GROUP BY resource_id HAVING count(*) > 1) d
), idents AS (%s
)
SELECT total, unused, pending, consumed, unleased, past_grace, oldest_ms, consumed_without,
       effects, stale, unissued, on_unconsumed, doubles, forever, no_status, no_updated, exhausted, dup
FROM pool, ledger, doubles, idents`

// The audit's count of identifiers held by several rows: counted where
// the layout does not make an identifier unique by itself, 0 where the
// pool's unique index does.
const (
	sqlAuditDuplicates = `
    SELECT count(*) AS dup FROM (SELECT identifier FROM resource_pool GROUP BY identifier HAVING count(*) > 1) d`
	sqlAuditUnique = `
    SELECT 0::bigint AS dup`
)

// auditSQL is the audit for the pool's layout: on Citus each join of the
// ledger to the pool is on the shard too, which Citus needs to run it on
// each shard, and duplicate identifiers are counted on Citus and on a
// partitioned pool.
func auditSQL(sh *shape) string {
	dup := sqlAuditUnique
	if len(sh.parts) > 0 || len(sh.shards) > 0 {
		dup = sqlAuditDuplicates
	}
	sql := fmt.Sprintf(sqlAudit, dup)
	if len(sh.shards) > 0 {
		sql = onShards(sql)
	}
	return sql
}

// Audit checks the invariants over the whole pool: conservation, at most one
// effect per id, no effect with a stale token, no CONSUMED id without its
// effect, no lease left unreaped for longer than grace, no PENDING id without
// a lease. It reads only, but scans both tables.
func (e *Engine) Audit(ctx context.Context, grace time.Duration) (AuditReport, error) {
	var a AuditReport
	sh, err := e.poolShape(ctx)
	if err != nil {
		return a, dbError("audit", err)
	}
	err = e.db.QueryRow(ctx, auditSQL(sh), durationMicros(grace)).Scan(&a.Total, &a.Unused, &a.Pending, &a.Consumed,
		&a.PendingUnleased, &a.PendingPastGrace, &a.OldestPastGraceMS, &a.ConsumedWithoutEffect,
		&a.Effects, &a.StaleEffects, &a.UnissuedEffects, &a.EffectsOnUnconsumed, &a.DoubleFinalizations,
		&a.PendingForever, &a.BadStatus, &a.BadUpdatedAt, &a.TokenExhausted, &a.DuplicateIdentifiers)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, fmt.Errorf("audit: no result")
	}
	if err != nil {
		return a, dbError("audit", err)
	}
	a.Violations, a.Findings = []string{}, []Finding{}
	var kind FindingKind
	add := func(n int64, format string) {
		if n > 0 {
			text := fmt.Sprintf(format, n)
			a.Violations = append(a.Violations, text)
			a.Findings = append(a.Findings, Finding{Kind: kind, Count: n, Text: text})
		}
	}
	for _, c := range []struct {
		kind   FindingKind
		n      int64
		format string
	}{
		{FindingBadStatus, a.BadStatus, "%d ids are neither UNUSED, PENDING nor CONSUMED (status NULL or unknown)"},
		{FindingLeaseForever, a.PendingForever, "%d PENDING ids have a lease that never expires (infinity): nothing will ever reclaim them"},
		{FindingBadUpdatedAt, a.BadUpdatedAt, "%d rows have no finite updated_at"},
		{FindingTokenExhausted, a.TokenExhausted, "%d ids have the largest token a bigint holds: they can never change owner again"},
		{FindingConsumedWithoutEffect, a.ConsumedWithoutEffect, "%d CONSUMED ids have no effect in business_ledger"},
		{FindingDoubleFinalization, a.DoubleFinalizations, "%d ids have more than one effect (double finalization)"},
		{FindingStaleEffect, a.StaleEffects, "%d effects were written with a stale token"},
		{FindingUnissuedEffect, a.UnissuedEffects, "%d effects were written with a token the id was never given (committed without the fence)"},
		{FindingEffectOnUnconsumed, a.EffectsOnUnconsumed, "%d effects belong to ids that are not CONSUMED"},
		{FindingPendingUnleased, a.PendingUnleased, "%d PENDING ids have no lease: nothing will ever reclaim them"},
		{FindingDuplicateIdentifier, a.DuplicateIdentifiers, "%d identifiers are held by more than one row: two holders can hold one identifier"},
	} {
		kind = c.kind
		add(c.n, c.format)
	}
	if a.PendingPastGrace > 0 {
		kind = FindingReaperLag
		add(a.PendingPastGrace, fmt.Sprintf("%%d leases expired more than %v ago and were not reaped (oldest %.0f ms): is the reaper running?", grace, a.OldestPastGraceMS))
	}
	return a, nil
}

// StillHeld returns which of the given leases (ids[i] at tokens[i]) are still
// PENDING at that token: for leases whose holder died, the ones the reaper
// has not brought back yet.
func (e *Engine) StillHeld(ctx context.Context, ids, tokens []int64) ([]int64, error) {
	if len(ids) != len(tokens) {
		return nil, invalid("%d ids for %d tokens", len(ids), len(tokens))
	}
	if len(ids) == 0 {
		return nil, nil
	}
	return collect(ctx, e.db, "still held", pgx.RowTo[int64], `
SELECT r.id FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
JOIN resource_pool r ON r.id = t.id AND r.lease_token = t.token AND r.status = 'PENDING'`, pgx.QueryExecModeExec, ids, tokens)
}
