package engine

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors callers match with errors.Is. A LeaseError wraps one of
// ErrLeaseLost, ErrStaleToken or ErrNotFound with the row's state.
var (
	// ErrLeaseLost: the lease is no longer the caller's (it expired, or the
	// id was consumed); nothing was changed.
	ErrLeaseLost = errors.New("lease lost")
	// ErrStaleToken: the fence rejected the caller's token because the id has
	// moved on to another token (reaped, released, transferred).
	ErrStaleToken = errors.New("stale fencing token")
	// ErrPoolEmpty: no UNUSED id could be claimed right now.
	ErrPoolEmpty = errors.New("pool empty: no UNUSED id available")
	// ErrNotFound: no row with that id.
	ErrNotFound = errors.New("no such id")
	// ErrInvalidArgument: the call's parameters are out of range; nothing was sent.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrRequestConflict: the request_id was already committed with another
	// payload or for another id; idempotency refuses to reuse it.
	ErrRequestConflict = errors.New("request_id already used for a different effect")
	// ErrContended: the optimistic strategy lost every attempt to other workers.
	ErrContended = errors.New("optimistic claim lost to other workers on every attempt")
	// ErrTokenExhausted: the id's token is the largest a bigint holds; no new
	// owner of it could be fenced, so it cannot change owner again.
	ErrTokenExhausted = errors.New("token exhausted")
	// ErrNoSchema: the database has no pooltop schema (run pooltop migrate).
	ErrNoSchema = errors.New("pooltop schema not found")
	// ErrNotPooltop: the schema exists but was not set up by pooltop (no
	// marker); write commands refuse it unless explicitly allowed.
	ErrNotPooltop = errors.New("database not set up by pooltop")
	// ErrOutcomeUnknown: an item of a batched commit that the batch did not
	// commit, whose reason (a rejection, or a replay of an earlier commit)
	// could not be read: look its request id up later.
	ErrOutcomeUnknown = errors.New("commit outcome unknown")
)

// IsRejected reports whether err means the fence or the lease refused the
// caller (as opposed to a broken call): a lost lease or a stale token.
func IsRejected(err error) bool {
	return errors.Is(err, ErrLeaseLost) || errors.Is(err, ErrStaleToken)
}

// LeaseError describes why a compare-and-set on a lease changed nothing,
// from the row as it was read right after the failed statement.
type LeaseError struct {
	Op           string // acquire, renew, release, transfer, commit
	ID           int64
	Token        int64 // the token the caller presented
	CurrentToken int64
	Status       string
	Holder       string
	LeasedUntil  *time.Time
	Reason       string
	Err          error // ErrLeaseLost, ErrStaleToken or ErrNotFound
}

func (e *LeaseError) Error() string {
	if errors.Is(e.Err, ErrNotFound) {
		return fmt.Sprintf("%s id %d: %v", e.Op, e.ID, e.Err)
	}
	return fmt.Sprintf("%s id %d token %d: %v: %s", e.Op, e.ID, e.Token, e.Err, e.Reason)
}

// Unwrap lets errors.Is match the sentinel.
func (e *LeaseError) Unwrap() error { return e.Err }

func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidArgument, fmt.Sprintf(format, args...))
}
