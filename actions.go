package main

import (
	"context"
	"fmt"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
)

// actor carries out the dashboard's actions (tui.Actions) on a pool of its
// own, the one session in watch that may write: it exists only with
// --allow-actions (and in the demo, whose pool is pooltop's own). Each
// action is written to the event log.
type actor struct {
	db  *engine.Pool
	eng *engine.Engine
	col *collector.Collector
}

// actionTimeout bounds one action's statement.
const actionTimeout = 10 * time.Second

func (a *actor) signal(fn, verb string, pid int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), actionTimeout)
	defer cancel()
	var ok bool
	if err := a.db.QueryRow(ctx, "SELECT "+fn+"($1)", pid).Scan(&ok); err != nil {
		return fmt.Errorf("%s backend %d: %w", verb, pid, err)
	}
	if !ok {
		return fmt.Errorf("%s backend %d: it is gone, or this role may not signal it (it needs pg_signal_backend or to be the same role)", verb, pid)
	}
	a.col.Note(collector.EventAction, fmt.Sprintf("%s backend %d (from the dashboard)", verb, pid))
	return nil
}

// Cancel cancels backend pid's running query.
func (a *actor) Cancel(pid int32) error {
	return a.signal("pg_cancel_backend", "cancelled the query of", pid)
}

// Terminate ends backend pid's session.
func (a *actor) Terminate(pid int32) error {
	return a.signal("pg_terminate_backend", "terminated", pid)
}

// ReleaseExpired frees a holder's expired leases, fenced.
func (a *actor) ReleaseExpired(holder string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := a.eng.ReleaseHolder(ctx, engine.ReleaseHolderParams{Holder: holder, Expired: true})
	if err != nil {
		return res.Released, err
	}
	a.col.Note(collector.EventAction, fmt.Sprintf("released %d expired leases of %s, tokens raised (from the dashboard)", res.Released, holder))
	return res.Released, nil
}
