package catalogue

import (
	"fmt"
	"strconv"

	"github.com/pooltop-dev/pooltop/collector"
)

// Severity says whom an alert should reach: a page wakes the on-call
// engineer, a ticket waits for working hours.
type Severity = string

// The severities.
const (
	SeverityPage   Severity = "page"
	SeverityTicket Severity = "ticket"
)

// Runbook is what an on-call engineer does about a raised alert.
type Runbook struct {
	First  string `json:"first"`  // what to look at first
	Causes string `json:"causes"` // the likely causes
	Do     string `json:"do"`     // what to do
	Tools  string `json:"tools"`  // the pooltop keys and commands that help
}

// Alert is one alert of the catalogue: the one description of an alert
// that the dashboard, --json, the metrics, the Prometheus rules and the
// docs all take theirs from.
type Alert struct {
	Name      collector.AlertName `json:"name"`
	Severity  Severity            `json:"severity"`
	Meaning   string              `json:"meaning"`
	Figure    string              `json:"figure"`    // the figure it watches, and its metric
	Flag      string              `json:"flag"`      // the flag that sets the threshold
	Threshold string              `json:"threshold"` // the threshold in force
	Raise     string              `json:"raise"`     // when it is raised
	Clear     string              `json:"clear"`     // when it clears (hysteresis)
	Runbook   Runbook             `json:"runbook"`
	// Rule is the Prometheus alert's name, Expr its expression with the
	// thresholds in force, For how long it must hold.
	Rule string `json:"prometheus_alert"`
	Expr string `json:"prometheus_expr"`
	For  string `json:"prometheus_for"`
}

// num prints a threshold for a PromQL expression.
func num(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// Alerts returns every alert pooltop raises, with the thresholds of a
// (zero fields: the defaults), in the order the dashboard shows them.
func Alerts(a collector.AlertConfig) []Alert {
	a = a.WithDefaults()
	hold := a.Hold.String()
	return []Alert{{
		Name: collector.AlertLockWait, Severity: SeverityPage, Rule: "PooltopLockWait",
		Meaning: "A session touching the pool or its ledger waits on a lock. A claim must never wait (SKIP LOCKED); a waiter is a blocking claim or a transaction holding rows.",
		Figure:  "the longest current lock wait, leaving out planned changes: the waits of a migration or of pooltop's own set-up (DDL, LOCK TABLE, TRUNCATE, VACUUM FULL, REINDEX; pooltop migrate's sessions) and the waits behind one, which are shown but do not page (lock_wait_unplanned_max_ms; pooltop_lock_wait_unplanned_max_seconds)",
		Flag:    "--alert-lock-wait", Threshold: a.LockWait.String(),
		Raise: "when the longest wait is over the threshold at 3 of the last 5 polls, or at once when one wait has lasted " + a.LockWaitFor.String(),
		Clear: "once the longest wait has stayed at or under half the threshold for " + hold,
		Expr:  "pooltop_lock_wait_unplanned_max_seconds > " + num(a.LockWait.Seconds()), For: "1m",
		Runbook: Runbook{
			First:  "who blocks whom: the root blocker, its state and query, and how many wait behind it",
			Causes: "claims without SKIP LOCKED (the blocking strategy); a transaction left open after claiming (idle in transaction); a long batch or a migration holding rows",
			Do:     "end the root blocker if it is stuck (cancel its query, or terminate it); make claims use FOR UPDATE SKIP LOCKED; fix the application that leaves transactions open",
			Tools:  "watch --allow-actions: ↑/↓ to the blocker, x cancels, X terminates; doctor (claim_statements)",
		},
	}, {
		Name: collector.AlertDepletion, Severity: SeverityPage, Rule: "PooltopDepletion",
		Meaning: "UNUSED ids run out soon at the current burn, or are gone: claims will fail.",
		Figure:  "time to empty at the smoothed burn (depletion_eta_s; pooltop_depletion_eta_seconds), and UNUSED",
		Flag:    "--alert-depletion", Threshold: a.DepletionWithin.String(),
		Raise: "once the time to empty has stayed under the threshold for " + a.DepletionFor.String() + ", or at once when UNUSED is 0",
		Clear: "once the time to empty has stayed over a third more than the threshold (or the pool stops draining) for " + hold,
		Expr:  "pooltop_depletion_eta_seconds < " + num(a.DepletionWithin.Seconds()) + ` or (pooltop_pool_ids{state="unused"} == 0)`, For: "1m",
		Runbook: Runbook{
			First:  "the pool bar and burn: whether the producer adds ids, and whether PENDING grows (ids held, not consumed)",
			Causes: "the producer that refills the pool stopped or is too slow; a leak: ids held by dead workers (see reaper_lag and holders); a load spike",
			Do:     "start or speed up the refill; free leaked ids; shed load until the pool recovers",
			Tools:  "pooltop seed --count N (adds ids); lease list --by-holder; lease release --holder H --expired",
		},
	}, {
		Name: collector.AlertReaperLag, Severity: SeverityPage, Rule: "PooltopReaperLag",
		Meaning: "Leases expired longer than a reaper interval ago are still PENDING: nothing returns them to the pool.",
		Figure:  "PENDING ids whose lease expired longer ago than the threshold (pool.expired_old; pooltop_pool_reaper_lag_ids)",
		Flag:    "--alert-expired", Threshold: a.ExpiredAfter.String(),
		Raise: "at the first poll that counts one",
		Clear: "once none is left, for " + hold,
		Expr:  "pooltop_pool_reaper_lag_ids > 0", For: "30s",
		Runbook: Runbook{
			First:  "the holders line: which holder has the expired leases (one dead pod, or all of them?)",
			Causes: "the reaper is down or disabled; it is too slow for the expiries (its batch); it is blocked (lock waits); the PENDING index it needs is missing",
			Do:     "restart the reaper or raise its batch; meanwhile free the expired leases by hand (tokens are raised, so late commits are fenced)",
			Tools:  "pooltop lease reap; lease release --holder H --expired (--dry-run first); doctor (reaper_index); watch --allow-actions: x on a holder",
		},
	}, {
		Name: collector.AlertNoLease, Severity: SeverityPage, Rule: "PooltopNoLease",
		Meaning: "PENDING ids are held with no lease: no reaper can ever take them back, so every holder that dies leaks its ids for good (the zombie resource crisis).",
		Figure:  "PENDING ids whose leased_until is NULL (pool.no_lease; pooltop_pool_no_lease_ids); not counted on a pool above 20,000 rows without a PENDING index",
		Flag:    "none (any)", Threshold: "0",
		Raise: "once such ids have been held for " + a.NoLeaseFor.String(),
		Clear: "once none is left, for " + hold,
		Expr:  "pooltop_pool_no_lease_ids > 0", For: "1m",
		Runbook: Runbook{
			First:  "the holders line and lease list: which holders claim without a lease",
			Causes: "an application (or pooltop lease acquire --no-lease) claims without setting leased_until; a hand-written claim that forgets the lease",
			Do:     "make every claim set a lease on the database clock; free the ids of holders that are gone",
			Tools:  "pooltop lease list --by-holder; lease release --holder H; doctor (unleased_pending)",
		},
	}, {
		Name: collector.AlertStarvation, Severity: SeverityTicket, Rule: "PooltopStarvation",
		Meaning: "Claims pass over free ids and take newer ones (seed 001 §6.3: SKIP LOCKED gives up FIFO order): something holds row locks on free ids, or claims do not take ids in id order. The ids are interchangeable, so nothing is lost yet; what holds them often also holds back vacuum.",
		Figure:  "how long claims have passed over the longest-passed-over free id, counting only intervals in which they took newer ids (pool.passed_over_s; pooltop_pool_passed_over_seconds), among the lowest 256 free ids, judged within each partition",
		Flag:    "--alert-starvation", Threshold: a.Starvation.String(),
		Raise: "once a free id has been passed over for the threshold and by at least " + strconv.Itoa(collector.StarvationClaims) + " newer claims (a handful of claims passing an id on a quiet pool is not worth a ticket)",
		Clear: "once no free id is passed over, for " + hold,
		Expr:  "pooltop_pool_passed_over_seconds >= " + num(a.Starvation.Seconds()) + " and pooltop_pool_passed_over_claims >= " + strconv.Itoa(collector.StarvationClaims), For: "1m",
		Runbook: Runbook{
			First:  "who blocks whom and the xmin holder line: a long transaction, or a reader with FOR SHARE / FOR UPDATE on free ids (pg_stat_activity: idle in transaction)",
			Causes: "a report or an audit that locks free rows in a long transaction; an application claiming inside a long transaction; a claim without ORDER BY id (a sequential scan takes ids in page order)",
			Do:     "end or shorten the transaction holding the rows (it likely holds vacuum back too); claim with ORDER BY id on the partial index; read the pool without FOR SHARE",
			Tools:  "pooltop doctor (xmin_horizon); watch --allow-actions: X on the xmin holder",
		},
	}, {
		Name: collector.AlertDeadTuples, Severity: SeverityTicket, Rule: "PooltopDeadTuples",
		Meaning: "Dead row versions pile up in the pool table: vacuum is not keeping up, and every claim reads more.",
		Figure:  "dead / (live + dead) tuples of the pool table (dead_ratio; pooltop_dead_tuples, pooltop_live_tuples)",
		Flag:    "--alert-dead-ratio", Threshold: num(a.DeadRatio),
		Raise: "at the first poll above the threshold",
		Clear: "once the ratio has stayed at or under three quarters of the threshold for " + hold,
		Expr:  "pooltop_dead_tuples / clamp_min(pooltop_dead_tuples + pooltop_live_tuples, 1) > " + num(a.DeadRatio), For: "10m",
		Runbook: Runbook{
			First:  "the dead tuples chart and the xmin holder line: is a vacuum running, and is a transaction holding the horizon?",
			Causes: "a long transaction (or a replication slot) holds the xmin horizon; autovacuum is off for the table or too slow for its churn",
			Do:     "end the transaction holding the horizon; set autovacuum_vacuum_scale_factor lower and naptime shorter for the table; VACUUM it",
			Tools:  "doctor (autovacuum, xmin_horizon, with the SQL to run); watch --allow-actions: X on the xmin holder",
		},
	}, {
		Name: collector.AlertConnections, Severity: SeverityTicket, Rule: "PooltopConnections",
		Meaning: "The server's connections near max_connections: new sessions will be refused.",
		Figure:  "connections / max_connections (connections; pooltop_connections, pooltop_max_connections)",
		Flag:    "--alert-connections", Threshold: num(a.Connections),
		Raise: "at the first poll above the threshold",
		Clear: "once the share has stayed 10 points under the threshold for " + hold,
		Expr:  "pooltop_connections / clamp_min(pooltop_max_connections, 1) > " + num(a.Connections), For: "5m",
		Runbook: Runbook{
			First:  "the status line's connection count, and which applications hold them (pg_stat_activity)",
			Causes: "workers' connection pools sized too large; sessions leaked by an application; a connection storm after a restart",
			Do:     "queue in the application (smaller pools per worker), or put PgBouncer in front; end idle sessions",
			Tools:  "doctor (connections)",
		},
	}, {
		Name: collector.AlertLWLock, Severity: SeverityTicket, Rule: "PooltopLWLockWaits",
		Meaning: "Sessions on the pool queue on a page latch (LWLock): the claim head is a hot spot.",
		Figure:  "sessions waiting on an LWLock in statements on the pool, the mean of the last 5 polls (lwlock_waits; pooltop_lwlock_waiters)",
		Flag:    "--alert-lwlock-waiters", Threshold: strconv.Itoa(a.LWLockWaiters),
		Raise: "once the mean of the last 5 polls has stayed at or above the threshold for " + a.LWLockFor.String(),
		Clear: "once the mean has stayed at or under half the threshold for " + hold,
		Expr:  "avg_over_time(pooltop_lwlock_waiters[1m]) >= " + strconv.Itoa(a.LWLockWaiters), For: "5m",
		Runbook: Runbook{
			First:  "lwlock_wait_event: which latch (BufferContent is the index's hot page)",
			Causes: "many concurrent claimers on one partial index's first leaf page",
			Do:     "hash-partition the pool so claims spread over N heads; claim in batches",
			Tools:  "pooltop migrate --partitions N (a new pool); bench --partitions to compare",
		},
	}, {
		Name: collector.AlertServerUnreachable, Severity: SeverityPage, Rule: "PooltopServerUnreachable",
		Meaning: "A node of the Citus cluster (or, in a watch over several pools, a pool's server) does not answer: the ids of its shards cannot be claimed, and its held leases wait for it to return (claims go on at the other nodes' shards).",
		Figure:  "whether each server answered the last poll (servers[].reachable; pooltop_server_up{server})",
		Flag:    "none", Threshold: "one failed poll",
		Raise: "at the first poll the server does not answer (it is tried again every 5 s)",
		Clear: "at the first poll it answers again",
		Expr:  "pooltop_server_up == 0", For: "1m",
		Runbook: Runbook{
			First:  "the node's row: the error it gives (refused, timeout, authentication, shutting down)",
			Causes: "the node is down, restarting or in crash recovery; a network partition; max_connections reached; a changed password",
			Do:     "bring the node back; its expired leases are reclaimed by the reaper once it answers; then pooltop verify",
			Tools:  "pooltop watch on the coordinator (a row per node); pooltop doctor (citus_nodes); pooltop verify",
		},
	}}
}

// Rule is one alerting rule of the rules file.
type Rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

// Rules are the alerting rules for pooltop's metrics: one per
// catalogue alert, with a's thresholds, and those that need no dashboard
// (the scrape is down, the poll fails or slows, a dashboard alert is up).
func Rules(a collector.AlertConfig) []Rule {
	var rules []Rule
	for _, s := range Alerts(a) {
		rules = append(rules, Rule{
			Alert: s.Rule, Expr: s.Expr, For: s.For,
			Labels: map[string]string{"severity": s.Severity, "pooltop_alert": s.Name},
			Annotations: map[string]string{
				"summary":     s.Meaning,
				"description": fmt.Sprintf("%s; threshold %s (%s).", s.Figure, s.Threshold, s.Flag),
				"runbook":     fmt.Sprintf("Look first at %s. Likely causes: %s. Do: %s. With pooltop: %s.", s.Runbook.First, s.Runbook.Causes, s.Runbook.Do, s.Runbook.Tools),
			},
		})
	}
	return append(rules, Rule{
		Alert: "PooltopScrapeDown", Expr: `up{job=~"pooltop.*"} == 0`, For: "2m",
		Labels: map[string]string{"severity": SeverityPage},
		Annotations: map[string]string{
			"summary":     "Prometheus cannot scrape pooltop: nothing watches the pool.",
			"description": "The target of a job named pooltop* is down.",
			"runbook":     "First: is the pooltop watch process running, and is --listen reachable from Prometheus (a port alone binds 127.0.0.1)? Do: restart it with --listen 0.0.0.0:PORT or a reachable address.",
		},
	}, Rule{
		Alert: "PooltopPollFailing", Expr: "increase(pooltop_poll_errors_total[2m]) > 0 and increase(pooltop_polls_total[2m]) == increase(pooltop_poll_errors_total[2m])", For: "2m",
		Labels: map[string]string{"severity": SeverityPage},
		Annotations: map[string]string{
			"summary":     "Every poll of the pool fails: the figures are stale.",
			"description": "pooltop_poll_errors_total grows as fast as pooltop_polls_total.",
			"runbook":     "First: the status line of watch, or its stderr, names the error. Causes: the database is down or refuses the role; statement_timeout on a very busy server. Do: check the server and the role's grants (pg_monitor).",
		},
	}, Rule{
		Alert: "PooltopPollSlow", Expr: "histogram_quantile(0.9, sum by (instance, job, le) (rate(pooltop_poll_duration_seconds_bucket[5m]))) > 1", For: "10m",
		Labels: map[string]string{"severity": SeverityTicket},
		Annotations: map[string]string{
			"summary":     "Polls take over a second: the server is saturated, or the pool lacks an index.",
			"description": "The 90th percentile of pooltop_poll_duration_seconds over 5 minutes.",
			"runbook":     "First: pooltop doctor (missing indexes). Causes: a pool without its partial indexes; a server short of CPU. Do: create the indexes doctor names; poll less often (--interval).",
		},
	}, Rule{
		Alert: "PooltopAlertActive", Expr: "pooltop_alert_active == 1", For: "1m",
		Labels: map[string]string{"severity": SeverityTicket},
		Annotations: map[string]string{
			"summary":     "The pooltop dashboard has an alert raised.",
			"description": "pooltop_alert_active{alert} is 1: the dashboard's own rule, with the thresholds watch was started with.",
			"runbook":     "Run pooltop alerts to read the runbook of the alert named in the alert label.",
		},
	})
}
