// Package engine is pooltop's lease engine on PostgreSQL: it claims ids from
// resource_pool without waiting (FOR UPDATE SKIP LOCKED), holds them under a
// time lease decided by the database clock, commits effects to
// business_ledger through a monotonic fencing token checked in the same
// statement, and reaps expired leases back to the pool.
//
// Every transition is one compare-and-set statement on (id, token, status);
// zero rows changed is reported as a typed error, never as success.
package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Status is a row's state in resource_pool. The SQL writes the same words.
type Status = string

// The three states of an id: free, held under a lease (or without one), and
// used for good (its effect is in the ledger).
const (
	StatusUnused   Status = "UNUSED"
	StatusPending  Status = "PENDING"
	StatusConsumed Status = "CONSUMED"
)

// DBTX is what the engine needs from a pool, a connection or a transaction.
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// TxBeginner is a DBTX that can also open transactions (pgxpool.Pool, pgx.Conn).
type TxBeginner interface {
	DBTX
	Begin(ctx context.Context) (pgx.Tx, error)
}

// MaxBatch bounds Acquire's n and Reap's batch: a larger claim holds too many
// row locks in one statement and is almost certainly a typo.
const MaxBatch = 10000

// Engine runs lease operations on one pool. It is safe for concurrent use;
// give it a pool sized for the workers that share it.
type Engine struct {
	db      TxBeginner
	stats   counters
	history atomic.Pointer[History] // nil: nothing is recorded
	shape   atomic.Pointer[shape]   // the pool's partitions, read on the first claim
	nodes   nodeHealth              // on Citus: the nodes that did not answer
	router  atomic.Pointer[nodeRouter]
}

// New returns an engine over db (normally a *pgxpool.Pool whose search_path
// points at the pooltop schema; see PoolConfig).
func New(db TxBeginner) *Engine { return &Engine{db: db} }

// Strategy is how Acquire claims rows. SkipLocked is the default and the one
// to use; the others exist to show and measure two anti-patterns: the
// blocking FOR UPDATE queue and the optimistic retry herd.
type Strategy int

const (
	// SkipLocked claims in one statement: lock with SKIP LOCKED in a CTE,
	// update in the same statement. Never waits on a row another worker holds.
	SkipLocked Strategy = iota
	// Blocking runs SELECT … FOR UPDATE then UPDATE in one transaction, so
	// workers queue behind each other's row locks.
	Blocking
	// Optimistic reads without locks, then updates guarded by a version check
	// (the token); lost races are counted as conflicts and retried.
	Optimistic
)

// Strategies lists every strategy in display order.
var Strategies = []Strategy{SkipLocked, Blocking, Optimistic}

func (s Strategy) String() string {
	switch s {
	case SkipLocked:
		return "skip-locked"
	case Blocking:
		return "blocking"
	case Optimistic:
		return "optimistic"
	}
	return fmt.Sprintf("strategy(%d)", int(s))
}

// ParseStrategy accepts the names String returns.
func ParseStrategy(s string) (Strategy, error) {
	for _, st := range Strategies {
		if st.String() == s {
			return st, nil
		}
	}
	return 0, invalid("strategy %q: use skip-locked, blocking or optimistic", s)
}

// Lease is the right to act on one id until LeasedUntil, proven by Token.
// LeasedUntil is nil for a claim made with NoLease (nothing reclaims it).
type Lease struct {
	ID          int64      `json:"id"`
	Identifier  string     `json:"identifier"`
	Token       int64      `json:"token"`
	LeasedUntil *time.Time `json:"leased_until"`
	Holder      string     `json:"holder,omitempty"`
}

// Stats are the engine's own counters, cheap to read at any time.
type Stats struct {
	OptimisticConflicts int64 // version checks that lost to another worker
	OptimisticRetries   int64 // optimistic attempts repeated after losing every row
	// PartitionFallthroughs: on a partitioned pool, claim attempts that found
	// no free row in a partition and moved on to the next.
	PartitionFallthroughs int64
	// NodeFailures: on Citus, calls that found the node of their shard not
	// answering (its shards are then skipped for a while).
	NodeFailures int64
}

type counters struct {
	conflicts    atomic.Int64
	retries      atomic.Int64
	fallthroughs atomic.Int64
	nodeFailures atomic.Int64
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	return Stats{
		OptimisticConflicts: e.stats.conflicts.Load(),
		OptimisticRetries:   e.stats.retries.Load(),

		PartitionFallthroughs: e.stats.fallthroughs.Load(),
		NodeFailures:          e.stats.nodeFailures.Load(),
	}
}

func durationMicros(d time.Duration) int64 { return d.Microseconds() }

func checkTTL(ttl time.Duration) error {
	if ttl <= 0 {
		return invalid("ttl %v: must be positive", ttl)
	}
	if ttl > 365*24*time.Hour {
		return invalid("ttl %v: longer than a year", ttl)
	}
	if ttl < time.Microsecond {
		return invalid("ttl %v: shorter than the database's 1µs resolution", ttl)
	}
	return nil
}

func checkLeaseRef(id, token int64) error {
	if id <= 0 {
		return invalid("id %d: ids are positive", id)
	}
	if token < 0 {
		return invalid("token %d: tokens are never negative", token)
	}
	return nil
}

// dbError adds the operation to err and maps a missing table or column to
// ErrNoSchema, so a database that was never migrated gets a clear answer.
func dbError(op string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "42703") {
		return fmt.Errorf("%s: %w (%s): run `pooltop migrate` first", op, ErrNoSchema, pgErr.Message)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// IsUniqueViolation reports a unique_violation (23505), optionally on one constraint.
func isUniqueViolation(err error, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "23505" && (constraint == "" || pgErr.ConstraintName == constraint)
}
