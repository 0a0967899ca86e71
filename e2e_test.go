package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is needed for the end-to-end test (apt-get install tmux; .ci/run installs it)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pooltop")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	r := &tmuxRun{t: t, session: fmt.Sprintf("pooltop-%s-%d", name, os.Getpid()), dir: dir}
	pidFile := filepath.Join(dir, "pid")
	// The subshell writes its pid and execs pooltop, so that pid is pooltop's.
	script := fmt.Sprintf("(echo $BASHPID > %s; exec env -u DATABASE_URL -u PGHOST -u PGDATABASE -u PGUSER -u PGPORT %s --pool-size 20000 2>%s/stderr); echo $? > %s/exit",
		pidFile, bin, dir, dir)
	r.tmux("new-session", "-d", "-s", r.session, "-x", "120", "-y", "40", script)
	t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", r.session).Run() })
	r.waitFor("█ UNUSED", 60*time.Second)
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
	r.waitFor("throughput/s  acquires", 20*time.Second)
	r.tmux("send-keys", "-t", r.session, "l")
	r.waitFor("lease    OFF", 10*time.Second)
	r.tmux("send-keys", "-t", r.session, "f")
	r.waitFor("fencing  OFF", 10*time.Second)
	r.tmux("send-keys", "-t", r.session, "q")
	exitFile := filepath.Join(r.dir, "exit")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(exitFile)
		if err == nil && len(b) > 0 {
			if code := strings.TrimSpace(string(b)); code != "0" {
				stderr, _ := os.ReadFile(filepath.Join(r.dir, "stderr"))
				t.Fatalf("pooltop exited with %s\n%s", code, stderr)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pooltop did not exit after q; screen:\n%s", r.screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
	r.cleanedUp(10 * time.Second)
}

// Closing the terminal (the session's pty goes away: SIGHUP) cleans up as
// Ctrl-C does: the embedded server stops and its directory is removed.
func TestClosingTheTerminalCleansUp(t *testing.T) {
	t.Parallel()
	r := startInTmux(t, "hup")
	r.tmux("kill-session", "-t", r.session)
	r.cleanedUp(30 * time.Second)
}
