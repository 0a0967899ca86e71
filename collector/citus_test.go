package collector_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// watch on a pool Citus distributes: the counts by state are the truth
// summed over every shard, with a row per node; a node stopped hard shows
// as not answering, with an alert and an event, while the other node's
// figures go on; started again, it answers again. On a cluster of the
// test's own.
func TestWatchCitus(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster := pgtest.OwnCitusCluster(t, ctx)
	pool, err := engine.Connect(ctx, engine.ConnOptions{DSN: cluster.DSN(), MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	e := engine.New(pool)
	if _, err := e.Seed(ctx, 1000); err != nil {
		t.Fatal(err)
	}
	leases, err := e.LeaseAcquire(ctx, &engine.LeaseAcquireParams{N: 30, TTL: time.Hour, Holder: "h", Strategy: engine.SkipLocked})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases[:10] {
		if _, err := e.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l.ID, Token: l.Token, Holder: "h", RequestID: "r" + l.Identifier}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := collector.New(ctx, collector.Config{DSN: cluster.DSN(), Table: "public.resource_pool"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := s.Pool
	if p.Total != 1000 || p.Unused != int64(1000-len(leases)) || p.Pending != int64(len(leases)-10) || p.Consumed != 10 || len(p.Estimated) != 0 {
		t.Fatalf("total %d, unused %d, pending %d, consumed %d (estimated %v); want 1000, %d, %d, 10, all counted",
			p.Total, p.Unused, p.Pending, p.Consumed, p.Estimated, 1000-len(leases), len(leases)-10)
	}
	if len(s.Servers) != 2 || !s.Servers[0].Reachable || !s.Servers[1].Reachable ||
		s.Servers[0].Snapshot.Pool.Total+s.Servers[1].Snapshot.Pool.Total != 1000 || s.Servers[0].Snapshot.Pool.Total == 0 {
		t.Fatalf("node rows %+v; want two nodes answering, sharing the 1000 ids", s.Servers)
	}
	checks := doctorOf(t, c, s)
	for name, want := range map[string]string{"citus_nodes": collector.CheckOK, "citus_shard_balance": collector.CheckOK,
		"citus_delegation": collector.CheckOK, "fencing": collector.CheckOK, "unused_index": collector.CheckOK, "reaper_index": collector.CheckOK} {
		if checks[name] != want {
			t.Fatalf("doctor on Citus: %s is %q, want %q (%v)", name, checks[name], want, checks)
		}
	}
	stopped := cluster.Workers[0].Port()
	if err := cluster.Workers[0].Halt(); err != nil {
		t.Fatal(err)
	}
	s, err = c.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var down, up *collector.ServerView
	for i := range s.Servers {
		if strings.HasSuffix(s.Servers[i].Addr, ":"+strconv.Itoa(stopped)) {
			down = &s.Servers[i]
		} else {
			up = &s.Servers[i]
		}
	}
	if down == nil || down.Reachable || up == nil || !up.Reachable || s.Pool.Total != up.Snapshot.Pool.Total || !hasAlert(s, collector.AlertServerUnreachable, down.Server) {
		t.Fatalf("with a node stopped: rows %+v, total %d, alerts %v; want it not answering, the other's figures, an alert", s.Servers, s.Pool.Total, s.Alerts)
	}
	if got := doctorOf(t, c, s)["citus_nodes"]; got != collector.CheckFail {
		t.Fatalf("doctor with a node stopped: citus_nodes is %q, want fail", got)
	}
	if err := cluster.Workers[0].Resume(ctx); err != nil {
		t.Fatal(err)
	}
	s, err = c.Poll(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pool.Total != 1000 || hasAlert(s, collector.AlertServerUnreachable, down.Server) {
		t.Fatalf("with the node back: total %d, alerts %v", s.Pool.Total, s.Alerts)
	}
	var noted, cleared bool
	for _, ev := range c.Events() {
		noted = noted || (ev.Kind == collector.EventAlert && strings.Contains(ev.Text, "does not answer"))
		cleared = cleared || (ev.Kind == collector.EventCleared && strings.Contains(ev.Text, "answers again"))
	}
	if !noted || !cleared {
		t.Fatalf("events %v; want the node's stop and return", c.Events())
	}
}

// doctorOf is the status of each of the doctor's checks on s.
func doctorOf(t *testing.T, c *collector.Collector, s collector.Snapshot) map[string]string {
	t.Helper()
	checks, err := c.Doctor(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, ch := range checks {
		out[ch.Check] = ch.Status
	}
	return out
}
