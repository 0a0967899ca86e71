package cli

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/workload"
)

var (
	buildOnce sync.Once
	builtBin  string
	buildErr  error
	buildOut  []byte
)

// binary builds pooltop once per test run and returns its path, for the
// tests that run it as a process of its own (tmux, the fleet).
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pooltop-bin-")
		if err != nil {
			buildErr = err
			return
		}
		builtBin = filepath.Join(dir, "pooltop")
		buildOut, buildErr = exec.Command("go", "build", "-o", builtBin, "github.com/pooltop-dev/pooltop").CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("build: %v\n%s", buildErr, buildOut)
	}
	return builtBin
}

// workProcess is one `pooltop work` running as a process of its own.
type workProcess struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan error
}

func startWork(t *testing.T, args ...string) *workProcess {
	t.Helper()
	p := &workProcess{done: make(chan error, 1)}
	p.cmd = exec.Command(binary(t), append([]string{"work"}, args...)...)
	p.cmd.Env = workload.WorkEnv()
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
	})
	return p
}

// wait waits for the process to end and returns its exit code.
func (p *workProcess) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.done:
		p.done <- nil // for the cleanup
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(30 * time.Second):
		t.Fatalf("pooltop work did not end within 30s\n%s", p.stderr.String())
		return -1
	}
}

// TestFleetOfProcesses runs two `pooltop work` processes on one pool and
// watches them as a fleet: both alive with their cycle rates; one killed
// with SIGKILL while it holds leases (tasks of 400 ms) is shown gone, and
// the other's reaper brings its leases back; the other, sent SIGTERM,
// drains, releases what it holds, and is shown stopped. The audit then
// finds every id accounted for and no effect twice.
func TestFleetOfProcesses(t *testing.T) {
	ctx := context.Background()
	schema := pgtest.MigratedSchema(t)
	dsn := pgtest.DSN()
	pooltop(t, "seed", "--dsn", dsn, "--schema", schema, "--count", "20000").must(t)
	conn := pgtest.Conn(t, schema)

	common := []string{"--dsn", dsn, "--schema", schema, "--workers", "4", "--heartbeat", "200ms", "--json"}
	keeper := startWork(t, append(common, "--name", "keeper", "--task", "20ms")...)
	victim := startWork(t, append(common, "--name", "victim", "--task", "400ms", "--no-reaper")...)

	col, err := collector.New(ctx, collector.Config{DSN: dsn, Table: schema + ".resource_pool"})
	if err != nil {
		t.Fatal(err)
	}
	defer col.Close()
	fleet := func() map[string]collector.Process {
		s, err := col.Poll(ctx)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]collector.Process{}
		for _, p := range s.Fleet {
			m[p.Name] = p
		}
		return m
	}
	pgtest.Eventually(t, "both processes alive and cycling", 20*time.Second, func() bool {
		f := fleet()
		return f["keeper"].Alive && f["victim"].Alive && f["keeper"].CyclesPS > 0 && f["victim"].CyclesPS > 0 &&
			f["victim"].PID == int32(victim.cmd.Process.Pid) && f["keeper"].Workers == 4
	})

	// The victim holds leases when it is killed: its tasks take 400 ms.
	var runID string
	if err := conn.QueryRow(ctx, "SELECT run_id FROM pooltop_worker WHERE name = 'victim'").Scan(&runID); err != nil {
		t.Fatal(err)
	}
	held := func() (n int) {
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM resource_pool WHERE status = 'PENDING' AND holder LIKE '%-' || $1", runID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	pgtest.Eventually(t, "the victim holds leases", 10*time.Second, func() bool { return held() > 0 })
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	victim.wait(t)
	if n := held(); n == 0 {
		t.Fatal("the killed process left no PENDING lease: SIGKILL must not release")
	}
	pgtest.Eventually(t, "the killed process shown gone", 10*time.Second, func() bool {
		v := fleet()["victim"]
		return v.State == collector.ProcessGone && !v.Alive && v.CyclesPS == 0
	})
	// Gone, it is shown with the leases it still holds, counted in the pool:
	// never more than it held when it died, and falling to 0 as the
	// keeper's reaper takes them back, while it is still listed gone.
	died := held()
	pgtest.Eventually(t, "the gone process's leases counted in the pool", 10*time.Second, func() bool {
		v := fleet()["victim"]
		return v.HeldCounted && v.Held > 0 && int(v.Held) <= died && !v.HeldAtLeast
	})
	pgtest.Eventually(t, "the keeper's reaper brings the killed process's leases back", 15*time.Second, func() bool { return held() == 0 })
	pgtest.Eventually(t, "the gone process shown holding nothing", 10*time.Second, func() bool {
		v := fleet()["victim"]
		return v.State == collector.ProcessGone && v.HeldCounted && v.Held == 0
	})

	// SIGTERM drains: the keeper releases what it holds and says so.
	if err := keeper.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := keeper.wait(t); code != 0 {
		t.Fatalf("keeper: exit %d\n%s", code, keeper.stderr.String())
	}
	sum := decode[workSummary](t, keeper.stdout.String())
	if sum.Held != 0 || sum.Committed == 0 || sum.Name != "keeper" {
		t.Fatalf("keeper's summary after SIGTERM: %+v", sum)
	}
	var pending int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM resource_pool WHERE status = 'PENDING'").Scan(&pending); err != nil {
		t.Fatal(err)
	}
	if pending != 0 {
		t.Fatalf("%d PENDING rows after the drain and the reaper", pending)
	}
	if k := fleet()["keeper"]; k.State != collector.ProcessStopped || k.Alive {
		t.Fatalf("keeper after SIGTERM: %+v", k)
	}
	pooltop(t, "verify", "--dsn", dsn, "--schema", schema).must(t)
}

// TestWorkRefusals: work needs --dsn, never the environment; refuses a name
// a live process holds; and a bad knob is named.
func TestWorkRefusals(t *testing.T) {
	t.Setenv("DATABASE_URL", pgtest.DSN())
	refused(t, pooltop(t, "work"), exitUsage, "--dsn is required", "work without --dsn")
	refused(t, pooltop(t, "work", "--dsn", pgtest.DSN(), "--heartbeat", "1ms"), exitUsage, "--heartbeat", "a bad heartbeat")
	refused(t, pooltop(t, "work", "--dsn", pgtest.DSN(), "--ttl", "1ms"), exitUsage, "ttl", "a bad ttl")

	schema := pgtest.MigratedSchema(t)
	eng := engine.New(pgtest.Pool(t, schema, pgtest.Options{}))
	live := engine.Process{Name: "taken", Host: "elsewhere", PID: 1, RunID: "r1", Workers: 1, Heartbeat: time.Minute}
	if err := eng.Register(context.Background(), live); err != nil {
		t.Fatal(err)
	}
	r := pooltop(t, "work", "--dsn", pgtest.DSN(), "--schema", schema, "--name", "taken", "--duration", "1s")
	refused(t, r, exitError, `running under the name "taken"`, "a name a live process holds")
}

// refused checks that r failed with code and one line of stderr holding want.
func refused(t *testing.T, r result, code int, want, what string) {
	t.Helper()
	if r.code != code || !strings.Contains(r.stderr, want) || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("%s: exit %d, stderr %q; want exit %d and one line with %q", what, r.code, r.stderr, code, want)
	}
}

// TestChaosWithRealFaults runs a short campaign of every real fault on a
// fleet of three pooltop work processes on a throwaway server: processes
// killed with SIGKILL mid-cycle, their sessions terminated, PostgreSQL
// ended by an immediate shutdown and restarted, connections cut around a
// commit (after the server ran it, then before), the network stalled for
// longer than a lease. It must end with every
// fault injected, every process cycling again after the last one, no id
// finalized twice and none left PENDING.
func TestChaosWithRealFaults(t *testing.T) {
	bin := binary(t)
	workBinary = func() (string, error) { return bin, nil }
	t.Cleanup(func() { workBinary = os.Executable })
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code := run(ctx, []string{"chaos", "--faults", "kill,terminate,restart,lost-ack,partition", "--duration", "11s", "--fault-every", "1s",
		"--processes", "3", "--pool-size", "50000", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	sum := decode[workload.FaultSummary](t, out.String())
	for _, f := range []workload.Fault{workload.FaultKill, workload.FaultTerminate, workload.FaultRestart, workload.FaultLostAck, workload.FaultPartition} {
		if sum.Faults[string(f)] == 0 {
			t.Errorf("no %s fault injected: %+v", f, sum.Faults)
		}
	}
	if !sum.Recovered || sum.Committed == 0 || sum.Audit.DoubleFinalizations != 0 || sum.Audit.Pending != 0 || !sum.OK() {
		t.Fatalf("after the campaign: %+v", sum)
	}
	// The first lost-ack cuts a commit the server ran (both halves are
	// shown one by one in internal/faultproxy's TestLostAcknowledgement).
	if sum.AcksLost["delivered"] == 0 || sum.History.Retried == 0 {
		t.Fatalf("lost acknowledgements: %v cut, %d commits retried under their request id", sum.AcksLost, sum.History.Retried)
	}
	if h := sum.History; !h.Linearizable || h.Ops < int(sum.Committed) || h.IDs == 0 {
		t.Fatalf("the history check after the campaign: %+v", h)
	}
	if sum.Processes <= 3 {
		t.Fatalf("a killed process is replaced: %d started", sum.Processes)
	}
}

// TestChaosPauseFault freezes a real pooltop work process with SIGSTOP
// while it holds leases, keeps it frozen until the reaper has taken them
// back, resumes it, and waits until it has acted on each: it wakes up
// believing it holds them, and every commit or release it makes with them
// is rejected by the fence (one accepted would be a violation). The
// history check passes, no id gets two effects, and no process is left
// frozen. One pause is enough: the campaign waits for its story.
func TestChaosPauseFault(t *testing.T) {
	bin := binary(t)
	workBinary = func() (string, error) { return bin, nil }
	t.Cleanup(func() { workBinary = os.Executable })
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	code := run(ctx, []string{"chaos", "--faults", "pause", "--duration", "2s", "--fault-every", "1s",
		"--processes", "2", "--pool-size", "20000", "--json"}, &out, &errb)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	sum := decode[workload.FaultSummary](t, out.String())
	if sum.Faults["pause"] == 0 || sum.ZombieCommitsRejected+sum.ZombieOthersRejected == 0 {
		t.Fatalf("pauses %d, zombie operations rejected %d + %d: want both above 0\n%s", sum.Faults["pause"], sum.ZombieCommitsRejected, sum.ZombieOthersRejected, errb.String())
	}
	if !sum.OK() || sum.Audit.DoubleFinalizations != 0 || sum.Audit.Pending != 0 || !sum.History.Linearizable {
		t.Fatalf("after the campaign: %+v", sum)
	}
	t.Logf("%d pauses, %d zombie commits rejected, %d committed", sum.Faults["pause"], sum.ZombieCommitsRejected, sum.Committed)
}
