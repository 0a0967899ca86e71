// Package pgembed launches a private, throwaway PostgreSQL server from the
// system's PostgreSQL binaries, so pooltop can run (demos, benchmarks, tests)
// without the user having to provide a database.
//
// The server listens on 127.0.0.1 only, uses trust authentication and
// durability-trading settings (fsync=off and friends): it is demo-grade and
// must never hold data anybody cares about. All of its files live in one
// temporary directory that Stop removes.
//
// The package installs no signal handlers. Callers should
//
//	srv, err := pgembed.Start(ctx, pgembed.Options{})
//	if err != nil { ... }
//	defer srv.Stop()
//
// and cancel ctx / call Stop on SIGINT and SIGTERM (for example with
// signal.NotifyContext), so the server is shut down cleanly and its files are
// removed. If the process is killed outright (SIGKILL), the kernel sends
// SIGQUIT to the server (parent-death signal) and the next Start removes the
// leftover directory.
package pgembed

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Options configures Start. The zero value is usable and gives a database and
// superuser both named "pooltop".
type Options struct {
	// Database is the database to create; default "pooltop".
	Database string
	// User is the superuser role name given to initdb -U; default "pooltop".
	User string
	// Settings are extra server settings passed as -c key=value; they
	// override the package defaults.
	Settings map[string]string
	// Log receives the output of initdb and of the server; nil discards it.
	// The last few KiB are kept in memory either way, to be quoted in the
	// error when startup fails.
	Log io.Writer
}

// ErrNoBinaries is returned (wrapped) by FindBinaries and Start when the
// PostgreSQL server binaries are not installed, so callers can fall back to
// an existing server or print installation advice.
var ErrNoBinaries = errors.New("PostgreSQL server binaries not found")

const (
	defaultName = "pooltop"
	// dirPrefix starts the name of every temporary directory; the creating
	// process's pid follows, so stale directories can be recognised.
	dirPrefix = "pooltop-pg-"
	// tailSize is how much recent output is kept for error messages.
	tailSize = 8 << 10
	// readyTimeout bounds startup when ctx has no deadline.
	readyTimeout = 30 * time.Second
	// pollInterval is the pause between connection attempts while waiting.
	pollInterval = 20 * time.Millisecond
	// portAttempts is how many ports are tried when the chosen one is taken
	// between picking it and the server binding it.
	portAttempts = 3
	// Stop escalation delays: SIGINT, then SIGQUIT, then SIGKILL.
	fastShutdownWait      = 5 * time.Second
	immediateShutdownWait = 2 * time.Second
	// waitDelay bounds how long Wait keeps reading output pipes that a
	// dead child's descendants still hold open.
	waitDelay = 2 * time.Second
)

// defaultSettings are passed to the server before opts.Settings, which
// override them. Several trade durability for speed: acceptable only because
// the whole cluster is thrown away when Stop returns.
var defaultSettings = map[string]string{
	// Demo-grade: no fsync; an OS crash can corrupt the cluster.
	"fsync": "off",
	// Demo-grade: commits return before their WAL is flushed.
	"synchronous_commit": "off",
	// Demo-grade: torn pages after an OS crash are not repairable.
	"full_page_writes": "off",
	// Room for pooltop's connection-pool experiments.
	"max_connections": "300",
	"shared_buffers":  "256MB",
	// Keep statistics fresh during short benchmark runs.
	"autovacuum_naptime": "10s",
	// Dynamic shared memory as files in the data directory instead of POSIX
	// segments in /dev/shm, so that a server killed outright leaves nothing
	// outside the directory the next Start cleans up.
	"dynamic_shared_memory_type": "mmap",
	// Keep the log quiet; startup failures are still reported.
	"log_min_messages": "warning",
}

// FindBinaries returns the directory holding initdb, pg_ctl and postgres, so
// callers (and Start) use one consistent installation; pgbench, when
// installed, is in the same directory. It looks for initdb in PATH first
// (following symlinks to the real installation directory), then in
// /usr/lib/postgresql/*/bin, newest major version first. If nothing is found
// the error wraps ErrNoBinaries.
func FindBinaries() (dir string, err error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		var cands []string
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			cands = append(cands, filepath.Dir(resolved))
		}
		cands = append(cands, filepath.Dir(p))
		for _, d := range cands {
			if hasServerBinaries(d) {
				if abs, err := filepath.Abs(d); err == nil {
					d = abs
				}
				return d, nil
			}
		}
	}
	pattern := filepath.Join(libRoot, "*", "bin")
	dirs, _ := filepath.Glob(pattern)
	sort.SliceStable(dirs, func(i, j int) bool {
		return versionGreater(filepath.Base(filepath.Dir(dirs[i])), filepath.Base(filepath.Dir(dirs[j])))
	})
	for _, d := range dirs {
		if hasServerBinaries(d) {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w (looked for initdb, pg_ctl and postgres in PATH and %s): "+
		"install them (Debian/Ubuntu: apt-get install postgresql) "+
		"or pass --dsn (or set DATABASE_URL) to use an existing server", ErrNoBinaries, pattern)
}

// libRoot holds Debian/Ubuntu's per-version PostgreSQL directories;
// replaceable by tests.
var libRoot = "/usr/lib/postgresql"

func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionGreater compares PostgreSQL directory names such as "16" and "9.6"
// numerically; names that are not versions sort last.
func versionGreater(a, b string) bool {
	va, oka := parseVersion(a)
	vb, okb := parseVersion(b)
	if oka != okb {
		return oka
	}
	if !oka {
		return a > b
	}
	for i := 0; i < len(va) || i < len(vb); i++ {
		var x, y int
		if i < len(va) {
			x = va[i]
		}
		if i < len(vb) {
			y = vb[i]
		}
		if x != y {
			return x > y
		}
	}
	return false
}

func parseVersion(s string) ([]int, bool) {
	var v []int
	for _, part := range strings.Split(s, ".") {
		n, err := strconv.Atoi(part)
		if err != nil || n < 0 {
			return nil, false
		}
		v = append(v, n)
	}
	return v, true
}

// Server is a running private PostgreSQL server started by Start. Its methods
// are safe for concurrent use; Stop must be called to shut it down and delete
// its files.
type Server struct {
	binDir  string
	rootDir string // the pooltop-pg-<pid>-* temporary directory
	dataDir string
	port    int
	user    string
	db      string
	startup time.Duration

	cmd    *exec.Cmd
	exited chan struct{} // closed once cmd has been reaped
	log    *tailWriter

	stopOnce sync.Once
	stopErr  error

	mu   sync.Mutex // serialises Restart and Stop
	opts Options
	cred *syscall.Credential
}

// DSN returns a connection URL for the created database, for pgx or any libpq
// client. It has no password: the server trusts every loopback connection.
func (s *Server) DSN() string {
	return dsn(s.user, s.port, s.db)
}

// Port returns the TCP port the server listens on at 127.0.0.1, for callers
// that build their own connection strings.
func (s *Server) Port() int { return s.port }

// BinDir returns the directory of the PostgreSQL binaries that run the
// server, so callers can find pgbench and friends of the same version.
func (s *Server) BinDir() string { return s.binDir }

// DataDir returns the server's data directory (it contains postmaster.pid);
// it is deleted by Stop.
func (s *Server) DataDir() string { return s.dataDir }

// StartupTime returns how long Start took, from its call until the database
// accepted connections and had been created; pooltop reports it as the cold
// start cost.
func (s *Server) StartupTime() time.Duration { return s.startup }

// Stop shuts the server down (SIGINT, escalating to SIGQUIT after 5 s and to
// SIGKILL after 2 s more), reaps it and removes all its files. It is
// idempotent and safe to call from several goroutines: every call waits for
// the one shutdown and returns its first error.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		err := stopProcess(s.cmd, s.exited)
		if rerr := os.RemoveAll(s.rootDir); rerr != nil && err == nil {
			err = fmt.Errorf("pgembed: removing %s: %w", s.rootDir, rerr)
		}
		s.stopErr = err
	})
	return s.stopErr
}

// stopProcess stops a postgres child started with Setpgid and waits until
// it has been reaped (exited is closed by the goroutine that waits for it).
func stopProcess(cmd *exec.Cmd, exited <-chan struct{}) error {
	signals := []struct {
		sig  syscall.Signal
		wait time.Duration
	}{
		{syscall.SIGINT, fastShutdownWait},       // fast shutdown
		{syscall.SIGQUIT, immediateShutdownWait}, // immediate shutdown
	}
	for _, st := range signals {
		select {
		case <-exited:
			return nil
		default:
		}
		_ = cmd.Process.Signal(st.sig) // fails only if it has already exited
		t := time.NewTimer(st.wait)
		select {
		case <-exited:
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	// Kill the whole process group (its pgid is its pid) so that no backend
	// survives the postmaster.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	_ = cmd.Process.Kill()
	<-exited
	return fmt.Errorf("pgembed: postgres (pid %d) ignored SIGINT and SIGQUIT and had to be killed", cmd.Process.Pid)
}

// Start creates a fresh cluster in a new temporary directory, starts a
// postgres server on a free loopback port, waits until it accepts
// connections and creates opts.Database. ctx bounds the startup only (30 s if
// it has no deadline); the server runs until Stop. On error nothing is left
// behind: no process and no directory.
func Start(ctx context.Context, opts Options) (*Server, error) {
	began := time.Now()
	if opts.Database == "" {
		opts.Database = defaultName
	}
	if opts.User == "" {
		opts.User = defaultName
	}
	binDir, err := FindBinaries()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("pgembed: %w", err)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readyTimeout)
		defer cancel()
	}

	cred, err := childCredential()
	if err != nil {
		return nil, err
	}

	removeStaleDirs()
	root, err := os.MkdirTemp(baseDir(), dirPrefix+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return nil, fmt.Errorf("pgembed: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(root)
		}
	}()
	if cred != nil {
		if err := os.Chown(root, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgembed: %w", err)
		}
	}
	s := &Server{
		binDir:  binDir,
		rootDir: root,
		dataDir: filepath.Join(root, "data"),
		user:    opts.User,
		db:      opts.Database,
	}

	tmpl := templateDir(binDir, opts.User)
	if !fromTemplate(tmpl, s.dataDir, cred) {
		if err := s.initdb(ctx, opts, cred); err != nil {
			return nil, err
		}
		saveTemplate(s.dataDir, tmpl)
	}
	var conn *pgx.Conn
	for attempt := 1; ; attempt++ {
		conn, err = s.startServer(ctx, opts, cred, 0)
		if err == nil {
			break
		}
		if !errors.Is(err, errPortTaken) || attempt >= portAttempts {
			return nil, err
		}
	}
	err = s.createDatabase(ctx, conn)
	conn.Close(context.Background())
	if err != nil {
		_ = stopProcess(s.cmd, s.exited)
		return nil, err
	}
	s.startup = time.Since(began)
	ok = true
	return s, nil
}

// ChildCredential is the credential that pgembed runs its children with
// (nil unless root), for other servers a test starts beside PostgreSQL.
func ChildCredential() (*syscall.Credential, error) { return childCredential() }

// childCredential returns the unprivileged user to run initdb and postgres
// as when we are root (PostgreSQL refuses to run as root), or nil.
func childCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		u, err = user.Lookup("nobody")
	}
	if err != nil {
		return nil, fmt.Errorf("pgembed: running as root, and no unprivileged user (postgres or nobody) to run PostgreSQL as: %w", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgembed: user %s has non-numeric uid/gid %s/%s", u.Username, u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// serverEnv is the caller's environment without the libpq and server
// variables (PGPORT, PGDATA, PGOPTIONS, …): an on-call shell sets them for
// another server, and initdb and postgres would take them for their own.
func serverEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

// command prepares a child in its own process group (so a Ctrl-C at the
// terminal does not reach it before the caller can stop it cleanly), running
// as cred, in the temporary directory (a cwd the unprivileged user can read).
// When ctx ends before the child exits, the child's whole group is killed.
func (s *Server) command(ctx context.Context, out io.Writer, cred *syscall.Credential, deathSig syscall.Signal, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(s.binDir, name), args...)
	cmd.Cancel = func() error {
		// Kill the whole group: initdb runs postgres children.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.Dir = s.rootDir
	cmd.Env = append(serverEnv(), "PWD="+s.rootDir, "LC_ALL=C")
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.WaitDelay = waitDelay
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  deathSig,
		Credential: cred,
	}
	return cmd
}

func (s *Server) initdb(ctx context.Context, opts Options, cred *syscall.Credential) error {
	out := newTailWriter(opts.Log)
	// -A trust: no password at all. This is demo-grade and only safe because
	// the server listens on 127.0.0.1 only (see startServer) and has no Unix
	// socket; anyone on this machine can connect, nobody else can.
	cmd := s.command(ctx, out, cred, syscall.SIGKILL, "initdb",
		append([]string{"-D", s.dataDir, "-U", s.user}, initdbFlags...)...)
	if err := startChild(cmd); err != nil {
		return fmt.Errorf("pgembed: starting initdb: %w", err)
	}
	if err := cmd.Wait(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return fmt.Errorf("pgembed: initdb interrupted: %w", ctxErr)
		}
		return fmt.Errorf("pgembed: initdb failed: %w%s", err, out.quote())
	}
	return nil
}

// errPortTaken marks a server start that failed because another process
// bound the port first; Start retries with another port.
var errPortTaken = errors.New("port already in use")

// startServer starts postgres on a free port and returns a connection to
// its postgres database once it accepts connections.
func (s *Server) startServer(ctx context.Context, opts Options, cred *syscall.Credential, port int) (*pgx.Conn, error) {
	s.opts, s.cred = opts, cred
	if port == 0 {
		p, err := pickPort()
		if err != nil {
			return nil, fmt.Errorf("pgembed: finding a free port: %w", err)
		}
		port = p
	}
	settings := make(map[string]string, len(defaultSettings)+len(opts.Settings)+3)
	for k, v := range defaultSettings {
		settings[k] = v
	}
	for k, v := range opts.Settings {
		settings[k] = v
	}
	// Loopback only, and no Unix socket: required for trust auth to be safe.
	settings["listen_addresses"] = "127.0.0.1"
	settings["port"] = strconv.Itoa(port)
	settings["unix_socket_directories"] = ""
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"-D", s.dataDir}
	for _, k := range keys {
		args = append(args, "-c", k+"="+settings[k])
	}

	out := newTailWriter(opts.Log)
	// Run postgres itself (not pg_ctl start) as our direct child, with
	// SIGQUIT (immediate shutdown) as parent-death signal: if we are killed,
	// the server goes too instead of being orphaned.
	// Its lifetime is not bound to ctx (which only bounds startup): Stop
	// ends it.
	cmd := s.command(context.Background(), out, cred, syscall.SIGQUIT, "postgres", args...)
	if err := startChild(cmd); err != nil {
		return nil, fmt.Errorf("pgembed: starting postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	s.cmd, s.exited, s.log, s.port = cmd, exited, out, port

	conn, err := s.waitReady(ctx)
	if err != nil {
		_ = stopProcess(cmd, exited)
		return nil, err
	}
	return conn, nil
}

// Crash ends the server as a power cut or the OOM killer would, by an
// immediate shutdown (SIGQUIT to the postmaster: no checkpoint, every
// session cut, the next start runs crash recovery), then starts it again on
// the same port and data directory and waits until it accepts connections.
// Clients see their connections fail and reconnect. With
// synchronous_commit on (Options.Settings) nothing acknowledged is lost: the
// WAL is replayed; with the default (off) commits acknowledged in the last
// wal_writer_delay may be. fsync off loses nothing here: the operating
// system keeps what postgres wrote. ctx bounds the restart.
func (s *Server) Crash(ctx context.Context) error {
	if err := s.Halt(); err != nil {
		return err
	}
	return s.Resume(ctx)
}

// Halt stops the server as Crash does (pg_ctl stop -m immediate), and
// leaves it stopped until Resume: clients are refused meanwhile.
func (s *Server) Halt() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.exited:
		return errors.New("pgembed: the server is not running")
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.exited:
	case <-time.After(immediateShutdownWait):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.exited
	}
	return nil
}

// Resume starts a server that Halt stopped, on the same port and data
// directory (crash recovery first), and waits until it accepts connections.
func (s *Server) Resume(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.exited:
	default:
		return errors.New("pgembed: the server is running")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, readyTimeout)
		defer cancel()
	}
	conn, err := s.startServer(ctx, s.opts, s.cred, s.port)
	if err != nil {
		return fmt.Errorf("pgembed: restart after the crash: %w", err)
	}
	conn.Close(context.Background())
	return nil
}

// startChild starts cmd from a fresh goroutine. The parent-death signal
// fires when the creating OS thread exits; a new goroutine never runs on a
// thread locked by the caller (runtime.LockOSThread), and unlocked threads
// live as long as the process.
func startChild(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	go func() { errc <- cmd.Start() }()
	return <-errc
}

// waitReady polls until the server accepts a connection to the postgres
// database, the child exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) (*pgx.Conn, error) {
	target := dsn(s.user, s.port, "postgres")
	var lastErr error
	for {
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(attemptCtx, target)
		cancel()
		if err == nil {
			return conn, nil
		}
		lastErr = err
		t := time.NewTimer(pollInterval)
		select {
		case <-s.exited:
			t.Stop()
			tail := s.log.String()
			if portTaken(tail) {
				return nil, fmt.Errorf("pgembed: postgres could not bind port %d: %w", s.port, errPortTaken)
			}
			return nil, fmt.Errorf("pgembed: postgres exited during startup (%v)%s", s.cmd.ProcessState, s.log.quote())
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("pgembed: postgres not accepting connections on port %d (last error: %v): %w%s",
				s.port, lastErr, ctx.Err(), s.log.quote())
		case <-t.C:
		}
	}
}

func portTaken(log string) bool {
	for _, m := range []string{"Address already in use", "could not create listen socket", "could not create any TCP/IP sockets"} {
		if strings.Contains(log, m) {
			return true
		}
	}
	return false
}

// createDatabase creates the requested database over conn, a connection
// to the postgres database.
func (s *Server) createDatabase(ctx context.Context, conn *pgx.Conn) error {
	if s.db == "postgres" {
		return nil // created by initdb
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{s.db}.Sanitize()); err != nil {
		return fmt.Errorf("pgembed: creating database %q: %w", s.db, err)
	}
	return nil
}

func dsn(user string, port int, db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(user),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// pickPort is freePort, replaceable by tests.
var pickPort = freePort

// freePort asks the kernel for a free loopback port. Another process may
// take it before postgres binds it; Start retries in that case.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	if err := l.Close(); err != nil {
		return 0, err
	}
	return port, nil
}

// removeStaleDirs deletes pooltop-pg-<pid>-* directories whose creating
// process no longer runs (it was killed before it could call Stop). Errors
// are ignored: this is best-effort housekeeping.
func removeStaleDirs() {
	for _, tmp := range []string{os.TempDir(), shmDir} {
		entries, err := os.ReadDir(tmp)
		if err != nil {
			continue
		}
		for _, e := range entries {
			pid, ok := dirPID(e.Name())
			if !ok || !e.IsDir() || processExists(pid) {
				continue
			}
			_ = os.RemoveAll(filepath.Join(tmp, e.Name()))
		}
	}
}

// shmDir is a memory file system on Linux. initdb and CREATE DATABASE write
// thousands of small files; on tmpfs a cold start takes about 1 s instead of
// 2.5 s on this kind of machine's disk. The data is throwaway either way.
const shmDir = "/dev/shm"

// shmMinFree is how much room shmDir must have before it is used: enough for
// a demo pool of a few million ids. Containers often give /dev/shm only 64 MiB.
const shmMinFree = 2 << 30

// baseDir picks where the server's directory goes: $POOLTOP_TMPDIR if set,
// else /dev/shm when it is a writable tmpfs with room, else os.TempDir().
func baseDir() string {
	if d := os.Getenv("POOLTOP_TMPDIR"); d != "" {
		return d
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(shmDir, &st); err == nil && st.Type == 0x01021994 /* TMPFS_MAGIC */ &&
		uint64(st.Bavail)*uint64(st.Bsize) >= shmMinFree && syscall.Access(shmDir, 2 /* W_OK */) == nil {
		return shmDir
	}
	return os.TempDir()
}

// dirPID extracts the pid from a name of the form pooltop-pg-<pid>-<random>.
func dirPID(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, dirPrefix)
	if !ok {
		return 0, false
	}
	num, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	pid, err := strconv.Atoi(num)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

// processExists reports whether pid is a live process (possibly another
// user's). A zombie counts as gone.
func processExists(pid int) bool {
	if pid == os.Getpid() {
		return true
	}
	err := syscall.Kill(pid, 0)
	if err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	if stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil {
		// Format: pid (comm) state ...; comm may contain spaces and ')'.
		if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z' {
			return false
		}
	}
	return true
}

// tailWriter forwards output to an optional writer and keeps the last
// tailSize bytes for error messages.
type tailWriter struct {
	mu   sync.Mutex
	w    io.Writer
	tail []byte
}

func newTailWriter(w io.Writer) *tailWriter { return &tailWriter{w: w} }

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.w != nil {
		_, _ = t.w.Write(p) // a failing log must not stall the server's output
	}
	t.tail = append(t.tail, p...)
	if n := len(t.tail); n > tailSize {
		t.tail = append(t.tail[:0], t.tail[n-tailSize:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.tail)
}

// quote formats the kept output for appending to an error message.
func (t *tailWriter) quote() string {
	s := strings.TrimSpace(t.String())
	if s == "" {
		return ""
	}
	return "; output:\n" + s
}
