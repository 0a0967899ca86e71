package collector

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
	sessions, err := c.citusSessions(ctx)
	if err != nil {
		sessions = nil // a node down fails the cluster-wide view: the rows say which
	}
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
			if ns, ok := sessions[id]; ok {
				s.Connections, s.MaxConnections = ns.sessions, ns.max
			}
			v.Snapshot = &s
		}
		views = append(views, v)
	}
	s := MergeServers(start, views)
	if ns, ok := sessions[coordinatorNode]; ok { // the coordinator's sessions, in the whole's
		s.Connections += ns.sessions
		s.MaxConnections += ns.max
	}
	if sessions == nil {
		s.Limits = append(s.Limits, "Citus: sessions not read (citus_stat_activity needs every node)")
	}
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
	// answered, less the rows added meanwhile (a seed is no burn).
	if allAnswered {
		if prev := c.citusPrev; prev != nil {
			s.Pool.unusedDelta = (s.Pool.Unused - prev.Unused) - (s.Pool.Total - prev.Total)
			s.Pool.haveDelta = true
		}
		c.citusPrev = &Pool{Unused: s.Pool.Unused, Total: s.Pool.Total}
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

// coordinatorNode is the key of the coordinator's sessions in citusSessions.
const coordinatorNode = -1

// nodeSessions are a node's client sessions and its max_connections.
type nodeSessions struct{ sessions, max int }

// citusSessions reads each node's sessions of the database from
// citus_stat_activity and its max_connections, by node id (the
// coordinator's under coordinatorNode).
func (c *Collector) citusSessions(ctx context.Context) (map[int]nodeSessions, error) {
	rows, err := c.pool.Query(ctx, `
SELECT CASE WHEN n.groupid = 0 THEN -1 ELSE n.nodeid END, coalesce(a.sessions, 0)::int, coalesce(w.result, current_setting('max_connections'))::int
FROM pg_dist_node AS n
LEFT JOIN (SELECT nodeid, count(*) AS sessions FROM citus_stat_activity WHERE backend_type = 'client backend' AND datname = current_database() GROUP BY 1) AS a ON a.nodeid = n.nodeid
LEFT JOIN run_command_on_workers($$SELECT current_setting('max_connections')$$) AS w ON w.nodename = n.nodename AND w.nodeport = n.nodeport AND w.success
WHERE n.noderole = 'primary' AND n.isactive`)
	if err != nil {
		return nil, err
	}
	out := map[int]nodeSessions{}
	var id int
	var ns nodeSessions
	_, err = pgx.ForEachRow(rows, []any{&id, &ns.sessions, &ns.max}, func() error { out[id] = ns; return nil })
	return out, err
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

// citusRequestKey is the columns of the ledger's unique key on requests
// that count as one on Citus (where a unique key holds the distribution
// column: request ids are unique per shard, and a commit is on its id's
// shard), sorted; none elsewhere.
func citusRequestKey(citus bool) []string {
	if citus {
		return []string{"request_id", "shard"}
	}
	return []string{"request_id"}
}

// citusPendingFigures are the doctor's PENDING figures on a Citus pool:
// the counts of s, a poll (which counts every shard), and the longest
// lease ahead, read from the PENDING index of every shard.
func (c *Collector) citusPendingFigures(ctx context.Context, s Snapshot) (doctorFigures, error) {
	f := doctorFigures{pending: s.Pool.Pending, expiredOld: s.Pool.ExpiredOld, sample: 1}
	if s.Pool.NoLease != nil {
		f.unleased = *s.Pool.NoLease
	}
	err := c.pool.QueryRow(ctx, `SELECT extract(epoch FROM max(leased_until) - now())::float8 FROM `+c.t.qualified+
		` WHERE status = 'PENDING' AND isfinite(leased_until)`).Scan(&f.longest)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && strings.HasPrefix(pgErr.Code, "08") {
		return f, nil // a node does not answer (citus_nodes says so): the longest lease is not known
	}
	return f, err
}

// doctorCitus checks what a pool on Citus needs: every node answering, the
// shards spread evenly over the nodes, the lease operations delegated to
// the nodes, and the settings that decide whether a write over several
// nodes can commit and be recovered.
func (c *Collector) doctorCitus(ctx context.Context, s Snapshot, add func(check, status, evidence, remedy string)) error {
	var down []string
	for _, v := range s.Servers {
		if !v.Reachable {
			down = append(down, fmt.Sprintf("%s (%s): %s", v.Server, v.Addr, v.Error))
		}
	}
	if len(down) > 0 {
		add("citus_nodes", CheckFail, "not answering: "+strings.Join(down, "; "),
			"start the node again; its shards' ids cannot be claimed, committed or reaped meanwhile (the others go on)")
	} else {
		add("citus_nodes", CheckOK, fmt.Sprintf("%d worker nodes answer", len(s.Servers)), "")
	}

	rows, err := c.pool.Query(ctx, `
SELECT n.nodename || ':' || n.nodeport, count(s.shardid)::int
FROM pg_dist_node AS n
LEFT JOIN pg_dist_placement AS pl ON pl.groupid = n.groupid
LEFT JOIN pg_dist_shard AS s ON s.shardid = pl.shardid AND s.logicalrelid = $1::regclass
WHERE n.noderole = 'primary' AND n.isactive AND n.shouldhaveshards
GROUP BY 1 ORDER BY 1`, c.t.qualified)
	if err != nil {
		return err
	}
	var spread []string
	least, most := -1, 0
	for rows.Next() {
		var node string
		var n int
		if err := rows.Scan(&node, &n); err != nil {
			rows.Close()
			return err
		}
		spread = append(spread, fmt.Sprintf("%s %d", node, n))
		if least < 0 || n < least {
			least = n
		}
		most = max(most, n)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if most > least+1 {
		add("citus_shard_balance", CheckWarn, "shards per node: "+strings.Join(spread, ", ")+": the nodes with more take more of the claims",
			"SELECT citus_rebalance_start(); then SELECT * FROM citus_rebalance_status()")
	} else {
		add("citus_shard_balance", CheckOK, "shards per node: "+strings.Join(spread, ", "), "")
	}

	var delegated int
	if err := c.pool.QueryRow(ctx, `
SELECT count(*)::int FROM pg_dist_object o JOIN pg_proc p ON o.classid = 'pg_proc'::regclass AND o.objid = p.oid
WHERE p.pronamespace = $1::regnamespace AND p.proname IN ('pooltop_claim', 'pooltop_commit', 'pooltop_renew', 'pooltop_release', 'pooltop_reap')
  AND o.distribution_argument_index IS NOT NULL AND o.force_delegation`, pgx.Identifier{c.t.schema}.Sanitize()).Scan(&delegated); err != nil {
		return err
	}
	if delegated < 5 {
		add("citus_delegation", CheckFail, fmt.Sprintf("%d of the 5 lease functions are delegated to the shards' nodes: the others run through the coordinator, with two-phase commits", delegated),
			"pooltop migrate (it creates and distributes them again)")
	} else {
		add("citus_delegation", CheckOK, "claim, commit, renew, release and reap run on the node of their shard, in one round trip", "")
	}

	var recoverEvery string
	var coordConns int
	if err := c.pool.QueryRow(ctx, `SELECT current_setting('citus.recover_2pc_interval'), current_setting('max_connections')::int`).Scan(&recoverEvery, &coordConns); err != nil {
		return err
	}
	rows, err = c.pool.Query(ctx, `SELECT nodename || ':' || nodeport, success, result FROM run_command_on_workers($$SELECT current_setting('max_prepared_transactions') || ',' || current_setting('max_connections')$$)`)
	if err != nil {
		return err
	}
	var settings []string
	var problems, remedies []string
	for rows.Next() {
		var node, result string
		var ok bool
		if err := rows.Scan(&node, &ok, &result); err != nil {
			rows.Close()
			return err
		}
		if !ok {
			continue // not answering: said above
		}
		prepared, conns, _ := strings.Cut(result, ",")
		settings = append(settings, fmt.Sprintf("%s max_prepared_transactions %s, max_connections %s", node, prepared, conns))
		if prepared == "0" {
			problems = append(problems, node+" has max_prepared_transactions 0: a write over several nodes (a seed, DDL) cannot commit")
			remedies = append(remedies, "set max_prepared_transactions (as max_connections) on "+node+" and restart it")
		}
		if n, err := strconv.Atoi(conns); err == nil && n < coordConns {
			problems = append(problems, fmt.Sprintf("%s accepts %d connections, fewer than the coordinator's %d: each coordinator session may open one to every node", node, n, coordConns))
			remedies = append(remedies, "raise max_connections on "+node+", or lower citus.max_shared_pool_size")
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if recoverEvery == "-1" {
		problems = append(problems, "citus.recover_2pc_interval is -1: the prepared transactions of an interrupted two-phase commit are never resolved")
		remedies = append(remedies, "ALTER SYSTEM RESET citus.recover_2pc_interval; SELECT pg_reload_conf()")
	}
	if len(problems) > 0 {
		add("citus_settings", CheckWarn, strings.Join(problems, "; "), strings.Join(remedies, "; "))
	} else {
		add("citus_settings", CheckOK, strings.Join(settings, "; "), "")
	}
	return nil
}
