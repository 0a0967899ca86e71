package collector

import (
	"strings"
	"testing"
	"time"
)

func TestMergeServers(t *testing.T) {
	t.Parallel()
	one, half := 1.0, 0.5
	a := Snapshot{Pool: Pool{Unused: 100, Pending: 5, Expired: 1, Consumed: 20, Total: 125, Counted: &one}, LockWaiters: 2, LockWaitMaxMS: 30,
		DeadTuples: 10, LiveTuples: 90, BurnPerS: 2, PollMS: 4, Alerts: []Alert{{Name: "lock_wait", Active: true, Message: "waits"}, {Name: "dead_tuples"}}}
	b := Snapshot{Pool: Pool{Unused: 300, Pending: 1, Consumed: 4, Total: 305, Counted: &half}, LockWaiters: 1, LockWaitMaxMS: 80,
		DeadTuples: 0, LiveTuples: 100, BurnPerS: 2, PollMS: 9}
	m := MergeServers(time.Now(), []ServerView{
		{Server: "s1", Reachable: true, Snapshot: &a},
		{Server: "s2", Reachable: true, Snapshot: &b},
		{Server: "s3", Addr: "u@h:5432/d", Error: "connection refused"},
	})
	p := m.Pool
	if p.Unused != 400 || p.Pending != 6 || p.Expired != 1 || p.Consumed != 24 || p.Total != 430 || *p.Counted != 0.5 {
		t.Fatalf("merged pool: %+v", p)
	}
	if m.LockWaiters != 3 || m.LockWaitMaxMS != 80 || m.DeadTuples != 10 || m.PollMS != 9 || m.DepletionETAS == nil || *m.DepletionETAS != 100 {
		t.Fatalf("merged figures: %+v", m)
	}
	if m.DeadRatio != 0.05 {
		t.Fatalf("dead ratio %v, want 10 dead of 200 tuples", m.DeadRatio)
	}
	var names []string
	for _, al := range m.Alerts {
		names = append(names, al.Server+":"+al.Name)
	}
	if strings.Join(names, ",") != "s1:lock_wait,s3:server_unreachable" {
		t.Fatalf("alerts %v: want the active one of s1 and s3 unreachable, each naming its server", names)
	}
	if len(m.Servers) != 3 {
		t.Fatalf("%d server rows", len(m.Servers))
	}
}
