package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
)

// The real binary replays a real recording in tmux: REPLAY and the
// recorded time in the header, pause, end and start, a time typed in, the
// chart window key, and q.
func TestReplayInTmux(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Fatal("tmux is needed for the end-to-end test (apt-get install tmux; .ci/run installs it)")
	}
	db := migrated(t, 30)
	dir := t.TempDir()
	file := filepath.Join(dir, "watch.ndjson")
	pooltop(t, append([]string{"watch", "--headless", "--json", "--count", "6", "--interval", "250ms", "--record", file}, db...)...).must(t)
	bin := filepath.Join(dir, "pooltop")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/pooltop-dev/pooltop").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	r := &tmuxRun{t: t, session: fmt.Sprintf("pooltop-replay-%d", os.Getpid()), dir: dir}
	r.tmux("new-session", "-d", "-s", r.session, "-x", "150", "-y", "45",
		fmt.Sprintf("%s replay %s 2>%s/stderr; echo $? > %s/exit", bin, file, dir, dir))
	t.Cleanup(func() { _ = exec.Command("tmux", "kill-session", "-t", r.session).Run() })
	r.waitFor("REPLAY ", 30*time.Second)
	r.waitFor("UNUSED 30", 10*time.Second)
	r.press("Space")
	r.waitFor("paused 1x", 10*time.Second)
	r.press("End")
	r.waitFor("│ 6/6", 10*time.Second)
	r.press("Home")
	r.waitFor("│ 1/6", 10*time.Second)
	// The offset of the fourth snapshot from the first, typed in.
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ls := lines(raw)
	first, fourth := decode[collector.Snapshot](t, string(ls[1])), decode[collector.Snapshot](t, string(ls[4]))
	r.press("g")
	r.waitFor("go to (HH:MM:SS", 10*time.Second) // typed at once, g and the time would read as one key
	r.press("-l", fmt.Sprintf("+%dms", fourth.Time.Sub(first.Time).Milliseconds()+1))
	r.press("Enter")
	r.waitFor("│ 4/6", 10*time.Second)
	r.press("h")
	r.waitFor("charts 1m", 10*time.Second)
	r.press("q")
	r.exited(10 * time.Second)
}
