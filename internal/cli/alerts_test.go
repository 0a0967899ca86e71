package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/catalogue"
)

// generated checks that a file in the repository is what pooltop makes of
// it now; POOLTOP_UPDATE=1 rewrites it instead.
func generated(t *testing.T, path, want, how string) {
	t.Helper()
	full := filepath.Join("..", "..", path)
	if os.Getenv("POOLTOP_UPDATE") != "" {
		if err := os.WriteFile(full, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("%s is stale: %s (or POOLTOP_UPDATE=1 go test ./internal/cli -run %s)", path, how, t.Name())
	}
}

// The docs page and the rules file are the catalogue's, with the defaults.
func TestAlertFilesAreTheCatalogue(t *testing.T) {
	r := pooltop(t, "alerts", "--markdown")
	if r.code != exitOK {
		t.Fatalf("alerts --markdown: exit %d: %s", r.code, r.stderr)
	}
	generated(t, "docs/alerts.md", r.stdout, "go run . alerts --markdown > docs/alerts.md")
	r = pooltop(t, "alerts", "--prometheus")
	if r.code != exitOK {
		t.Fatalf("alerts --prometheus: exit %d: %s", r.code, r.stderr)
	}
	generated(t, "contrib/prometheus/pooltop-alerts.yml", r.stdout, "go run . alerts --prometheus > contrib/prometheus/pooltop-alerts.yml")
	generated(t, "contrib/prometheus/pooltop-alerts_test.yml", promtoolTests(t), "the test writes it")
	for _, name := range []string{"lock_wait", "depletion", "reaper_lag", "dead_tuples", "connections", "lwlock_waits", "no_lease"} {
		if !strings.Contains(r.stdout, "pooltop_alert: "+name) {
			t.Errorf("the rules file has no rule for %s", name)
		}
	}
}

// The thresholds given reach the rules, and bad ones are refused by flag.
func TestAlertsThresholdsAndBadInput(t *testing.T) {
	r := pooltop(t, "alerts", "--prometheus", "--alert-lock-wait", "200ms", "--alert-dead-ratio", "0.5")
	if r.code != exitOK || !strings.Contains(r.stdout, "pooltop_lock_wait_unplanned_max_seconds > 0.2") || !strings.Contains(r.stdout, "> 0.5") {
		t.Fatalf("alerts --prometheus with thresholds: exit %d\n%s", r.code, r.stdout)
	}
	for _, bad := range [][]string{{"--alert-lock-wait", "0"}, {"--alert-dead-ratio", "1.5"}, {"--alert-lwlock-waiters", "0"}, {"--alert-starvation", "0s"}, {"--alert-connections", "x"}, {"--json", "--prometheus"}} {
		r := pooltop(t, append([]string{"alerts"}, bad...)...)
		if r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, bad[0]) {
			t.Errorf("alerts %v: exit %d, stderr %q; want exit 2 and one line naming the flag", bad, r.code, r.stderr)
		}
	}
	r = pooltop(t, "alerts", "--json")
	if r.code != exitOK || !strings.Contains(r.stdout, `"runbook":{"first":`) || !strings.Contains(r.stdout, `"severity":"page"`) {
		t.Fatalf("alerts --json: exit %d\n%s", r.code, r.stdout)
	}
	// Names choose alerts; an unknown one is refused, naming the others.
	r = pooltop(t, "alerts", "--json", "starvation", "no_lease")
	var some []catalogue.Alert
	if err := json.Unmarshal([]byte(r.stdout), &some); r.code != exitOK || err != nil || len(some) != 2 || some[0].Name != "no_lease" || some[1].Name != "starvation" {
		t.Fatalf("alerts --json starvation no_lease: exit %d, %v, %+v", r.code, err, some)
	}
	for _, bad := range [][]string{{"nope"}, {"--prometheus", "lock_wait"}} {
		r = pooltop(t, append([]string{"alerts"}, bad...)...)
		if r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "lock_wait") {
			t.Errorf("alerts %v: exit %d, stderr %q; want exit 2 and one line naming the alerts", bad, r.code, r.stderr)
		}
	}
	// -o writes the rules file whole; a path that cannot be written is
	// one line, exit 2, and leaves nothing behind.
	dir := t.TempDir()
	file := filepath.Join(dir, "rules.yml")
	if r = pooltop(t, "alerts", "--prometheus", "-o", file); r.code != exitOK || r.stdout != "" {
		t.Fatalf("alerts --prometheus -o: exit %d, stdout %q", r.code, r.stdout)
	}
	written, err := os.ReadFile(file)
	if want := pooltop(t, "alerts", "--prometheus").stdout; err != nil || string(written) != want {
		t.Fatalf("the file written differs from the rules printed (%v)", err)
	}
	r = pooltop(t, "alerts", "--prometheus", "-o", filepath.Join(dir, "missing", "rules.yml"))
	if r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || !strings.Contains(r.stderr, "--output") {
		t.Errorf("-o into a missing directory: exit %d, stderr %q; want exit 2 and one line naming --output", r.code, r.stderr)
	}
	if left, _ := os.ReadDir(dir); len(left) != 1 {
		t.Errorf("files left in %s: %v, want only rules.yml", dir, left)
	}
}

// promtool checks the rules file and runs its tests: every rule fires on
// the series meant to fire it and not on the calm one.
func TestPromtoolChecksAndTestsTheRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is needed (apt-get install prometheus; .ci/run installs it)")
	}
	dir := filepath.Join("..", "..", "contrib", "prometheus")
	for _, args := range [][]string{{"check", "rules", "pooltop-alerts.yml"}, {"test", "rules", "pooltop-alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// promtoolTests is contrib/prometheus/pooltop-alerts_test.yml: for every
// rule, an instance whose series fire it and one whose series do not.
func promtoolTests(t *testing.T) string {
	t.Helper()
	type series struct {
		Series string `yaml:"series"`
		Values string `yaml:"values"`
	}
	type expAlert struct {
		ExpLabels      map[string]string `yaml:"exp_labels"`
		ExpAnnotations map[string]string `yaml:"exp_annotations"`
	}
	type ruleTest struct {
		EvalTime  string     `yaml:"eval_time"`
		Alertname string     `yaml:"alertname"`
		ExpAlerts []expAlert `yaml:"exp_alerts"`
	}
	flat := func(v string) string { return v + "+0x80" }
	in := func(metric, labels, bad, good string) []series {
		sep := ""
		if labels != "" {
			sep = ","
		}
		return []series{
			{metric + `{job="pooltop",instance="bad"` + sep + labels + `}`, bad},
			{metric + `{job="pooltop",instance="good"` + sep + labels + `}`, good},
		}
	}
	var inputs []series
	add := func(s []series) { inputs = append(inputs, s...) }
	add(in("pooltop_lock_wait_unplanned_max_seconds", "", flat("0.2"), flat("0.01")))
	add(in("pooltop_depletion_eta_seconds", "", flat("300"), flat("5000")))
	add(in("pooltop_pool_ids", `state="unused"`, flat("1000"), flat("100000")))
	add(in("pooltop_pool_reaper_lag_ids", "", flat("5"), flat("0")))
	add(in("pooltop_pool_no_lease_ids", "", flat("30"), flat("0")))
	add(in("pooltop_pool_passed_over_seconds", "", flat("40"), flat("40")))
	add(in("pooltop_pool_passed_over_claims", "", flat("5000"), flat("20")))
	add(in("pooltop_dead_tuples", "", flat("500"), flat("10")))
	add(in("pooltop_live_tuples", "", flat("1000"), flat("1000")))
	add(in("pooltop_connections", "", flat("95"), flat("50")))
	add(in("pooltop_max_connections", "", flat("100"), flat("100")))
	add(in("pooltop_lwlock_waiters", "", flat("6"), flat("1")))
	add(in("up", "", flat("0"), flat("1")))
	add(in("pooltop_polls_total", "", "0+1x80", "0+1x80"))
	add(in("pooltop_poll_errors_total", "", "0+1x80", "0+0x80"))
	add(in("pooltop_poll_duration_seconds_bucket", `le="0.5"`, "0+0x80", "0+10x80"))
	add(in("pooltop_poll_duration_seconds_bucket", `le="2"`, "0+10x80", "0+10x80"))
	add(in("pooltop_poll_duration_seconds_bucket", `le="+Inf"`, "0+10x80", "0+10x80"))
	add(in("pooltop_alert_active", `alert="lock_wait"`, flat("1"), flat("0")))
	add(in("pooltop_server_up", `server="s2"`, flat("0"), flat("1")))
	var tests []ruleTest
	for _, r := range catalogue.Rules(collector.AlertConfig{}) {
		labels := map[string]string{"job": "pooltop", "instance": "bad"}
		for k, v := range r.Labels {
			labels[k] = v
		}
		switch r.Alert {
		case "PooltopAlertActive":
			labels["alert"] = "lock_wait"
		case "PooltopServerUnreachable":
			labels["server"] = "s2"
		}
		tests = append(tests, ruleTest{EvalTime: "15m", Alertname: r.Alert, ExpAlerts: []expAlert{{labels, r.Annotations}}})
	}
	var b bytes.Buffer
	b.WriteString("# promtool test rules pooltop-alerts_test.yml: every rule fires on the\n")
	b.WriteString("# instance \"bad\" and not on \"good\". Written by TestAlertFilesAreTheCatalogue.\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	err := enc.Encode(map[string]any{
		"rule_files":          []string{"pooltop-alerts.yml"},
		"evaluation_interval": "15s",
		"tests": []map[string]any{{
			"interval":        "15s",
			"input_series":    inputs,
			"alert_rule_test": tests,
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
