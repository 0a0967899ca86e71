package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ConnOptions describes one pooltop connection pool. Each role (workload,
// reaper, CLI) gets its own application_name so pg_activity, pg_stat_activity
// and the collector can tell them apart.
type ConnOptions struct {
	DSN              string        // URL or key=value; empty means the PG* environment variables
	From             string        // where DSN came from, for errors: "--dsn" (default) or "DATABASE_URL"
	Schema           string        // schema holding the pool; default "public"
	AppName          string        // application_name; default "pooltop"
	MaxConns         int32         // pool size; default 16
	LockTimeout      time.Duration // lock_timeout; default 2s (a claim never waits, but DDL and the blocking strategy may)
	StatementTimeout time.Duration // statement_timeout; default 30s
	// RTT, when set, delays every message the client sends by this long: a
	// simulated network round trip between client and server, for
	// benchmarks on loopback (where a round trip costs tens of microseconds).
	RTT time.Duration
}

var schemaName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidSchema checks a --schema value. Only plain identifiers are accepted
// (quoted wherever they are used, so MyPool and select work), and not the
// system's own schemas.
func ValidSchema(s string) error {
	if !schemaName.MatchString(s) {
		return invalid("schema %q: use letters, digits and underscores, starting with a letter or underscore", s)
	}
	if l := strings.ToLower(s); strings.HasPrefix(l, "pg_") || l == "information_schema" {
		return invalid("schema %q belongs to PostgreSQL itself: name a schema of your own", s)
	}
	return nil
}

// PoolConfig builds a pgxpool configuration from opts without connecting,
// with pooltop's settings as startup parameters (a direct connection).
func PoolConfig(opts ConnOptions) (*pgxpool.Config, error) {
	cfg, settings, err := poolConfig(opts)
	if err != nil {
		return nil, err
	}
	for _, s := range settings {
		cfg.ConnConfig.RuntimeParams[s.Name] = s.Value
	}
	return cfg, nil
}

// poolConfig is the configuration of opts without its settings, and the
// settings apart, for NewPool to place where they survive.
func poolConfig(opts ConnOptions) (*pgxpool.Config, []Setting, error) {
	if opts.Schema == "" {
		opts.Schema = "public"
	}
	if err := ValidSchema(opts.Schema); err != nil {
		return nil, nil, err
	}
	opts.AppName = cmp.Or(opts.AppName, "pooltop")
	if opts.MaxConns <= 0 {
		opts.MaxConns = 16
	}
	opts.LockTimeout = cmp.Or(opts.LockTimeout, 2*time.Second)
	opts.StatementTimeout = cmp.Or(opts.StatementTimeout, 30*time.Second)
	cfg, err := pgxpool.ParseConfig(opts.DSN)
	if err != nil {
		from := opts.From
		if from == "" {
			from = "--dsn"
		}
		return nil, nil, ParseError(opts.DSN, from, err)
	}
	cfg.MaxConns = opts.MaxConns
	settings := []Setting{
		{"application_name", opts.AppName},
		{"lock_timeout", fmt.Sprint(opts.LockTimeout.Milliseconds())},
		{"statement_timeout", fmt.Sprint(opts.StatementTimeout.Milliseconds())},
		{"search_path", pgx.Identifier{opts.Schema}.Sanitize()},
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	if opts.RTT > 0 {
		dial, rtt := cfg.ConnConfig.DialFunc, opts.RTT
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &delayedConn{Conn: c, rtt: rtt}, nil
		}
	}
	return cfg, settings, nil
}

// delayedConn holds each write back by rtt before it leaves, as if the
// request and its answer each crossed half of a network round trip. pgx
// writes each protocol exchange (a query, a pipelined batch) at once, so
// each exchange pays one rtt, like on a real network.
type delayedConn struct {
	net.Conn
	rtt time.Duration
}

func (c *delayedConn) Write(b []byte) (int, error) {
	time.Sleep(c.rtt)
	return c.Conn.Write(b)
}

// Connect opens a pool and checks that the server answers, turning the usual
// failures (refused, wrong password, no such database) into one clear line.
// Behind a pooler that refuses or drops pooltop's startup parameters the
// pool is scoped (see Pool).
func Connect(ctx context.Context, opts ConnOptions) (*Pool, error) {
	cfg, settings, err := poolConfig(opts)
	if err != nil {
		return nil, err
	}
	return NewPool(ctx, cfg, PoolOptions{Settings: settings})
}

// ConnectLater opens a pool on a server that does not answer now, to be
// reached when it does (a server of a pool over several that is down at
// the start): its connections are made on first use. Nothing tells yet
// whether a pooler stands in front of the server, and a pooler refuses
// pooltop's settings as startup parameters (the server would look down
// for good) or drops them (no timeouts, another schema): the pool is
// scoped, its settings inside every transaction, which PostgreSQL itself
// takes as well, at the cost of a set_config per statement.
func ConnectLater(opts ConnOptions) (*Pool, error) {
	cfg, settings, err := poolConfig(opts)
	if err != nil {
		return nil, err
	}
	cfg.MinConns = 0
	return scopedPool(cfg, PoolOptions{Settings: settings}, "the server did not answer at the start, so whether a pooler stands in front of it is not known")
}

// ConnectError rewrites a connection failure as "what, why, what to do",
// naming the server and user but never the password.
func ConnectError(cc *pgx.ConnConfig, err error) error {
	msg := connectError(cc, err).Error()
	// A URL whose password holds a raw @, / or : parses with pieces of the
	// password as host, port or database, which the line names: mask the
	// password as written in the connection string, and its pieces.
	ce := &ConnError{msg: redactPassword(msg, cc.ConnString(), cc.Password)}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		ce.Code = pgErr.Code
	}
	return ce
}

// ConnError is a connection failure as ConnectError words it. It keeps
// the server's SQLSTATE, when the server answered, but not the error it
// came from, whose text may hold the password: Unreachable tells a server
// that is down (no code, or 08…, 53…, 57P0…) from one that refused (a
// wrong password, an unknown database).
type ConnError struct {
	msg  string
	Code string // the SQLSTATE, "" when the server did not answer
}

func (e *ConnError) Error() string { return e.msg }

func connectError(cc *pgx.ConnConfig, err error) error {
	where := fmt.Sprintf("%s@%s:%d/%s", cc.User, cc.Host, cc.Port, cc.Database)
	if pw := passwordIn(cc.ConnString()); pw != "" && pw != cc.Password && strings.Contains(cc.ConnString(), "://") {
		// The URL's password holds a raw @, : or /, and the parser took
		// pieces of it for the host, port or database: name none of them.
		where = "the server of a URL whose password holds an unescaped @, : or / (percent-encode them: %40, %3A, %2F)"
	}
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "28P01":
		return fmt.Errorf("connect to %s: password authentication failed: check the password in --dsn, DATABASE_URL or PGPASSWORD", where)
	case errors.As(err, &pgErr) && pgErr.Code == "28000":
		return fmt.Errorf("connect to %s: the server refused this user or host (%s): check pg_hba.conf and the user name", where, pgErr.Message)
	case errors.As(err, &pgErr) && pgErr.Code == "3D000":
		return fmt.Errorf("connect to %s: database %q does not exist: create it or fix the database name in --dsn", where, cc.Database)
	case errors.As(err, &pgErr):
		return fmt.Errorf("connect to %s: %s (SQLSTATE %s)", where, pgErr.Message, pgErr.Code)
	}
	var netErr net.Error
	if errors.As(err, &netErr) && netErr.Timeout() || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("connect to %s: timed out: is the server running and reachable?", where)
	}
	msg := err.Error()
	if strings.Contains(msg, "connection refused") {
		return fmt.Errorf("connect to %s: connection refused: is PostgreSQL running there and listening on that port?", where)
	}
	if strings.Contains(msg, "no such host") {
		return fmt.Errorf("connect to %s: unknown host %q: fix the host in --dsn", where, cc.Host)
	}
	return fmt.Errorf("connect to %s: %s", where, Redact(msg, cc.Password))
}
