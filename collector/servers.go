package collector

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// ServerView is one server of a watch over several: its snapshot, or why
// there is none this poll.
type ServerView struct {
	Server    string    `json:"server"` // its name in the pool (s1, s2, …), else its place in the list (#1, #2 …)
	Addr      string    `json:"addr"`   // user@host:port/database, never a password
	Reachable bool      `json:"reachable"`
	Error     string    `json:"error,omitempty"`
	Snapshot  *Snapshot `json:"snapshot,omitempty"`
}

// MergeServers adds the servers' snapshots up into the snapshot of the
// whole pool: counts, rates, dead tuples and connections are summed, the
// longest lock wait and the slowest poll kept, the waiters and blockers
// listed with their server, the time to empty computed
// from the sums, and each server's active alerts carried with its name.
// A server that did not answer adds nothing but its row. The views are
// kept in Servers.
func MergeServers(now time.Time, views []ServerView) Snapshot {
	m := Snapshot{Time: now, Servers: views, Alerts: []Alert{}, Waiters: []Waiter{}, Blockers: []Blocker{}, Pool: Pool{Estimated: []string{}}}
	noLease := int64(0)
	noLeaseKnown := true
	for _, v := range views {
		s := v.Snapshot
		if !v.Reachable || s == nil {
			m.Alerts = append(m.Alerts, Alert{Name: AlertServerUnreachable, Active: true, Server: v.Server,
				Message: "server " + v.Server + " (" + v.Addr + ") does not answer: " + v.Error})
			continue
		}
		p := &m.Pool
		p.Unused += s.Pool.Unused
		p.Pending += s.Pool.Pending
		p.Expired += s.Pool.Expired
		p.Consumed += s.Pool.Consumed
		p.Stuck += s.Pool.Stuck
		p.ExpiredOld += s.Pool.ExpiredOld
		p.Total += s.Pool.Total
		p.UnusedAgeS = max(p.UnusedAgeS, s.Pool.UnusedAgeS)
		p.PendingAgeS = max(p.PendingAgeS, s.Pool.PendingAgeS)
		if s.Pool.Counted != nil && (p.Counted == nil || *s.Pool.Counted < *p.Counted) {
			c := *s.Pool.Counted // the least of the servers': how far the whole is read
			p.Counted = &c
		}
		if s.Pool.NoLease != nil {
			noLease += *s.Pool.NoLease
		} else {
			noLeaseKnown = false
		}
		for _, e := range s.Pool.Estimated {
			if !slices.Contains(p.Estimated, e) {
				p.Estimated = append(p.Estimated, e)
			}
		}
		for _, w := range s.Waiters {
			w.Server = v.Server
			m.Waiters = append(m.Waiters, w)
		}
		for _, b := range s.Blockers {
			b.Server = v.Server
			m.Blockers = append(m.Blockers, b)
		}
		m.LWLockWaits += s.LWLockWaits
		m.LockWaiters += s.LockWaiters
		m.LockWaitMaxMS = max(m.LockWaitMaxMS, s.LockWaitMaxMS)
		if u := s.LockWaitUnplannedMaxMS; u != nil && (m.LockWaitUnplannedMaxMS == nil || *u > *m.LockWaitUnplannedMaxMS) {
			m.LockWaitUnplannedMaxMS = u
		}
		m.DeadTuples += s.DeadTuples
		m.LiveTuples += s.LiveTuples
		m.Connections += s.Connections
		m.MaxConnections += s.MaxConnections
		m.ConsumedPerS += s.ConsumedPerS
		m.BurnPerS += s.BurnPerS
		m.PollMS = max(m.PollMS, s.PollMS)
		for _, a := range s.Alerts {
			if a.Active {
				a.Server = v.Server
				a.Message = "server " + v.Server + ": " + a.Message
				m.Alerts = append(m.Alerts, a)
			}
		}
	}
	if noLeaseKnown {
		m.Pool.NoLease = &noLease
	}
	if m.DeadTuples+m.LiveTuples > 0 {
		m.DeadRatio = float64(m.DeadTuples) / float64(m.DeadTuples+m.LiveTuples)
	}
	if m.BurnPerS > 0 {
		eta := float64(m.Pool.Unused) / m.BurnPerS
		m.DepletionETAS = &eta
	}
	return m
}

// Member is one server of a watch over several: where it is (Addr, never
// with a password) and how to open its collector. Open returns the
// collector and the server's name in its pool (its mark: s1, s2 …), ""
// when it has none.
type Member struct {
	Addr string
	Open func(ctx context.Context) (*Collector, string, error)
}

// retryOpen is how long a server whose collector could not be made waits
// before the next try, so that a server that is down costs a poll nothing.
const retryOpen = 5 * time.Second

// Servers watches several servers as one source for the dashboard, the
// headless loop, the metrics and a recording: every poll polls them all at
// once and merges them (MergeServers), and the series and events are those
// of the whole. A server that does not answer is shown as such, tried
// again, and the others go on. Safe for use from several goroutines.
type Servers struct {
	members []*member
	cfg     ServersConfig

	mu        sync.Mutex
	series    map[string]*History
	events    *eventLog
	prev      *raw
	notes     []Event // noted since the last poll recorded (see Note)
	gen       int     // bumped by Reset and Suspend: a poll begun before is not recorded
	suspended bool    // no poll is recorded until the next Reset
}

// ServersConfig configures Servers. Zero fields take defaults.
type ServersConfig struct {
	// History is the points kept as polled, as Config.History.
	History int
	// Workload, when set, is the workload running over the servers (the
	// demo): its figures go with each merged snapshot, not the servers'.
	Workload WorkloadSource
}

// member is a Member and its collector, while it has one.
type member struct {
	Member
	mu      *sync.Mutex // the Servers' mu: guards name, col and info, which Info and Names read
	name    string
	col     *Collector
	retryAt time.Time
	lastErr error
	down    bool // it did not answer at the last poll (after answering once)
	info    Info
}

// NewServers watches members. No server is reached before Open or the first Poll. A
// server is named by its mark (s1, s2 …) once it has answered, and until
// then, or where it has none (separate pools), by its place in the list:
// #1, #2 ….
func NewServers(members []Member, cfg ServersConfig) *Servers {
	cfg.History = cmp.Or(cfg.History, DefaultHistory)
	s := &Servers{cfg: cfg, events: newEventLog(200), series: map[string]*History{}}
	for i, m := range members {
		s.members = append(s.members, &member{Member: m, mu: &s.mu, name: "#" + strconv.Itoa(i+1)})
	}
	for _, name := range allSeries {
		s.series[name] = NewHistory(cfg.History)
	}
	return s
}

// open makes the member's collector, unless it has one or its retry is not
// due.
func (m *member) open(ctx context.Context) {
	if m.col != nil || time.Now().Before(m.retryAt) {
		return
	}
	col, name, err := m.Open(ctx)
	if err != nil {
		m.lastErr, m.retryAt = err, time.Now().Add(retryOpen)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.col, m.info = col, col.Info()
	if name != "" {
		m.name = name
	}
}

// Open makes every server's collector at once, so that Info knows them
// before the first poll. A server that does not answer is left for the
// polls to try again; one that answers and refuses (a wrong password, an
// unknown database, no pool table) fails Open with its error: it would
// refuse every poll, and the watch would show a pool without it.
func (s *Servers) Open(ctx context.Context) error {
	errs := make([]error, len(s.members))
	var wg sync.WaitGroup
	for i, m := range s.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.open(ctx)
			if m.col == nil && m.lastErr != nil && !serverDown(m.lastErr) {
				errs[i] = m.lastErr
				var ce *engine.ConnError
				if !errors.As(m.lastErr, &ce) { // a connection error names its server already
					errs[i] = fmt.Errorf("server %s (%s): %w", m.name, m.Addr, m.lastErr)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// serverDown says whether a collector could not be made because its
// server did not answer (rather than answered and refused).
func serverDown(err error) bool {
	var ce *engine.ConnError
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ce) && engine.Unreachable(err)
}

// poll is the member's view at this poll.
func (m *member) poll(ctx context.Context) ServerView {
	m.open(ctx)
	v := ServerView{Server: m.name, Addr: m.Addr}
	if m.col != nil {
		snap, err := m.col.Poll(ctx)
		if err == nil {
			v.Reachable, v.Snapshot = true, &snap
		} else {
			m.lastErr = err
		}
	}
	if !v.Reachable && m.lastErr != nil {
		v.Error = oneLine(m.lastErr.Error())
	}
	return v
}

// oneLine keeps an error's first line.
func oneLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return s
}

// Poll polls every server at once and returns the merged snapshot: its
// Servers hold each server's view. It fails only when no server answered
// (the snapshot still says which and why).
func (s *Servers) Poll(ctx context.Context) (Snapshot, error) {
	start := time.Now()
	s.mu.Lock()
	gen := s.gen
	s.mu.Unlock()
	views := make([]ServerView, len(s.members))
	var wg sync.WaitGroup
	for i, m := range s.members {
		wg.Add(1)
		go func() {
			defer wg.Done()
			views[i] = m.poll(ctx)
		}()
	}
	wg.Wait()
	snap := MergeServers(start, views)
	var why []string
	for _, v := range views {
		if !v.Reachable {
			why = append(why, v.Server+": "+v.Error)
		}
	}
	if len(why) == len(views) {
		return snap, fmt.Errorf("no server answers: %s", strings.Join(why, "; "))
	}
	if w := s.cfg.Workload; w != nil {
		if _, err := w.RefreshLeaked(ctx); err != nil && !errors.Is(err, context.Canceled) {
			snap.Limits = append(snap.Limits, "workload: leaked ids not checked: "+err.Error())
		}
		ws := w.Snapshot()
		snap.Workload = &ws
	}
	s.record(&snap, gen)
	return snap, nil
}

// record adds the merged snapshot to the series and the servers' events
// to the log, each named by its server, with an event when a server stops
// or starts answering.
func (s *Servers) record(snap *Snapshot, gen int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if gen != s.gen || s.suspended {
		return // begun before a reset, or while the pool is being rebuilt
	}
	var events []Event
	for i, v := range snap.Servers {
		m := s.members[i]
		if !v.Reachable {
			if !m.down {
				m.down = true
				events = append(events, Event{Time: snap.Time, Kind: EventAlert, Text: AlertServerUnreachable + ": server " + v.Server + " (" + v.Addr + ") does not answer: " + v.Error})
			}
			continue
		}
		if m.down {
			m.down = false
			events = append(events, Event{Time: snap.Time, Kind: EventCleared, Text: AlertServerUnreachable + ": server " + v.Server + " answers again"})
		}
		for _, e := range v.Snapshot.Events {
			if _, ok := counted[e.Kind]; !ok { // a count event sums over the servers
				e.Text = v.Server + ": " + e.Text
			}
			events = append(events, e)
		}
	}
	cur := rawOf(snap)
	if s.prev != nil {
		workloadRates(snap, cur, s.prev, cur.at.Sub(s.prev.at).Seconds(), func(kind EventKind, n int64) {
			events = append(events, countEvent(snap.Time, kind, n))
		})
	}
	sort.SliceStable(events, func(i, j int) bool { return events[i].Time.Before(events[j].Time) })
	for _, e := range events {
		s.events.add(e)
	}
	snap.Events = append(s.notes, events...) // the notes are in the log already
	s.notes = nil
	addPoints(snap, cur, s.prev, func(name string, v float64) { s.series[name].Add(Point{snap.Time, v}) })
	s.prev = cur
}

// Note logs an event that happened outside the databases: a knob turned,
// a scenario started.
func (s *Servers) Note(kind EventKind, text string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := Event{Time: time.Now(), Kind: kind, Text: text}
	s.events.add(e)
	s.notes = append(s.notes, e)
}

// Reset starts the figures again, on every server and for the whole (see
// Collector.Reset).
func (s *Servers) Reset(rebuilt bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.suspended = false
	for name := range s.series {
		s.series[name] = NewHistory(s.cfg.History)
	}
	s.prev = nil
	for _, m := range s.members {
		if m.col != nil {
			m.col.Reset(rebuilt)
		}
	}
}

// Suspend stops recording polls until the next Reset, on every server
// (see Collector.Suspend).
func (s *Servers) Suspend() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gen++
	s.suspended = true
	for _, m := range s.members {
		if m.col != nil {
			m.col.Suspend()
		}
	}
}

// Series returns a copy of one series of the whole, oldest first.
func (s *Servers) Series(name string) []Point {
	s.mu.Lock()
	defer s.mu.Unlock()
	h, ok := s.series[name]
	if !ok {
		return nil
	}
	return h.Points()
}

// Events returns the newest events of all the servers, oldest first.
func (s *Servers) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events.all()
}

// Info is what the header shows: the servers' count for the host, the
// table, and the database, user and version the servers share (else
// "mixed"). It never includes a password.
func (s *Servers) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out Info
	same := func(have *string, v string) {
		switch {
		case *have == "":
			*have = v
		case *have != v:
			*have = "mixed"
		}
	}
	out.Monitor = true
	for _, m := range s.members {
		if m.col == nil {
			continue
		}
		same(&out.Database, m.info.Database)
		same(&out.User, m.info.User)
		same(&out.Version, m.info.Version)
		same(&out.Table, m.info.Table)
		out.Monitor = out.Monitor && m.info.Monitor
	}
	out.Host = fmt.Sprintf("%d servers", len(s.members))
	return out
}

// Close closes every server's collector.
func (s *Servers) Close() {
	for _, m := range s.members {
		if m.col != nil {
			m.col.Close()
		}
	}
}
