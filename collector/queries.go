package collector

import (
	"fmt"
	"strings"
)

// The collector's statements that differ by server version, each named and
// chosen by locksQuery from the server_version_num read once at start
// (pgcenter's way). The counting statements (sqlUnused, the PENDING
// statements in pending.go, the table scan in census.go) are the same on
// every version pooltop supports (12 and later), but for the TID range
// scan, which census picks.

// sqlLocks14 reads the pool's lock waits and who blocks them, from
// PostgreSQL 14 on: pg_locks tells since when a lock is waited for
// (waitstart).
var sqlLocks14 = fmt.Sprintf(sqlLocksTemplate, "waitstart", blockingPIDsWaiters, "waitstart")

// sqlLocks12 is sqlLocks14 for PostgreSQL 12 and 13, whose pg_locks has
// no waitstart: the wait is timed from the session's last state change.
var sqlLocks12 = fmt.Sprintf(sqlLocksTemplate, "NULL::timestamptz", blockingPIDsWaiters, "(SELECT a.state_change FROM a WHERE a.pid = ws.pid)")

// blockingPIDsWaiters is how many of the pool's lock waiters, the longest
// waiting first, are asked pg_blocking_pids: each call takes every
// lock-manager partition lock again, and an incident may have hundreds of
// waiters. The others' blockers are read from the same pass over pg_locks:
// the sessions holding a granted lock on what they wait for, in a mode that
// conflicts with theirs (the hard blockers; pg_blocking_pids also names
// the sessions queued ahead in a conflicting mode).
const blockingPIDsWaiters = 10

// locksQuery picks the lock statement for a server_version_num.
func locksQuery(version int) string {
	if version >= 140000 {
		return sqlLocks14
	}
	return sqlLocks12
}

// sqlServer reads the table statistics summed over the partitions, a
// running vacuum, the session holding back the xmin horizon, the
// connection count, the LWLock waits and whether a session of this
// database waits on a lock (then the poll reads the lock waits with
// sqlLocksTemplate): $1 the relations holding rows and statistics (the
// table or its partitions), $2 whether to name the worst partition, $3
// the names of the table and its partitions. It is the same on every
// version.
//
// The LWLock figures count the client backends (not the collector's own:
// its three sessions, or another watch's, share its application_name, and
// on a partitioned pool their statements take enough relation locks to
// queue on the lock manager among themselves) that wait on
// an LWLock (wait_event_type = 'LWLock': a page's buffer_content latch, the
// WAL insert locks, the lock manager's partitions…) at the moment of the
// poll, while running a statement that names the pool table or one of its
// partitions: the page-latch contention at the head of the claim index that
// hash partitioning spreads. It is a sample, not a total: an LWLock wait
// lasts microseconds, so a count above zero at a 1 s poll means sessions
// queue on latches often; the most frequent wait event is named.
// Statements that touch the pool through a function or a view are not
// counted (their text does not name it).
const sqlServer = `
WITH a AS MATERIALIZED (
    SELECT pid, backend_type, application_name, usename, state, backend_xmin, xact_start,
           wait_event_type, wait_event, state_change, query, datname
    FROM pg_stat_activity
)
SELECT st.live, st.dead, st.autovac, st.last, st.insdel,
       v.phase, v.heap_blks_total, v.heap_blks_scanned, v.heap_blks_vacuumed,
       x.pid, x.app, x.state, x.age, x.xact_s,
       (SELECT count(*) FROM a WHERE backend_type = 'client backend'),
       current_setting('max_connections')::int,
       EXISTS (SELECT 1 FROM a WHERE wait_event_type = 'Lock' AND datname = current_database()),
       w.o, w.live, w.dead,
       lw.n, lw.top
FROM (SELECT sum(pg_stat_get_live_tuples(o))::bigint AS live, sum(pg_stat_get_dead_tuples(o))::bigint AS dead,
             sum(pg_stat_get_autovacuum_count(o))::bigint AS autovac, max(pg_stat_get_last_autovacuum_time(o)) AS last,
             sum(pg_stat_get_tuples_inserted(o) - pg_stat_get_tuples_deleted(o))::bigint AS insdel
      FROM unnest($1::oid[]) AS o) AS st
LEFT JOIN (SELECT phase, heap_blks_total, heap_blks_scanned, heap_blks_vacuumed
           FROM pg_stat_progress_vacuum WHERE relid = ANY($1::oid[]) LIMIT 1) AS v ON true
LEFT JOIN (SELECT o, pg_stat_get_live_tuples(o) AS live, pg_stat_get_dead_tuples(o) AS dead FROM unnest($1::oid[]) AS o
           WHERE $2::boolean ORDER BY pg_stat_get_dead_tuples(o)::float8 / greatest(1, pg_stat_get_live_tuples(o) + pg_stat_get_dead_tuples(o)) DESC, o
           LIMIT 1) AS w ON true
LEFT JOIN (SELECT pid, coalesce(application_name, '') AS app, coalesce(state, '') AS state,
                  age(backend_xmin)::bigint AS age, extract(epoch FROM now() - xact_start)::float8 AS xact_s
           FROM a WHERE backend_xmin IS NOT NULL AND pid <> pg_backend_pid()
           ORDER BY age(backend_xmin) DESC LIMIT 1) AS x ON true
CROSS JOIN LATERAL (
    SELECT sum(e.n)::int AS n, (array_agg(e.wait_event ORDER BY e.n DESC, e.wait_event))[1] AS top
    FROM (SELECT a.wait_event, count(*) AS n FROM a
          WHERE a.wait_event_type = 'LWLock' AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()
            AND a.application_name IS DISTINCT FROM current_setting('application_name')
            AND EXISTS (SELECT 1 FROM unnest($3::text[]) AS t(name) WHERE strpos(a.query, t.name) > 0)
          GROUP BY a.wait_event) AS e) AS lw`

// sqlLocksTemplate reads the pool's lock waits: sessions waiting on a
// heavyweight lock that hold or await a lock on a relation of $1 (the
// pool, its partitions, the ledger; a session waiting on a row of the
// pool holds its lock on the table while it waits on the holder's
// transaction id, or on the row's tuple lock, which names the table).
// pg_locks takes every lock-manager partition lock to read the lock
// table, in the workers' way, so the poll sends this statement only
// while a session of this database waits on a lock (a waiter in another
// database cannot be the pool's), and it reads pg_locks only if one still
// does. Its planning alone is most of the server statement's first run
// in a new backend (docs/benchmarks.md). The longest waiting
// blockingPIDsWaiters of the pool's waiters are asked pg_blocking_pids;
// the others' blockers come from that one read (hb). The CTEs' sizes are
// unknown to the planner, so membership is tested as (pid IN (…)) IS
// TRUE, which stays a hashed lookup instead of a join it might plan as a
// nested loop, and hb joins on hashable keys (coalesced: a lock tag's
// unused fields are null), the rest of the tag compared after.
const sqlLocksTemplate = `
WITH a AS MATERIALIZED (
    SELECT pid, backend_type, application_name, usename, state, backend_xmin, xact_start,
           wait_event_type, wait_event, state_change, query, datname
    FROM pg_stat_activity
), l AS MATERIALIZED (
    SELECT pid, locktype, database, relation, page, tuple, virtualxid, transactionid, classid, objid, objsubid,
           mode, granted, %[1]s AS waitstart
    FROM pg_locks
    WHERE pid IS NOT NULL AND EXISTS (SELECT 1 FROM a WHERE wait_event_type = 'Lock' AND datname = current_database())
), p AS MATERIALIZED (
    SELECT DISTINCT pid FROM l WHERE relation = ANY($1::oid[])
), wl AS MATERIALIZED (
    SELECT * FROM l WHERE NOT granted AND (pid IN (SELECT pid FROM p)) IS TRUE
), ws AS MATERIALIZED (
    SELECT pid, min(waitstart) AS waitstart FROM wl GROUP BY pid
), top AS (
    SELECT pid FROM ws ORDER BY %[3]s, pid LIMIT %[2]d
), w AS MATERIALIZED (
    SELECT * FROM wl WHERE pid NOT IN (SELECT pid FROM top)
), hb AS (
    SELECT w.pid, array_agg(DISTINCT h.pid ORDER BY h.pid) AS pids
    FROM w JOIN l AS h
      ON coalesce(h.transactionid, '0') = coalesce(w.transactionid, '0') AND coalesce(h.relation, 0) = coalesce(w.relation, 0)
        AND coalesce(h.page, 0) = coalesce(w.page, 0) AND coalesce(h.tuple, 0) = coalesce(w.tuple, 0)
        AND coalesce(h.objid, 0) = coalesce(w.objid, 0)
        AND h.pid <> w.pid AND h.locktype IS NOT DISTINCT FROM w.locktype
        AND h.database IS NOT DISTINCT FROM w.database AND h.page IS NOT DISTINCT FROM w.page
        AND h.tuple IS NOT DISTINCT FROM w.tuple AND h.virtualxid IS NOT DISTINCT FROM w.virtualxid
        AND h.classid IS NOT DISTINCT FROM w.classid AND h.objsubid IS NOT DISTINCT FROM w.objsubid
    WHERE h.granted AND CASE h.locktype WHEN 'relation' THEN h.relation IN (SELECT relation FROM w)
                                        WHEN 'virtualxid' THEN h.virtualxid IN (SELECT virtualxid FROM w)
                                        ELSE h.locktype IN (SELECT locktype FROM w) END
      AND h.mode = ANY (CASE w.mode
        WHEN 'AccessShareLock' THEN '{AccessExclusiveLock}'::text[]
        WHEN 'RowShareLock' THEN '{ExclusiveLock,AccessExclusiveLock}'
        WHEN 'RowExclusiveLock' THEN '{ShareLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'
        WHEN 'ShareUpdateExclusiveLock' THEN '{ShareUpdateExclusiveLock,ShareLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'
        WHEN 'ShareLock' THEN '{RowExclusiveLock,ShareUpdateExclusiveLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'
        WHEN 'ShareRowExclusiveLock' THEN '{RowExclusiveLock,ShareUpdateExclusiveLock,ShareLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'
        WHEN 'ExclusiveLock' THEN '{RowShareLock,RowExclusiveLock,ShareUpdateExclusiveLock,ShareLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'
        WHEN 'AccessExclusiveLock' THEN '{AccessShareLock,RowShareLock,RowExclusiveLock,ShareUpdateExclusiveLock,ShareLock,ShareRowExclusiveLock,ExclusiveLock,AccessExclusiveLock}'
    END)
    GROUP BY w.pid
)
SELECT (SELECT json_agg(json_build_object(
            'pid', a.pid, 'application_name', coalesce(a.application_name, ''), 'user', coalesce(a.usename::text, ''),
            'state', coalesce(a.state, ''), 'wait_event', coalesce(a.wait_event_type, '') || coalesce(':' || a.wait_event, ''),
            'wait_ms', CASE WHEN a.wait_event_type = 'Lock' THEN extract(epoch FROM clock_timestamp() - coalesce(ws.waitstart, a.state_change)) * 1000 END,
            'blocked_by', CASE WHEN a.wait_event_type = 'Lock' THEN
                              CASE WHEN a.pid IN (SELECT pid FROM top) THEN pg_blocking_pids(a.pid) ELSE coalesce(hb.pids, '{}') END END,
            'query', left(coalesce(a.query, ''), 300)))
        FROM a JOIN p ON p.pid = a.pid
        LEFT JOIN ws ON ws.pid = a.pid
        LEFT JOIN hb ON hb.pid = a.pid
        WHERE a.pid <> pg_backend_pid())`

// lwlockNames12 are the LWLock wait events of PostgreSQL 12 under the names
// PostgreSQL 13 gave them and later versions keep (13 renamed the tranches
// from snake_case, gave the SLRU locks names of their own and dropped the
// Lock suffix of the others): the dashboard, JSON and the runbooks say
// BufferContent on every version.
var lwlockNames12 = map[string]string{
	"buffer_content": "BufferContent", "buffer_io": "BufferIO", "buffer_mapping": "BufferMapping",
	"lock_manager": "LockManager", "predicate_lock_manager": "PredicateLockManager", "wal_insert": "WALInsert",
	"proc": "LockFastPath", "tbm": "SharedTidBitmap", "parallel_append": "ParallelAppend",
	"parallel_hash_join": "ParallelHashJoin", "parallel_query_dsa": "ParallelQueryDSA",
	"session_dsa": "PerSessionDSA", "session_record_table": "PerSessionRecordType",
	"session_typmod_table": "PerSessionRecordTypmod", "shared_tuplestore": "SharedTupleStore",
	"replication_origin": "ReplicationOriginState", "replication_slot_io": "ReplicationSlotIO",
	"clog": "XactBuffer", "CLogControlLock": "XactSLRU",
	"subtrans": "SubtransBuffer", "SubtransControlLock": "SubtransSLRU",
	"multixact_offset": "MultiXactOffsetBuffer", "MultiXactOffsetControlLock": "MultiXactOffsetSLRU",
	"multixact_member": "MultiXactMemberBuffer", "MultiXactMemberControlLock": "MultiXactMemberSLRU",
	"commit_timestamp": "CommitTsBuffer", "CommitTsControlLock": "CommitTsSLRU",
	"async": "NotifyBuffer", "AsyncCtlLock": "NotifySLRU",
	"oldserxid": "SerialBuffer", "OldSerXidLock": "SerialSLRU",
}

// lwlockName is an LWLock wait event of a server_version_num under its
// name from PostgreSQL 13 on.
func lwlockName(version int, name string) string {
	if version >= 130000 {
		return name
	}
	if n, ok := lwlockNames12[name]; ok {
		return n
	}
	// The individual locks: WALWriteLock, ProcArrayLock, XidGenLock…
	if n, ok := strings.CutSuffix(name, "Lock"); ok && n != "" {
		return n
	}
	return name
}

// waitEventName is a session's wait event ("type:event", as pg_stat_activity
// gives them) under its name from PostgreSQL 13 on.
func waitEventName(version int, event string) string {
	if n, ok := strings.CutPrefix(event, "LWLock:"); ok {
		return "LWLock:" + lwlockName(version, n)
	}
	return event
}
