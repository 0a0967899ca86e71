package workload

import (
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/pooltop-dev/pooltop/engine"
)

// The lease register's model accepts the histories the protocol allows
// and refuses each way of breaking it.
func TestRegisterModel(t *testing.T) {
	type op = engine.HistoryOp
	at := func(o op, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: o, Output: o.Outcome, Call: call, Return: ret}
	}
	acq := func(tok int64) op { return op{Kind: "acquire", ID: 1, NewToken: tok, Outcome: engine.OutcomeOK} }
	commit := func(tok int64, req, out string) op {
		return op{Kind: "commit", ID: 1, Token: tok, Request: req, Outcome: out}
	}
	final := func(status, req string) op { return op{Kind: "final", ID: 1, Outcome: status, Request: req} }
	reap := op{Kind: "reap", ID: 1, Outcome: engine.OutcomeOK}
	const never = 1 << 62
	cases := []struct {
		name string
		h    []porcupine.Operation
		ok   bool
	}{
		{"claim, commit, consumed", []porcupine.Operation{at(acq(1), 0, 1), at(commit(1, "a", "ok"), 2, 3), at(final("CONSUMED", "a"), 10, 11)}, true},
		{"a replay of the same request", []porcupine.Operation{at(acq(1), 0, 1), at(commit(1, "a", "ok"), 2, 3), at(commit(1, "a", "ok"), 4, 5), at(final("CONSUMED", "a"), 10, 11)}, true},
		{"the zombie rejected after the reaper", []porcupine.Operation{at(acq(1), 0, 1), at(reap, 2, 3), at(acq(3), 4, 5), at(commit(1, "z", "rejected"), 6, 7), at(commit(3, "b", "ok"), 8, 9), at(final("CONSUMED", "b"), 10, 11)}, true},
		{"an unanswered commit that happened", []porcupine.Operation{at(acq(1), 0, 1), at(commit(1, "a", "unknown"), 2, never), at(final("CONSUMED", "a"), 10, 11)}, true},
		{"an unanswered commit that did not", []porcupine.Operation{at(acq(1), 0, 1), at(commit(1, "a", "unknown"), 2, never), at(final("UNUSED", ""), 10, 11)}, true},
		{"two holders commit", []porcupine.Operation{at(acq(1), 0, 1), at(reap, 2, 3), at(acq(3), 4, 5), at(commit(1, "z", "ok"), 6, 7), at(commit(3, "b", "ok"), 8, 9), at(final("CONSUMED", "z,b"), 10, 11)}, false},
		{"a stale token commits", []porcupine.Operation{at(acq(1), 0, 1), at(reap, 2, 3), at(commit(1, "z", "ok"), 6, 7), at(final("CONSUMED", "z"), 10, 11)}, false},
		{"an acknowledged commit lost", []porcupine.Operation{at(acq(1), 0, 1), at(commit(1, "a", "ok"), 2, 3), at(final("UNUSED", ""), 10, 11)}, false},
		{"a token goes back", []porcupine.Operation{at(acq(5), 0, 1), at(reap, 2, 3), at(acq(4), 4, 5), at(final("PENDING", ""), 10, 11)}, false},
		{"concurrent calls may order either way", []porcupine.Operation{at(acq(1), 0, 5), at(commit(1, "a", "ok"), 1, 6), at(final("CONSUMED", "a"), 10, 11)}, true},
	}
	model := registerModel.ToModel()
	for _, c := range cases {
		if got := porcupine.CheckOperations(model, c.h); got != c.ok {
			t.Errorf("%s: linearizable %v, want %v", c.name, got, c.ok)
		}
	}
}

// A history file as a killed process leaves it: the call line of its last
// commit, no answer; half a line at the end. The call is read as an
// operation with no answer.
func TestReadHistoryOfAKilledProcess(t *testing.T) {
	file := `{"seq":1,"kind":"acquire","id":7,"call":10,"return":20,"outcome":"ok","new_token":1}
{"seq":2,"kind":"commit","id":7,"token":1,"request":"r","call":30}
{"seq":3,"kind":"release","id":8,"token":1,"call":31}
{"seq":3,"kind":"release","id":8,"token":1,"call":31,"return":40,"outcome":"ok","new_token":2}
{"seq":4,"kind":"comm`
	ops, err := ReadHistory(strings.NewReader(file))
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 3 || ops[1].Kind != "commit" || ops[1].Return != 0 || ops[2].Outcome != "ok" || ops[2].Return != 40 {
		t.Fatalf("read %+v", ops)
	}
}
