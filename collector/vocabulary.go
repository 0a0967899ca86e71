package collector

// AlertName names an alert rule. The dashboard matches on these, and they
// are the JSON values of Alert.Name.
type AlertName = string

// The alert rules.
const (
	AlertLockWait    AlertName = "lock_wait"    // a session waits on a lock longer than the threshold
	AlertDepletion   AlertName = "depletion"    // UNUSED runs out sooner than the threshold, or is gone
	AlertReaperLag   AlertName = "reaper_lag"   // a lease expired longer than a reaper interval ago is still PENDING
	AlertDeadTuples  AlertName = "dead_tuples"  // dead tuples above the threshold share of the table
	AlertConnections AlertName = "connections"  // connections above the threshold share of max_connections
	AlertLWLock      AlertName = "lwlock_waits" // sessions on the pool waiting on an LWLock (page latches) at or above the threshold
	AlertNoLease     AlertName = "no_lease"     // PENDING ids held with no lease: a crashed holder leaks them for good
	AlertStarvation  AlertName = "starvation"   // claims pass over a free id, taking newer ones, for longer than the threshold
	// AlertServerUnreachable: a server of a watch over several does not answer.
	AlertServerUnreachable AlertName = "server_unreachable"
)

// EventKind says what an event of the log reports; the JSON value of Event.Kind.
type EventKind = string

// The kinds of events.
const (
	EventReclaimed EventKind = "reclaimed" // the reaper returned expired leases to the pool
	EventFenced    EventKind = "fenced"    // the fence rejected commits with stale tokens (zombies)
	EventDouble    EventKind = "double"    // an id got a second effect (fencing off)
	EventCrash     EventKind = "crash"     // simulated workers died holding leases
	EventAlert     EventKind = "alert"     // an alert was raised
	EventCleared   EventKind = "cleared"   // an alert cleared
	EventEmpty     EventKind = "empty"     // the pool ran out of UNUSED ids
	EventKnob      EventKind = "knob"      // a demo knob was turned
	EventScenario  EventKind = "scenario"  // a demo scenario started on a fresh pool
	EventReset     EventKind = "reset"     // counters, charts and alerts were reset
	EventAction    EventKind = "action"    // the user acted from the dashboard (cancel, terminate, release)
)
