package collector

import (
	"fmt"
	"math"
	"time"

	"github.com/pooltop-dev/pooltop/internal/termtext"
)

// eventLog keeps the newest events for the dashboard. A count event (the
// reaper's reclaims, the fence's rejections…) of the same kind as one logged
// less than mergeWindow ago is folded into it and moves it to the end, so
// that a reaper reclaiming every second fills one line, not the whole panel.
type eventLog struct {
	buf []Event
	max int
}

// mergeWindow is how long a count event keeps absorbing later ones.
const mergeWindow = 10 * time.Second

// counted are the kinds whose text is made from a count, and the text.
var counted = map[EventKind]string{
	EventReclaimed: "reaper reclaimed %s expired leases",
	EventFenced:    "%s zombie commits rejected by the fence",
	EventDouble:    "%s DOUBLE FINALIZATIONS: effects committed twice (fencing off)",
	EventCrash:     "%s workers crashed holding their leases",
}

func newEventLog(n int) *eventLog { return &eventLog{max: n} }

// countEvent makes the event of a count, with its text.
func countEvent(at time.Time, kind EventKind, n int64) Event {
	return Event{Time: at, Since: at, Kind: kind, Count: n, Text: fmt.Sprintf(counted[kind], termtext.Count(n))}
}

func (l *eventLog) add(e Event) {
	if _, ok := counted[e.Kind]; ok {
		for i := len(l.buf) - 1; i >= 0 && i >= len(l.buf)-8; i-- {
			o := l.buf[i]
			if o.Kind != e.Kind || e.Time.Sub(o.Since) >= mergeWindow {
				continue
			}
			merged := countEvent(e.Time, e.Kind, o.Count+e.Count)
			merged.Since = o.Since
			if d := e.Time.Sub(o.Since).Round(time.Second); d > 0 {
				merged.Text += " in " + d.String()
			}
			l.buf = append(l.buf[:i], l.buf[i+1:]...)
			e = merged
			break
		}
	}
	l.buf = append(l.buf, e)
	if len(l.buf) > l.max {
		l.buf = append(l.buf[:0], l.buf[len(l.buf)-l.max:]...)
	}
}

func (l *eventLog) all() []Event { return append([]Event(nil), l.buf...) }

// burnTau is the time constant of the burn-rate smoothing.
const burnTau = 15 * time.Second

// record computes rates from the previous poll (using the measured elapsed
// time; a counter that went down was reset and gives no rate), appends the
// series, evaluates the alerts and derives events.
func (c *Collector) record(s *Snapshot, gen int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen || c.suspended {
		return // begun before a reset, or while the pool is being rebuilt
	}
	cur := rawOf(s)
	prev := c.prev
	var events []Event
	ev := func(kind, format string, args ...any) {
		e := Event{Time: s.Time, Kind: kind, Text: fmt.Sprintf(format, args...)}
		events = append(events, e)
	}
	count := func(kind EventKind, n int64) { events = append(events, countEvent(s.Time, kind, n)) }
	if p := c.prev; p != nil {
		dt := cur.at.Sub(p.at).Seconds()
		if dt > 0 {
			rate := func(now, before int64) (float64, bool) {
				if now < before {
					return 0, false // reset
				}
				return float64(now-before) / dt, true
			}
			// A correction of the pool's rows is no consumption.
			if r, ok := rate(cur.consumed-s.Pool.totalShift, p.consumed); ok {
				s.ConsumedPerS = r
			}
			// Net decline of UNUSED, from what was counted in both polls.
			// Smoothed with a 15 s time constant; the first samples are
			// averaged plainly, so the rate is right from the first poll.
			if s.Pool.haveDelta {
				inst := float64(-s.Pool.unusedDelta) / dt
				c.burnSamples++
				alpha := math.Max(1-math.Exp(-dt/burnTau.Seconds()), 1/float64(c.burnSamples))
				c.burn += alpha * (inst - c.burn)
			}
			workloadRates(s, cur, p, dt, count)
		}
	} else {
		c.burn, c.burnSamples = 0, 0
	}
	c.sampleFrom = s.Time
	if c.prev != nil {
		c.sampleFrom = c.prev.at
	}
	c.prev = cur
	empty := s.Pool.Unused == 0 && s.Pool.Total > 0
	if empty {
		c.burn = 0 // nothing left to burn: the rate before the pool ran out is history
	}
	if empty && !c.empty {
		ev(EventEmpty, "the pool is empty: no UNUSED id is left to claim")
	}
	c.empty = empty
	s.BurnPerS = c.burn
	if c.burn > 0.01 && s.Pool.Unused > 0 {
		eta := float64(s.Pool.Unused) / c.burn
		s.DepletionETAS = &eta
	}

	addPoints(s, cur, prev, func(name string, v float64) { c.series[name].Add(Point{s.Time, v}) })

	c.evaluate(s, ev)
	for _, e := range events {
		c.events.add(e)
	}
	// The notes since the last poll go with this snapshot too (already
	// in the log), so that a recording holds the knobs turned, the
	// scenarios and the actions taken.
	s.Events = append(c.notes, events...)
	c.notes = nil
}

// workloadRates sets the workload's claim and commit rates since p, the
// previous poll dt seconds before, and counts its reclaims, rejections,
// double finalizations and crashes as events: the live collector and a
// watch over several servers (whose workload runs over them all) share it.
func workloadRates(s *Snapshot, cur, p *raw, dt float64, count func(EventKind, int64)) {
	if !cur.haveWorkload || !p.haveWorkload || dt <= 0 {
		return
	}
	rate := func(now, before int64) (float64, bool) {
		if now < before {
			return 0, false // reset
		}
		return float64(now-before) / dt, true
	}
	if r, ok := rate(cur.acquired, p.acquired); ok {
		s.AcquiresPerS = &r
	}
	if r, ok := rate(cur.committed, p.committed); ok {
		s.CommitsPerS = &r
	}
	if d := cur.reclaimed - p.reclaimed; d > 0 {
		count(EventReclaimed, d)
	}
	if d := cur.fenced - p.fenced; d > 0 {
		count(EventFenced, d)
	}
	if d := cur.double - p.double; d > 0 {
		count(EventDouble, d)
	}
	if d := cur.crashes - p.crashes; d > 0 {
		count(EventCrash, d)
	}
}

// rawOf is what a snapshot says of the counters between polls.
func rawOf(s *Snapshot) *raw {
	cur := &raw{at: s.Time, consumed: s.Pool.Consumed}
	if w := s.Workload; w != nil {
		cur.haveWorkload = true
		cur.acquired, cur.committed, cur.fenced, cur.double = w.Acquired, w.Committed, w.FencedRejections, w.DoubleFinalizations
		cur.crashes, cur.reclaimed, cur.conflicts = w.Crashes, w.Reclaimed, w.Conflicts
		cur.leaseLost, cur.empty = w.LeasesLost, w.EmptyPool
		for _, n := range w.Errors {
			cur.errors += n
		}
	}
	return cur
}

// addPoints gives one poll's points to add: the snapshot's figures (its
// rates already computed), and the per-second rates of the workload's
// counters since prev, the previous poll (nil: none). The live collector
// and a replay both chart through it, so a recording charts as it did live.
func addPoints(s *Snapshot, cur, prev *raw, add func(name string, v float64)) {
	if prev != nil && cur.haveWorkload && prev.haveWorkload {
		if dt := cur.at.Sub(prev.at).Seconds(); dt > 0 {
			for _, r := range []struct {
				series    string
				now, then int64
			}{{SeriesFenced, cur.fenced, prev.fenced}, {SeriesDoublePerS, cur.double, prev.double}, {SeriesConflictsPerS, cur.conflicts, prev.conflicts},
				{SeriesLeasesLostPerS, cur.leaseLost, prev.leaseLost}, {SeriesEmptyPerS, cur.empty, prev.empty}, {SeriesErrorsPerS, cur.errors, prev.errors}} {
				if r.now >= r.then { // a counter that went down was reset: no rate
					add(r.series, float64(r.now-r.then)/dt)
				}
			}
		}
	}
	add(SeriesUnused, float64(s.Pool.Unused))
	add(SeriesPending, float64(s.Pool.Pending))
	add(SeriesExpired, float64(s.Pool.Expired))
	add(SeriesConsumed, float64(s.Pool.Consumed))
	add(SeriesLockWaiters, float64(s.LockWaiters))
	add(SeriesLockWaitMax, s.LockWaitMaxMS)
	add(SeriesLWLockWaits, float64(s.LWLockWaits))
	add(SeriesDeadTuples, float64(s.DeadTuples))
	add(SeriesDeadRatio, s.DeadRatio)
	add(SeriesBurn, s.BurnPerS)
	add(SeriesConsumedPerS, s.ConsumedPerS)
	add(SeriesPollMS, s.PollMS)
	if s.DepletionETAS != nil {
		add(SeriesETA, *s.DepletionETAS)
	}
	if cs := s.Claims; cs != nil {
		add(SeriesClaimsPerS, cs.CallsPerS)
		add(SeriesClaimMeanMS, cs.MeanMS)
	}
	if s.AcquiresPerS != nil {
		add(SeriesAcquires, *s.AcquiresPerS)
	}
	if s.CommitsPerS != nil {
		add(SeriesCommits, *s.CommitsPerS)
	}
	if w := s.Workload; w != nil {
		add(SeriesAcquireP99, w.RecentAcquireLatency.P99)
		add(SeriesDouble, float64(w.DoubleFinalizations))
		add(SeriesLeaked, float64(w.Leaked))
	}

}

// evaluate updates every alert rule and reports transitions as events. A
// rule is raised as soon as its condition holds and cleared only once its
// figure has stayed on the calm side of a lower threshold for Alerts.Hold,
// so that a figure hovering at the threshold does not raise and clear it at
// every poll.
func (c *Collector) evaluate(s *Snapshot, ev func(kind, format string, args ...any)) {
	a := c.cfg.Alerts
	rule := func(name string, raise, calm bool, format string, args ...any) {
		st, ok := c.alerts[name]
		if !ok {
			st = &alertState{Alert: Alert{Name: name}}
			c.alerts[name] = st
		}
		msg := fmt.Sprintf(format, args...)
		switch {
		case raise && !st.Active:
			st.Active, st.Since, st.calmSince = true, s.Time, time.Time{}
			ev(EventAlert, "ALERT %s: %s", name, msg)
		case st.Active && !calm:
			st.calmSince = time.Time{}
		case st.Active && st.calmSince.IsZero():
			st.calmSince = s.Time
		case st.Active && s.Time.Sub(st.calmSince) >= a.Hold:
			st.Active = false
			ev(EventCleared, "cleared %s after %s", name, s.Time.Sub(st.Since).Round(time.Second))
			st.Since, st.calmSince = time.Time{}, time.Time{}
		}
		st.Message = msg
		s.Alerts = append(s.Alerts, st.Alert)
	}
	wait := float64(a.LockWait.Milliseconds())
	longest := s.LockWaitMaxMS
	if s.LockWaitUnplannedMaxMS != nil {
		longest = *s.LockWaitUnplannedMaxMS
	}
	waiting := longest > wait
	c.lockRecent = append(c.lockRecent, waiting)
	if len(c.lockRecent) > lockPolls {
		c.lockRecent = c.lockRecent[1:]
	}
	over := 0
	for _, w := range c.lockRecent {
		if w {
			over++
		}
	}
	recurs := over >= lockPollsOver || longest >= float64(a.LockWaitFor.Milliseconds())
	rule(AlertLockWait, waiting && recurs, longest <= wait/2,
		"longest lock wait %.0f ms (threshold %v)", longest, a.LockWait)
	within := a.DepletionWithin.Seconds()
	empty := s.Pool.Unused == 0 && s.Pool.Total > 0
	draining := s.DepletionETAS != nil && *s.DepletionETAS < within
	switch {
	case !draining:
		c.drainingSince = time.Time{}
	case c.drainingSince.IsZero():
		c.drainingSince = c.sampleFrom // the burn sample covers the time since the previous poll
	}
	draining = draining && s.Time.Sub(c.drainingSince) >= a.DepletionFor
	calmETA := !empty && (s.DepletionETAS == nil || *s.DepletionETAS > within*4/3)
	if empty {
		rule(AlertDepletion, true, false, "the pool is empty: every id is PENDING or CONSUMED; refill it, or free the ids leaked or expired")
	} else {
		rule(AlertDepletion, draining, calmETA, "UNUSED %d lasts %s at %.0f/s (threshold %v)", s.Pool.Unused, etaText(s.DepletionETAS), s.BurnPerS, a.DepletionWithin)
	}
	top := s.LWLockWaitEvent
	if top == "" {
		top = "none"
	}
	// A wait on a latch lasts microseconds, and one poll's sample of them
	// jumps: a healthy demo on 4 partitions showed 5 at one poll. The alert
	// weighs the mean of the last lwlockPolls polls, and needs them all.
	c.lwRecent = append(c.lwRecent, s.LWLockWaits)
	if len(c.lwRecent) > lwlockPolls {
		c.lwRecent = c.lwRecent[1:]
	}
	var lwSum int
	for _, n := range c.lwRecent {
		lwSum += n
	}
	lwMean := float64(lwSum) / float64(len(c.lwRecent))
	full := len(c.lwRecent) == lwlockPolls
	high := full && lwMean >= float64(a.LWLockWaiters)
	switch {
	case !high:
		c.lwHighSince = time.Time{}
	case c.lwHighSince.IsZero():
		c.lwHighSince = s.Time
	}
	rule(AlertLWLock, high && s.Time.Sub(c.lwHighSince) >= a.LWLockFor, lwMean <= float64(a.LWLockWaiters)/2,
		"%.1f sessions waiting on an LWLock in statements on the pool, the mean of the last %d polls, most on %s now (threshold %d): page-latch contention; more partitions spread it",
		lwMean, len(c.lwRecent), top, a.LWLockWaiters)
	rule(AlertReaperLag, s.Pool.ExpiredOld > 0, s.Pool.ExpiredOld == 0,
		"%d leases expired more than %v ago are still PENDING", s.Pool.ExpiredOld, a.ExpiredAfter)
	noLease := s.Pool.NoLease != nil && *s.Pool.NoLease > 0
	switch {
	case !noLease:
		c.noLeaseSince = time.Time{}
	case c.noLeaseSince.IsZero():
		c.noLeaseSince = s.Time
	}
	if s.Pool.NoLease != nil {
		rule(AlertNoLease, noLease && s.Time.Sub(c.noLeaseSince) >= a.NoLeaseFor, !noLease,
			"%d PENDING ids are held with no lease: if their holders die, nothing will ever free them (claim with a lease)", *s.Pool.NoLease)
	}
	if s.Pool.PassedOver != nil && s.Pool.PassedOverS != nil {
		starved := *s.Pool.PassedOverS >= a.Starvation.Seconds() && s.Pool.PassedOverBy >= StarvationClaims
		rule(AlertStarvation, starved, *s.Pool.PassedOver == 0,
			"claims have passed over %d free ids, the oldest for %.0fs by %d newer claims (threshold %v): something holds them, or claims skip id order",
			*s.Pool.PassedOver, *s.Pool.PassedOverS, s.Pool.PassedOverBy, a.Starvation)
	}
	rule(AlertDeadTuples, s.DeadRatio > a.DeadRatio, s.DeadRatio <= a.DeadRatio*3/4,
		"dead tuples %.0f%% of the table (threshold %.0f%%)", 100*s.DeadRatio, 100*a.DeadRatio)
	used := float64(s.Connections) / math.Max(float64(s.MaxConnections), 1)
	conn := s.MaxConnections > 0 && used > a.Connections
	rule(AlertConnections, conn, used <= a.Connections-0.1, "%d of %d connections in use (threshold %.0f%%)", s.Connections, s.MaxConnections, 100*a.Connections)
}

// lock_wait is raised when the longest wait is over the threshold at
// lockPollsOver of the last lockPolls polls.
const (
	lockPolls     = 5
	lockPollsOver = 3
)

// lwlockPolls: the LWLock alert weighs the mean waiters of this many polls.
const lwlockPolls = 5

// alertState is an alert rule's state between polls.
type alertState struct {
	Alert
	calmSince time.Time // since when the figure has been calm, while active
}

// startPoll begins a poll: it drops the counts kept between polls if the
// pool was made anew, and returns the reset generation the poll belongs to.
func (c *Collector) startPoll() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rebuilt {
		c.unused = unusedCounter{reanchor: c.unused.reanchor, seeks: c.unused.seeks}
		c.total = totalCounter{}
		c.rows.ok = false // the catalog's figure was the old pool's
		c.pending = pendingCounter{}
		c.census = census{byTID: c.census.byTID, parts: c.census.parts}
		c.holders = holderSample{}
		c.parts = partitionCounts{}
		c.claims = claimReader{available: c.claims.available}
		c.rebuilt = false
	}
	return c.gen
}

// Reset starts the history again: series, alerts and rates from zero (the
// dashboard's reset key, and a demo scenario's start). rebuilt says the pool
// itself was made anew, so the counts kept between polls are dropped too.
// A poll under way when Reset is called is not recorded.
func (c *Collector) Reset(rebuilt bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.suspended = false
	c.rebuilt = c.rebuilt || rebuilt
	for name := range c.series {
		c.series[name] = NewHistory(c.cfg.History)
	}
	c.prev, c.burn, c.burnSamples, c.empty, c.drainingSince, c.sampleFrom = nil, 0, 0, false, time.Time{}, time.Time{}
	c.alerts = map[string]*alertState{}
	c.lwRecent, c.lwHighSince, c.noLeaseSince, c.lockRecent = nil, time.Time{}, time.Time{}, nil
}

// Suspend stops recording polls until the next Reset: the demo calls it
// before it empties the pool to make a fresh one, so that the empty pool of
// the moment raises no alert and leaves no event.
func (c *Collector) Suspend() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen++
	c.suspended = true
}

// Note logs an event that happened outside the database: a knob turned,
// a scenario started, the counters reset.
func (c *Collector) Note(kind EventKind, text string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := Event{Time: time.Now(), Kind: kind, Text: text}
	c.events.add(e)
	c.notes = append(c.notes, e)
}

func etaText(eta *float64) string {
	if eta == nil {
		return "forever"
	}
	return (time.Duration(*eta) * time.Second).Round(time.Second).String()
}

// Series returns a copy of one series, oldest first.
func (c *Collector) Series(name string) []Point {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, ok := c.series[name]
	if !ok {
		return nil
	}
	return r.Points()
}

// Events returns the newest events, oldest first.
func (c *Collector) Events() []Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.events.all()
}
