package collector

import (
	"fmt"
	"math"
	"time"
)

// eventRing keeps the newest events.
type eventRing struct {
	buf  []Event
	next int
	full bool
}

func newEventRing(n int) *eventRing { return &eventRing{buf: make([]Event, n)} }

func (r *eventRing) add(e Event) {
	r.buf[r.next] = e
	r.next = (r.next + 1) % len(r.buf)
	if r.next == 0 {
		r.full = true
	}
}

func (r *eventRing) all() []Event {
	var out []Event
	if r.full {
		out = append(out, r.buf[r.next:]...)
	}
	return append(out, r.buf[:r.next]...)
}

// burnTau is the time constant of the burn-rate smoothing.
const burnTau = 15 * time.Second

// record computes rates from the previous poll (using the measured elapsed
// time; a counter that went down was reset and gives no rate), appends the
// series, evaluates the alerts and derives events.
func (c *Collector) record(s *Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cur := &raw{at: s.Time, consumed: s.Pool.Consumed}
	if w := s.Workload; w != nil {
		cur.haveWorkload = true
		cur.acquired, cur.committed, cur.fenced, cur.double = w.Acquired, w.Committed, w.FencedRejections, w.DoubleFinalizations
		cur.crashes, cur.reclaimed = w.Crashes, w.Reclaimed
	}
	var events []Event
	ev := func(kind, format string, args ...any) {
		e := Event{Time: s.Time, Kind: kind, Text: fmt.Sprintf(format, args...)}
		events = append(events, e)
	}
	if p := c.prev; p != nil {
		dt := cur.at.Sub(p.at).Seconds()
		if dt > 0 {
			rate := func(now, before int64) (float64, bool) {
				if now < before {
					return 0, false // reset
				}
				return float64(now-before) / dt, true
			}
			if r, ok := rate(cur.consumed, p.consumed); ok {
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
			if cur.haveWorkload && p.haveWorkload {
				if r, ok := rate(cur.acquired, p.acquired); ok {
					s.AcquiresPerS = &r
				}
				if r, ok := rate(cur.committed, p.committed); ok {
					s.CommitsPerS = &r
				}
				if r, ok := rate(cur.fenced, p.fenced); ok {
					c.series[SeriesFenced].Add(Point{s.Time, r})
				}
				if d := cur.reclaimed - p.reclaimed; d > 0 {
					ev(EventReclaimed, "reaper reclaimed %d expired leases", d)
				}
				if d := cur.fenced - p.fenced; d > 0 {
					ev(EventFenced, "%d zombie commits rejected by the fence", d)
				}
				if d := cur.double - p.double; d > 0 {
					ev(EventDouble, "%d DOUBLE FINALIZATIONS: effects committed twice (fencing off)", d)
				}
				if d := cur.crashes - p.crashes; d > 0 {
					ev(EventCrash, "%d workers crashed holding their leases", d)
				}
			}
		}
	} else {
		c.burn, c.burnSamples = 0, 0
	}
	c.prev = cur
	if s.Pool.Unused == 0 && s.Pool.Total > 0 {
		c.burn = 0 // nothing left to burn: the rate before the pool ran out is history
	}
	s.BurnPerS = c.burn
	if c.burn > 0.01 && s.Pool.Unused > 0 {
		eta := float64(s.Pool.Unused) / c.burn
		s.DepletionETAS = &eta
	}

	add := func(name string, v float64) { c.series[name].Add(Point{s.Time, v}) }
	add(SeriesUnused, float64(s.Pool.Unused))
	add(SeriesPending, float64(s.Pool.Pending))
	add(SeriesExpired, float64(s.Pool.Expired))
	add(SeriesConsumed, float64(s.Pool.Consumed))
	add(SeriesLockWaiters, float64(s.LockWaiters))
	add(SeriesLockWaitMax, s.LockWaitMaxMS)
	add(SeriesDeadTuples, float64(s.DeadTuples))
	add(SeriesDeadRatio, s.DeadRatio)
	add(SeriesBurn, s.BurnPerS)
	add(SeriesConsumedPerS, s.ConsumedPerS)
	add(SeriesPollMS, s.PollMS)
	if s.DepletionETAS != nil {
		add(SeriesETA, *s.DepletionETAS)
	}
	if s.AcquiresPerS != nil {
		add(SeriesAcquires, *s.AcquiresPerS)
	}
	if s.CommitsPerS != nil {
		add(SeriesCommits, *s.CommitsPerS)
	}
	if w := s.Workload; w != nil {
		add(SeriesAcquireP99, w.AcquireLatency.P99)
		add(SeriesDouble, float64(w.DoubleFinalizations))
		add(SeriesLeaked, float64(w.Leaked))
	}

	c.evaluate(s, ev)
	for _, e := range events {
		c.events.add(e)
	}
	s.Events = events
}

// evaluate updates every alert rule and reports transitions as events.
func (c *Collector) evaluate(s *Snapshot, ev func(kind, format string, args ...any)) {
	a := c.cfg.Alerts
	rule := func(name string, active bool, format string, args ...any) {
		st, ok := c.alerts[name]
		if !ok {
			st = &Alert{Name: name}
			c.alerts[name] = st
		}
		msg := fmt.Sprintf(format, args...)
		switch {
		case active && !st.Active:
			st.Active, st.Since = true, s.Time
			ev(EventAlert, "ALERT %s: %s", name, msg)
		case !active && st.Active:
			st.Active = false
			ev(EventCleared, "cleared %s after %s", name, s.Time.Sub(st.Since).Round(time.Second))
			st.Since = time.Time{}
		}
		st.Message = msg
		s.Alerts = append(s.Alerts, *st)
	}
	rule(AlertLockWait, s.LockWaitMaxMS > float64(a.LockWait.Milliseconds()),
		"longest lock wait %.0f ms (threshold %v)", s.LockWaitMaxMS, a.LockWait)
	draining := s.DepletionETAS != nil && *s.DepletionETAS < a.DepletionWithin.Seconds()
	if empty := s.Pool.Unused == 0 && s.Pool.Total > 0; empty {
		rule(AlertDepletion, true, "the pool is empty: every id is PENDING or CONSUMED; refill it, or free the ids leaked or expired")
	} else {
		rule(AlertDepletion, draining, "UNUSED %d lasts %s at %.0f/s (threshold %v)", s.Pool.Unused, etaText(s.DepletionETAS), s.BurnPerS, a.DepletionWithin)
	}
	rule(AlertReaperLag, s.Pool.ExpiredOld > 0,
		"%d leases expired more than %v ago are still PENDING", s.Pool.ExpiredOld, a.ExpiredAfter)
	rule(AlertDeadTuples, s.DeadRatio > a.DeadRatio,
		"dead tuples %.0f%% of the table (threshold %.0f%%)", 100*s.DeadRatio, 100*a.DeadRatio)
	conn := s.MaxConnections > 0 && float64(s.Connections) > a.Connections*float64(s.MaxConnections)
	rule(AlertConnections, conn, "%d of %d connections in use (threshold %.0f%%)", s.Connections, s.MaxConnections, 100*a.Connections)
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
