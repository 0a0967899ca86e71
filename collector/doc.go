// Package collector polls PostgreSQL (and, in the demo, the workload) for
// the live signals of a resource pool: counts by status, lock waits and who
// blocks whom, dead tuples and vacuum, burn rate and time to exhaustion. It
// keeps them in bounded time series and raises alerts. It never writes: its
// sessions are read-only (per transaction, also behind a pooler), and it is
// cheap enough to point at a production pool of ten million rows during an
// incident.
//
// # Main types
//
//   - Collector: built by New from a Config (the DSN, the table, alert
//     thresholds); Poll returns one Snapshot, the object `watch --json`
//     prints and recordings store. Doctor checks a pool against the
//     production checklist.
//   - Snapshot: the counts (Pool), waiters and blockers, statistics,
//     holders, the fleet of work processes, alerts, events and limits.
//   - Recorder, ReadRecording, Replay: snapshots to an NDJSON file and back
//     onto the dashboard.
//
// Two packages present what the collector finds: internal/prom serves the
// snapshot as Prometheus metrics, and internal/catalogue describes each
// alert, its threshold and its runbook.
//
// # A poll
//
// A poll sends one pipelined batch on one session: the UNUSED count, the
// PENDING count, and everything else (table statistics, lock waits while
// a session waits on a lock, holders, the fleet, claim statements from
// pg_stat_statements, the total count of rows). The session keeps its
// backend from poll to poll: a backend's first run of a statement costs
// it far more than the next. A large pool starts in stages, a poll each,
// so that no poll pays every statement's first run (see docs/counting.md).
//
// # Counting
//
// No count reads the whole pool at one poll. Each counter keeps what it
// learned and, at every poll, recounts only where the pool changes (the
// lowest UNUSED ids, where claims take theirs; the newest and oldest
// leases) plus a share of the rest in turn, as much as a time budget
// allows (pace). Every counter follows one contract: plan decides what a
// poll counts, queue adds its statements to a batch, absorb takes the
// results (pure Go, tested without PostgreSQL) and returns the figures.
//
//   - UNUSED: chunks of about a thousand ids through the partial index on
//     UNUSED rows (unusedCounter).
//   - PENDING, expired, stuck: slices of the partial index on leased_until
//     WHERE status = 'PENDING' (pendingCounter), or, without that index,
//     ranges of the table's pages read in turn (census).
//   - CONSUMED: the rows counted once through the index on id, then kept up
//     by the statistics' inserts and deletes (totalCounter), less UNUSED
//     and PENDING.
//
// A figure is exact when every part of it was counted at this poll, and
// estimated otherwise: Snapshot.Pool.Estimated names it, and the dashboard
// shows it with "~". docs/counting.md explains each mechanism, what it
// costs and why it is there, with a glossary of the names in the code.
package collector
