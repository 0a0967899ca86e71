package collector

import (
	"fmt"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
)

// Process is one `pooltop work` process as the fleet table pooltop_worker
// shows it. Field names are part of the snapshot's JSON contract.
type Process struct {
	Name     string  `json:"name"`
	Host     string  `json:"host"`
	PID      int32   `json:"pid"`
	Workers  int32   `json:"workers"`
	CyclesPS float64 `json:"cycles_per_s"` // from the cycles of its last two heartbeats seen by the collector
	// Held is the leases it holds: for a live or stopped process, as its
	// last heartbeat said; for a gone one, counted in the pool's PENDING rows
	// under its holder names (HeldCounted), falling as the reaper reclaims
	// them. The count reads the first holdersRows PENDING rows in lease
	// order, where a dead process's leases are; HeldAtLeast says the sample
	// was full and it may hold more.
	Held        int32   `json:"held"`
	HeldCounted bool    `json:"held_counted,omitempty"`
	HeldAtLeast bool    `json:"held_at_least,omitempty"`
	LastSeenS   float64 `json:"last_seen_s"` // since its last heartbeat, by the database clock
	Alive       bool    `json:"alive"`
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
	// gone is the leases still held by each gone process, by run id, as
	// last counted in the pool.
	gone map[string]*goneCount
}

// goneCount is the last count of a gone process's leases. It is counted at
// every poll while it changes (the reaper is taking them back), then every
// holdersEvery polls: a process that is gone takes no new lease, so a count
// that stands still stays true until the reaper runs.
type goneCount struct {
	held    int32
	atLeast bool
	counted bool
	changed bool // the last count differed from the one before
	polls   int  // polls since the last count
}

// fleetSeen is a process's latest heartbeat the collector saw, and the
// cycle rate between it and the one before.
type fleetSeen struct {
	cycles int64
	at     time.Time // the database clock at the heartbeat
	rate   float64
}

type fleetQuery struct {
	got   []Process
	raw   map[string]fleetSeen
	runs  map[string]string // name → run id
	count []string          // the run ids of the gone processes counted this poll
	held  map[string]int32
	read  int64
}

// plan reads the fleet table, and counts the leases of the gone processes
// due (countable: the pool has the PENDING index and a holder column).
func (f *fleetReader) plan(table string, countable bool) *fleetQuery {
	if table == "" {
		f.last, f.gone = nil, nil
		return nil
	}
	q := &fleetQuery{got: []Process{}, raw: map[string]fleetSeen{}, runs: map[string]string{}, held: map[string]int32{}}
	if !countable {
		return q
	}
	for run, g := range f.gone {
		g.polls++
		settled := g.counted && !g.changed && g.held == 0 && !g.atLeast // a gone process takes no new lease
		if !settled && (!g.counted || g.changed || g.polls >= holdersEvery) {
			q.count = append(q.count, run)
		}
	}
	sort.Strings(q.count)
	return q
}

// sqlFleet lists the processes of the last hour that have not stopped, and
// those that stopped in the last five minutes, by name.
const sqlFleet = `
SELECT name, host, pid, run_id, workers, cycles, held, last_seen,
       extract(epoch FROM now() - last_seen)::float8, heartbeat_s, stopped_at IS NOT NULL
FROM %s
WHERE (stopped_at IS NULL AND last_seen > now() - interval '1 hour') OR stopped_at > now() - interval '5 minutes'
ORDER BY name LIMIT 500`

// sqlGoneHeld counts, for each run id in $1, the PENDING rows held under
// its holder names (w<n>-<run id>; run ids are hex) among the first %[2]d
// in lease order: the rows a process that stopped renewing holds are the
// earliest to expire. The walk is the PENDING index's, bounded like the
// holders panel.
const sqlGoneHeld = `
WITH p AS (SELECT holder FROM %[1]s WHERE status = 'PENDING' ORDER BY leased_until LIMIT %[2]d)
SELECT r, coalesce(c.n, 0)::int, (SELECT count(*) FROM p)
FROM unnest($1::text[]) AS r
LEFT JOIN (SELECT substr(holder, strpos(holder, '-') + 1) AS run, count(*) AS n FROM p GROUP BY 1) AS c ON c.run = r`

func (q *fleetQuery) queue(b *pgx.Batch, table, pool string) {
	if q == nil {
		return
	}
	if len(q.count) > 0 {
		b.Queue(fmt.Sprintf(sqlGoneHeld, pool, holdersRows), q.count).Query(func(rows pgx.Rows) error {
			for rows.Next() {
				var run string
				var n int32
				if err := rows.Scan(&run, &n, &q.read); err != nil {
					return fmt.Errorf("fleet: leases of gone processes: %w", err)
				}
				q.held[run] = n
			}
			return rows.Err()
		})
	}
	b.Queue(fmt.Sprintf(sqlFleet, table)).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var p Process
			var run string
			var cycles int64
			var seen time.Time
			var beat float64
			var stopped bool
			if err := rows.Scan(&p.Name, &p.Host, &p.PID, &run, &p.Workers, &cycles, &p.Held, &seen, &p.LastSeenS, &beat, &stopped); err != nil {
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
			q.runs[p.Name] = run
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
	if f.gone == nil {
		f.gone = map[string]*goneCount{}
	}
	for run, n := range q.held {
		g := f.gone[run]
		if g == nil {
			g = &goneCount{}
		}
		g.changed = !g.counted || g.held != n
		g.held, g.atLeast, g.counted, g.polls = n, q.read >= holdersRows, true, 0
		f.gone[run] = g
	}
	gone := make(map[string]*goneCount) // kept for the processes still gone
	for i := range q.got {
		p := &q.got[i]
		if p.State == ProcessGone {
			run := q.runs[p.Name]
			g := f.gone[run]
			if g == nil {
				g = &goneCount{}
			}
			gone[run] = g
			if g.counted {
				p.Held, p.HeldCounted, p.HeldAtLeast = g.held, true, g.atLeast
			}
		}
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
	f.last, f.gone = next, gone
	return q.got
}
