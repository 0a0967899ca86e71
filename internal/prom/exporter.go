package prom

import (
	"sort"
	"sync"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/prometheus/client_golang/prometheus"
)

// Exporter serves the snapshots as Prometheus metrics. It holds the latest
// snapshot it was given (Observe, called after each poll by whoever polls)
// and reads it at every scrape: a scrape never polls and never queries the
// database, so /metrics costs nothing however often it is scraped, and its
// figures are exactly those of the poll the screen or the NDJSON shows.
//
// Names are prefixed pooltop_ and in base units (seconds, ids). Before the
// first poll only the poll counters and histogram are exported.
// pooltop_depletion_eta_seconds is absent while the pool is not draining
// (the snapshot's null), so that a rule such as
// pooltop_depletion_eta_seconds < 900 fires only on a real drain. Workload
// counters exist only where a workload runs in the process (the demo); they
// restart from zero when the demo resets its counters, which Prometheus'
// rate() reads as a counter reset.
//
// Over several servers (a snapshot with Servers) each server's figures are
// exported with a server label (its name: s1, s2 …, or its address), so
// that the same rules fire per server and sum without (server) gives the
// whole; pooltop_server_up says which answered.
type Exporter struct {
	perServer bool
	// labelled are the metrics' descriptions with the server label, for
	// an exporter per server.
	labelled map[*prometheus.Desc]*prometheus.Desc

	mu     sync.Mutex
	last   *collector.Snapshot
	polls  prometheus.Counter
	errors prometheus.Counter
	dur    prometheus.Histogram
}

// NewExporter returns an exporter with no snapshot yet; perServer exports
// each server of a watch over several with a server label.
func NewExporter(perServer bool) *Exporter {
	var labelled map[*prometheus.Desc]*prometheus.Desc
	if perServer {
		labelled = map[*prometheus.Desc]*prometheus.Desc{}
		for d, sp := range specs {
			labelled[d] = prometheus.NewDesc(sp.name, sp.help, append(append([]string(nil), sp.labels...), "server"), nil)
		}
	}
	return &Exporter{perServer: perServer, labelled: labelled,
		polls: prometheus.NewCounter(prometheus.CounterOpts{Name: "pooltop_polls_total", Help: "Polls of the pool that succeeded."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "pooltop_poll_errors_total",
			Help: "Polls of the pool that failed (the figures stay those of the last good poll)."}),
		dur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "pooltop_poll_duration_seconds",
			Help:    "Time one poll of the pool took (all its queries, one round trip).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}), // 0.5 ms to 4 s
	}
}

// Observe takes a poll's snapshot: the next scrape shows it.
func (e *Exporter) Observe(s collector.Snapshot) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.last = &s
	e.polls.Inc()
	e.dur.Observe(s.PollMS / 1000)
}

// ObserveError counts a failed poll.
func (e *Exporter) ObserveError() { e.errors.Inc() }

// spec is what a metric's description was made of.
type spec struct {
	name, help string
	labels     []string
}

// specs are the descriptions desc made, by description.
var specs = map[*prometheus.Desc]spec{}

func desc(name, help string, labels ...string) *prometheus.Desc {
	d := prometheus.NewDesc(name, help, labels, nil)
	specs[d] = spec{name, help, labels}
	return d
}

// descServerUp is exported only over several servers.
var descServerUp = prometheus.NewDesc("pooltop_server_up", "1 when the server answered the last poll, else 0 (watch over several servers).", []string{"server"}, nil)

var (
	descPoolIDs       = desc("pooltop_pool_ids", "Ids of the pool by state: unused, pending (held), expired (pending whose lease has passed, a part of pending), consumed.", "state")
	descStuck         = desc("pooltop_pool_stuck_ids", "PENDING ids nothing will free: a lease expired longer ago than --stuck, or no lease and unchanged that long.")
	descPassedOver    = desc("pooltop_pool_passed_over_ids", "Free ids that claims have passed over, taking newer ones, at two polls or more (among the lowest 256 free ids): starvation; absent before the second poll.")
	descPassedOverS   = desc("pooltop_pool_passed_over_seconds", "How long claims have passed over the longest-passed-over free id (intervals in which they took newer ids).")
	descPassedOverBy  = desc("pooltop_pool_passed_over_claims", "Newer ids claimed while the longest-passed-over free id stayed free.")
	descWaitUnplanned = desc("pooltop_lock_wait_unplanned_max_seconds", "The longest lock wait, leaving out the waits of planned changes (DDL, LOCK TABLE, TRUNCATE, VACUUM FULL; pooltop migrate) and the waits behind them: what lock_wait pages on.")
	descNoLease       = desc("pooltop_pool_no_lease_ids", "PENDING ids held with no lease (leased_until NULL): a holder that dies leaks them for good; absent where not counted.")
	descReaperLag     = desc("pooltop_pool_reaper_lag_ids", "PENDING ids whose lease expired longer ago than one reaper interval (--alert-expired): the reaper lags.")
	descEstimated     = desc("pooltop_pool_ids_estimated", "1 when the count of that state comes from statistics or a rolling recount instead of one exact count.", "state")
	descWaiters       = desc("pooltop_lock_waiters", "Sessions waiting on a lock on the pool or its ledger.")
	descWaitMax       = desc("pooltop_lock_wait_max_seconds", "Longest current lock wait on the pool or its ledger.")
	descLWLock        = desc("pooltop_lwlock_waiters", "Sessions waiting on an LWLock (a page latch such as BufferContent, WAL, lock manager) at the poll, in a statement that names the pool or a partition.")
	descPartUnused    = desc("pooltop_partition_unused_ids", "UNUSED ids of each partition of a partitioned pool.", "partition")
	descDead          = desc("pooltop_dead_tuples", "Dead tuples of the pool table (all partitions).")
	descLive          = desc("pooltop_live_tuples", "Live tuples of the pool table (all partitions).")
	descBurn          = desc("pooltop_burn_ids_per_second", "Net decline of UNUSED ids per second, smoothed (negative: the pool grows).")
	descETA           = desc("pooltop_depletion_eta_seconds", "Time until UNUSED runs out at the current burn; absent when the pool is not draining.")
	descConsumedRate  = desc("pooltop_consumed_ids_per_second", "CONSUMED ids added per second between the last two polls.")
	descConns         = desc("pooltop_connections", "Connections to the server.")
	descMaxConns      = desc("pooltop_max_connections", "The server's max_connections.")
	descAlert         = desc("pooltop_alert_active", "1 while the alert rule is raised, else 0.", "alert")
	descPollTime      = desc("pooltop_last_poll_timestamp_seconds", "When the poll these figures come from began (Unix time).")
	descWorkers       = desc("pooltop_workload_workers", "Simulated workers running (demo only).")
	descLeaked        = desc("pooltop_workload_leaked_ids", "Ids held by crashed workers that nobody released (demo only).")
	descReaperMaxLag  = desc("pooltop_workload_reaper_max_lag_seconds", "Longest a reclaimed lease waited for the reaper while nothing held its row (demo only).")
	descErrors        = desc("pooltop_workload_errors_total", "Failed workload statements by class (demo only).", "class")
	descFleet         = desc("pooltop_fleet_processes", "pooltop work processes by state: alive, stopped (drained), gone (stopped heartbeating without draining).", "state")
	descFleetCycles   = desc("pooltop_fleet_cycles_per_second", "Cycles per second of the live pooltop work processes, summed.")
	descFleetHeld     = desc("pooltop_fleet_gone_held_leases", "Leases the gone processes still hold, counted in the pool (until counted, as their last heartbeat said): waiting for the reaper.")
)

// workloadCounters are the demo workload's counters, exported as _total.
var workloadCounters = []struct {
	desc *prometheus.Desc
	get  func(s *collector.Snapshot) int64
}{
	{desc("pooltop_workload_acquires_total", "Ids claimed by the workload (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Acquired }},
	{desc("pooltop_workload_claim_statements_total", "Claim statements that succeeded (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.AcquireCalls }},
	{desc("pooltop_workload_commits_total", "Effects accepted by the system of record (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Committed }},
	{desc("pooltop_workload_fenced_rejections_total", "Commits rejected by the fence: stale token or lost lease (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.FencedRejections }},
	{desc("pooltop_workload_double_finalizations_total", "Commits that wrote a second effect for an id, fencing off (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.DoubleFinalizations }},
	{desc("pooltop_workload_releases_total", "Ids released by the workload (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Released }},
	{desc("pooltop_workload_renewals_total", "Leases renewed (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Renewed }},
	{desc("pooltop_workload_leases_lost_total", "Renewals refused because the lease was gone (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.LeasesLost }},
	{desc("pooltop_workload_empty_claims_total", "Claims that found the pool empty (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.EmptyPool }},
	{desc("pooltop_workload_conflicts_total", "Optimistic version checks lost, retried (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Conflicts }},
	{desc("pooltop_workload_crashes_total", "Simulated workers that died holding leases (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Crashes }},
	{desc("pooltop_workload_pauses_total", "Simulated workers that froze (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Pauses }},
	{desc("pooltop_workload_cycles_total", "Acquire → work → commit cycles completed (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Cycles }},
	{desc("pooltop_workload_reclaimed_total", "Expired leases the reaper returned to the pool (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Reclaimed }},
	{desc("pooltop_workload_reaper_held_total", "Expired leases the reaper passed over because their holder had the row locked: held, not late (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.ReaperHeld }},
	{desc("pooltop_workload_refilled_total", "Ids the producer added to the pool (demo only)."), func(s *collector.Snapshot) int64 { return s.Workload.Refilled }},
}

// Describe sends every metric's description.
func (e *Exporter) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolIDs, descStuck, descReaperLag, descWaitUnplanned, descNoLease, descPassedOver, descPassedOverS, descPassedOverBy, descEstimated, descWaiters, descWaitMax, descLWLock, descPartUnused, descDead, descLive, descBurn,
		descETA, descConsumedRate, descConns, descMaxConns, descAlert, descPollTime, descWorkers, descLeaked, descReaperMaxLag, descErrors,
		descFleet, descFleetCycles, descFleetHeld} {
		ch <- e.desc(d)
	}
	for _, c := range workloadCounters {
		ch <- e.desc(c.desc)
	}
	if e.perServer {
		ch <- descServerUp
	}
	e.polls.Describe(ch)
	e.errors.Describe(ch)
	e.dur.Describe(ch)
}

// Collect sends the metrics of the latest snapshot.
func (e *Exporter) Collect(ch chan<- prometheus.Metric) {
	e.mu.Lock()
	s := e.last
	e.mu.Unlock()
	e.polls.Collect(ch)
	e.errors.Collect(ch)
	e.dur.Collect(ch)
	if s == nil {
		return
	}
	if !e.perServer {
		e.collect(ch, s, "")
		return
	}
	for _, v := range s.Servers {
		up := 0.0
		if v.Reachable && v.Snapshot != nil {
			up = 1
			e.collect(ch, v.Snapshot, v.Server)
		} else {
			ch <- prometheus.MustNewConstMetric(e.desc(descAlert), prometheus.GaugeValue, 1, collector.AlertServerUnreachable, v.Server)
		}
		ch <- prometheus.MustNewConstMetric(descServerUp, prometheus.GaugeValue, up, v.Server)
	}
}

// desc is d as this exporter exports it: with the server label, per server.
func (e *Exporter) desc(d *prometheus.Desc) *prometheus.Desc {
	if e.perServer {
		return e.labelled[d]
	}
	return d
}

// collect sends the metrics of one snapshot: a server's, labelled with its
// name, when server is not "".
func (e *Exporter) collect(ch chan<- prometheus.Metric, s *collector.Snapshot, server string) {
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		if e.perServer {
			labels = append(labels, server)
		}
		ch <- prometheus.MustNewConstMetric(e.desc(d), t, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) { metric(d, prometheus.GaugeValue, v, labels...) }
	p := s.Pool
	estimated := map[string]bool{}
	for _, name := range p.Estimated {
		estimated[name] = true
	}
	for _, st := range []struct {
		name string
		v    int64
	}{{"unused", p.Unused}, {"pending", p.Pending}, {"expired", p.Expired}, {"consumed", p.Consumed}} {
		gauge(descPoolIDs, float64(st.v), st.name)
		gauge(descEstimated, b2f(estimated[st.name]), st.name)
	}
	gauge(descStuck, float64(p.Stuck))
	gauge(descReaperLag, float64(p.ExpiredOld))
	if p.NoLease != nil {
		gauge(descNoLease, float64(*p.NoLease))
	}
	if p.PassedOver != nil && p.PassedOverS != nil {
		gauge(descPassedOver, float64(*p.PassedOver))
		gauge(descPassedOverS, *p.PassedOverS)
		gauge(descPassedOverBy, float64(p.PassedOverBy))
	}
	gauge(descWaiters, float64(s.LockWaiters))
	gauge(descWaitMax, s.LockWaitMaxMS/1000)
	if s.LockWaitUnplannedMaxMS != nil {
		gauge(descWaitUnplanned, *s.LockWaitUnplannedMaxMS/1000)
	}
	gauge(descLWLock, float64(s.LWLockWaits))
	for _, p := range s.Partitions {
		gauge(descPartUnused, float64(p.Unused), p.Name)
	}
	gauge(descDead, float64(s.DeadTuples))
	gauge(descLive, float64(s.LiveTuples))
	gauge(descBurn, s.BurnPerS)
	if s.DepletionETAS != nil {
		gauge(descETA, *s.DepletionETAS)
	}
	gauge(descConsumedRate, s.ConsumedPerS)
	gauge(descConns, float64(s.Connections))
	gauge(descMaxConns, float64(s.MaxConnections))
	for _, a := range s.Alerts {
		gauge(descAlert, b2f(a.Active), a.Name)
	}
	if e.perServer {
		gauge(descAlert, 0, collector.AlertServerUnreachable)
	}
	gauge(descPollTime, float64(s.Time.UnixNano())/1e9)
	if s.Fleet != nil {
		n := map[string]int{}
		var rate float64
		var held int64
		for _, p := range s.Fleet {
			n[p.State]++
			if p.Alive {
				rate += p.CyclesPS
			}
			if p.State == collector.ProcessGone {
				held += int64(p.Held)
			}
		}
		for _, st := range []string{collector.ProcessAlive, collector.ProcessStopped, collector.ProcessGone} {
			gauge(descFleet, float64(n[st]), st)
		}
		gauge(descFleetCycles, rate)
		gauge(descFleetHeld, float64(held))
	}
	if s.Workload == nil {
		return
	}
	gauge(descWorkers, float64(s.Workload.Workers))
	gauge(descLeaked, float64(s.Workload.Leaked))
	gauge(descReaperMaxLag, s.Workload.ReaperMaxLag.Seconds())
	for _, c := range workloadCounters {
		metric(c.desc, prometheus.CounterValue, float64(c.get(s)))
	}
	classes := make([]string, 0, len(s.Workload.Errors))
	for class := range s.Workload.Errors {
		classes = append(classes, class)
	}
	sort.Strings(classes)
	for _, class := range classes {
		metric(descErrors, prometheus.CounterValue, float64(s.Workload.Errors[class]), class)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
