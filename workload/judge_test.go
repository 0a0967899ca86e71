package workload

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pooltop-dev/pooltop/engine"
)

// The chaos verdict reads the audit's kinds, never its wording: rewording
// a finding cannot turn an expected failure into a violation, or back.
func TestChaosVerdictReadsKindsNotWords(t *testing.T) {
	audit := engine.AuditReport{Findings: []engine.Finding{
		{Kind: engine.FindingDoubleFinalization, Count: 3, Text: "reworded: three ids twice"},
		{Kind: engine.FindingStaleEffect, Count: 3, Text: "reworded: old tokens"},
		{Kind: engine.FindingConsumedWithoutEffect, Count: 1, Text: "a CONSUMED id without its effect"},
	}}
	noFence, _ := ScenarioByName("pause-no-fencing")
	healthy, _ := ScenarioByName("healthy")

	s := Summary{DoubleFinalizations: 3}
	s.judge(noFence, noFence.Config(1), audit)
	if len(s.Expected) != 2 || len(s.Violations) != 1 || s.Violations[0] != "a CONSUMED id without its effect" {
		t.Fatalf("pause-no-fencing: expected %q, violations %q", s.Expected, s.Violations)
	}
	s = Summary{DoubleFinalizations: 3}
	s.judge(healthy, healthy.Config(1), audit)
	if len(s.Expected) != 0 || len(s.Violations) != 3 {
		t.Fatalf("healthy: expected %q, violations %q", s.Expected, s.Violations)
	}
}

// A story of the shifted digits that does not show what it exists to show is a violation,
// and so is one that shows a failure it must not.
func TestChaosVerdictOfTheLaterStories(t *testing.T) {
	for _, c := range []struct {
		name string
		s    Summary
		ok   bool
	}{
		{"transfer", Summary{Transferred: 5, OldHolderRejections: 5}, true},
		{"transfer", Summary{}, false},
		{"transfer", Summary{Transferred: 5}, false},
		{"local-clock", Summary{PastExpiry: 3, FencedRejections: 3}, true},
		{"local-clock", Summary{FencedRejections: 3}, false},
		{"lost-ack", Summary{DoubleFinalizations: 4, DuplicatesFreshID: 4, Replayed: 2}, true},
		{"lost-ack", Summary{DoubleFinalizations: 4, DuplicatesFreshID: 4, Replayed: 2, DuplicatesStableID: 1}, false},
		{"lost-ack", Summary{Replayed: 2}, false},
		{"short-lease", Summary{LeasesLost: 2}, true},
		{"short-lease", Summary{}, false},
		{"short-lease", Summary{LeasesLost: 2, Crashes: 1}, false},
		{"long-lease", Summary{Crashes: 2, MaxRecoveryMS: 29_000}, true},
		{"long-lease", Summary{Crashes: 2, MaxRecoveryMS: 2_000}, false},
		{"long-lease", Summary{Crashes: 2, MaxRecoveryMS: 29_000, FencedRejections: 1}, false},
		{"vacuum-off", Summary{Committed: 100, Vacuum: &engine.VacuumState{AutovacuumOff: true, DeadTuples: 500}}, true},
		{"vacuum-off", Summary{Committed: 100, Vacuum: &engine.VacuumState{AutovacuumOff: false, DeadTuples: 500}}, false},
		{"vacuum-off", Summary{Committed: 100, Vacuum: &engine.VacuumState{AutovacuumOff: true, DeadTuples: 500}, AutovacuumLeftOff: true}, false},
		{"vacuum-off", Summary{Committed: 10_000, Vacuum: &engine.VacuumState{AutovacuumOff: true, DeadTuples: 50}}, false},
	} {
		sc, err := ScenarioByName(c.name)
		if err != nil {
			t.Fatal(err)
		}
		s := c.s
		s.judge(sc, sc.Config(1), engine.AuditReport{})
		if s.OK() != c.ok {
			t.Errorf("%s %+v: violations %q, want ok=%v", c.name, c.s, s.Violations, c.ok)
		}
	}
}

// The lost-ack story is judged by duplicates_stable_id being 0: the JSON
// must say 0, not leave the field out.
func TestSummaryJSONStatesZeroStableDuplicates(t *testing.T) {
	b, err := json.Marshal(Summary{Scenario: "lost-ack", DuplicatesFreshID: 3})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"duplicates_stable_id":0`) {
		t.Fatalf("summary JSON without duplicates_stable_id 0: %s", b)
	}
}
