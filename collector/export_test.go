package collector

import (
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// SetReanchor changes how often c looks for the lowest UNUSED id from the
// start of the index, for a test.
func SetReanchor(c *Collector, d time.Duration) { c.unused.reanchor = d }

// SetSeekTime changes how long one statement of c's seek for the lowest
// UNUSED id may open windows (its first window always runs), for a test.
func SetSeekTime(c *Collector, d time.Duration) { c.unused.seekTime = d }

// Seeking says whether c's seek for the lowest UNUSED id is under way.
func Seeking(c *Collector) bool { return c.unused.seek != nil }

// EvaluateAlerts runs c's alert rules on s, as a poll does, for a test.
func EvaluateAlerts(c *Collector, s *Snapshot) { c.evaluate(s, func(string, string, ...any) {}) }

// Paces returns how far c's next poll walks the PENDING index, how many
// entries it recounts in turn and how many UNUSED chunks it sweeps.
func Paces(c *Collector) (walk, per, sweep int64) {
	return c.pending.walk.n, c.pending.per.n, c.unused.per.n
}

// PaceFloors returns the least each of Paces can fall to.
func PaceFloors(c *Collector) (walk, per, sweep int64) {
	return c.pending.walk.lo, c.pending.per.lo, c.unused.per.lo
}

// LastWalk returns how many PENDING index entries c's last walk read, and
// the server time it took by c's measure.
func LastWalk(c *Collector) (int64, float64) { return c.pending.walked, c.pending.walkMS }

// SetStatementsLearnEvery changes how often c finds the claim statements
// in pg_stat_statements' texts, for a test.
func SetStatementsLearnEvery(c *Collector, d time.Duration) { c.claims.learnEvery = d }

// Sessions returns how many sessions c holds open on the server.
func Sessions(c *Collector) int32 { return c.pool.Stat().TotalConns() }

// DBPool is the collector's own read-only pool.
func DBPool(c *Collector) *engine.Pool { return c.pool }

// LockReads is how many of c's polls read the lock waits.
func LockReads(c *Collector) int { return c.lockReads }

// LocksStatement returns the statement of c's poll that reads the lock
// waits, with its arguments.
func LocksStatement(c *Collector) (string, []any) {
	return locksQuery(c.t.version), []any{c.lockRelations()}
}

// Knockout switches the named counting mechanism off (settled, cuts,
// floor) for collectors made from now on, and returns a function that
// switches it back on.
func Knockout(name string) (restore func()) {
	flags := map[string]*bool{"settled": &knockout.settled, "cuts": &knockout.cuts, "floor": &knockout.floor}
	f, ok := flags[name]
	if !ok {
		panic("no mechanism " + name)
	}
	*f = true
	return func() { *f = false }
}

// ExactRows is the size up to which a pool is counted whole at every poll.
const ExactRows = exactRows

// ExactStatement returns the statement that counts c's pool whole, with
// its arguments.
func ExactStatement(c *Collector) (string, []any) { return c.exactStatement() }

// CountsByRanges says whether c counts the PENDING rows without a lease by
// ranges of the table, and how many of the ranges it has read.
func CountsByRanges(c *Collector) (ranged bool, read, ranges int64) {
	return c.pending.ranged, c.leaseless.read, c.leaseless.ranges
}

// LeaselessLook is how far the next count of PENDING rows without a
// lease through the index may read.
func LeaselessLook(c *Collector) int64 { return c.pending.look }

// Seat returns the backend that ran c's last poll.
func Seat(c *Collector) uint32 { return c.seat }

// HoldersFrom is the first poll that reads the holders.
const HoldersFrom = holdersFrom

// SetWalkStop changes the server time at which c's walks of the PENDING
// index stop reading (past minPending entries), for a test.
func SetWalkStop(c *Collector, d time.Duration) { c.pending.walkStop = d }

// WalkStops returns how many of c's walks stopped before their limit and
// their slice's end.
func WalkStops(c *Collector) int64 { return c.pending.walkStops }

// WaitEventName is a wait event ("type:event") of a server_version_num
// under its name from PostgreSQL 13 on.
func WaitEventName(version int, event string) string { return waitEventName(version, event) }
