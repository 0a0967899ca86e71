package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// Prometheus itself, scraping watch --listen on a pool whose expired
// leases nothing reaps and loading contrib/prometheus/pooltop-alerts.yml,
// fires PooltopReaperLag (for: 30s) within a minute and a half. A machine
// without prometheus fails the test: CI installs it (Debian's package).
func TestPrometheusFiresFromTheRulesFile(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("no prometheus binary: apt-get install prometheus (.ci/run does)")
	}
	rules, err := filepath.Abs(filepath.Join("..", "..", "contrib", "prometheus", "pooltop-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	db := migrated(t, 40)
	// Three leases of a second, never renewed, and no reaper: they expire
	// and stay PENDING.
	pooltop(t, append([]string{"lease", "acquire", "--holder", "gone", "--ttl", "1s", "--n", "3"}, db...)...).must(t)
	w := start(t, append([]string{"watch", "--headless", "--json", "--interval", "1s", "--listen", "127.0.0.1:0"}, db...)...)
	target, err := url.Parse(w.metricsAt(t))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	config := filepath.Join(dir, "prometheus.yml")
	err = os.WriteFile(config, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  evaluation_interval: 1s
rule_files: [%q]
scrape_configs:
  - job_name: pooltop
    static_configs:
      - targets: [%q]
`, rules, target.Host), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	web := l.Addr().String()
	_ = l.Close()
	var out bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus said:\n%s", out.String())
		}
	})
	type alerts struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	started := time.Now()
	var seen []string
	pgtest.Eventually(t, "PooltopReaperLag firing at Prometheus's /api/v1/alerts", 90*time.Second, func() bool {
		time.Sleep(time.Second) // ask once a second: Prometheus evaluates its rules as often
		resp, err := http.Get("http://" + web + "/api/v1/alerts")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var a alerts
		if json.NewDecoder(resp.Body).Decode(&a) != nil {
			return false
		}
		seen = seen[:0]
		for _, x := range a.Data.Alerts {
			seen = append(seen, x.Labels["alertname"]+"="+x.State)
			if x.Labels["alertname"] == "PooltopReaperLag" && x.State == "firing" && x.Labels["pooltop_alert"] == "reaper_lag" {
				return true
			}
		}
		return false
	})
	t.Logf("PooltopReaperLag firing %.0fs after Prometheus started; alerts %v", time.Since(started).Seconds(), seen)
}
