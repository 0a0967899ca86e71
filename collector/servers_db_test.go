package collector_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/faultproxy"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// dsnVia is the test database's DSN with its address replaced by addr
// (host:port).
func dsnVia(t *testing.T, addr string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	dsn := pgtest.DSN()
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		u.Host = addr
		return u.String()
	}
	return dsn + " host=" + host + " port=" + port
}

// A watch over several: two pools (two schemas, one through a proxy that
// cuts it off for a while) and a server that is not there. Each poll sums
// the pools that answer, says which does not and why, names them as their
// opener does, else by their place in the list; the pool cut off is reported down once, then back once,
// and the series hold the sums.
func TestServersWatchSeveralPools(t *testing.T) {
	ctx, a := pgtest.Setup(t, 300, pgtest.Options{})
	b := pgtest.NewSeeded(t, ctx, 200, pgtest.Options{})
	if _, err := b.Engine.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 5}); err != nil {
		t.Fatal(err)
	}
	cc, err := pgx.ParseConfig(pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.New(net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	dead, err := net.Listen("tcp", "127.0.0.1:0") // a port nothing answers on once closed
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()

	member := func(addr, schema string) collector.Member {
		return collector.Member{Addr: addr, Open: func(ctx context.Context) (*collector.Collector, string, error) {
			col, err := collector.New(ctx, collector.Config{DSN: dsnVia(t, addr), Table: schema + ".resource_pool"})
			if err != nil {
				return nil, "", err
			}
			name := "" // named by its place in the list
			if schema == a.Schema {
				name = "s1" // the name its opener gives it
			}
			return col, name, nil
		}}
	}
	direct := net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
	w := collector.NewServers([]collector.Member{member(direct, a.Schema), member(proxy.Addr(), b.Schema), member(deadAddr, a.Schema)}, collector.ServersConfig{History: 100})
	t.Cleanup(w.Close)
	if err := w.Open(ctx); err != nil {
		t.Fatalf("open with one server down: %v", err)
	}
	if info := w.Info(); info.Host != "3 servers" || info.Table != "mixed" || info.User == "" {
		t.Errorf("info before the first poll %+v", info)
	}

	poll := func(timeout time.Duration) collector.Snapshot {
		t.Helper()
		pctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		s, err := w.Poll(pctx)
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		return s
	}
	s := poll(10 * time.Second)
	if len(s.Servers) != 3 || s.Servers[0].Server != "s1" || s.Servers[1].Server != "#2" || s.Servers[1].Addr != proxy.Addr() {
		t.Fatalf("servers %+v", s.Servers)
	}
	if !s.Servers[0].Reachable || !s.Servers[1].Reachable || s.Servers[2].Reachable || s.Servers[2].Error == "" {
		t.Fatalf("reachable: %+v", s.Servers)
	}
	if s.Pool.Unused != 495 || s.Pool.Pending != 5 {
		t.Errorf("sums: unused %d pending %d, want 495 and 5", s.Pool.Unused, s.Pool.Pending)
	}
	if !hasAlert(s, collector.AlertServerUnreachable, "#3") {
		t.Errorf("no server_unreachable alert for %s: %+v", deadAddr, s.Alerts)
	}
	if info := w.Info(); info.Host != "3 servers" || info.Table != "mixed" {
		t.Errorf("info %+v", info)
	}
	if pts := w.Series(collector.SeriesUnused); len(pts) != 1 || pts[0].V != 495 {
		t.Errorf("unused series %v", pts)
	}

	// The proxied pool stops answering: the others go on, it is down.
	proxy.Partition(4 * time.Second)
	s = poll(1500 * time.Millisecond)
	if s.Servers[1].Reachable || !s.Servers[0].Reachable || s.Pool.Unused != 300 {
		t.Fatalf("while cut off: %+v, unused %d", s.Servers[1], s.Pool.Unused)
	}
	// It answers again once the partition ends.
	pgtest.Eventually(t, "the proxied pool answers again", 20*time.Second, func() bool {
		s = poll(5 * time.Second)
		return s.Servers[1].Reachable
	})
	var down, back int
	for _, e := range w.Events() {
		if strings.HasPrefix(e.Text, collector.AlertServerUnreachable+": server #2") {
			switch e.Kind {
			case collector.EventAlert:
				down++
			case collector.EventCleared:
				back++
			}
		}
	}
	if down != 1 || back != 1 {
		t.Errorf("the cut-off pool: %d down and %d back events, want 1 and 1: %+v", down, back, w.Events())
	}

	// No server answers: the poll fails and says why.
	none := collector.NewServers([]collector.Member{member(deadAddr, a.Schema)}, collector.ServersConfig{History: 10})
	t.Cleanup(none.Close)
	_, err = none.Poll(ctx)
	if err == nil || !strings.Contains(err.Error(), "no server answers") || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("no server: %v", err)
	}
}

func hasAlert(s collector.Snapshot, name, server string) bool {
	for _, a := range s.Alerts {
		if a.Name == name && a.Server == server && a.Active {
			return true
		}
	}
	return false
}
