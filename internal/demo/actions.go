package demo

import (
	"context"
	"fmt"
	"os"
	"os/user"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
)

// Actor carries out the dashboard's actions (tui.Actions) on a pool of its
// own, the one session in watch that may write: it exists only with
// --allow-actions (and in the demo, whose pool is pooltop's own). Each
// action is written to the event log.
type Actor struct {
	DB        *engine.Pool
	Engine    *engine.Engine
	Collector *collector.Collector
	// Table is the watched pool table (schema, name) the releases act on;
	// nil: resource_pool on db's search_path (the demo's own pool).
	Table pgx.Identifier
}

// WatchActor opens the actions' connection for the table watch watches
// (schema.table, as collector.ParseTable reads it): its releases act on that
// table, named and quoted in every statement, whatever its name.
func WatchActor(ctx context.Context, cfg collector.Config, from string, col *collector.Collector) (*Actor, error) {
	schema, table, err := collector.ParseTable(cfg.Table)
	if err != nil {
		return nil, err
	}
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: cfg.DSN, From: from, Schema: schema, AppName: "pooltop-actions", MaxConns: 1})
	if err != nil {
		return nil, err
	}
	return &Actor{DB: pool, Engine: engine.New(pool), Collector: col, Table: pgx.Identifier{schema, table}}, nil
}

// releaseColumns are the columns a release writes or reads: without one of
// them (lease_token above all: the fence that rejects the old holder's late
// commits) a release is not safe, and is refused.
var releaseColumns = []string{"status", "holder", "leased_until", "lease_token", "updated_at"}

// checkReleasable refuses, in one line, a release in a table that lacks a
// column the release needs.
func (a *Actor) checkReleasable(ctx context.Context) error {
	if a.Table == nil {
		return nil
	}
	var missing []string
	err := a.DB.QueryRow(ctx, `
SELECT coalesce(array_agg(c ORDER BY o), '{}') FROM unnest($2::text[]) WITH ORDINALITY AS w(c, o)
WHERE NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = $1::regclass AND attname = w.c AND attnum > 0 AND NOT attisdropped)`,
		a.Table.Sanitize(), releaseColumns).Scan(&missing)
	if err != nil {
		return fmt.Errorf("release in %s: read its columns: %w", a.Table.Sanitize(), err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("release in %s refused: it has no %s column, and a release must free the row and raise its lease_token so the old holder's late commits are rejected: pooltop migrate --allow-writes adds the lease columns to a pooltop pool; free these rows by hand otherwise",
			a.Table.Sanitize(), strings.Join(missing, ", "))
	}
	return nil
}

// actionTimeout bounds one action's statement.
const actionTimeout = 10 * time.Second

func (a *Actor) signal(fn, verb string, pid int32) error {
	ctx, cancel := context.WithTimeout(context.Background(), actionTimeout)
	defer cancel()
	var ok bool
	if err := a.DB.QueryRow(ctx, "SELECT "+fn+"($1)", pid).Scan(&ok); err != nil {
		return fmt.Errorf("%s backend %d: %w", verb, pid, err)
	}
	if !ok {
		return fmt.Errorf("%s backend %d: it is gone, or this role may not signal it (it needs pg_signal_backend or to be the same role)", verb, pid)
	}
	a.Collector.Note(collector.EventAction, fmt.Sprintf("%s backend %d (from the dashboard, by %s)", verb, pid, who()))
	return nil
}

// Cancel cancels backend pid's running query.
func (a *Actor) Cancel(pid int32) error {
	return a.signal("pg_cancel_backend", "cancelled the query of", pid)
}

// Terminate ends backend pid's session.
func (a *Actor) Terminate(pid int32) error {
	return a.signal("pg_terminate_backend", "terminated", pid)
}

// ReleaseExpired frees a holder's expired leases, fenced.
func (a *Actor) ReleaseExpired(holder string) (int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.checkReleasable(ctx); err != nil {
		return 0, err
	}
	res, err := a.Engine.ReleaseHolder(ctx, engine.ReleaseHolderParams{Holder: holder, Expired: true, Table: a.Table})
	if err != nil {
		return res.Released, err
	}
	a.Collector.Note(collector.EventAction, fmt.Sprintf("released %d expired leases of %s, tokens raised (from the dashboard, by %s)", res.Released, holder, who()))
	return res.Released, nil
}

// who names the person acting from the dashboard, for the event log and
// the postmortem: the operating system's user and host.
func who() string {
	name := "someone"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	return name
}
