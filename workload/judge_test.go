package workload

import (
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
	s.judge(noFence, audit)
	if len(s.Expected) != 2 || len(s.Violations) != 1 || s.Violations[0] != "a CONSUMED id without its effect" {
		t.Fatalf("pause-no-fencing: expected %q, violations %q", s.Expected, s.Violations)
	}
	s = Summary{DoubleFinalizations: 3}
	s.judge(healthy, audit)
	if len(s.Expected) != 0 || len(s.Violations) != 3 {
		t.Fatalf("healthy: expected %q, violations %q", s.Expected, s.Violations)
	}
}
