package collector_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// On a pool made by migrate --partitions, the snapshot carries each
// partition's UNUSED ids, in partition order, one partition counted per
// poll after the first, summing to the pool's, equal to what the partitions
// hold; and the LWLock figures (none on an idle server) are in the JSON.
func TestPartitionUnusedInTheSnapshot(t *testing.T) {
	ctx, db := pgtest.Setup(t, 4000, pgtest.Options{MaxConns: 4, Partitions: 4})
	for range 30 {
		if _, err := db.Engine.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Hour, N: 10}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]int64{}
	rows, err := db.Pool.Query(ctx, "SELECT c.relname, count(r.id) FROM pg_class c LEFT JOIN resource_pool r ON r.tableoid = c.oid AND r.status = 'UNUSED' WHERE c.oid IN (SELECT relid FROM pg_partition_tree('resource_pool'::regclass) WHERE isleaf) GROUP BY 1")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		want[name] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	c := newCollector(t, ctx, collector.Config{Table: db.Schema + ".resource_pool"})
	// The second poll counts every partition, then one poll in four counts
	// one partition in turn (the others keep their last figures, marked
	// estimated): poll until each has been counted exactly.
	exact := map[string]int64{}
	s := pollUntil(t, c, "exact partition counts", func(s collector.Snapshot) bool {
		if len(s.Partitions) != 4 {
			t.Fatalf("partitions %+v, want 4", s.Partitions)
		}
		for _, p := range s.Partitions {
			if !p.Estimated {
				exact[p.Name] = p.Unused
			}
		}
		return len(exact) == 4 && s.Pool.Unused == 3700
	})
	var sum int64
	for i, p := range s.Partitions {
		if p.Name != engineName(i) || exact[p.Name] != want[p.Name] || p.Unused != want[p.Name] {
			t.Fatalf("partition %d: %+v (counted exactly: %d), want %s with %d UNUSED (all: %v)", i, p, exact[p.Name], engineName(i), want[p.Name], want)
		}
		sum += p.Unused
	}
	if sum != s.Pool.Unused {
		t.Fatalf("partitions sum to %d, the pool says %d UNUSED", sum, s.Pool.Unused)
	}
	if s.LWLockWaits != 0 || s.LWLockWaitEvent != "" {
		t.Fatalf("LWLock waits on an idle server: %d %q", s.LWLockWaits, s.LWLockWaitEvent)
	}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"lwlock_waits":0`, `"lwlock_wait_event":""`, `"partitions":[{"name":"resource_pool_p0","unused":`} {
		if !strings.Contains(string(b), field) {
			t.Errorf("snapshot JSON lacks %s", field)
		}
	}
}

func engineName(i int) string { return fmt.Sprintf("resource_pool_p%d", i) }

// A plain pool's snapshot has no partitions field.
func TestNoPartitionsOnAPlainPool(t *testing.T) {
	b := setup(t, 100)
	c := b.collector(t, collector.Config{})
	s, err := c.Poll(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	out, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if s.Partitions != nil || strings.Contains(string(out), `"partitions"`) {
		t.Fatalf("partitions on a plain pool: %v", s.Partitions)
	}
}

// The LWLock alert is raised once the mean of 5 polls has stayed at the
// threshold for LWLockFor, stays up while the mean is above half of it, and
// clears after the hold once calm.
func TestLWLockAlert(t *testing.T) {
	b := setup(t, 10)
	c := b.collector(t, collector.Config{Alerts: collector.AlertConfig{LWLockWaiters: 4, LWLockFor: 2 * time.Second, Hold: time.Second}})
	at := time.Now()
	state := func(n int) collector.Alert {
		t.Helper()
		s := &collector.Snapshot{Time: at, LWLockWaits: n, LWLockWaitEvent: "BufferContent"}
		collector.EvaluateAlerts(c, s)
		for _, a := range s.Alerts {
			if a.Name == collector.AlertLWLock {
				return a
			}
		}
		t.Fatalf("no %s alert among %+v", collector.AlertLWLock, s.Alerts)
		return collector.Alert{}
	}
	for _, step := range []struct {
		n      int
		after  time.Duration
		active bool
	}{
		// One poll's spike of 12 does not raise it: the mean of 5 polls does.
		{12, 0, false}, {3, time.Second, false}, {0, time.Second, false}, {0, time.Second, false},
		{0, time.Second, false},                                                   // 12 3 0 0 0: mean 3.0
		{6, time.Second, false}, {6, time.Second, false}, {6, time.Second, false}, // 0 0 6 6 6: 3.6
		{6, time.Second, false}, // 0 6 6 6 6: 4.8, at the threshold since now
		{6, time.Second, false}, // 6 6 6 6 6: for 1 s
		{6, time.Second, true},  // for 2 s: LWLockFor
		{3, time.Second, true}, {0, time.Second, true},
		{0, time.Second, true},      // 6 6 3 0 0: 3.0, not calm yet
		{0, time.Second, true},      // 6 3 0 0 0: 1.8, calm since now
		{0, 2 * time.Second, false}, // calm for the hold
	} {
		at = at.Add(step.after)
		if a := state(step.n); a.Active != step.active {
			t.Fatalf("%d waiters: active %v, want %v (%s)", step.n, a.Active, step.active, a.Message)
		} else if step.active && !strings.Contains(a.Message, "BufferContent") {
			t.Fatalf("message %q does not name the wait event", a.Message)
		}
	}
	// Reset starts the history again: the polls before it are not in the
	// mean (a demo's fresh pool does not inherit the old one's waits).
	for range 8 {
		at = at.Add(time.Second)
		state(6)
	}
	c.Reset(false)
	at = at.Add(time.Second)
	if a := state(6); a.Active {
		t.Fatalf("raised at the first poll after a reset: %s", a.Message)
	}
}

// PENDING ids held with no lease are counted (pool.no_lease) and raise
// no_lease once held for NoLeaseFor; it clears after the hold once none is
// left, and is absent where the figure is not counted.
func TestNoLeaseAlert(t *testing.T) {
	b := setup(t, 20_000) // past the size counted whole: the PENDING index counts them
	if _, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "careless", N: 7, NoLease: true}); err != nil {
		t.Fatal(err)
	}
	c := b.collector(t, collector.Config{Alerts: collector.AlertConfig{NoLeaseFor: 2 * time.Second, Hold: time.Second}})
	s := pollUntil(t, c, "the ids held with no lease counted", func(s collector.Snapshot) bool {
		return s.Pool.NoLease != nil && *s.Pool.NoLease == 7
	})
	at := s.Time
	state := func(n *int64) (collector.Alert, bool) {
		t.Helper()
		s := &collector.Snapshot{Time: at, Pool: collector.Pool{NoLease: n}}
		collector.EvaluateAlerts(c, s)
		for _, a := range s.Alerts {
			if a.Name == collector.AlertNoLease {
				return a, true
			}
		}
		return collector.Alert{}, false
	}
	seven, zero := int64(7), int64(0)
	for _, step := range []struct {
		n      *int64
		after  time.Duration
		active bool
	}{{&seven, time.Second, false}, {&seven, 2 * time.Second, true}, {&zero, time.Second, true}, {&zero, 2 * time.Second, false}} {
		at = at.Add(step.after)
		if a, ok := state(step.n); !ok || a.Active != step.active {
			t.Fatalf("no_lease %d: active %v (listed %v), want %v", *step.n, a.Active, ok, step.active)
		}
	}
	if _, ok := state(nil); ok {
		t.Fatal("no_lease listed where the figure is not counted")
	}
}
