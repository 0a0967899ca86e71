package workload

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// The worker's steps for the stories of a lease's edges: a clock that runs
// behind, a lease handed over mid-task, the fence checked in the
// application; the lost answer of a commit is in commit.

// byLocalClock is the worker judging its leases by its own clock, which
// runs ClockSkew behind the database's: a lease its clock says has run out
// it gives back; the others it commits, and those the database already
// considers expired are work done past the expiry (the fence rejects them).
func (wk *worker) byLocalClock(ctx context.Context, cfg *Config, leases []engine.Lease) []engine.Lease {
	now := time.Now()
	local := now.Add(-cfg.ClockSkew)
	kept := leases[:0]
	var expired []engine.Lease
	for _, l := range leases {
		switch {
		case l.LeasedUntil == nil:
			kept = append(kept, l)
		case !local.Before(*l.LeasedUntil):
			expired = append(expired, l) // even the slow clock sees it: give it back
		default:
			if !now.Before(*l.LeasedUntil) {
				wk.shard.add(cPastExpiry, 1)
			}
			kept = append(kept, l)
		}
	}
	wk.release(ctx, expired)
	return kept
}

// peer names another worker of the fleet, to hand a lease to.
func (wk *worker) peer(cfg *Config) string {
	n := wk.rng.IntN(max(cfg.Workers, 2))
	if p := fmt.Sprintf("w%d-%s", n, wk.w.runID); p != wk.name {
		return p
	}
	return fmt.Sprintf("w%d-%s", n+1, wk.w.runID)
}

// transfer hands each lease to a peer mid-task: the token rises and the
// peer commits the effect under the new one. The old holder, unaware,
// finishes and commits late with the token it was given: the fence must
// reject it (with fencing off, it writes a second effect).
func (wk *worker) transfer(ctx context.Context, cfg *Config, leases []engine.Lease, cycle int) {
	s := wk.shard
	for _, l := range leases {
		to := wk.peer(cfg)
		nl, err := wk.w.eng.LeaseTransfer(ctx, &engine.LeaseTransferParams{ID: l.ID, Token: l.Token, To: to, TTL: cfg.TTL})
		switch {
		case engine.IsRejected(err):
			s.add(cLeaseLost, 1)
			continue
		case err != nil:
			s.fail(err)
			continue
		}
		s.add(cTransferred, 1)
		res, err := wk.commitOne(ctx, cfg, nl, to, fmt.Sprintf("%s-%d-%d-t", to, cycle, l.ID), noPause)
		wk.countCommit(err, res.PriorEffects)
		res, err = wk.commitOne(ctx, cfg, l, wk.name, fmt.Sprintf("%s-%d-%d", wk.name, cycle, l.ID), noPause)
		if rejected(err) {
			s.add(cOldHolder, 1)
		}
		wk.countCommit(err, res.PriorEffects)
	}
}

// errAppFence is the application's own token check refusing a commit.
var errAppFence = errors.New("the application's token check found the lease gone")

func rejected(err error) bool { return engine.IsRejected(err) || errors.Is(err, errAppFence) }

// commitOne commits one lease's effect as holder with request id reqID:
// fenced in the statement, or, with the fence in the application, after a
// check that its token is current, freezing between the check and the
// write when pauseAfterCheck; with fencing off, unchecked.
func (wk *worker) commitOne(ctx context.Context, cfg *Config, l engine.Lease, holder, reqID string, afterCheck pause) (engine.CommitResult, error) {
	p := &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: holder, RequestID: reqID, NoFence: !cfg.Fencing}
	if cfg.Fencing && cfg.FenceInApp {
		ok, err := wk.w.eng.LeaseCheck(ctx, &engine.LeaseCheckParams{ID: l.ID, Token: l.Token})
		if err != nil {
			return engine.CommitResult{}, err
		}
		if !ok {
			return engine.CommitResult{}, errAppFence
		}
		wk.freeze(ctx, cfg, []engine.Lease{l}, afterCheck) // checked, then frozen: it wakes believing the check still holds
		p.NoFence = true                                   // the statement itself carries no token
	}
	return wk.w.eng.LeaseCommit(ctx, p)
}

// stage makes the fault a scenario is about happen at once rather than by
// chance: the first claim after the fault knobs change (or the workload
// starts with a fault on) crashes, pauses, hands its lease over or loses
// its commit's answer, whichever of those faults is on, crash first. A
// staged pause lasts until another holder has committed the frozen
// worker's id, so the worker always wakes a zombie: the demo shows the
// failure within seconds, and a chaos run of a few seconds shows its
// story on a machine of any speed.
type stage struct {
	// armed is the configuration whose fault is staged: only a claim made
	// under it takes the stage, so that the fault is the one its knobs say.
	armed   atomic.Pointer[Config]
	playing atomic.Int32 // staged faults taken and not yet played out
}

// faultKnobs are the knobs whose change stages a fault again.
type faultKnobs struct {
	crash, pause, transfer, ackLoss  float64
	pauseLength                      time.Duration
	lease, fencing, inApp, stableIDs bool
}

func (c Config) faultKnobs() faultKnobs {
	return faultKnobs{c.CrashRate, c.PauseRate, c.TransferRate, c.AckLoss, c.PauseLength, c.Lease, c.Fencing, c.FenceInApp, c.StableRequestID}
}

// arm stages a fault when the knobs of a fault changed from before to now
// and one of its rates is on.
func (st *stage) arm(before Config, now *Config) {
	if before.faultKnobs() == now.faultKnobs() {
		return
	}
	if now.CrashRate > 0 || now.PauseRate > 0 || now.TransferRate > 0 || now.AckLoss > 0 {
		st.armed.Store(now)
	} else {
		st.armed.Store(nil)
	}
}

// take reports whether this claim, made under cfg, is the staged one;
// played must follow.
func (st *stage) take(cfg *Config) bool {
	if cfg == nil || !st.armed.CompareAndSwap(cfg, nil) {
		return false
	}
	st.playing.Add(1)
	return true
}

func (st *stage) played() { st.playing.Add(-1) }

// Staged reports whether the fault staged by the last change of the fault
// knobs has played out (or none was staged): the worker that took it has
// crashed or finished its cycle.
func (w *Workload) Staged() bool { return w.stage.armed.Load() == nil && w.stage.playing.Load() == 0 }

// pause is how a worker freezes: not, for PauseLength, or for PauseLength
// and then until another holder has committed its id (LeaseSuperseded).
type pause int

const (
	noPause pause = iota
	pauseFor
	pauseTillSuperseded
)

// maxStagedPause bounds a staged pause whose id nobody commits (the reaper
// off, the workers stopped).
const maxStagedPause = time.Minute

// freeze is a frozen worker: no renewal, no commit, nothing, as p says. It
// stops early when the worker is told to stop.
func (wk *worker) freeze(ctx context.Context, cfg *Config, leases []engine.Lease, p pause) {
	if p == noPause || !wk.sleep(cfg.PauseLength) || p != pauseTillSuperseded || len(leases) == 0 {
		return
	}
	l := leases[0]
	deadline := time.Now().Add(maxStagedPause)
	for time.Now().Before(deadline) {
		done, err := wk.w.eng.LeaseSuperseded(ctx, &engine.LeaseCheckParams{ID: l.ID, Token: l.Token})
		if err != nil {
			wk.shard.fail(err)
		}
		if done || !wk.sleep(25*time.Millisecond) {
			return
		}
	}
}
