package prom

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/prometheus/client_golang/prometheus"
)

// Every metric the Grafana dashboard in contrib/ queries is one the
// exporter describes: a renamed metric cannot leave a panel empty.
func TestGrafanaDashboardQueriesExportedMetrics(t *testing.T) {
	raw, err := os.ReadFile("../../contrib/grafana/pooltop.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	ch := make(chan *prometheus.Desc, 100)
	NewExporter(false).Describe(ch)
	close(ch)
	exported := map[string]bool{}
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		exported[fq.FindStringSubmatch(d.String())[1]] = true
	}
	name := regexp.MustCompile(`pooltop_[a-z_]+`)
	queried := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				queried++
				base := n
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					base = strings.TrimSuffix(base, suffix)
				}
				if !exported[n] && !exported[base] {
					t.Errorf("panel %q queries %s, which the exporter does not export", p.Title, n)
				}
			}
		}
	}
	if queried < 10 {
		t.Fatalf("only %d metric names found in the dashboard", queried)
	}
}

// The fleet of a snapshot is exported: processes by state, the live ones'
// cycles per second, and the leases the gone ones held.
func TestFleetMetrics(t *testing.T) {
	e := NewExporter(false)
	e.Observe(collector.Snapshot{Fleet: []collector.Process{
		{Name: "a", State: collector.ProcessAlive, Alive: true, CyclesPS: 100},
		{Name: "b", State: collector.ProcessAlive, Alive: true, CyclesPS: 50},
		{Name: "c", State: collector.ProcessGone, Held: 4},
		{Name: "d", State: collector.ProcessStopped},
	}})
	got := gathered(t, e)
	for name, want := range map[string]float64{
		"pooltop_fleet_processes/state=alive": 2, "pooltop_fleet_processes/state=gone": 1, "pooltop_fleet_processes/state=stopped": 1,
		"pooltop_fleet_cycles_per_second": 150, "pooltop_fleet_gone_held_leases": 4,
	} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// Over several servers each server's figures carry its name in a server
// label, a server that does not answer is down with its alert raised, and
// a pedantic registry takes the labelled descriptions.
func TestServerLabelledMetrics(t *testing.T) {
	s1 := collector.Snapshot{Pool: collector.Pool{Unused: 70, Consumed: 3}, LockWaiters: 2,
		Alerts: []collector.Alert{{Name: collector.AlertLockWait, Active: true}}}
	s2 := collector.Snapshot{Pool: collector.Pool{Unused: 30}}
	views := []collector.ServerView{
		{Server: "s1", Reachable: true, Snapshot: &s1},
		{Server: "s2", Reachable: true, Snapshot: &s2},
		{Server: "s3", Error: "connection refused"},
	}
	e := NewExporter(true)
	e.Observe(collector.MergeServers(s1.Time, views))
	got := gathered(t, e)
	for name, want := range map[string]float64{
		"pooltop_pool_ids/server=s1/state=unused": 70, "pooltop_pool_ids/server=s2/state=unused": 30,
		"pooltop_lock_waiters/server=s1": 2, "pooltop_lock_waiters/server=s2": 0,
		"pooltop_alert_active/alert=lock_wait/server=s1":          1,
		"pooltop_alert_active/alert=server_unreachable/server=s3": 1,
		"pooltop_alert_active/alert=server_unreachable/server=s1": 0,
		"pooltop_server_up/server=s1":                             1, "pooltop_server_up/server=s3": 0,
	} {
		if v, ok := got[name]; !ok || v != want {
			t.Errorf("%s = %v (exported: %v), want %v", name, v, ok, want)
		}
	}
	if _, ok := got["pooltop_pool_ids/state=unused"]; ok {
		t.Error("the sums are exported without a server label beside the servers' own")
	}
	if _, ok := got["pooltop_lock_waiters/server=s3"]; ok {
		t.Error("a server that did not answer has figures")
	}
}

// gathered gathers e through a pedantic registry: each gauge's value by
// its name and labels, as name/label=value/….
func gathered(t *testing.T, e *Exporter) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(e)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetName() + "=" + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue()
		}
	}
	return got
}
