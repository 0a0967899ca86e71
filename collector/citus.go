package collector

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// A pool that Citus distributes is watched through its coordinator: each
// poll reads every shard on the node that holds it (run_command_on_shards,
// one command per shard, on their nodes at once), and sums the shards by
// node into a row per node (Snapshot.Servers, as a watch over several
// servers shows them) and the whole. A node that does not answer is shown
// as such, with an alert, while the others' figures go on; the lock waits
// are Citus's own view of the cluster (citus_lock_waits).

// citusShardFigures is the command run on every shard (%1$s, its name): its
// counts by state and its tuples, as one comma-separated line. $1 the
// expired threshold and $2 the stuck threshold, in microseconds, are
// written into the text (run_command_on_shards takes no parameters).
const citusShardFigures = `SELECT concat_ws(',',
    count(*) FILTER (WHERE status = 'UNUSED'),
    count(*) FILTER (WHERE status = 'PENDING'),
    count(*) FILTER (WHERE status = 'PENDING' AND leased_until < clock_timestamp()),
    count(*) FILTER (WHERE status = 'PENDING' AND leased_until < clock_timestamp() - %[2]d * interval '1 microsecond'),
    count(*) FILTER (WHERE status = 'PENDING' AND (leased_until < clock_timestamp() - %[3]d * interval '1 microsecond'
                                               OR (leased_until IS NULL AND updated_at < clock_timestamp() - %[3]d * interval '1 microsecond'))),
    count(*) FILTER (WHERE status = 'PENDING' AND leased_until IS NULL),
    count(*) FILTER (WHERE status = 'CONSUMED'),
    count(*),
    coalesce(extract(epoch FROM clock_timestamp() - min(CASE WHEN leased_until IS NULL THEN updated_at ELSE leased_until END)
                     FILTER (WHERE status = 'PENDING' AND (leased_until IS NULL OR leased_until < clock_timestamp()))), -1),
    pg_stat_get_dead_tuples('%[1]s'::regclass),
    pg_stat_get_live_tuples('%[1]s'::regclass))
FROM %[1]s`

// sqlCitusPoll runs the command on every shard of the pool ($1) and names
// the node of each; the nodes with no shard of the pool are listed too.
const sqlCitusPoll = `
SELECT n.nodeid, n.nodename || ':' || n.nodeport, r.success, coalesce(r.result, '')
FROM pg_dist_node AS n
LEFT JOIN pg_dist_placement AS pl ON pl.groupid = n.groupid
LEFT JOIN run_command_on_shards($1::regclass, $2) AS r ON r.shardid = pl.shardid
WHERE n.noderole = 'primary' AND n.isactive AND n.shouldhaveshards
  AND (r.shardid IS NOT NULL OR NOT EXISTS (SELECT FROM pg_dist_placement AS p JOIN pg_dist_shard AS s USING (shardid)
                                            WHERE p.groupid = n.groupid AND s.logicalrelid = $1::regclass))
ORDER BY n.nodeid`

// sqlCitusLockWaits is Citus's view of the cluster's lock waits: who waits
// on whom, on any node.
const sqlCitusLockWaits = `
SELECT waiting_gpid, blocking_gpid, coalesce(blocked_statement, ''), coalesce(current_statement_in_blocking_process, ''),
       coalesce(waiting_nodeid, 0), coalesce(blocking_nodeid, 0)
FROM citus_lock_waits`

// citusDistributed says whether Citus distributes the table of oid.
func (c *Collector) citusDistributed(ctx context.Context, oid uint32) (bool, error) {
	var ext bool
	if err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_extension WHERE extname = 'citus')`).Scan(&ext); err != nil || !ext {
		return false, err
	}
	var distributed bool
	err := c.pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_dist_partition WHERE logicalrelid = $1::oid::regclass)`, oid).Scan(&distributed)
	return distributed, err
}

// citusNode is one node's sums of its shards at a poll.
type citusNode struct {
	id       int
	addr     string
	shards   int
	failed   string // the first shard's failure, "" when all answered
	pool     Pool
	noLease  int64
	oldestS  float64 // -1: none
	dead     int64
	live     int64
	answered int
}

// pollCitus is Poll on a pool Citus distributes.
func (c *Collector) pollCitus(ctx context.Context) (Snapshot, error) {
	start := time.Now()
	gen := c.startPoll()
	cmd := fmt.Sprintf(citusShardFigures, "%1$s", c.cfg.Alerts.ExpiredAfter.Microseconds(), c.cfg.StuckAfter.Microseconds())
	rows, err := c.pool.Query(ctx, sqlCitusPoll, c.t.qualified, cmd)
	if err != nil {
		return Snapshot{}, fmt.Errorf("poll: %w", err)
	}
	nodes := map[int]*citusNode{}
	var order []int
	for rows.Next() {
		var id int
		var addr, result string
		var success *bool
		if err := rows.Scan(&id, &addr, &success, &result); err != nil {
			rows.Close()
			return Snapshot{}, fmt.Errorf("poll: %w", err)
		}
		n := nodes[id]
		if n == nil {
			n = &citusNode{id: id, addr: addr, oldestS: -1}
			nodes[id] = n
			order = append(order, id)
		}
		if success == nil {
			continue // a node that holds no shard of the pool
		}
		n.shards++
		if !*success {
			if n.failed == "" {
				n.failed = result
			}
			continue
		}
		if err := n.add(result); err != nil {
			rows.Close()
			return Snapshot{}, fmt.Errorf("poll: shard figures %q: %w", result, err)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return Snapshot{}, fmt.Errorf("poll: %w", err)
	}
	sort.Ints(order)
	views := make([]ServerView, 0, len(order))
	allAnswered := true
	for _, id := range order {
		n := nodes[id]
		v := ServerView{Server: "node " + strconv.Itoa(id), Addr: n.addr, Reachable: n.failed == ""}
		if !v.Reachable {
			v.Error = n.failed
			allAnswered = false
		} else {
			s := n.snapshot(start)
			v.Snapshot = &s
		}
		views = append(views, v)
	}
	s := MergeServers(start, views)
	s.Limits = append(s.Limits, fmt.Sprintf("Citus: counted by reading every shard of %s at each poll", c.t.qualified))
	if !c.t.monitor {
		s.Limits = append(s.Limits, "no pg_monitor: lock waits, queries and xmin of other roles' sessions are hidden")
	}
	counted := 1.0
	if !allAnswered {
		counted = 0
		s.Pool.Estimated = append(s.Pool.Estimated, "unused", "pending", "expired", "stuck", "consumed")
	}
	s.Pool.Counted = &counted
	// The burn: the fall of UNUSED since the last poll at which every node
	// answered.
	if allAnswered {
		if c.citusPrevUnused != nil {
			s.Pool.unusedDelta, s.Pool.haveDelta = s.Pool.Unused-*c.citusPrevUnused, true
		}
		u := s.Pool.Unused
		c.citusPrevUnused = &u
	}
	if err := c.citusLockWaits(ctx, &s, start); err != nil {
		s.Limits = append(s.Limits, "Citus lock waits not read: "+err.Error())
	}
	s.Events = nil
	c.citusEvents(&s)
	s.PollMS = float64(time.Since(start).Microseconds()) / 1000
	if c.cfg.Workload != nil {
		ws := c.cfg.Workload.Snapshot()
		s.Workload = &ws
	}
	c.record(&s, gen)
	c.polls++
	return s, nil
}

// add adds one shard's figures (citusShardFigures' line) to the node's.
func (n *citusNode) add(line string) error {
	f := strings.Split(line, ",")
	if len(f) != 11 {
		return fmt.Errorf("%d fields, want 11", len(f))
	}
	var v [11]float64
	for i, s := range f {
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return err
		}
		v[i] = x
	}
	p := &n.pool
	p.Unused += int64(v[0])
	p.Pending += int64(v[1])
	p.Expired += int64(v[2])
	p.ExpiredOld += int64(v[3])
	p.Stuck += int64(v[4])
	n.noLease += int64(v[5])
	p.Consumed += int64(v[6])
	p.Total += int64(v[7])
	if v[8] >= 0 && v[8] > n.oldestS {
		n.oldestS = v[8]
	}
	n.dead += int64(v[9])
	n.live += int64(v[10])
	n.answered++
	return nil
}

// snapshot is the node's row.
func (n *citusNode) snapshot(at time.Time) Snapshot {
	s := Snapshot{Time: at, Pool: n.pool, DeadTuples: n.dead, LiveTuples: n.live, Waiters: []Waiter{}, Blockers: []Blocker{}, Alerts: []Alert{}}
	s.Pool.Estimated = []string{}
	noLease := n.noLease
	s.Pool.NoLease = &noLease
	if n.oldestS >= 0 {
		o := n.oldestS
		s.Pool.OldestPendingS = &o
	}
	counted := 1.0
	s.Pool.Counted = &counted
	return s
}

// citusLockWaits reads the cluster's lock waits into s: each waiting
// statement and who blocks it, with the nodes they run on.
func (c *Collector) citusLockWaits(ctx context.Context, s *Snapshot, at time.Time) error {
	rows, err := c.pool.Query(ctx, sqlCitusLockWaits)
	if err != nil {
		return err
	}
	defer rows.Close()
	blockers := map[int64]bool{}
	for rows.Next() {
		var waiting, blocking int64
		var blocked, blockingQuery string
		var waitingNode, blockingNode int
		if err := rows.Scan(&waiting, &blocking, &blocked, &blockingQuery, &waitingNode, &blockingNode); err != nil {
			return err
		}
		s.LockWaiters++
		s.Waiters = append(s.Waiters, Waiter{PID: int32(waiting % 10_000_000_000), Query: oneLine(engine.MaskQuery(blocked)), BlockedBy: []int32{int32(blocking % 10_000_000_000)},
			Server: "node " + strconv.Itoa(waitingNode)})
		if !blockers[blocking] {
			blockers[blocking] = true
			s.Blockers = append(s.Blockers, Blocker{PID: int32(blocking % 10_000_000_000), Query: oneLine(engine.MaskQuery(blockingQuery)), Server: "node " + strconv.Itoa(blockingNode)})
		}
	}
	return rows.Err()
}

// citusEvents notes a node that stops or starts answering.
func (c *Collector) citusEvents(s *Snapshot) {
	if c.citusDown == nil {
		c.citusDown = map[string]bool{}
	}
	for _, v := range s.Servers {
		was := c.citusDown[v.Server]
		switch {
		case !v.Reachable && !was:
			c.citusDown[v.Server] = true
			c.Note(EventAlert, AlertServerUnreachable+": "+v.Server+" ("+v.Addr+") does not answer: "+v.Error)
		case v.Reachable && was:
			delete(c.citusDown, v.Server)
			c.Note(EventCleared, AlertServerUnreachable+": "+v.Server+" answers again")
		}
	}
}
