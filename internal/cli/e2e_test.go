package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tmuxRun is the real binary running in a tmux session of its own.
type tmuxRun struct {
	t       *testing.T
	session string
	dir     string
	mark    string // prefix of the embedded server's directory: pooltop-pg-<pid>-
}

// startInTmux builds pooltop and runs the demo in a 120×40 tmux session,
// with no PG* or DATABASE_URL in its environment, and waits for the dashboard.
func startInTmux(t *testing.T, name string) *tmuxRun {
	return startSized(t, name, 120, 40, "--pool-size", "20000")
}

// startSized is startInTmux at width×height with the demo's arguments.
func startSized(t *testing.T, name string, width, height int, args ...string) *tmuxRun {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is needed for the end-to-end test (apt-get install tmux; .ci/run installs it)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pooltop")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/pooltop-dev/pooltop").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	r := &tmuxRun{t: t, session: fmt.Sprintf("pooltop-%s-%d", name, os.Getpid()), dir: dir}
	pidFile := filepath.Join(dir, "pid")
	// The subshell writes its pid and execs pooltop, so that pid is pooltop's.
	script := fmt.Sprintf("(echo $BASHPID > %s; exec env -u DATABASE_URL -u PGHOST -u PGDATABASE -u PGUSER -u PGPORT %s %s 2>%s/stderr); echo $? > %s/exit",
		pidFile, bin, strings.Join(args, " "), dir, dir)
	r.tmux("new-session", "-d", "-s", r.session, "-x", fmt.Sprint(width), "-y", fmt.Sprint(height), script)
	t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", r.session).Run() })
	r.waitFor(" · stuck ", screenWait) // the pool line, once the first poll is in
	pid, err := os.ReadFile(pidFile)
	if err != nil || len(strings.TrimSpace(string(pid))) == 0 {
		t.Fatalf("no pid recorded: %v", err)
	}
	r.mark = "pooltop-pg-" + strings.TrimSpace(string(pid)) + "-"
	if dirs := r.serverDirs(); len(dirs) != 1 {
		t.Fatalf("while running, pooltop's server directory %s* should exist once: %v", r.mark, dirs)
	}
	return r
}

// screenWait bounds a wait for the screen to show what a step makes
// happen. It is a deadline, not a measure: the demo shows each step within
// seconds, but the tests share two cores with the rest of the suite under
// the race detector, where a first poll or a seeding can take many times
// longer. A wait whose length is the subject (an alert's hold) says so.
const screenWait = 90 * time.Second

func (r *tmuxRun) tmux(args ...string) string {
	r.t.Helper()
	out, err := exec.Command("tmux", args...).CombinedOutput()
	if err != nil {
		r.t.Fatalf("tmux %v: %v\n%s", args, err, out)
	}
	return string(out)
}

func (r *tmuxRun) screen() string { return r.tmux("capture-pane", "-p", "-t", r.session) }

func (r *tmuxRun) waitFor(what string, timeout time.Duration) string {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := r.screen()
		if strings.Contains(s, what) {
			return s
		}
		if time.Now().After(deadline) {
			stderr, _ := os.ReadFile(filepath.Join(r.dir, "stderr"))
			r.t.Fatalf("%q did not appear within %v; screen:\n%s\nstderr:\n%s", what, timeout, s, stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitNumber waits until re (whose first group is a number such as 1,234)
// matches the screen with a number for which ok holds, and returns it.
func (r *tmuxRun) waitNumber(re *regexp.Regexp, ok func(int64) bool, timeout time.Duration) int64 {
	r.t.Helper()
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		s := r.screen()
		if m := re.FindStringSubmatch(s); m != nil {
			if n, err := parseFigure(m[1]); err == nil && ok(n) {
				r.t.Logf("%s: %d after %.1fs", re, n, time.Since(start).Seconds())
				return n
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: no satisfying number within %v; screen:\n%s", re, timeout, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// parseFigure reads a figure as the dashboard writes it: 1,234, 3.4k, 1.2M.
func parseFigure(s string) (int64, error) {
	mult := 1.0
	switch {
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, strings.TrimSuffix(s, "k")
	case strings.HasSuffix(s, "M"):
		mult, s = 1e6, strings.TrimSuffix(s, "M")
	}
	f, err := strconv.ParseFloat(strings.ReplaceAll(s, ",", ""), 64)
	return int64(f * mult), err
}

// press sends keys to the program.
func (r *tmuxRun) press(keys ...string) {
	r.t.Helper()
	r.tmux(append([]string{"send-keys", "-t", r.session}, keys...)...)
}

// pressLiteral types keys as text (tmux would read "^" or "$" otherwise).
func (r *tmuxRun) pressLiteral(keys string) {
	r.t.Helper()
	r.tmux("send-keys", "-t", r.session, "-l", keys)
}

// exited waits for the program to exit and checks it exited 0.
func (r *tmuxRun) exited(timeout time.Duration) {
	r.t.Helper()
	exitFile := filepath.Join(r.dir, "exit")
	deadline := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(exitFile)
		if err == nil && len(b) > 0 {
			if code := strings.TrimSpace(string(b)); code != "0" {
				stderr, _ := os.ReadFile(filepath.Join(r.dir, "stderr"))
				r.t.Fatalf("pooltop exited with %s\n%s", code, stderr)
			}
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("pooltop did not exit; screen:\n%s", r.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *tmuxRun) serverDirs() []string {
	var dirs []string
	for _, base := range []string{"/dev/shm", os.TempDir()} {
		m, _ := filepath.Glob(filepath.Join(base, r.mark+"*"))
		dirs = append(dirs, m...)
	}
	return dirs
}

// cleanedUp waits until no postgres runs on a data directory of that
// pooltop process and the directory is gone.
func (r *tmuxRun) cleanedUp(timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		out, _ := exec.Command("pgrep", "-af", r.mark).Output()
		left := r.serverDirs()
		if !strings.Contains(string(out), "postgres") && len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after %v: postgres %q, directories %v left behind", timeout, out, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestDashboardInTmux runs the real binary in tmux against its embedded
// PostgreSQL, waits for the dashboard, presses keys and reads the screen.
func TestDashboardInTmux(t *testing.T) {
	t.Parallel()
	r := startInTmux(t, "e2e")
	s := r.screen()
	for _, want := range []string{"pooltop demo", "embedded 127.0.0.1", "UNUSED", "lease    on", "who blocks whom", "events"} {
		if !strings.Contains(s, want) {
			t.Fatalf("dashboard lacks %q:\n%s", want, s)
		}
	}
	// The throughput chart: "acquires/s", or "acq/s" once the figures are
	// too wide for the long label.
	r.waitFor("acq", screenWait)
	r.tmux("send-keys", "-t", r.session, "l")
	r.waitFor("lease    OFF", screenWait)
	r.tmux("send-keys", "-t", r.session, "f")
	r.waitFor("fencing  OFF", screenWait)
	r.press("q")
	r.exited(screenWait)
	r.cleanedUp(screenWait)
}

// Closing the terminal (the session's pty goes away: SIGHUP) cleans up as
// Ctrl-C does: the embedded server stops and its directory is removed.
func TestClosingTheTerminalCleansUp(t *testing.T) {
	t.Parallel()
	r := startInTmux(t, "hup")
	r.tmux("kill-session", "-t", r.session)
	r.cleanedUp(screenWait)
}

// TestDemoScriptInTmux follows the five-minute demo of docs/demo.md in
// order (demoScript; TestDemoPageIsTheScriptTheTestFollows holds the page to
// it), as a
// speaker would, at 100×30 and at 80×24, and reads each step's proof number
// on screen: digits, never cut. (Pools of 50,000 ids instead of the
// default's 200,000, to seed faster; the script is the same.)
func TestDemoScriptInTmux(t *testing.T) {
	t.Parallel()
	for _, size := range []struct{ w, h int }{{100, 30}, {80, 24}} {
		t.Run(fmt.Sprintf("%dx%d", size.w, size.h), func(t *testing.T) {
			t.Parallel()
			r := startSized(t, fmt.Sprintf("script%d", size.w), size.w, size.h, "--pool-size", "50000")
			const wait = screenWait
			positive := func(n int64) bool { return n > 0 }
			zero := func(n int64) bool { return n == 0 }
			banner := func(step, rest string) *regexp.Regexp {
				return regexp.MustCompile(`▶ ` + regexp.QuoteMeta(step) + `(?: \+ knobs)?  ` + rest)
			}
			atLeast := func(n int64) func(int64) bool { return func(v int64) bool { return v >= n } }
			// 1: healthy, nothing leaked or finalized twice, work done.
			r.waitNumber(banner("1 healthy", `leaked ([\d,]+)`), zero, wait)
			r.waitNumber(banner("1 healthy", `leaked 0 · double ([\d,]+)`), zero, wait)
			r.waitNumber(regexp.MustCompile(`([\d.,]+k?) acq`), positive, wait)
			// 2: crash-no-lease, leaked climbs.
			r.press("2")
			r.waitNumber(banner("2 crash-no-lease", `leaked ([\d,]+)`), positive, wait)
			r.waitFor("ALERT no_lease", wait)
			// 3: crash-with-lease, the reaper brings them back.
			r.press("3")
			r.waitNumber(banner("3 crash-with-lease", `reclaimed ([\d,]+)`), positive, wait)
			// 4: pause-no-fencing, double finalizations.
			r.press("4")
			r.waitNumber(banner("4 pause-no-fencing", `double(?: finalizations)? ([\d,]+)`), positive, wait)
			// 5: pause-with-fencing, zombies fenced, no double finalization.
			r.press("5")
			r.waitNumber(banner("5 pause-with-fencing", `fenced ([\d,]+)`), positive, wait)
			if size.w >= 100 {
				r.waitNumber(banner("5 pause-with-fencing", `fenced [\d,]+ · double ([\d,]+)`), zero, wait)
			}
			// !: fence-in-app, the check in the application lets zombies
			// through: double finalizations with fencing "in app"; F moves
			// the fence into the database.
			r.pressLiteral("!")
			r.waitNumber(banner("! fence-in-app", `double(?: finalizations)? ([\d,]+) · fencing in app`), positive, wait)
			r.pressLiteral("F")
			r.waitFor("fencing in app → on", wait)
			// @: local-clock, work committed past the database's expiry.
			r.pressLiteral("@")
			r.waitNumber(banner("@ local-clock", `past (?:DB )?expiry ([\d,]+)`), positive, wait)
			// #: transfer, the old holders' late commits fenced, none doubled.
			r.pressLiteral("#")
			r.waitNumber(banner("# transfer", `transferred [\d,]+ · (?:old holders )?fenced ([\d,]+)`), positive, wait)
			// $: lost-ack, retries with fresh request ids duplicate; i makes
			// them stable and the ledger replays them.
			r.pressLiteral("$")
			r.waitNumber(banner("$ lost-ack", `dup(?:licates)? ([\d,]+)`), positive, wait)
			r.pressLiteral("i")
			r.waitNumber(banner("$ lost-ack", `dup.* replayed ([\d,]+)`), positive, wait)
			// %: short-lease, healthy workers lose leases, nothing crashed.
			r.pressLiteral("%")
			r.waitNumber(banner("% short-lease", `(?:leases )?lost ([\d,]+)`), positive, wait)
			r.waitNumber(banner("% short-lease", `(?:leases )?lost [\d,]+.* crashes ([\d,]+)`), zero, wait)
			// ^: long-lease, crashed workers' ids stay frozen.
			r.pressLiteral("^")
			r.waitNumber(banner("^ long-lease", `(?:dead-held|held by the dead) [\d,]+ · oldest (\d+)s`), atLeast(2), wait)
			// 6: blocking-contention, sessions wait; s twice back to skip-locked, the waits go.
			r.press("6")
			r.waitNumber(banner("6 blocking-contention", `(?:lock waits: )?waiting (\d+)`), positive, wait)
			r.waitFor("ALERT lock_wait", wait) // the alert that names the failure
			r.press("s")
			r.waitFor("strategy optimistic", wait)
			r.press("s")
			r.waitFor("strategy skip-locked", wait)
			r.waitNumber(banner("6 blocking-contention", `(?:lock waits: )?waiting (\d+)`), zero, wait)
			// 7: optimistic-herd, version checks lost.
			r.press("7")
			r.waitNumber(banner("7 optimistic-herd", `conflicts ([\d,]+)`), positive, wait)
			// &: vacuum-off, dead tuples pile up; u turns autovacuum back on.
			// The alert needs dead tuples over 20% of the table, two to three
			// times the 5,000 first read: the time that took, measured on this
			// machine, bounds the wait for the rest.
			pressed := time.Now()
			r.pressLiteral("&")
			r.waitNumber(banner("& vacuum-off", `dead(?: tuples)? ([\d,.]+k?) · autovac(?:uum)? OFF`), atLeast(5000), wait)
			r.waitFor("ALERT dead_tuples", 3*time.Since(pressed)+wait)
			r.pressLiteral("u")
			r.waitFor("autovacuum OFF → on", wait)
			// *: starvation, a report holds the lowest free ids FOR SHARE
			// and claims pass over them; g ends the report.
			r.pressLiteral("*")
			r.waitNumber(banner("* starvation", `(?:free ids )?passed over ([\d,]+)`), positive, wait)
			r.waitFor("ALERT starvation", wait)
			r.pressLiteral("g")
			r.waitFor("report FOR SHARE 20s → off", wait)
			// 8: drain, the pool runs dry.
			r.press("8")
			r.waitNumber(banner("8 drain", `UNUSED ([\d,]+)`), zero, wait)
			r.waitFor("EMPTY", wait)
			r.waitFor("ALERT depletion", wait)
			// r: a reset says so.
			r.press("r")
			r.waitFor("counters, charts and alerts reset", wait)
			// 9: q, and nothing is left behind.
			r.press("q")
			r.exited(screenWait)
			r.cleanedUp(screenWait)
		})
	}
}

// demoScript is the order of the keys TestDemoScriptInTmux presses: each
// scenario key and the keys it presses within that step.
var demoScript = []struct {
	key  string
	then []string
}{
	{"2", nil}, {"3", nil}, {"4", nil}, {"5", nil}, {"!", []string{"F"}},
	{"@", nil}, {"#", nil}, {"$", []string{"i"}}, {"%", nil}, {"^", nil},
	{"6", []string{"s"}}, {"7", nil}, {"&", []string{"u"}}, {"*", []string{"g"}}, {"8", nil},
}

// TestDemoPageIsTheScriptTheTestFollows reads the numbered steps of
// docs/demo.md and holds them to demoScript: the same scenario keys in the
// same order, each step naming the keys the test presses within it.
func TestDemoPageIsTheScriptTheTestFollows(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "docs", "demo.md"))
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	for _, line := range strings.Split(string(raw), "\n") {
		switch {
		case regexp.MustCompile(`^\d+\. `).MatchString(line):
			steps = append(steps, line)
		case len(steps) > 0 && strings.HasPrefix(line, "   "):
			steps[len(steps)-1] += " " + strings.TrimSpace(line)
		}
	}
	press := regexp.MustCompile("Press `([^`]+)`")
	var keys []string
	var texts []string
	for _, s := range steps {
		if m := press.FindStringSubmatch(s); m != nil {
			keys = append(keys, m[1])
			texts = append(texts, s)
		}
	}
	if len(keys) != len(demoScript) {
		t.Fatalf("docs/demo.md presses %d scenario keys %v; the test follows %d", len(keys), keys, len(demoScript))
	}
	for i, step := range demoScript {
		if keys[i] != step.key {
			t.Errorf("step %d of docs/demo.md presses %q; the test presses %q", i+2, keys[i], step.key)
		}
		for _, k := range step.then {
			if !strings.Contains(texts[i], "`"+k+"`") {
				t.Errorf("the step of %q in docs/demo.md does not name %q, which the test presses there", step.key, k)
			}
		}
	}
}
