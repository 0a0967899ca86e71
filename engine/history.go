package engine

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// HistoryOp is one operation on one id as the caller saw it: when it was
// called and answered (wall clock, Unix nanoseconds) and with what outcome.
// A chaos run records every acquire, commit, release, transfer and reap, and
// checks the history against a model of the lease register
// (workload.CheckHistory). Field names are the history file's format.
type HistoryOp struct {
	Seq     uint64 `json:"seq"`
	Kind    string `json:"kind"` // acquire, commit, release, transfer, reap
	ID      int64  `json:"id"`
	Token   int64  `json:"token,omitempty"` // the caller's token: commit, release, transfer
	Request string `json:"request,omitempty"`
	Holder  string `json:"holder,omitempty"`
	Call    int64  `json:"call"`
	// Return is 0 while (or when) no answer came: the process died, or the
	// connection was lost; the outcome is then unknown.
	Return   int64  `json:"return,omitempty"`
	Outcome  string `json:"outcome,omitempty"`   // ok, rejected, unknown
	NewToken int64  `json:"new_token,omitempty"` // the token an ok acquire, release or transfer left
}

// The outcomes.
const (
	OutcomeOK       = "ok"
	OutcomeRejected = "rejected" // refused by the fence or the lease: nothing changed
	OutcomeUnknown  = "unknown"  // no answer: it may or may not have happened
)

// History records operations in memory and, when it has a writer, as NDJSON
// as they happen: a line when an operation that writes (commit, release,
// transfer) is called, and a line for every operation when it returns, so
// that a process killed in the middle of a commit leaves the call behind.
type History struct {
	seq atomic.Uint64
	mu  sync.Mutex
	ops []HistoryOp
	w   io.Writer
	err error
}

// NewHistory returns an empty history. With a writer it streams every
// operation to w and keeps none (a work process runs for days: its history
// must not grow with it); with none (nil) it keeps them for Ops.
func NewHistory(w io.Writer) *History { return &History{w: w} }

// Ops returns the operations recorded so far, answered or not; none when
// they are streamed to a writer.
func (h *History) Ops() []HistoryOp {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]HistoryOp(nil), h.ops...)
}

// Err is the first error writing the history failed with.
func (h *History) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

func (h *History) write(op HistoryOp) {
	if h.w == nil || h.err != nil {
		return
	}
	b, _ := json.Marshal(op)
	if _, err := h.w.Write(append(b, '\n')); err != nil {
		h.err = err
	}
}

// Record makes e record every operation in h (nil stops recording).
func (e *Engine) Record(h *History) { e.history.Store(h) }

// begin notes a call; nil when nothing records.
func (e *Engine) begin(kind string, id, token int64, holder, req string) *HistoryOp {
	h := e.history.Load()
	if h == nil {
		return nil
	}
	op := &HistoryOp{Seq: h.seq.Add(1), Kind: kind, ID: id, Token: token, Holder: holder, Request: req, Call: time.Now().UnixNano()}
	if kind != "acquire" && kind != "reap" { // their ids are known only when they return
		h.mu.Lock()
		h.write(*op)
		h.mu.Unlock()
	}
	return op
}

// end notes the answer to op: the new token, or the error it failed with.
func (e *Engine) end(op *HistoryOp, newToken int64, err error) {
	if op == nil {
		return
	}
	h := e.history.Load()
	if h == nil {
		return
	}
	op.Return = time.Now().UnixNano()
	switch {
	case err == nil:
		op.Outcome, op.NewToken = OutcomeOK, newToken
	case IsRejected(err) || errors.Is(err, ErrRequestConflict) || errors.Is(err, ErrNotFound) || errors.Is(err, ErrInvalidArgument):
		op.Outcome = OutcomeRejected
	default:
		op.Outcome, op.Return = OutcomeUnknown, 0
	}
	h.mu.Lock()
	if h.w == nil {
		h.ops = append(h.ops, *op)
	}
	h.write(*op)
	h.mu.Unlock()
}

// Finals reads the ids' state now as "final" operations called at at: the
// status as the outcome, the request ids of their effects (comma-separated,
// in ledger order) as the request.
func (e *Engine) Finals(ctx context.Context, ids []int64, at int64) ([]HistoryOp, error) {
	sh, err := e.poolShape(ctx)
	if err != nil {
		return nil, dbError("read the final state", err)
	}
	sql := `
SELECT r.id, coalesce(r.status, ''),
       coalesce((SELECT string_agg(b.request_id, ',' ORDER BY b.id) FROM business_ledger b WHERE b.resource_id = r.id), '')
FROM resource_pool r WHERE r.id = ANY($1)`
	if len(sh.shards) > 0 {
		sql = onShards(sql)
	}
	rows, err := e.db.Query(ctx, sql, ids)
	if err != nil {
		return nil, dbError("read the final state", err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (HistoryOp, error) {
		f := HistoryOp{Kind: "final", Call: at, Return: at + 1}
		err := row.Scan(&f.ID, &f.Outcome, &f.Request)
		return f, err
	})
}
