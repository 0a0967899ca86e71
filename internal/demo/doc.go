// Package demo is what the dashboard drives in the demo and in watch: the
// Stage (tui.Knobs), which turns the workload's knobs and plays each
// scenario on a fresh pool of its own, and the Actor (tui.Actions), which
// cancels or terminates a session or releases a holder's expired leases,
// in the one session of watch that may write.
package demo
