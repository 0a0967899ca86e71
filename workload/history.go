package workload

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/pooltop-dev/pooltop/engine"
)

// HistoryCheck is the verdict of CheckHistory. Field names are part of the
// chaos summary's JSON.
type HistoryCheck struct {
	Ops     int `json:"ops"`
	IDs     int `json:"ids"`
	Unknown int `json:"unknown"` // operations that got no answer (killed, cut off)
	// Retried counts the commits sent more than once under one request id
	// (a retry after no answer): each must have one effect at most.
	Retried int `json:"retried"`
	// Linearizable: for every id, some order of its operations, consistent
	// with when each was called and answered, is one the lease register
	// allows: tokens only grow, only the current holder commits, an id is
	// committed at most once (a replay of the same request aside), and an
	// acknowledged commit is in the ledger at the end.
	Linearizable bool    `json:"linearizable"`
	Bad          []int64 `json:"bad_ids"` // ids whose history no order explains (at most 10)
	// Example is the history of the first of them, with its final state,
	// in call order: what to read first.
	Example []engine.HistoryOp `json:"example,omitempty"`
	Timeout int                `json:"timeouts"` // ids the checker gave up on
}

// registerState is one id's lease register as the model knows it: a lower
// bound of its token, and whether (and by which request) it was consumed.
type registerState struct {
	token    int64
	consumed bool
	req      string
}

// registerModel is the sequential specification of one id. Operations
// whose answer never came may or may not have happened; rejected ones
// changed nothing. Expiry is not modelled: the database may refuse a commit
// the model would allow, never the other way round.
var registerModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{registerState{}} },
	Step: func(state, input, _ any) []any {
		s, op := state.(registerState), input.(engine.HistoryOp)
		if op.Kind == "final" {
			consumed := op.Outcome == string(engine.StatusConsumed)
			if s.consumed == consumed && (!consumed || s.req == op.Request) {
				return []any{s}
			}
			return nil
		}
		var next []any
		if op.Outcome == engine.OutcomeRejected || op.Outcome == engine.OutcomeUnknown {
			next = append(next, s) // it did not happen (or changed nothing)
		}
		if op.Outcome == engine.OutcomeRejected {
			return next
		}
		// What the operation does when it happens.
		switch op.Kind {
		case "acquire":
			if !s.consumed && op.NewToken > s.token {
				next = append(next, registerState{token: op.NewToken})
			}
		case "release", "transfer":
			if op.Outcome == engine.OutcomeOK && !s.consumed && op.Token >= s.token && op.NewToken > op.Token {
				next = append(next, registerState{token: op.NewToken})
			}
		case "reap":
			if !s.consumed {
				next = append(next, registerState{token: s.token + 1})
			}
		case "commit":
			switch {
			case !s.consumed && op.Token >= s.token:
				next = append(next, registerState{token: op.Token, consumed: true, req: op.Request})
			case s.consumed && s.req == op.Request: // a replay
				next = append(next, s)
			}
		}
		return next
	},
}

// CheckHistory checks ops against the lease register, id by id, ending each
// id's history with its state in the database now (status, and the request
// of its effect), which eng reads.
func CheckHistory(ctx context.Context, eng *engine.Engine, ops []engine.HistoryOp) (HistoryCheck, error) {
	byID := map[int64][]engine.HistoryOp{}
	var last int64
	c := HistoryCheck{Ops: len(ops), Bad: []int64{}}
	for _, op := range ops {
		if op.Return == 0 { // a call that never got its answer line
			op.Outcome = engine.OutcomeUnknown
		}
		byID[op.ID] = append(byID[op.ID], op)
		last = max(last, op.Call, op.Return)
		if op.Return == 0 {
			c.Unknown++
		}
	}
	reqs := map[string]int{}
	for _, op := range ops {
		if op.Kind == "commit" {
			reqs[op.Request]++
		}
	}
	for _, n := range reqs {
		if n > 1 {
			c.Retried++
		}
	}
	ids := make([]int64, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	c.IDs = len(ids)
	finals, err := eng.Finals(ctx, ids, last+1)
	if err != nil {
		return c, err
	}
	final := make(map[int64]engine.HistoryOp, len(finals))
	for _, f := range finals {
		final[f.ID] = f
	}
	model := registerModel.ToModel()
	c.Linearizable = true
	for _, id := range ids {
		var h []porcupine.Operation
		for _, op := range byID[id] {
			ret := op.Return
			if ret == 0 {
				ret = math.MaxInt64 // no answer: it may take effect any time after its call
			}
			h = append(h, porcupine.Operation{Input: op, Call: op.Call, Output: op.Outcome, Return: ret})
		}
		f, ok := final[id]
		if !ok {
			f = engine.HistoryOp{Kind: "final", ID: id, Call: last + 1, Return: last + 2}
		}
		h = append(h, porcupine.Operation{Input: f, Call: f.Call, Output: f.Outcome, Return: f.Return})
		switch porcupine.CheckOperationsTimeout(model, h, 10*time.Second) {
		case porcupine.Ok:
		case porcupine.Illegal:
			c.Linearizable = false
			if len(c.Bad) == 0 {
				c.Example = append(append([]engine.HistoryOp(nil), byID[id]...), f)
				sort.Slice(c.Example, func(i, j int) bool { return c.Example[i].Call < c.Example[j].Call })
			}
			if len(c.Bad) < 10 {
				c.Bad = append(c.Bad, id)
			}
		default:
			c.Timeout++
		}
	}
	return c, nil
}

// ReadHistory reads a history file a `pooltop work --history` process
// wrote: a line when an operation that writes was called, a line when any
// operation returned. A call with no return line (the process was killed)
// is an operation with no answer.
func ReadHistory(r io.Reader) ([]engine.HistoryOp, error) {
	bySeq := map[uint64]int{}
	var ops []engine.HistoryOp
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		var op engine.HistoryOp
		if err := json.Unmarshal(sc.Bytes(), &op); err != nil {
			// A process killed while writing leaves half a line at the end.
			continue
		}
		if op.Outcome == "" { // a call
			bySeq[op.Seq] = len(ops)
			ops = append(ops, op)
			continue
		}
		if i, ok := bySeq[op.Seq]; ok && ops[i].ID == op.ID {
			ops[i] = op
			delete(bySeq, op.Seq)
			continue
		}
		ops = append(ops, op)
	}
	return ops, sc.Err()
}

// ReadHistoryFile is ReadHistory on a file.
func ReadHistoryFile(path string) ([]engine.HistoryOp, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return ReadHistory(f)
}

// historyViolation describes a failed check for the summary, or "".
func (c HistoryCheck) violation() string {
	if c.Linearizable {
		return ""
	}
	return fmt.Sprintf("the history of ids %v fits no order the lease register allows (two holders committed, a token went back, or an acknowledged commit is missing)", c.Bad)
}
