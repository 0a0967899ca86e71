package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Process is one `pooltop work` process as it registers in pooltop_worker.
type Process struct {
	Name      string
	Host      string
	PID       int
	RunID     string // the suffix of its workers' holder names
	Workers   int
	Cycles    int64
	Committed int64
	Held      int           // leases its workers hold now
	Heartbeat time.Duration // how often it beats: readers call it gone after three missed beats
}

// ErrNameTaken is returned when another live process registered under the name.
var ErrNameTaken = errors.New("name taken")

// Register records p in pooltop_worker, or refuses with ErrNameTaken when a
// process of that name (another pid or host) beat within three of its
// heartbeats and has not stopped: two processes under one name would read as
// one. A name whose process stopped or went silent is taken over.
func (e *Engine) Register(ctx context.Context, p Process) error {
	var host string
	var pid int
	err := e.db.QueryRow(ctx, `
INSERT INTO pooltop_worker AS w (name, host, pid, run_id, workers, heartbeat_s)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (name) DO UPDATE SET host = excluded.host, pid = excluded.pid, run_id = excluded.run_id,
    workers = excluded.workers, cycles = 0, committed = 0, held = 0, heartbeat_s = excluded.heartbeat_s,
    started_at = now(), last_seen = now(), stopped_at = NULL
WHERE w.stopped_at IS NOT NULL OR w.last_seen < now() - 3 * w.heartbeat_s * interval '1 second'
   OR (w.host = excluded.host AND w.pid = excluded.pid)
RETURNING host, pid`, p.Name, p.Host, p.PID, p.RunID, p.Workers, p.Heartbeat.Seconds()).Scan(&host, &pid)
	if errors.Is(err, pgx.ErrNoRows) {
		_ = e.db.QueryRow(ctx, `SELECT host, pid FROM pooltop_worker WHERE name = $1`, p.Name).Scan(&host, &pid)
		return fmt.Errorf("%w: process %s (pid %d) on %s is running under the name %q: give this one another --name",
			ErrNameTaken, p.Name, pid, host, p.Name)
	}
	if err != nil {
		return wrap("register the process", err)
	}
	return nil
}

// Heartbeat records p's figures and the time; one small update.
func (e *Engine) Heartbeat(ctx context.Context, p Process) error {
	_, err := e.db.Exec(ctx, `
UPDATE pooltop_worker SET workers = $2, cycles = $3, committed = $4, held = $5, last_seen = now()
WHERE name = $1 AND run_id = $6`, p.Name, p.Workers, p.Cycles, p.Committed, p.Held, p.RunID)
	return wrap("heartbeat", err)
}

// Deregister marks p stopped: it drained and released its leases.
func (e *Engine) Deregister(ctx context.Context, p Process) error {
	_, err := e.db.Exec(ctx, `
UPDATE pooltop_worker SET workers = 0, cycles = $2, committed = $3, held = $4, last_seen = now(), stopped_at = now()
WHERE name = $1 AND run_id = $5`, p.Name, p.Cycles, p.Committed, p.Held, p.RunID)
	return wrap("deregister the process", err)
}

// wrap names op in err; a schema migrated before the fleet table existed is
// told how to get it.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%s: the schema has no pooltop_worker table (it was migrated by an older pooltop): run pooltop migrate", op)
	}
	return fmt.Errorf("%s: %w", op, err)
}
