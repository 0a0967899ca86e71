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

// TestDashboardInTmux runs the real binary in tmux against its embedded
// PostgreSQL, waits for the dashboard, presses keys and reads the screen.
func TestDashboardInTmux(t *testing.T) {
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is needed for the end-to-end test (apt-get install tmux; .ci/run installs it)")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "pooltop")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	session := fmt.Sprintf("pooltop-e2e-%d", os.Getpid())
	exitFile := filepath.Join(dir, "exit")
	pidFile := filepath.Join(dir, "pid")
	// The subshell writes its pid and execs pooltop, so that pid is pooltop's.
	script := fmt.Sprintf("(echo $BASHPID > %s; exec env -u DATABASE_URL -u PGHOST -u PGDATABASE -u PGUSER -u PGPORT %s --pool-size 20000 2>%s/stderr); echo $? > %s",
		pidFile, bin, dir, exitFile)
	tmux := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("tmux", args...).CombinedOutput()
		if err != nil {
			t.Fatalf("tmux %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	tmux("new-session", "-d", "-s", session, "-x", "120", "-y", "40", script)
	t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", session).Run() })
	screen := func() string { return tmux("capture-pane", "-p", "-t", session) }
	waitFor := func(what string, timeout time.Duration) string {
		t.Helper()
		deadline := time.Now().Add(timeout)
		for {
			s := screen()
			if strings.Contains(s, what) {
				return s
			}
			if time.Now().After(deadline) {
				stderr, _ := os.ReadFile(filepath.Join(dir, "stderr"))
				t.Fatalf("%q did not appear within %v; screen:\n%s\nstderr:\n%s", what, timeout, s, stderr)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	s := waitFor("█ UNUSED", 60*time.Second)
	for _, want := range []string{"pooltop demo", "UNUSED", "lease    on", "who blocks whom", "events"} {
		if !strings.Contains(s, want) {
			t.Fatalf("dashboard lacks %q:\n%s", want, s)
		}
	}
	waitFor("throughput/s  acquires", 20*time.Second)
	pid, err := os.ReadFile(pidFile)
	if err != nil || len(strings.TrimSpace(string(pid))) == 0 {
		t.Fatalf("no pid recorded: %v", err)
	}
	mark := "pooltop-pg-" + strings.TrimSpace(string(pid)) + "-"
	var running []string
	for _, base := range []string{"/dev/shm", os.TempDir()} {
		m, _ := filepath.Glob(filepath.Join(base, mark+"*"))
		running = append(running, m...)
	}
	if len(running) != 1 {
		t.Fatalf("while running, pooltop's server directory %s* should exist once: %v", mark, running)
	}
	tmux("send-keys", "-t", session, "l")
	waitFor("lease    OFF", 10*time.Second)
	tmux("send-keys", "-t", session, "f")
	waitFor("fencing  OFF", 10*time.Second)
	tmux("send-keys", "-t", session, "q")
	deadline := time.Now().Add(30 * time.Second)
	for {
		b, err := os.ReadFile(exitFile)
		if err == nil && len(b) > 0 {
			if code := strings.TrimSpace(string(b)); code != "0" {
				stderr, _ := os.ReadFile(filepath.Join(dir, "stderr"))
				t.Fatalf("pooltop exited with %s\n%s", code, stderr)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pooltop did not exit after q; screen:\n%s", screen())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Quitting removed the embedded server: no postgres runs on a data
	// directory of that pooltop process, and the directory is gone.
	out, _ := exec.Command("pgrep", "-af", mark).Output()
	if strings.Contains(string(out), "postgres") {
		t.Errorf("a postgres outlived its pooltop: %s", out)
	}
	for _, base := range []string{"/dev/shm", os.TempDir()} {
		if left, _ := filepath.Glob(filepath.Join(base, mark+"*")); len(left) > 0 {
			t.Errorf("pooltop left %v behind", left)
		}
	}
}
