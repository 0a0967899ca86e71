package workload

import (
	"context"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/faultproxy"
)

// Fault is a real fault a campaign injects into a fleet of `pooltop work`
// processes and their server.
type Fault string

// The faults.
const (
	// FaultKill: SIGKILL of a worker process mid-cycle (leases held,
	// commits in flight); a new process takes its place.
	FaultKill Fault = "kill"
	// FaultTerminate: pg_terminate_backend of some of the workers' sessions.
	FaultTerminate Fault = "terminate"
	// FaultRestart: PostgreSQL ended by an immediate shutdown and started
	// again; the workers reconnect by themselves.
	FaultRestart Fault = "restart"
	// FaultLostAck: the connection cut around a commit, in turn after the
	// server executed it (its answer lost) and before the server saw it;
	// the worker retries with the same request id.
	FaultLostAck Fault = "lost-ack"
	// FaultPartition: the network between the workers and the server
	// stalls, both ways, for longer than a lease, then heals.
	FaultPartition Fault = "partition"
	// FaultPause: a worker process frozen with SIGSTOP while it holds
	// leases, past their expiry, until the reaper has taken them back, then
	// resumed with SIGCONT: the seeds' stop-the-world pause with a real
	// process. Its late commits must be rejected by the fence.
	FaultPause Fault = "pause"
)

// Faults are the faults a campaign knows, in the order help lists them.
var Faults = []Fault{FaultKill, FaultTerminate, FaultRestart, FaultLostAck, FaultPartition, FaultPause}

// NeedsProxy reports whether a fault is injected in the network, so that
// the workers must reach the server through a faultproxy.
func (f Fault) NeedsProxy() bool { return f == FaultLostAck || f == FaultPartition }

// ParseFaults reads a comma-separated list of faults.
func ParseFaults(s string) ([]Fault, error) {
	var out []Fault
	seen := map[Fault]bool{}
	for _, part := range strings.Split(s, ",") {
		f := Fault(strings.TrimSpace(part))
		known := false
		for _, k := range Faults {
			known = known || f == k
		}
		if !known {
			names := make([]string, len(Faults))
			for i, k := range Faults {
				names[i] = string(k)
			}
			return nil, fmt.Errorf("fault %q: choose among %s", f, strings.Join(names, ", "))
		}
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out, nil
}

// Campaign is a fault campaign: Processes `pooltop work` processes on one
// pool for Duration, a fault every Every (on average) drawn from Faults.
type Campaign struct {
	Faults    []Fault
	Processes int
	Duration  time.Duration
	Every     time.Duration
	Seed      uint64
	Scenario  Scenario
	// Spawn prepares one `pooltop work` process named name, which must run
	// without a reaper (the campaign runs one) and write its history to
	// history; the campaign starts and signals it.
	Spawn func(name, history string) *exec.Cmd
	// Crash ends the server by an immediate shutdown and starts it again
	// (nil: FaultRestart cannot be injected).
	Crash func(ctx context.Context) error
	Pool  *pgxpool.Pool // the campaign's own connections: the reaper, terminate, the audit
	// Proxy stands between the workers and the server for the network's
	// faults (nil: lost-ack and partition cannot be injected).
	Proxy *faultproxy.Proxy
	// Progress, if not nil, gets a line per fault and per phase.
	Progress func(string)
}

// FaultSummary is the outcome of a campaign. Field names are part of the
// JSON contract (chaos --faults --json).
type FaultSummary struct {
	Faults          map[string]int `json:"faults"` // injected, by kind
	Processes       int            `json:"processes_started"`
	DurationS       float64        `json:"duration_s"`
	Committed       int64          `json:"committed"` // effects in the ledger
	Reclaimed       int64          `json:"reclaimed"`
	MaxReclaimLagMS float64        `json:"max_reclaim_lag_ms"`
	ReclaimBoundMS  float64        `json:"reclaim_bound_ms"`
	ReaperHeld      int64          `json:"reaper_held"`   // expired leases passed over while their holder had the row locked
	DownS           float64        `json:"server_down_s"` // the longest restart
	// AcksLost counts the commits whose connection was cut, by whether the
	// server had executed them (delivered) or never saw them (dropped).
	AcksLost map[string]int64 `json:"acks_lost,omitempty"`
	// ZombieCommitsRejected counts the commits that processes resumed from
	// a pause tried with the leases they held when frozen, and the fence
	// rejected.
	ZombieCommitsRejected int64 `json:"zombie_commits_rejected"`
	// ZombieOthersRejected counts their other operations on those leases
	// (a release, a renewal), rejected by the fence too.
	ZombieOthersRejected int64              `json:"zombie_others_rejected"`
	Recovered            bool               `json:"recovered"` // every live process cycled again after the last fault
	Audit                engine.AuditReport `json:"audit"`
	History              HistoryCheck       `json:"history"`
	Violations           []string           `json:"violations"`
}

// OK reports whether the campaign found no violation.
func (s FaultSummary) OK() bool { return len(s.Violations) == 0 }

type child struct {
	name    string
	history string
	cmd     *exec.Cmd
	done    chan struct{}
	// zombie holds the leases (id, token) it held when frozen by a pause
	// and that were taken back from it before it was resumed: whatever it
	// does with them after is a zombie's, and the fence must refuse it.
	zombie map[[2]int64]bool
}

// Run runs the campaign and audits the pool after it.
func (c *Campaign) Run(ctx context.Context) (FaultSummary, error) {
	sum := FaultSummary{Faults: map[string]int{}, Violations: []string{}}
	for _, f := range c.Faults {
		if f == FaultRestart && c.Crash == nil {
			return sum, errors.New("the restart fault needs a server pooltop can restart: the throwaway one")
		}
		if f.NeedsProxy() && c.Proxy == nil {
			return sum, fmt.Errorf("the %s fault needs the workers behind a fault proxy", f)
		}
	}
	say := func(format string, args ...any) {
		if c.Progress != nil {
			c.Progress(fmt.Sprintf(format, args...))
		}
	}
	cfg := c.Scenario.Config(c.Seed)
	eng := engine.New(c.Pool)
	hist := engine.NewHistory(nil) // the reaper's
	eng.Record(hist)
	dir, err := os.MkdirTemp("", "pooltop-history-")
	if err != nil {
		return sum, err
	}
	defer os.RemoveAll(dir)
	reaper, err := eng.NewReaper(cfg.reaperConfig())
	if err != nil {
		return sum, err
	}
	rctx, stopReaper := context.WithCancel(ctx)
	defer stopReaper()
	reaper.Start(rctx)
	defer reaper.Stop()

	var kids []*child
	n := 0
	spawn := func() error {
		n++
		k := &child{name: fmt.Sprintf("chaos-%d", n), done: make(chan struct{})}
		k.history = filepath.Join(dir, k.name+".ndjson")
		k.cmd = c.Spawn(k.name, k.history)
		if err := k.cmd.Start(); err != nil {
			return fmt.Errorf("start a worker process: %w", err)
		}
		go func() { _ = k.cmd.Wait(); close(k.done) }()
		kids = append(kids, k)
		return nil
	}
	defer func() { // whatever happens, no process is left behind, nor frozen
		for _, k := range kids {
			_ = k.cmd.Process.Signal(syscall.SIGCONT)
			_ = k.cmd.Process.Kill()
			<-k.done
		}
	}()
	for range c.Processes {
		if err := spawn(); err != nil {
			return sum, err
		}
	}
	sum.Processes = c.Processes
	rng := mrand.New(mrand.NewPCG(c.Seed, 7))
	start := time.Now()
	deadline := start.Add(c.Duration)
	turn := 0
	// Until the duration has passed and every kind was injected once (a
	// slow restart on a loaded machine must not crowd the others out).
	more := func() bool { return time.Now().Before(deadline) || turn < len(c.Faults) }
	for more() {
		wait := time.Duration((0.5 + rng.Float64()) * float64(c.Every))
		if turn >= len(c.Faults) {
			wait = min(wait, time.Until(deadline))
		}
		select {
		case <-ctx.Done():
			return sum, ctx.Err()
		case <-time.After(wait):
		}
		if !more() {
			break
		}
		// Each kind in turn, so that a short campaign has them all.
		f := c.Faults[turn%len(c.Faults)]
		turn++
		switch f {
		case FaultKill:
			live := liveKids(kids)
			if len(live) == 0 {
				continue
			}
			k := live[rng.IntN(len(live))]
			_ = k.cmd.Process.Signal(syscall.SIGKILL)
			<-k.done
			say("kill -9 %s (pid %d)", k.name, k.cmd.Process.Pid)
			if err := spawn(); err != nil {
				return sum, err
			}
			sum.Processes++
		case FaultTerminate:
			var cut int
			err := c.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE application_name = 'pooltop-work' AND random() < 0.5`).Scan(&cut)
			if err != nil {
				say("terminate: %v", err)
				continue
			}
			say("pg_terminate_backend of %d worker sessions", cut)
		case FaultRestart:
			t0 := time.Now()
			if err := c.Crash(ctx); err != nil {
				return sum, err
			}
			c.Pool.Reset() // the campaign's own connections died with the server
			down := time.Since(t0).Seconds()
			sum.DownS = max(sum.DownS, down)
			say("PostgreSQL immediate shutdown and restart (%.1fs)", down)
		case FaultLostAck:
			delivered := sum.Faults[string(f)]%2 == 0
			done := c.Proxy.CutNextCommit(delivered)
			select {
			case <-done:
				say("connection cut around a commit (executed by the server: %v)", delivered)
			case <-time.After(5 * time.Second):
				c.Proxy.CancelCut()
				say("lost-ack: no commit within 5s")
				continue
			case <-ctx.Done():
				return sum, ctx.Err()
			}
		case FaultPartition:
			d := cfg.TTL + time.Second
			c.Proxy.Partition(d)
			say("network partition for %v (the lease is %v)", d, cfg.TTL)
		case FaultPause:
			live := liveKids(kids)
			if len(live) == 0 {
				continue
			}
			k := live[rng.IntN(len(live))]
			held, d, err := c.pause(ctx, k, cfg)
			if err != nil {
				return sum, err
			}
			say("SIGSTOP %s holding %d leases, SIGCONT %.1fs later (the lease is %v)", k.name, held, d.Seconds(), cfg.TTL)
		}
		sum.Faults[string(f)]++
	}

	// Every process still alive must cycle again after the last fault.
	live := liveKids(kids)
	cycles := func() (map[string]int64, error) {
		rows, err := c.Pool.Query(ctx, `SELECT name, cycles FROM pooltop_worker WHERE stopped_at IS NULL`)
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		m := map[string]int64{}
		for rows.Next() {
			var name string
			var n int64
			if err := rows.Scan(&name, &n); err != nil {
				return nil, err
			}
			m[name] = n
		}
		return m, rows.Err()
	}
	before, err := cycles()
	if err != nil {
		return sum, fmt.Errorf("read the fleet: %w", err)
	}
	sum.Recovered = waitFor(ctx, 30*time.Second, func() bool {
		now, err := cycles()
		if err != nil {
			return false
		}
		for _, k := range live {
			if now[k.name] <= before[k.name] {
				return false
			}
		}
		return true
	}) == nil
	if !sum.Recovered {
		sum.Violations = append(sum.Violations, "a worker process did not cycle again within 30s of the last fault")
	}
	// Drain the fleet, let the reaper bring back what the killed held.
	say("draining %d processes", len(live))
	for _, k := range live {
		_ = k.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, k := range live {
		select {
		case <-k.done:
			if code := k.cmd.ProcessState.ExitCode(); code != 0 {
				sum.Violations = append(sum.Violations, fmt.Sprintf("%s exited %d after SIGTERM", k.name, code))
			}
		case <-time.After(30 * time.Second):
			sum.Violations = append(sum.Violations, fmt.Sprintf("%s did not drain within 30s of SIGTERM", k.name))
		}
	}
	catchUp := cfg.TTL + 2*cfg.ReaperInterval + cfg.ReaperGrace
	select {
	case <-ctx.Done():
		return sum, ctx.Err()
	case <-time.After(catchUp):
	}
	if _, err := reaper.RunOnce(ctx); err != nil {
		return sum, fmt.Errorf("reap after the campaign: %w", err)
	}
	reaper.Stop()
	audit, err := eng.Audit(ctx, 0)
	if err != nil {
		return sum, fmt.Errorf("audit: %w", err)
	}
	rs := reaper.Stats()
	if c.Proxy != nil {
		sum.AcksLost = map[string]int64{"delivered": c.Proxy.CutDelivered.Load(), "dropped": c.Proxy.CutDropped.Load()}
	}
	sum.DurationS = time.Since(start).Seconds()
	sum.Audit, sum.Committed, sum.Reclaimed, sum.MaxReclaimLagMS = audit, audit.Effects, rs.Reclaimed, ms(rs.MaxLag)
	// As for Chaos: the gap between two reap statements that succeeded
	// also holds the time the server was away.
	sum.ReclaimBoundMS, sum.ReaperHeld = ms(reaper.LagBound()), rs.Held // see Summary.ReclaimBoundMS
	for _, f := range audit.Findings {
		sum.Violations = append(sum.Violations, f.Text)
	}
	// The history of every process, and of the reaper, against the model.
	eng.Record(nil)
	ops := hist.Ops()
	for _, k := range kids {
		h, err := ReadHistoryFile(k.history)
		if errors.Is(err, os.ErrNotExist) {
			continue // killed before it recorded anything
		}
		if err != nil {
			return sum, fmt.Errorf("read the history of %s: %w", k.name, err)
		}
		for _, op := range h {
			if !k.zombie[[2]int64{op.ID, op.Token}] || op.Kind == "acquire" || op.Kind == "reap" {
				continue
			}
			switch {
			case op.Outcome == engine.OutcomeRejected && op.Kind == "commit":
				sum.ZombieCommitsRejected++
			case op.Outcome == engine.OutcomeRejected:
				sum.ZombieOthersRejected++
			case op.Outcome == engine.OutcomeOK:
				sum.Violations = append(sum.Violations, fmt.Sprintf("%s, resumed from a pause, was allowed to %s id %d with the lease (token %d) taken back from it while it was frozen",
					k.name, op.Kind, op.ID, op.Token))
			}
		}
		ops = append(ops, h...)
	}
	if sum.History, err = CheckHistory(ctx, eng, ops); err != nil {
		return sum, err
	}
	if v := sum.History.violation(); v != "" {
		sum.Violations = append(sum.Violations, v)
	}
	if audit.Pending > 0 {
		sum.Violations = append(sum.Violations, fmt.Sprintf("%d ids still PENDING after the drain and the reaper: lost", audit.Pending))
	}
	if rs.Reclaimed > 0 && sum.MaxReclaimLagMS > sum.ReclaimBoundMS {
		sum.Violations = append(sum.Violations, fmt.Sprintf("a lease waited %.0f ms past expiry for the reaper (bound %.0f ms)", sum.MaxReclaimLagMS, sum.ReclaimBoundMS))
	}
	sort.Strings(sum.Violations)
	return sum, nil
}

// pause freezes k with SIGSTOP once it holds leases (or after 3 s), keeps
// it frozen until every lease it held has been taken back from it (reaped,
// its token raised) or three leases' time has passed, and resumes it with
// SIGCONT. It returns how many leases k held and how long it was frozen.
func (c *Campaign) pause(ctx context.Context, k *child, cfg Config) (int, time.Duration, error) {
	type lease struct{ id, token int64 }
	var held []lease
	read := func() error {
		held = held[:0]
		rows, err := c.Pool.Query(ctx, `
SELECT r.id, r.lease_token FROM resource_pool r, pooltop_worker w
WHERE w.name = $1 AND r.status = 'PENDING' AND r.holder LIKE '%-' || w.run_id AND r.leased_until > clock_timestamp()`, k.name)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var l lease
			if err := rows.Scan(&l.id, &l.token); err != nil {
				return err
			}
			held = append(held, l)
		}
		return rows.Err()
	}
	// A statement the process sent just before the signal still runs on
	// the server (a commit lands, a claim takes ids): settle waits until the
	// work processes' statements running at the stop have ended.
	type stmt struct {
		pid   int32
		start time.Time
	}
	settle := func() {
		var running []stmt
		rows, err := c.Pool.Query(ctx, `SELECT pid, query_start FROM pg_stat_activity WHERE application_name = 'pooltop-work' AND state = 'active'`)
		if err == nil {
			running, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (stmt, error) {
				var s stmt
				return s, r.Scan(&s.pid, &s.start)
			})
		}
		if err != nil || len(running) == 0 {
			return
		}
		pids := make([]int32, len(running))
		starts := make([]time.Time, len(running))
		for i, s := range running {
			pids[i], starts[i] = s.pid, s.start
		}
		_ = waitFor(ctx, 5*time.Second, func() bool {
			var still int
			err := c.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity a JOIN unnest($1::int[], $2::timestamptz[]) AS t(pid, start)
ON a.pid = t.pid AND a.query_start = t.start AND a.state = 'active'`, pids, starts).Scan(&still)
			return err == nil && still == 0
		})
	}
	// Frozen with no lease left (it was committing them), it would wake
	// with nothing to be fenced: resume it and try again, a few times.
	var t0 time.Time
	for attempt := 0; ; attempt++ {
		_ = waitFor(ctx, 3*time.Second, func() bool { return read() == nil && len(held) > 0 })
		if err := k.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			return 0, 0, nil // it has just exited: nothing to pause
		}
		t0 = time.Now()
		settle()
		// Read again, frozen: what it holds now is what it wakes up
		// believing it still holds.
		if err := read(); err != nil {
			_ = k.cmd.Process.Signal(syscall.SIGCONT)
			return 0, 0, fmt.Errorf("pause: read the leases of %s: %w", k.name, err)
		}
		if len(held) > 0 || attempt == 4 {
			break
		}
		if err := k.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			return 0, 0, nil
		}
	}
	ids := make([]int64, len(held))
	tokens := make([]int64, len(held))
	for i, l := range held {
		ids[i], tokens[i] = l.id, l.token
	}
	_ = waitFor(ctx, 3*cfg.TTL+2*cfg.ReaperInterval+cfg.ReaperGrace+time.Second, func() bool {
		still, err := engine.New(c.Pool).StillHeld(ctx, ids, tokens)
		return err == nil && len(still) == 0 && time.Since(t0) > cfg.TTL
	})
	// The leases taken back while it was frozen (their token raised by the
	// reaper; not those its last commit, landing after the stop, consumed)
	// are a zombie's from now on.
	var zombie [][2]int64
	rows, err := c.Pool.Query(ctx, `SELECT t.id, t.token FROM unnest($1::bigint[], $2::bigint[]) AS t(id, token)
JOIN resource_pool r ON r.id = t.id AND r.lease_token > t.token`, ids, tokens)
	if err == nil {
		zombie, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]int64, error) {
			var z [2]int64
			return z, r.Scan(&z[0], &z[1])
		})
	}
	if err != nil {
		_ = k.cmd.Process.Signal(syscall.SIGCONT)
		return 0, 0, fmt.Errorf("pause: read the leases taken back from %s: %w", k.name, err)
	}
	if k.zombie == nil {
		k.zombie = map[[2]int64]bool{}
	}
	for _, z := range zombie {
		k.zombie[z] = true
	}
	var from int64
	if fi, err := os.Stat(k.history); err == nil {
		from = fi.Size()
	}
	if err := k.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return len(held), time.Since(t0), fmt.Errorf("pause: SIGCONT %s: %w", k.name, err)
	}
	d := time.Since(t0)
	// The campaign goes on once the zombie has answered for every such
	// lease (committed, released or renewed it, and been told no), so that
	// the next fault or the drain does not overtake what it does on waking.
	_ = waitFor(ctx, 30*time.Second, func() bool { return answeredAll(k.history, from, zombie) })
	return len(held), d, nil
}

// answeredAll reports whether the history file, from offset from on, holds
// an answered operation on each of the leases.
func answeredAll(path string, from int64, leases [][2]int64) bool {
	if len(leases) == 0 {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return false
	}
	ops, err := ReadHistory(f)
	if err != nil {
		return false
	}
	for _, l := range leases {
		if !slices.ContainsFunc(ops, func(op engine.HistoryOp) bool {
			return op.ID == l[0] && op.Token == l[1] && op.Outcome != "" && op.Kind != "acquire"
		}) {
			return false
		}
	}
	return true
}

// liveKids are the processes that have not exited.
func liveKids(kids []*child) []*child {
	var out []*child
	for _, k := range kids {
		select {
		case <-k.done:
		default:
			out = append(out, k)
		}
	}
	return out
}

// WorkEnv is the environment for a worker process: the caller's, without
// the variables that name a server.
func WorkEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "DATABASE_URL" || strings.HasPrefix(k, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
