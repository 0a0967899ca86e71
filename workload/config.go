// Package workload runs a fleet of simulated workers on the lease engine:
// each cycle claims ids, calls a simulated external service, renews while
// the task runs, and commits the effect through the fence, or releases on
// failure. Every knob can change while it runs, and faults (crashes, pauses,
// no lease, no fencing) can be injected so that each failure mode of a
// lease-based pool can be produced, measured and shown.
package workload

import (
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// Limits of the knobs.
const (
	MaxWorkers = 512
	MaxBatch   = 1000
)

// Config holds every knob. The zero value is not valid; start from Defaults.
type Config struct {
	Workers  int             `json:"workers"`  // simulated workers, 0..512
	Rate     float64         `json:"rate"`     // acquires per second across the fleet; 0 = unlimited
	Batch    int             `json:"batch"`    // ids per claim, 1..1000
	TTL      time.Duration   `json:"ttl"`      // lease length
	Task     time.Duration   `json:"task"`     // mean duration of the simulated external call (exponential)
	Renew    bool            `json:"renew"`    // renew leases while the task runs
	RenewAt  float64         `json:"renew_at"` // renew once this fraction of the TTL has passed, 0.1..0.9
	Strategy engine.Strategy `json:"strategy"` // how ids are claimed
	Lease    bool            `json:"lease"`    // false: claim with no expiry (leaks on crash)
	Fencing  bool            `json:"fencing"`  // false: commit without the token check
	// FenceInApp moves the fence into the application: the worker reads
	// whether its token is current, then writes without the token in the
	// statement. A pause between the check and the write lets a zombie
	// through. Only with Fencing on.
	FenceInApp bool `json:"fence_in_app"`
	// BatchCommit commits the whole batch in one fenced statement instead of
	// one statement per id.
	BatchCommit bool          `json:"batch_commit"`
	FailRate    float64       `json:"fail_rate"`    // chance a task fails and its ids are released
	CrashRate   float64       `json:"crash_rate"`   // chance per cycle that a worker dies holding its leases
	PauseRate   float64       `json:"pause_rate"`   // chance per cycle that a worker freezes before committing
	PauseLength time.Duration `json:"pause_length"` // how long a frozen worker sleeps
	// TransferRate is the chance per cycle that a worker hands its leases to
	// a peer mid-task (the token rises, the peer commits) and then, unaware,
	// commits late with the token it was given.
	TransferRate float64 `json:"transfer_rate"`
	// ClockSkew is how far the workers' local clock runs behind the
	// database's. When set, workers judge their leases by that clock: they
	// renew late and commit work they believe is still leased.
	ClockSkew time.Duration `json:"clock_skew"`
	// ShareHold: a report reads the ShareRows lowest free ids FOR SHARE
	// and keeps its transaction open this long, again and again (0: no
	// report). Claims pass over the rows it holds: starvation.
	ShareHold time.Duration `json:"share_hold"`
	// LockHeld is how long a Blocking claim keeps its row locks between
	// the SELECT … FOR UPDATE and the UPDATE (application code between
	// the two); the other strategies ignore it.
	LockHeld time.Duration `json:"lock_held"`
	// AckLoss is the chance that a commit's answer is lost: the effect is
	// written, the worker is told it failed and retries.
	AckLoss float64 `json:"ack_loss"`
	// StableRequestID makes a retried commit reuse its request id (the
	// idempotency key); false gives every attempt a fresh one.
	StableRequestID bool `json:"stable_request_id"`
	// Autovacuum false turns autovacuum off for the pool table while the
	// workload runs; the workload restores it when the knob returns or it
	// stops. Only on a pool pooltop made: the callers check.
	Autovacuum bool `json:"autovacuum"`

	Reaper         bool          `json:"reaper"` // run the reaper
	ReaperInterval time.Duration `json:"reaper_interval"`
	ReaperBatch    int           `json:"reaper_batch"`
	ReaperGrace    time.Duration `json:"reaper_grace"`

	Refill float64 `json:"refill"` // ids per second a producer adds to the pool; 0 = off
	// KeepUp makes the producer also add as many ids as the workers consume
	// (commit), as a producer sized for the load does: UNUSED then falls
	// only by what leaks or is held.
	KeepUp bool   `json:"keep_up"`
	Seed   uint64 `json:"seed"` // random seed: the same seed gives the same fault decisions per worker
}

// Defaults is a healthy fleet.
func Defaults() Config {
	return Config{
		Workers: 8, Batch: 1, TTL: 5 * time.Second, Task: 20 * time.Millisecond,
		Renew: true, RenewAt: 0.5, Strategy: engine.SkipLocked, Lease: true, Fencing: true,
		PauseLength: 8 * time.Second, StableRequestID: true, Autovacuum: true,
		Reaper: true, ReaperInterval: time.Second, ReaperBatch: 1000,
		Seed: 1,
	}
}

// Validate reports the first knob out of range, in words a user can act on.
func (c Config) Validate() error {
	rate := func(name string, v float64) error {
		if v < 0 || v > 1 || math.IsNaN(v) {
			return fmt.Errorf("%s %v: a probability between 0 and 1", name, v)
		}
		return nil
	}
	switch {
	case c.Workers < 0 || c.Workers > MaxWorkers:
		return fmt.Errorf("workers %d: between 0 and %d", c.Workers, MaxWorkers)
	case c.Rate < 0 || math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("rate %v: acquires per second, 0 for unlimited", c.Rate)
	case c.Batch < 1 || c.Batch > MaxBatch:
		return fmt.Errorf("batch %d: between 1 and %d", c.Batch, MaxBatch)
	case c.TTL < 10*time.Millisecond || c.TTL > time.Hour:
		return fmt.Errorf("ttl %v: between 10ms and 1h", c.TTL)
	case c.Task < 0 || c.Task > time.Hour:
		return fmt.Errorf("task %v: between 0 and 1h", c.Task)
	case c.RenewAt < 0.1 || c.RenewAt > 0.9:
		return fmt.Errorf("renew-at %v: between 0.1 and 0.9 of the TTL", c.RenewAt)
	case c.Strategy < engine.SkipLocked || c.Strategy > engine.Optimistic:
		return fmt.Errorf("strategy %d unknown", c.Strategy)
	case c.PauseLength < 0 || c.PauseLength > time.Hour:
		return fmt.Errorf("pause length %v: between 0 and 1h", c.PauseLength)
	case c.ReaperInterval < 10*time.Millisecond || c.ReaperInterval > time.Hour:
		return fmt.Errorf("reaper interval %v: between 10ms and 1h", c.ReaperInterval)
	case c.ReaperBatch < 1 || c.ReaperBatch > engine.MaxBatch:
		return fmt.Errorf("reaper batch %d: between 1 and %d", c.ReaperBatch, engine.MaxBatch)
	case c.ReaperGrace < 0 || c.ReaperGrace > time.Hour:
		return fmt.Errorf("reaper grace %v: between 0 and 1h", c.ReaperGrace)
	case c.ClockSkew < 0 || c.ClockSkew > time.Hour:
		return fmt.Errorf("clock skew %v: between 0 and 1h", c.ClockSkew)
	case c.ShareHold < 0 || c.ShareHold > time.Hour:
		return fmt.Errorf("share hold %v: between 0 and 1h", c.ShareHold)
	case c.LockHeld < 0 || c.LockHeld > time.Second:
		return fmt.Errorf("lock held %v: between 0 and 1s", c.LockHeld)
	case c.Refill < 0 || c.Refill > 1e6 || math.IsNaN(c.Refill):
		return fmt.Errorf("refill %v: ids per second between 0 and 1,000,000", c.Refill)
	}
	for _, r := range []struct {
		n string
		v float64
	}{{"fail rate", c.FailRate}, {"crash rate", c.CrashRate}, {"pause rate", c.PauseRate},
		{"transfer rate", c.TransferRate}, {"ack loss", c.AckLoss}} {
		if err := rate(r.n, r.v); err != nil {
			return err
		}
	}
	return nil
}

func (c Config) reaperConfig() engine.ReaperConfig {
	return engine.ReaperConfig{Interval: c.ReaperInterval, Batch: c.ReaperBatch, Grace: c.ReaperGrace}
}

// Changes lists the knobs that differ from before to c, in words for the
// event log: "workers 16 → 32", "fencing on → OFF".
func (c Config) Changes(before Config) []string {
	onOff := func(b bool) string {
		if b {
			return "on"
		}
		return "OFF"
	}
	pct := func(f float64) string { return strconv.FormatFloat(100*f, 'f', -1, 64) + "%" }
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	var out []string
	knob := func(name, was, now string) {
		if was != now {
			out = append(out, name+" "+was+" → "+now)
		}
	}
	knob("workers", strconv.Itoa(before.Workers), strconv.Itoa(c.Workers))
	knob("strategy", before.Strategy.String(), c.Strategy.String())
	knob("lease", onOff(before.Lease), onOff(c.Lease))
	knob("fencing", before.FenceMode(), c.FenceMode())
	knob("renewal", onOff(before.Renew), onOff(c.Renew))
	knob("reaper", onOff(before.Reaper), onOff(c.Reaper))
	knob("ttl", before.TTL.String(), c.TTL.String())
	knob("task", before.Task.String(), c.Task.String())
	knob("batch", strconv.Itoa(before.Batch), strconv.Itoa(c.Batch))
	knob("crash rate", pct(before.CrashRate), pct(c.CrashRate))
	knob("pause rate", pct(before.PauseRate), pct(c.PauseRate))
	knob("pause length", before.PauseLength.String(), c.PauseLength.String())
	knob("rate limit", num(before.Rate)+"/s", num(c.Rate)+"/s")
	knob("refill", num(before.Refill)+"/s", num(c.Refill)+"/s")
	knob("keep-up producer", onOff(before.KeepUp), onOff(c.KeepUp))
	knob("transfer rate", pct(before.TransferRate), pct(c.TransferRate))
	knob("clock skew", before.ClockSkew.String(), c.ClockSkew.String())
	knob("lock held", before.LockHeld.String(), c.LockHeld.String())
	knob("report FOR SHARE", holdText(before.ShareHold), holdText(c.ShareHold))
	knob("ack loss", pct(before.AckLoss), pct(c.AckLoss))
	knob("request ids", idMode(before.StableRequestID), idMode(c.StableRequestID))
	knob("autovacuum", onOff(before.Autovacuum), onOff(c.Autovacuum))
	return out
}

// FenceMode says where the fence is: "on" (in the statement that writes
// the effect), "in app" (checked first, then written without the token) or
// "OFF".
func (c Config) FenceMode() string {
	switch {
	case !c.Fencing:
		return "OFF"
	case c.FenceInApp:
		return "in app"
	}
	return "on"
}

// idMode names how a retried commit picks its request id.
func idMode(stable bool) string {
	if stable {
		return "stable"
	}
	return "FRESH"
}

// ShareRows is how many of the lowest free ids the report holds FOR SHARE.
const ShareRows = 20

// ShareHoldOn is the report's hold when a key turns it on.
const ShareHoldOn = 20 * time.Second

// holdText says whether the report runs, and how long it holds.
func holdText(d time.Duration) string {
	if d == 0 {
		return "off"
	}
	return d.String()
}
