package pgembed_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/internal/pgembed"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

const helperEnv = "PGEMBED_TEST_HELPER"

func startServer(t testing.TB, opts pgembed.Options) *pgembed.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := pgembed.Start(ctx, opts)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return srv
}

// postmasterPID reads the server's pid from the first line of postmaster.pid.
func postmasterPID(t testing.TB, dataDir string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		t.Fatalf("reading postmaster.pid: %v", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatalf("parsing postmaster.pid %q: %v", line, err)
	}
	return pid
}

// alive reports whether pid is a running process; a zombie (left when its
// new parent does not reap it) counts as gone.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}

// ourDirs lists the pooltop-pg-<our pid>-* directories in pgembed.BaseDir().
func ourDirs(t *testing.T) map[string]bool {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(pgembed.BaseDir(), fmt.Sprintf("pooltop-pg-%d-*", os.Getpid())))
	if err != nil {
		t.Fatal(err)
	}
	set := make(map[string]bool, len(m))
	for _, d := range m {
		set[d] = true
	}
	return set
}

func sameSet(a, b map[string]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// serverProcesses lists processes whose command line mentions one of our
// temporary directories (postgres is started with -D <dir>/data; its
// children inherit that command line).
func serverProcesses(t *testing.T) []int {
	t.Helper()
	marker := []byte(filepath.Join(pgembed.BaseDir(), fmt.Sprintf("pooltop-pg-%d-", os.Getpid())))
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	var pids []int
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, marker) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		if alive(pid) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestFindBinaries(t *testing.T) {
	dir, err := pgembed.FindBinaries()
	if err != nil {
		t.Fatalf("FindBinaries: %v", err)
	}
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Errorf("%s not in %s: %v", name, dir, err)
		}
	}
	t.Logf("binaries in %s", dir)
}

func TestFindBinariesWithoutPATH(t *testing.T) {
	// Fake installations: only the lookup is under test here, so empty
	// executable files stand in for the binaries.
	root := t.TempDir()
	for _, v := range []string{"9.6", "16", "10", "17beta", "15"} {
		dir := filepath.Join(root, v, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		names := []string{"initdb", "pg_ctl", "postgres"}
		if v == "16" {
			names = names[:2] // incomplete: no postgres, must be skipped
		}
		for _, name := range names {
			if err := os.WriteFile(filepath.Join(dir, name), nil, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Setenv("PATH", t.TempDir())
	defer pgembed.SetLibRoot(root)()
	dir, err := pgembed.FindBinaries()
	if err != nil {
		t.Fatalf("FindBinaries: %v", err)
	}
	if want := filepath.Join(root, "15", "bin"); dir != want {
		t.Errorf("FindBinaries = %s, want %s (newest complete version)", dir, want)
	}

	defer pgembed.SetLibRoot(t.TempDir())()
	_, err = pgembed.FindBinaries()
	if !errors.Is(err, pgembed.ErrNoBinaries) {
		t.Fatalf("err = %v, want ErrNoBinaries", err)
	}
	msg := err.Error()
	for _, want := range []string{"initdb", "apt-get install postgresql", "pass --dsn (or set DATABASE_URL) to use an existing server"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not mention %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") {
		t.Errorf("error is not one line: %q", msg)
	}
	t.Logf("error: %s", msg)
}

func TestStartQueryStop(t *testing.T) {
	ctx := context.Background()
	srv := startServer(t, pgembed.Options{})
	t.Logf("startup time %v, port %d, bin %s", srv.StartupTime(), srv.Port(), srv.BinDir())

	wantDSN := fmt.Sprintf("postgres://pooltop@127.0.0.1:%d/pooltop?sslmode=disable", srv.Port())
	if srv.DSN() != wantDSN {
		t.Errorf("DSN = %q, want %q", srv.DSN(), wantDSN)
	}
	if srv.StartupTime() <= 0 {
		t.Errorf("StartupTime = %v", srv.StartupTime())
	}
	if _, err := os.Stat(filepath.Join(srv.BinDir(), "pgbench")); err != nil {
		t.Errorf("pgbench not next to the server binaries: %v", err)
	}

	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	var db, version string
	if err := conn.QueryRow(ctx, "select current_database(), version()").Scan(&db, &version); err != nil {
		t.Fatalf("query: %v", err)
	}
	conn.Close(ctx)
	if db != "pooltop" {
		t.Errorf("current_database() = %q, want pooltop", db)
	}
	t.Logf("%s", version)

	pid := postmasterPID(t, srv.DataDir())
	if !alive(pid) {
		t.Fatalf("postmaster pid %d from postmaster.pid not running", pid)
	}
	dataDir := srv.DataDir()
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data directory still there after Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Dir(dataDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary directory still there after Stop: %v", err)
	}
	pgtest.Eventually(t, fmt.Sprintf("postgres pid %d gone after Stop", pid), 10*time.Second, func() bool { return !alive(pid) })
	if err := srv.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestCustomNamesAndSettings(t *testing.T) {
	ctx := context.Background()
	srv := startServer(t, pgembed.Options{
		Database: "Odd Name",
		User:     "bench user",
		Settings: map[string]string{"max_connections": "50", "work_mem": "8MB"},
	})
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatalf("connect %s: %v", srv.DSN(), err)
	}
	defer conn.Close(ctx)
	var db, usr, maxConn, workMem, fsync, listen string
	err = conn.QueryRow(ctx, `select current_database(), current_user,
		current_setting('max_connections'), current_setting('work_mem'),
		current_setting('fsync'), current_setting('listen_addresses')`).Scan(&db, &usr, &maxConn, &workMem, &fsync, &listen)
	if err != nil {
		t.Fatalf("query: %v", err)
	}
	if db != "Odd Name" || usr != "bench user" || maxConn != "50" || workMem != "8MB" || fsync != "off" || listen != "127.0.0.1" {
		t.Errorf("got db=%q user=%q max_connections=%s work_mem=%s fsync=%s listen_addresses=%s",
			db, usr, maxConn, workMem, fsync, listen)
	}
}

func TestTwoServers(t *testing.T) {
	var (
		wg   sync.WaitGroup
		srvs [2]*pgembed.Server
		errs [2]error
	)
	for i := range srvs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			srvs[i], errs[i] = pgembed.Start(ctx, pgembed.Options{})
		})
	}
	wg.Wait()
	for i, srv := range srvs {
		if errs[i] != nil {
			t.Fatalf("Start %d: %v", i, errs[i])
		}
		t.Cleanup(func() { _ = srv.Stop() })
	}
	if srvs[0].Port() == srvs[1].Port() {
		t.Fatalf("both servers on port %d", srvs[0].Port())
	}
	if srvs[0].DataDir() == srvs[1].DataDir() {
		t.Fatalf("both servers in %s", srvs[0].DataDir())
	}
	ctx := context.Background()
	for i, srv := range srvs {
		conn, err := pgx.Connect(ctx, srv.DSN())
		if err != nil {
			t.Fatalf("server %d: connect: %v", i, err)
		}
		var port int
		err = conn.QueryRow(ctx, "select current_setting('port')::int").Scan(&port)
		conn.Close(ctx)
		if err != nil {
			t.Fatalf("server %d: query: %v", i, err)
		}
		if port != srv.Port() {
			t.Errorf("server %d: port setting %d, Port() %d", i, port, srv.Port())
		}
	}
	// Concurrent Stops of the same server all return the one result.
	var stops sync.WaitGroup
	for range 3 {
		stops.Go(func() {
			if err := srvs[0].Stop(); err != nil {
				t.Errorf("concurrent Stop: %v", err)
			}
		})
	}
	stops.Wait()
}

func TestCancelledContext(t *testing.T) {
	before := ourDirs(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	srv, err := pgembed.Start(ctx, pgembed.Options{})
	if err == nil {
		_ = srv.Stop()
		t.Fatal("Start with a cancelled context succeeded")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if after := ourDirs(t); !sameSet(before, after) {
		t.Errorf("temporary directories before %v, after %v", before, after)
	}
}

// cancelOn calls cancel when the output written to it contains marker.
type cancelOn struct {
	mu     sync.Mutex
	buf    []byte
	marker string
	cancel context.CancelFunc
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf = append(c.buf, p...)
	if bytes.Contains(c.buf, []byte(c.marker)) {
		c.cancel()
	}
	return len(p), nil
}

// TestCancelDuringStartup cancels while initdb runs, and while the server is
// starting: what was started must be stopped and the directory removed.
func TestCancelDuringStartup(t *testing.T) {
	for _, tc := range []struct{ phase, marker string }{
		{"initdb", "The files belonging to this database system"},
		{"server", "starting PostgreSQL"},
	} {
		t.Run(tc.phase, func(t *testing.T) {
			// initdb runs only without a kept cluster to copy.
			t.Setenv("POOLTOP_INITDB_CACHE", "off")
			before := ourDirs(t)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv, err := pgembed.Start(ctx, pgembed.Options{
				Settings: map[string]string{"log_min_messages": "log"},
				Log:      &cancelOn{marker: tc.marker, cancel: cancel},
			})
			if err == nil {
				_ = srv.Stop()
				t.Fatalf("Start succeeded although cancelled during %s", tc.phase)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("err = %v, want context.Canceled", err)
			}
			if after := ourDirs(t); !sameSet(before, after) {
				t.Errorf("temporary directories before %v, after %v", before, after)
			}
			if pids := serverProcesses(t); len(pids) > 0 {
				t.Errorf("processes left running: %v", pids)
			}
		})
	}
}

func TestPortTakenRetries(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	takenPort := taken.Addr().(*net.TCPAddr).Port
	calls := 0
	restore := pgembed.SetFreePort(func(pick func() (int, error)) (int, error) {
		calls++
		if calls == 1 {
			return takenPort, nil // as if another process grabbed it first
		}
		return pick()
	})
	defer restore()
	srv := startServer(t, pgembed.Options{})
	if srv.Port() == takenPort {
		t.Fatalf("server reports the taken port %d", takenPort)
	}
	if calls != 2 {
		t.Errorf("free port picked %d times, want 2", calls)
	}
	conn, err := pgx.Connect(context.Background(), srv.DSN())
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	conn.Close(context.Background())
}

func TestBadSettingFailsWithLog(t *testing.T) {
	before := ourDirs(t)
	var log bytes.Buffer
	var mu sync.Mutex
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := pgembed.Start(ctx, pgembed.Options{
		Settings: map[string]string{"shared_buffers": "lots"},
		Log:      lockedWriter{&mu, &log},
	})
	if err == nil {
		_ = srv.Stop()
		t.Fatal("Start with an invalid setting succeeded")
	}
	if !strings.Contains(err.Error(), "shared_buffers") {
		t.Errorf("error does not quote the server log: %v", err)
	}
	mu.Lock()
	logged := log.String()
	mu.Unlock()
	if !strings.Contains(logged, "shared_buffers") {
		t.Errorf("Options.Log did not receive the server output: %q", logged)
	}
	if after := ourDirs(t); !sameSet(before, after) {
		t.Errorf("temporary directories before %v, after %v", before, after)
	}
	if pids := serverProcesses(t); len(pids) > 0 {
		t.Errorf("processes left running: %v", pids)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestHelperProcess is not a real test: TestKilledParentLeavesNoServer runs
// the test binary with helperEnv set to make it start a server, report it
// and block until killed.
func TestHelperProcess(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	srv, err := pgembed.Start(ctx, pgembed.Options{})
	if err != nil {
		fmt.Printf("ERROR %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("PID %d\nDATADIR %s\n", postmasterPID(t, srv.DataDir()), srv.DataDir())
	time.Sleep(time.Minute) // wait to be killed; give up if nobody does
	_ = srv.Stop()
	os.Exit(1)
}

func TestKilledParentLeavesNoServer(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})

	var pid int
	var dataDir string
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	timeout := time.After(30 * time.Second)
	for pid == 0 || dataDir == "" {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatal("helper exited before reporting its server")
			}
			switch {
			case strings.HasPrefix(line, "PID "):
				pid, _ = strconv.Atoi(strings.TrimPrefix(line, "PID "))
			case strings.HasPrefix(line, "DATADIR "):
				dataDir = strings.TrimPrefix(line, "DATADIR ")
			case strings.HasPrefix(line, "ERROR "):
				t.Fatalf("helper: %s", line)
			}
		case <-timeout:
			t.Fatal("helper did not report its server within 30s")
		}
	}
	helperDir := filepath.Dir(dataDir)
	if !alive(pid) {
		t.Fatalf("helper's postgres (pid %d) not running", pid)
	}
	if !strings.HasPrefix(filepath.Base(helperDir), fmt.Sprintf("pooltop-pg-%d-", cmd.Process.Pid)) {
		t.Fatalf("helper's directory %s not named after its pid %d", helperDir, cmd.Process.Pid)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	killedAt := time.Now()
	pgtest.Eventually(t, fmt.Sprintf("orphaned postgres pid %d gone after its parent was killed", pid), 10*time.Second,
		func() bool { return !alive(pid) })
	t.Logf("postgres pid %d gone %v after its parent was killed", pid, time.Since(killedAt))
	if _, err := os.Stat(helperDir); err != nil {
		t.Fatalf("helper's directory should still exist before cleanup: %v", err)
	}

	// A new Start removes the directory left by the killed process.
	srv := startServer(t, pgembed.Options{})
	if _, err := os.Stat(helperDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale directory %s not removed by Start: %v", helperDir, err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkColdStart(b *testing.B) {
	var total time.Duration
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		srv, err := pgembed.Start(ctx, pgembed.Options{})
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		total += srv.StartupTime()
		if err := srv.Stop(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "startup-ms/op")
}

// Crash ends the server by an immediate shutdown and starts it again on
// the same port: a session open before it is cut, a committed row survives
// (crash recovery replays the WAL, with synchronous_commit on), a new session connects at the same DSN,
// and Stop still removes everything.
func TestCrashRestartsOnTheSamePort(t *testing.T) {
	srv := startServer(t, pgembed.Options{Settings: map[string]string{"synchronous_commit": "on"}})
	ctx := context.Background()
	before, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close(ctx)
	if _, err := before.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	oldPID := postmasterPID(t, srv.DataDir())
	if err := srv.Crash(ctx); err != nil {
		t.Fatal(err)
	}
	if newPID := postmasterPID(t, srv.DataDir()); newPID == oldPID || alive(oldPID) {
		t.Fatalf("postmaster %d after the crash, %d before (alive: %v)", newPID, oldPID, alive(oldPID))
	}
	if _, err := before.Exec(ctx, "SELECT 1"); err == nil {
		t.Fatal("a session from before the crash still works")
	}
	after, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close(ctx)
	var v int
	if err := after.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Fatalf("the committed row after the crash: %d, %v", v, err)
	}
	dir := srv.DataDir()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("%s left behind after Stop: %v", dir, err)
	}
}

// The first start keeps its fresh cluster in the cache directory, and the
// next start with the same superuser copies it instead of running initdb;
// the copy is a working server of its own. Another superuser's name gets
// a template of its own, and POOLTOP_INITDB_CACHE=off keeps none.
func TestInitdbTemplate(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	templates := func() []string {
		t.Helper()
		m, err := filepath.Glob(filepath.Join(cache, "pooltop", "initdb-*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	first := startServer(t, pgembed.Options{})
	if got := templates(); len(got) != 1 {
		t.Fatalf("after the first start: templates %v, want one", got)
	}
	// The template is what initdb wrote: the second start's data directory
	// is a copy, so a file marked in the template turns up in it.
	mark := filepath.Join(templates()[0], "pooltop-template-test")
	if err := os.WriteFile(mark, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	second := startServer(t, pgembed.Options{})
	if _, err := os.Stat(filepath.Join(second.DataDir(), "pooltop-template-test")); err != nil {
		t.Fatalf("the second start did not copy the template: %v", err)
	}
	for _, srv := range []*pgembed.Server{first, second} {
		conn, err := pgx.Connect(context.Background(), srv.DSN())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(context.Background(), "CREATE TABLE t (id int); INSERT INTO t VALUES (1)"); err != nil {
			t.Fatalf("server on %d: %v", srv.Port(), err)
		}
		conn.Close(context.Background())
	}
	startServer(t, pgembed.Options{User: "other"})
	if got := templates(); len(got) != 2 {
		t.Fatalf("after a start as another superuser: templates %v, want two", got)
	}
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv("POOLTOP_INITDB_CACHE", "off")
	startServer(t, pgembed.Options{})
	if m, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_CACHE_HOME"), "pooltop", "*")); len(m) != 0 {
		t.Fatalf("with the cache off: %v kept", m)
	}
}
