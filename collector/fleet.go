package collector

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Process is one `pooltop work` process as the fleet table pooltop_worker
// shows it. Field names are part of the snapshot's JSON contract.
type Process struct {
	Name      string  `json:"name"`
	Host      string  `json:"host"`
	PID       int32   `json:"pid"`
	Workers   int32   `json:"workers"`
	CyclesPS  float64 `json:"cycles_per_s"` // from the cycles of its last two heartbeats seen by the collector
	Held      int32   `json:"held"`         // leases it held at its last heartbeat
	LastSeenS float64 `json:"last_seen_s"`  // since its last heartbeat, by the database clock
	Alive     bool    `json:"alive"`
	// State is "alive", "stopped" (it drained and released its leases) or
	// "gone" (it stopped heartbeating without draining: killed, or cut off;
	// the leases it held wait for the reaper).
	State string `json:"state"`
}

// Process states.
const (
	ProcessAlive   = "alive"
	ProcessStopped = "stopped"
	ProcessGone    = "gone"
)

// goneAfter is how many heartbeat intervals a process may miss before it is
// called gone.
const goneAfter = 3

// fleetReader reads pooltop_worker at every poll: one row per process, a
// small table (processes that stopped long ago are left out).
type fleetReader struct {
	last map[string]fleetSeen
}

// fleetSeen is a process's latest heartbeat the collector saw, and the
// cycle rate between it and the one before.
type fleetSeen struct {
	cycles int64
	at     time.Time // the database clock at the heartbeat
	rate   float64
}

type fleetQuery struct {
	got []Process
	raw map[string]fleetSeen
}

func (f *fleetReader) plan(table string) *fleetQuery {
	if table == "" {
		f.last = nil
		return nil
	}
	return &fleetQuery{got: []Process{}, raw: map[string]fleetSeen{}}
}

// sqlFleet lists the processes of the last hour that have not stopped, and
// those that stopped in the last five minutes, by name.
const sqlFleet = `
SELECT name, host, pid, workers, cycles, held, last_seen,
       extract(epoch FROM now() - last_seen)::float8, heartbeat_s, stopped_at IS NOT NULL
FROM %s
WHERE (stopped_at IS NULL AND last_seen > now() - interval '1 hour') OR stopped_at > now() - interval '5 minutes'
ORDER BY name LIMIT 500`

func (q *fleetQuery) queue(b *pgx.Batch, table string) {
	if q == nil {
		return
	}
	b.Queue(fmt.Sprintf(sqlFleet, table)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var p Process
			var cycles int64
			var seen time.Time
			var beat float64
			var stopped bool
			if err := rows.Scan(&p.Name, &p.Host, &p.PID, &p.Workers, &cycles, &p.Held, &seen, &p.LastSeenS, &beat, &stopped); err != nil {
				return fmt.Errorf("fleet: %w", err)
			}
			switch {
			case stopped:
				p.State = ProcessStopped
			case p.LastSeenS > goneAfter*beat:
				p.State = ProcessGone
			default:
				p.State, p.Alive = ProcessAlive, true
			}
			q.raw[p.Name] = fleetSeen{cycles: cycles, at: seen}
			q.got = append(q.got, p)
		}
		return rows.Err()
	})
}

// absorb returns the fleet with each live process's cycle rate, from its
// last two heartbeats (not two polls: a process beats once a second
// whatever the dashboard's interval).
func (f *fleetReader) absorb(q *fleetQuery) []Process {
	if q == nil {
		return nil
	}
	next := make(map[string]fleetSeen, len(q.got))
	for i := range q.got {
		p := &q.got[i]
		now := q.raw[p.Name]
		old, ok := f.last[p.Name]
		switch {
		case ok && old.at.Equal(now.at):
			now.rate = old.rate
		case ok && now.at.After(old.at) && now.cycles >= old.cycles:
			now.rate = float64(now.cycles-old.cycles) / now.at.Sub(old.at).Seconds()
		}
		if p.Alive {
			p.CyclesPS = now.rate
		}
		next[p.Name] = now
	}
	f.last = next
	return q.got
}
