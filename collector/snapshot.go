package collector

import (
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/workload"
)

// Pool are the counts by status. Figures marked in Estimated come from
// catalog statistics or a rolling recount rather than one exact count.
type Pool struct {
	Unused   int64 `json:"unused"`
	Pending  int64 `json:"pending"`
	Expired  int64 `json:"expired"` // PENDING whose lease has passed, not yet reaped
	Consumed int64 `json:"consumed"`
	// Stuck: PENDING rows nothing will free: a lease expired longer ago than
	// the stuck threshold, or no lease and unchanged for that long (pools
	// that use no leases at all leak these).
	Stuck int64 `json:"stuck"`
	// ExpiredOld: expired for longer than a reaper interval (the reaper lags).
	ExpiredOld int64 `json:"expired_old"`
	// NoLease: PENDING ids with no lease at all (leased_until NULL): a
	// holder that dies leaks them for good. Null where pooltop cannot count
	// them (a pool without a PENDING index, above 20,000 rows); estimated
	// with pending when there are more than 1,024 (read by ranges of the
	// table in turn).
	NoLease *int64 `json:"no_lease"`
	// OldestPendingS: how long the longest-waiting PENDING row that nothing
	// frees has waited: since its lease expired, or, without a lease, since
	// it last changed. Null when there is none.
	OldestPendingS *float64 `json:"oldest_pending_s"`
	// PassedOver: free ids that claims have passed over, taking newer ids
	// while these stayed free, at two polls or more (seed 001 §6.3:
	// starvation). Read from the lowest 256 free ids; PassedOverFull says
	// all of them were, so the figure is a lower bound. Null at the first
	// poll, and in recordings made before pooltop read it.
	PassedOver     *int64 `json:"passed_over"`
	PassedOverFull bool   `json:"passed_over_full,omitempty"`
	// PassedOverS: how long the longest-passed-over of them has been
	// passed over (poll intervals in which claims took newer ids), and
	// PassedOverBy: how many newer ids were claimed meanwhile.
	PassedOverS  *float64 `json:"passed_over_s"`
	PassedOverBy int64    `json:"passed_over_by"`
	Estimated    []string `json:"estimated"`     // which of the counts above are estimates
	UnusedAgeS   float64  `json:"unused_age_s"`  // age of the oldest part of the rolling UNUSED recount
	PendingAgeS  float64  `json:"pending_age_s"` // age of the oldest part of the PENDING counts
	// Counted: how much of the pool the counters have read at least once
	// since start, 0 to 1 (the least of the UNUSED sweep, the walk of the
	// PENDING index and the reads of the table by ranges). Below 1, the
	// figures marked estimated are partly extrapolated, not only aged.
	// Null in recordings made before pooltop read it.
	Counted *float64 `json:"counted"`
	Total   int64    `json:"total"`
	// unusedDelta is the change of UNUSED since the previous poll, from the
	// chunks counted in both (valid when haveDelta): the burn rate uses it,
	// so that an estimate being corrected never reads as a burn.
	unusedDelta int64
	haveDelta   bool
	// totalShift is the part of the change in Total since the previous
	// poll that corrects the figure (see totalFigures).
	totalShift int64
}

// Waiter is a session waiting on a lock, with who blocks it.
type Waiter struct {
	PID       int32   `json:"pid"`
	App       string  `json:"application_name"`
	User      string  `json:"user"`
	State     string  `json:"state"`
	WaitEvent string  `json:"wait_event"`
	WaitMS    float64 `json:"wait_ms"`
	BlockedBy []int32 `json:"blocked_by"`
	Query     string  `json:"query"`
	// Server names the waiter's server, in a watch over several.
	Server string `json:"server,omitempty"`
}

// Blocker is a session holding what others wait for.
type Blocker struct {
	PID   int32  `json:"pid"`
	App   string `json:"application_name"`
	State string `json:"state"`
	Query string `json:"query"`
	// Blocks lists the waiters directly behind it.
	Blocks []int32 `json:"blocks"`
	// Server names the blocker's server, in a watch over several.
	Server string `json:"server,omitempty"`
}

// VacuumProgress is a running (auto)vacuum of the pool table.
type VacuumProgress struct {
	Phase        string  `json:"phase"`
	HeapTotal    int64   `json:"heap_blks_total"`
	HeapScanned  int64   `json:"heap_blks_scanned"`
	HeapVacuumed int64   `json:"heap_blks_vacuumed"`
	Percent      float64 `json:"percent"`
}

// PartitionDead is one partition's dead and live tuples.
type PartitionDead struct {
	Name       string  `json:"name"`
	Partitions int     `json:"partitions"` // how many partitions the pool has
	Dead       int64   `json:"dead_tuples"`
	Live       int64   `json:"live_tuples"`
	DeadRatio  float64 `json:"dead_ratio"`
}

// PartitionUnused is one partition's UNUSED ids, counted like the pool's
// (a rolling recount by id range of its own partial index, see
// unusedCounter), one partition per poll in turn (see partitionCounts):
// Estimated while some of its ranges were counted at an earlier poll.
type PartitionUnused struct {
	Name      string `json:"name"`
	Unused    int64  `json:"unused"`
	Estimated bool   `json:"estimated"`
}

// XminHolder is the session holding back the xmin horizon the most: while
// it runs, vacuum cannot remove the dead tuples it might still see.
type XminHolder struct {
	PID   int32    `json:"pid"`
	App   string   `json:"application_name"`
	State string   `json:"state"`
	Age   int64    `json:"xmin_age"` // transactions
	XactS *float64 `json:"xact_s"`
}

// Alert is one alert rule's state.
type Alert struct {
	Name string `json:"name"`
	// Server names the server the alert is about, in a watch over several.
	Server  string    `json:"server,omitempty"`
	Active  bool      `json:"active"`
	Since   time.Time `json:"since,omitempty"`
	Message string    `json:"message"`
}

// Event is a line of the dashboard's event log.
type Event struct {
	Time time.Time `json:"time"`
	Kind string    `json:"kind"` // see the EventKind constants
	Text string    `json:"text"`
	// Count is how many things a count event reports (reclaimed leases,
	// rejected commits…); on the dashboard's log, events of the same kind
	// within ten seconds are merged and Since is when the first one was.
	Count int64     `json:"count,omitempty"`
	Since time.Time `json:"-"`
}

// Snapshot is one poll. The JSON names of its top-level fields are a
// contract (`pooltop watch --headless --json`).
type Snapshot struct {
	Time          time.Time `json:"time"`
	Pool          Pool      `json:"pool"`
	LockWaiters   int       `json:"lock_waiters"`
	LockWaitMaxMS float64   `json:"lock_wait_max_ms"`
	LockWaitP95MS float64   `json:"lock_wait_p95_ms"`
	// LockWaitUnplannedMaxMS: the longest lock wait, leaving out planned
	// changes (see planned): the figure the lock_wait alert watches. Null
	// in recordings made before pooltop read it (the alert then watches
	// LockWaitMaxMS).
	LockWaitUnplannedMaxMS *float64  `json:"lock_wait_unplanned_max_ms"`
	Waiters                []Waiter  `json:"waiters"`
	Blockers               []Blocker `json:"blockers"`
	// LWLockWaits: client backends waiting on an LWLock (a page latch such
	// as BufferContent, a WAL or lock-manager lock) at the poll, in a
	// statement that names the pool or one of its partitions;
	// LWLockWaitEvent the most frequent of their wait events ("" for none),
	// by its name from PostgreSQL 13 on (12's buffer_content is
	// BufferContent here).
	LWLockWaits     int    `json:"lwlock_waits"`
	LWLockWaitEvent string `json:"lwlock_wait_event"`

	DeadTuples      int64           `json:"dead_tuples"`
	LiveTuples      int64           `json:"live_tuples"`
	DeadRatio       float64         `json:"dead_ratio"`
	AutovacuumCount int64           `json:"autovacuum_count"`
	LastAutovacuum  *time.Time      `json:"last_autovacuum"`
	Vacuum          *VacuumProgress `json:"vacuum"`
	// insDel: the statistics' rows inserted less rows deleted, cumulative.
	insDel *int64
	// WorstPartition, on a partitioned pool (whose figures above are sums
	// over its partitions), is the partition with the highest dead ratio.
	WorstPartition *PartitionDead `json:"worst_partition,omitempty"`
	// Partitions, on a partitioned pool of at most MaxPartitionCounts
	// partitions, are the UNUSED ids of each partition, in partition order;
	// absent on a plain table.
	Partitions []PartitionUnused `json:"partitions,omitempty"`
	Xmin       *XminHolder       `json:"xmin_holder"`

	Connections    int `json:"connections"`
	MaxConnections int `json:"max_connections"`

	AcquiresPerS  *float64 `json:"acquires_per_s"` // null without a workload in this process
	CommitsPerS   *float64 `json:"commits_per_s"`
	ConsumedPerS  float64  `json:"consumed_per_s"`
	BurnPerS      float64  `json:"burn_per_s"`
	DepletionETAS *float64 `json:"depletion_eta_s"` // null when the pool is not draining

	// Holders are the top holders of PENDING rows, most held first, from
	// the first HoldersRead PENDING rows in lease order (the expired first),
	// read every few polls; absent without a holder column or a PENDING index.
	Holders     []engine.Holder `json:"holders"`
	HoldersRead int64           `json:"holders_rows_read"`
	// Claims are the claim statements' figures from pg_stat_statements,
	// where it is installed and readable (null otherwise).
	Claims *ClaimStats `json:"claim_statements,omitempty"`
	// Fleet are the `pooltop work` processes registered beside the pool
	// (pooltop_worker), by name; absent where the pool has no fleet table.
	Fleet []Process `json:"fleet,omitempty"`

	Workload *workload.Snapshot `json:"workload,omitempty"`
	Alerts   []Alert            `json:"alerts"`
	Events   []Event            `json:"events,omitempty"` // new since the previous poll
	PollMS   float64            `json:"poll_ms"`
	// Limits says what this role cannot see (no pg_monitor, missing index…).
	Limits []string `json:"limits,omitempty"`

	// Servers are the servers' own snapshots, in a watch over several
	// (the figures above are then their sums); absent otherwise.
	Servers []ServerView `json:"servers,omitempty"`
}
