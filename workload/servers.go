package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// ServerStop is a campaign over a pool on several servers: the scenario's
// workers and one reaper run over all of them, and one server is stopped
// hard (an immediate shutdown) at a third of the run and started again at
// two thirds. Claims must go on at the others while it is down; once it is
// back, its expired leases must be reclaimed by its own clock; the audit of
// every server must find no double finalization and no id lost. Without
// Halt no server is stopped: the scenario runs over the servers, and the
// audit of each must hold.
type ServerStop struct {
	Servers  *engine.Servers
	Stopped  int          // the member (index in Servers.Members) to stop
	Halt     func() error // nil: none is stopped
	Resume   func(ctx context.Context) error
	Scenario Scenario
	Duration time.Duration
	Seed     uint64
	Override func(*Config)
	Progress func(string) // a line per phase; nil: none
}

// ServerFigures are one server's figures at the end of a ServerStop.
type ServerFigures struct {
	Server   string `json:"server"`
	Addr     string `json:"addr"`
	Stopped  bool   `json:"stopped"`
	Total    int64  `json:"total"`
	Consumed int64  `json:"consumed"`
	// ConsumedWhileDown: ids this server consumed while the stopped one was down.
	ConsumedWhileDown int64 `json:"consumed_while_down"`
}

// ServerStopSummary is the outcome of a ServerStop. Its first fields are
// chaos's (the JSON contract); the rest are the servers'.
type ServerStopSummary struct {
	Scenario            string   `json:"scenario"`
	DurationS           float64  `json:"duration_s"`
	Cycles              int64    `json:"cycles"`
	Committed           int64    `json:"committed"`
	FencedRejections    int64    `json:"fenced_rejections"`
	DoubleFinalizations int64    `json:"double_finalizations"`
	LostIDs             int64    `json:"lost_ids"`
	ExpiredPending      int64    `json:"expired_pending"`
	Reclaimed           int64    `json:"reclaimed"`
	MaxReclaimLagMS     float64  `json:"max_reclaim_lag_ms"`
	Crashes             int64    `json:"crashes"`
	Pauses              int64    `json:"pauses"`
	Violations          []string `json:"violations"`

	StoppedServer string  `json:"stopped_server"` // "" when none was stopped
	DownS         float64 `json:"server_down_s"`
	// CommittedWhileDown: ids the other servers consumed while it was down.
	CommittedWhileDown int64 `json:"committed_while_down"`
	// ReclaimedAfterS: from its restart until no lease on it was left expired.
	ReclaimedAfterS float64              `json:"reclaimed_after_s"`
	Servers         []ServerFigures      `json:"servers"`
	Audit           engine.AuditReport   `json:"audit"`
	PerServer       []engine.ServerAudit `json:"audit_servers"`
}

// consumedOn reads each server's CONSUMED count but skip's (-1 there and
// where one does not answer).
func consumedOn(ctx context.Context, s *engine.Servers, skip int) []int64 {
	out := make([]int64, len(s.Members()))
	for i, m := range s.Members() {
		if i == skip {
			out[i] = -1
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		n, err := m.Eng.CountStatus(cctx, engine.StatusConsumed)
		cancel()
		if err != nil {
			n = -1
		}
		out[i] = n
	}
	return out
}

// Run runs the campaign.
func (c ServerStop) Run(ctx context.Context) (ServerStopSummary, error) {
	say := func(format string, args ...any) {
		if c.Progress != nil {
			c.Progress(fmt.Sprintf(format, args...))
		}
	}
	members := c.Servers.Members()
	if c.Halt == nil {
		c.Stopped = -1
	} else if c.Stopped < 0 || c.Stopped >= len(members) || len(members) < 2 {
		return ServerStopSummary{}, fmt.Errorf("server stop: member %d of %d: a pool of at least two servers, one of them stopped", c.Stopped, len(members))
	}
	cfg := c.Scenario.Config(c.Seed)
	if c.Override != nil {
		c.Override(&cfg)
	}
	cfg.Reaper = true
	wl, err := New(c.Servers, cfg)
	if err != nil {
		return ServerStopSummary{}, err
	}
	start := time.Now()
	wl.Start(ctx)
	defer wl.Stop()
	sleep := func(d time.Duration) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(d):
			return nil
		}
	}
	var stopped *engine.Member
	var before, during []int64
	var down, reclaimedAfter time.Duration
	if c.Halt == nil {
		if err := sleep(c.Duration); err != nil {
			return ServerStopSummary{}, err
		}
	} else {
		stopped = members[c.Stopped]
		if before, during, down, reclaimedAfter, err = c.outage(ctx, cfg, stopped, sleep, say); err != nil {
			return ServerStopSummary{}, err
		}
		if rest := c.Duration - time.Since(start); rest > 0 {
			if err := sleep(rest); err != nil {
				return ServerStopSummary{}, err
			}
		}
	}
	say("stopping the workers, letting the reaper catch up")
	calm := wl.Config()
	calm.CrashRate, calm.PauseRate, calm.Workers, calm.Refill, calm.KeepUp = 0, 0, 0, 0, false
	if err := wl.SetConfig(calm); err != nil {
		return ServerStopSummary{}, err
	}
	if err := waitFor(ctx, cfg.PauseLength+cfg.Task*10+30*time.Second, func() bool { return wl.Snapshot().Workers == 0 }); err != nil {
		return ServerStopSummary{}, fmt.Errorf("workers did not stop: %w", err)
	}
	if err := sleep(cfg.TTL + 2*cfg.ReaperInterval + cfg.ReaperGrace); err != nil {
		return ServerStopSummary{}, err
	}
	if _, err := wl.Reaper().RunOnce(ctx); err != nil {
		return ServerStopSummary{}, fmt.Errorf("the last reaper pass: %w", err)
	}
	lost, err := wl.RefreshLeaked(ctx)
	if err != nil {
		return ServerStopSummary{}, err
	}
	wl.Stop()
	audit, per, err := c.Servers.Audit(ctx, 0)
	if err != nil {
		return ServerStopSummary{}, err
	}
	snap := wl.Snapshot()
	rs := wl.Reaper().Stats()
	s := ServerStopSummary{
		Scenario: c.Scenario.Name, DurationS: time.Since(start).Seconds(),
		Cycles: snap.Cycles, Committed: snap.Committed, FencedRejections: snap.FencedRejections,
		DoubleFinalizations: audit.DoubleFinalizations, LostIDs: int64(lost), ExpiredPending: audit.PendingPastGrace,
		Reclaimed: rs.Reclaimed, MaxReclaimLagMS: ms(rs.MaxLag), Crashes: snap.Crashes, Pauses: snap.Pauses,
		Violations: []string{}, DownS: down.Seconds(),
		ReclaimedAfterS: reclaimedAfter.Seconds(), Audit: audit, PerServer: per,
	}
	if stopped != nil {
		s.StoppedServer = stopped.Name()
	}
	for i, m := range members {
		f := ServerFigures{Server: m.Name(), Addr: m.Addr, Stopped: i == c.Stopped}
		for _, p := range per {
			if p.Server == m.Name() {
				f.Total, f.Consumed = p.Report.Total, p.Report.Consumed
			}
		}
		if stopped != nil && i != c.Stopped && before[i] >= 0 && during[i] >= 0 {
			f.ConsumedWhileDown = during[i] - before[i]
			s.CommittedWhileDown += f.ConsumedWhileDown
		}
		s.Servers = append(s.Servers, f)
	}
	s.Violations = append(s.Violations, audit.Violations...)
	if lost > 0 {
		s.Violations = append(s.Violations, fmt.Sprintf("%d ids held by crashed workers were never reclaimed", lost))
	}
	if stopped == nil {
		return s, nil
	}
	if s.CommittedWhileDown == 0 {
		s.Violations = append(s.Violations, fmt.Sprintf("no id was committed on the other servers in the %.1fs server %s was down", down.Seconds(), stopped.Name()))
	}
	if reclaimedAfter < 0 {
		s.Violations = append(s.Violations, fmt.Sprintf("server %s still held leases that had expired before it came back, %v after", stopped.Name(), cfg.ReaperGrace+10*time.Second))
	}
	return s, nil
}

// outage stops the server hard for the middle third of the run, starts it
// again, and waits until the leases that expired on it meanwhile are
// reclaimed. It returns the other servers' consumed ids before and at the
// end of the outage, how long it was down, and how long its leases took to
// come back (-1: not within the grace and 10 s).
func (c ServerStop) outage(ctx context.Context, cfg Config, stopped *engine.Member, sleep func(time.Duration) error, say func(string, ...any)) (before, during []int64, down, reclaimedAfter time.Duration, err error) {
	third := c.Duration / 3
	if err = sleep(third); err != nil {
		return
	}
	before = consumedOn(ctx, c.Servers, c.Stopped)
	say("stopping server %s (%s) hard", stopped.Name(), stopped.Addr)
	if err = c.Halt(); err != nil {
		err = fmt.Errorf("stop server %s: %w", stopped.Name(), err)
		return
	}
	downAt := time.Now()
	if err = sleep(third); err != nil {
		return
	}
	during = consumedOn(ctx, c.Servers, c.Stopped)
	say("starting server %s again", stopped.Name())
	if err = c.Resume(ctx); err != nil {
		err = fmt.Errorf("start server %s again: %w", stopped.Name(), err)
		return
	}
	upAt := time.Now()
	down = upAt.Sub(downAt)
	// Its leases expire by its own clock; the workload's reaper takes them
	// back once the server answers again. Those that had expired by the time
	// it came back (the audit's grace reaching back to then) must all go;
	// leases of crashed workers that expire later come and go as ever.
	deadline := upAt.Add(cfg.ReaperGrace + 10*time.Second)
	for {
		a, aerr := stopped.Eng.Audit(ctx, time.Since(upAt)+cfg.ReaperGrace)
		if aerr == nil && a.PendingPastGrace == 0 {
			return before, during, down, time.Since(upAt), nil
		}
		if time.Now().After(deadline) {
			return before, during, down, -1, nil
		}
		if err = sleep(100 * time.Millisecond); err != nil {
			return
		}
	}
}
