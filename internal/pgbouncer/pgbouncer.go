// Package pgbouncer starts a real PgBouncer in front of a PostgreSQL server,
// for the tests that check pooltop through a connection pooler. It runs the
// system's pgbouncer binary (Debian package pgbouncer) on loopback, as an
// unprivileged user when run as root, with trust authentication for the
// server's user, and removes its directory on Stop.
package pgbouncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pooltop-dev/pooltop/internal/pgembed"
)

// ErrNoBinary is returned when no pgbouncer binary is installed.
var ErrNoBinary = errors.New("pgbouncer: no pgbouncer binary on PATH or in /usr/sbin: install the pgbouncer package")

// Options configures Start.
type Options struct {
	// Server is the URL of the PostgreSQL server to pool.
	Server string
	// Mode is PgBouncer's pool_mode: "transaction" (the default) or "session".
	Mode string
	// PoolSize is default_pool_size: server connections per database and
	// user; default 4, fewer than pooltop's clients, so that clients do
	// share server connections.
	PoolSize int
	// Ignore lists startup parameters PgBouncer accepts and drops
	// (ignore_startup_parameters).
	Ignore []string
}

// Bouncer is a running PgBouncer.
type Bouncer struct {
	cmd    *exec.Cmd
	dir    string
	port   int
	user   string
	db     string
	exited chan struct{}
	log    string
}

// Binary finds the pgbouncer binary.
func Binary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", ErrNoBinary
}

// Start runs PgBouncer and waits until it answers a query.
func Start(ctx context.Context, o Options) (*Bouncer, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	if o.Mode == "" {
		o.Mode = "transaction"
	}
	if o.PoolSize == 0 {
		o.PoolSize = 4
	}
	su, err := url.Parse(o.Server)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: server URL: %w", err)
	}
	host, port := su.Hostname(), su.Port()
	if port == "" {
		port = "5432"
	}
	b := &Bouncer{user: su.User.Username(), db: strings.TrimPrefix(su.Path, "/"), exited: make(chan struct{})}
	cred, err := pgembed.ChildCredential()
	if err != nil {
		return nil, err
	}
	b.dir, err = os.MkdirTemp("", "pooltop-pgbouncer-")
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			b.Stop()
		}
	}()
	if cred != nil {
		if err := os.Chown(b.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b.port = l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	b.log = filepath.Join(b.dir, "pgbouncer.log")
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 500
ignore_startup_parameters = %s
logfile = %s
server_reset_query = DISCARD ALL
`, host, port, b.port, filepath.Join(b.dir, "users.txt"), o.Mode, o.PoolSize, strings.Join(o.Ignore, ","), b.log)
	users := fmt.Sprintf("%q \"\"\n", b.user)
	for name, text := range map[string]string{"pgbouncer.ini": ini, "users.txt": users} {
		path := filepath.Join(b.dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			return nil, err
		}
		if cred != nil {
			if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
				return nil, err
			}
		}
	}
	b.cmd = exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini"))
	b.cmd.Dir = b.dir
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgbouncer: start: %w", err)
	}
	go func() { _ = b.cmd.Wait(); close(b.exited) }()
	deadline := time.Now().Add(15 * time.Second)
	for {
		err := b.ping(ctx)
		if err == nil {
			break
		}
		select {
		case <-b.exited:
			return nil, fmt.Errorf("pgbouncer: exited at start: %s", b.tail())
		default:
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("pgbouncer: not answering after 15 s (%v): %s", err, b.tail())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	ok = true
	return b, nil
}

func (b *Bouncer) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, b.DSN())
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	return conn.Ping(ctx)
}

func (b *Bouncer) tail() string {
	data, _ := os.ReadFile(b.log)
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// DSN is the URL that reaches the server's database through PgBouncer.
func (b *Bouncer) DSN() string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(b.user),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port)),
		Path:     "/" + b.db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Log is what PgBouncer has logged so far.
func (b *Bouncer) Log() string {
	data, _ := os.ReadFile(b.log)
	return string(data)
}

// Stop ends PgBouncer and removes its directory.
func (b *Bouncer) Stop() {
	if b.cmd != nil && b.cmd.Process != nil {
		_ = b.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-b.exited:
		case <-time.After(5 * time.Second):
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
	}
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}
