package workload

import (
	"context"
	"errors"
	"fmt"
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
		nl, err := wk.w.eng.LeaseTransfer(ctx, &engine.LeaseTransferParams{ID: l.ID, Token: l.Token, Server: l.Server, To: to, TTL: cfg.TTL})
		switch {
		case engine.IsRejected(err):
			s.add(cLeaseLost, 1)
			continue
		case err != nil:
			s.fail(err)
			continue
		}
		s.add(cTransferred, 1)
		res, err := wk.commitOne(ctx, cfg, nl, to, fmt.Sprintf("%s-%d-%d-t", to, cycle, l.ID), false)
		wk.countCommit(err, res.PriorEffects)
		res, err = wk.commitOne(ctx, cfg, l, wk.name, fmt.Sprintf("%s-%d-%d", wk.name, cycle, l.ID), false)
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
func (wk *worker) commitOne(ctx context.Context, cfg *Config, l engine.Lease, holder, reqID string, pauseAfterCheck bool) (engine.CommitResult, error) {
	p := &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Server: l.Server, Holder: holder, RequestID: reqID, NoFence: !cfg.Fencing}
	if cfg.Fencing && cfg.FenceInApp {
		ok, err := wk.w.eng.LeaseCheck(ctx, &engine.LeaseCheckParams{ID: l.ID, Token: l.Token, Server: l.Server})
		if err != nil {
			return engine.CommitResult{}, err
		}
		if !ok {
			return engine.CommitResult{}, errAppFence
		}
		if pauseAfterCheck {
			wk.sleep(cfg.PauseLength) // checked, then frozen: it wakes believing the check still holds
		}
		p.NoFence = true // the statement itself carries no token
	}
	return wk.w.eng.LeaseCommit(ctx, p)
}
