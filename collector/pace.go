package collector

import "time"

// knockout switches counting mechanisms off, one at a time, for
// BenchmarkMechanisms to measure what each buys. All false in use.
var knockout struct{ settled, cuts, floor bool }

// pace is how much of the work done in turn a counter does at a poll (the
// UNUSED sweep's chunks, the PENDING rotation's entries and walk, the
// census's ranges), from the time the server took for it at the last poll
// against a budget. It doubles while the work is cheap, until it is slow
// once; from then on it grows by step a cheap poll and halves at a slow one
// (TCP's way). On a busy server a statement's time is mostly its wait for a
// CPU and swings from poll to poll: doubling at every cheap poll kept the
// UNUSED sweep at 4–16 chunks under a 16-client load, where a step a poll
// keeps it near one. A step of 0 always doubles (the PENDING walk, which
// covers the index once at start).
//
// A pace with a ceiling never plans more work than the last poll's cost
// says fits in the budget, and above the budget shrinks to what fits: the
// walk and the reads by ranges, which the goal of 50 ms a poll bounds, not
// only steers.
type pace struct {
	n, lo, hi, step int64
	slowed          bool
	ceiling         bool
}

// adjust paces the next poll from this one's server time ms against
// budget (both in milliseconds): more under budget, half above twice it.
func (p *pace) adjust(ms, budget float64) {
	if p.ceiling && ms > 0 {
		fits := int64(float64(p.n) * budget / ms)
		switch {
		case ms > budget:
			p.n, p.slowed = max(p.lo, min(p.n-1, fits)), true
		case ms < budget && p.n < p.hi:
			p.n = max(p.n, min(p.hi, 2*p.n, fits))
		}
		return
	}
	switch {
	case ms < budget && p.n < p.hi && p.slowed && p.step > 0:
		p.n = min(p.hi, p.n+p.step)
	case ms < budget && p.n < p.hi:
		p.n = min(p.hi, 2*p.n)
	case ms > 2*budget && p.n > p.lo:
		p.n = max(p.lo, p.n/2)
		p.slowed = true
	}
}

// backOff divides the pace after a failed poll, which gave no time to pace
// by: a statement past statement_timeout would fail the same way again.
func (p *pace) backOff(by int64) {
	p.n = max(p.lo, p.n/by)
	p.slowed = true
}

// millis is d in milliseconds.
func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
