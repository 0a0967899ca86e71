package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Setting is one server setting a pooltop connection runs under
// (search_path, lock_timeout, statement_timeout, …).
type Setting struct{ Name, Value string }

// Pool is pooltop's connection pool: a pgxpool whose statements always run
// under pooltop's settings, wherever the connection ends.
//
// Straight to PostgreSQL the settings are startup parameters: each session
// carries them from its start, at no cost per statement. Behind a pooler in
// transaction mode (PgBouncer) a session's state does not survive the
// transaction that set it, and the pooler refuses or drops most startup
// parameters. There the pool is "scoped": each statement goes out in one
// pipeline behind set_config(name, value, true) of every setting, so the
// settings hold for exactly that transaction on whichever server connection
// runs it; a transaction (Begin) sets them with SET LOCAL in the exchange
// that begins it, which takes no snapshot (see Begin). Nothing else is
// assumed to outlive a transaction: statements are not prepared by name,
// a statement described ahead of its batch (PoolOptions.QualifiedNames) is
// described inside the transaction that runs it, and a cancelled context
// drops the connection instead of sending a cancel request (which
// PgBouncer 1.18 can crash on).
type Pool struct {
	pool    *pgxpool.Pool
	scoped  bool
	reason  string // why the pool is scoped, for doctor and the logs
	setSQL  string // SELECT set_config($1, $2, true), … ; "" when not scoped
	setArgs []any
	// beginSQL begins a scoped transaction under the settings:
	// "BEGIN; SET LOCAL …; …", one simple query.
	beginSQL string
	// describes: pgx describes each new statement ahead of its batch, in
	// an exchange of its own (QueryExecModeCacheDescribe), so every
	// statement runs in a transaction begun with beginSQL (see sendInTx).
	describes bool
}

// ErrPooler marks what cannot be done through a transaction-pooling proxy.
var ErrPooler = errors.New("not possible through a connection pooler")

// PoolOptions say how NewPool sets up its connections.
type PoolOptions struct {
	// Settings are the server settings every statement runs under.
	Settings []Setting
	// QualifiedNames: every statement names its tables with their schema,
	// so a scoped pool may describe a statement ahead of its batch. Its
	// results then come back in binary, which composite values need; the
	// price behind a pooler is one round trip more per statement or batch,
	// which runs in a transaction of its own (see sendInTx).
	QualifiedNames bool
}

// NewPool connects with cfg under o.Settings. It tries the settings as startup
// parameters first; when the server side refuses them (PgBouncer: "unsupported
// startup parameter") or drops them silently (ignore_startup_parameters), it
// connects again without them and scopes every statement instead.
func NewPool(ctx context.Context, cfg *pgxpool.Config, o PoolOptions) (*Pool, error) {
	settings := o.Settings
	direct := cfg.Copy()
	for _, s := range settings {
		direct.ConnConfig.RuntimeParams[s.Name] = s.Value
	}
	pool, err := pgxpool.NewWithConfig(ctx, direct)
	if err == nil {
		err = pool.Ping(ctx)
	}
	var reason string
	switch {
	case err == nil:
		dropped, derr := droppedSettings(ctx, pool, settings)
		if derr != nil {
			pool.Close()
			return nil, ConnectError(direct.ConnConfig, derr)
		}
		if len(dropped) == 0 {
			return &Pool{pool: pool}, nil
		}
		pool.Close()
		reason = fmt.Sprintf("the server side ignored the startup parameters %s (a pooler's ignore_startup_parameters)", strings.Join(dropped, ", "))
	case refusedStartupParameter(err):
		if pool != nil {
			pool.Close()
		}
		reason = "the server side refused startup parameters (" + firstLine(err) + ")"
	default:
		if pool != nil {
			pool.Close()
		}
		return nil, ConnectError(direct.ConnConfig, err)
	}
	return newScopedPool(ctx, cfg, o, reason)
}

func newScopedPool(ctx context.Context, cfg *pgxpool.Config, o PoolOptions, reason string) (*Pool, error) {
	p, err := scopedPool(cfg, o, reason)
	if err != nil {
		return nil, err
	}
	if err := p.pool.Ping(ctx); err != nil {
		p.pool.Close()
		return nil, ConnectError(p.pool.Config().ConnConfig, err)
	}
	return p, nil
}

// scopedPool is a scoped pool (see Pool) on cfg under o.Settings, reason
// saying why it is scoped, whatever the server side is. It connects on
// first use (cfg.MinConns aside), so it serves a server that does not
// answer yet as well.
func scopedPool(cfg *pgxpool.Config, o PoolOptions, reason string) (*Pool, error) {
	settings := o.Settings
	scfg := cfg.Copy()
	for _, s := range settings {
		if s.Name != "application_name" { // a pooler passes application_name on
			delete(scfg.ConnConfig.RuntimeParams, s.Name)
		}
	}
	cc := scfg.ConnConfig
	// No statement prepared by name (the next transaction may run on
	// another server connection, which has never seen it), nor described
	// ahead of its batch: a description is an exchange of its own, before
	// the set_config of the batch, so each statement is parsed in its
	// batch, after them, and its results come back as text. A pool whose
	// statements are described (QualifiedNames) runs each in a transaction
	// begun with the settings, where its description is made too.
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	if o.QualifiedNames {
		cc.DefaultQueryExecMode = pgx.QueryExecModeCacheDescribe
	}
	cc.BuildContextWatcherHandler = func(c *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: c.Conn()}
	}
	p := &Pool{scoped: true, reason: reason}
	var sql, begin strings.Builder
	sql.WriteString("SELECT ")
	begin.WriteString("BEGIN")
	n := 0
	add := func(name, value string) error {
		if n > 0 {
			sql.WriteString(", ")
		}
		fmt.Fprintf(&sql, "set_config($%d, $%d, true)", 2*n+1, 2*n+2)
		p.setArgs = append(p.setArgs, name, value)
		n++
		set, err := setLocal(name, value)
		if err != nil {
			return err
		}
		begin.WriteString("; ")
		begin.WriteString(set)
		return nil
	}
	for _, s := range settings {
		if s.Name == "application_name" {
			continue
		}
		if err := add(s.Name, s.Value); err != nil {
			return nil, err
		}
		// default_transaction_read_only set inside a transaction applies to
		// the next one; this transaction is made read-only by its own flag.
		if s.Name == "default_transaction_read_only" && s.Value == "on" {
			if err := add("transaction_read_only", "on"); err != nil {
				return nil, err
			}
		}
	}
	if n > 0 {
		p.setSQL, p.beginSQL = sql.String(), begin.String()
		p.describes = cc.DefaultQueryExecMode == pgx.QueryExecModeCacheDescribe
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), scfg)
	if err != nil {
		return nil, ConnectError(cc, err)
	}
	p.pool = pool
	return p, nil
}

// DetectPooler connects once with cc as it is and tells why a pooler seems
// to sit between pooltop and PostgreSQL: it refuses cc's startup parameters,
// or drops them. It returns "" when the connection is direct.
func DetectPooler(ctx context.Context, cc *pgx.ConnConfig) (string, error) {
	conn, err := pgx.ConnectConfig(ctx, cc.Copy())
	if refusedStartupParameter(err) {
		return "the server side refused startup parameters (" + firstLine(err) + ")", nil
	}
	if err != nil {
		return "", err
	}
	defer conn.Close(context.Background())
	var settings []Setting
	for name, value := range cc.RuntimeParams {
		settings = append(settings, Setting{name, value})
	}
	dropped, err := droppedSettings(ctx, conn, settings)
	if err != nil || len(dropped) == 0 {
		return "", err
	}
	return fmt.Sprintf("the server side ignored the startup parameters %s (a pooler's ignore_startup_parameters)", strings.Join(dropped, ", ")), nil
}

// PoolerConnConfig is cc for one connection through a pooler: no startup
// parameter but application_name, no statement prepared by name, no cancel
// request. Statements on it must name their schema.
func PoolerConnConfig(cc *pgx.ConnConfig) *pgx.ConnConfig {
	c := cc.Copy()
	for name := range c.RuntimeParams {
		if name != "application_name" {
			delete(c.RuntimeParams, name)
		}
	}
	c.DefaultQueryExecMode = pgx.QueryExecModeExec
	c.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
	}
	return c
}

// WrapPool uses a pool built elsewhere as is (its settings already in its
// sessions), for tests and for code handed a *pgxpool.Pool.
func WrapPool(pool *pgxpool.Pool) *Pool { return &Pool{pool: pool} }

// setLocal is SET LOCAL of name to value, value as set_config takes it.
// SET quotes each element of a list setting's value (search_path) as an
// identifier, so such a value is given element by element, each by its
// name.
func setLocal(name, value string) (string, error) {
	var ident pgx.Identifier
	for part := range strings.SplitSeq(name, ".") {
		ident = append(ident, part)
	}
	var values []string
	switch strings.ToLower(name) {
	case "search_path", "temp_tablespaces":
		elems, err := splitIdentifiers(value)
		if err == nil && len(elems) == 0 {
			err = errors.New("no name")
		}
		if err != nil {
			return "", fmt.Errorf("setting %s = %q: %w: write a list of names", name, value, err)
		}
		for _, e := range elems {
			values = append(values, quoteLiteral(e))
		}
	default:
		values = []string{quoteLiteral(value)}
	}
	return "SET LOCAL " + ident.Sanitize() + " TO " + strings.Join(values, ", "), nil
}

// quoteLiteral is s as an escape string constant (E'…'), which reads the
// same whatever standard_conforming_strings is.
func quoteLiteral(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	return "E'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// splitIdentifiers splits a list of names as PostgreSQL reads a list
// setting's value: comma-separated, an unquoted name folded to lower case,
// a double-quoted one taken as written ("" for a quote).
func splitIdentifiers(s string) ([]string, error) {
	var out []string
	rest := strings.TrimLeft(s, " \t\n\r")
	if rest == "" {
		return nil, nil
	}
	for {
		var name string
		if strings.HasPrefix(rest, `"`) {
			var b strings.Builder
			i := 1
			for {
				j := strings.IndexByte(rest[i:], '"')
				if j < 0 {
					return nil, errors.New("unterminated quoted name")
				}
				b.WriteString(rest[i : i+j])
				i += j + 1
				if !strings.HasPrefix(rest[i:], `"`) {
					break
				}
				b.WriteByte('"')
				i++
			}
			name, rest = b.String(), rest[i:]
		} else {
			end := strings.IndexAny(rest, ", \t\n\r")
			if end < 0 {
				end = len(rest)
			}
			name, rest = lowerASCII(rest[:end]), rest[end:]
		}
		if name == "" {
			return nil, errors.New("empty name")
		}
		out = append(out, name)
		rest = strings.TrimLeft(rest, " \t\n\r")
		if rest == "" {
			return out, nil
		}
		if rest[0] != ',' {
			return nil, errors.New("names must be separated by commas")
		}
		rest = strings.TrimLeft(rest[1:], " \t\n\r")
	}
}

// lowerASCII folds A-Z to a-z, as PostgreSQL folds an unquoted name in
// UTF-8 (other letters are left as they are).
func lowerASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + 'a' - 'A'
		}
		return r
	}, s)
}

// refusedStartupParameter tells a pooler's refusal of a startup parameter
// (PgBouncer: "unsupported startup parameter: lock_timeout", SQLSTATE 08P01).
func refusedStartupParameter(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "08P01" && strings.Contains(pgErr.Message, "startup parameter")
}

func firstLine(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// droppedSettings names the settings a session did not receive from its
// startup parameters: PostgreSQL marks what a client sent with source
// 'client', so a setting with another source was dropped on the way.
func droppedSettings(ctx context.Context, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, settings []Setting) ([]string, error) {
	var names []string
	for _, s := range settings {
		if s.Name != "application_name" {
			names = append(names, s.Name)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	rows, err := db.Query(ctx, `
SELECT n FROM unnest($1::text[]) AS n
WHERE NOT EXISTS (SELECT 1 FROM pg_settings s WHERE s.name = lower(n) AND s.source = 'client')
ORDER BY n`, names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Scoped reports whether every statement carries its settings (a pooler is
// in between), and why.
func (p *Pool) Scoped() (bool, string) { return p.scoped, p.reason }

// Raw is the pgxpool underneath. Statements sent on it directly do not carry
// pooltop's settings when the pool is scoped.
func (p *Pool) Raw() *pgxpool.Pool { return p.pool }

// Close closes every connection.
func (p *Pool) Close() { p.pool.Close() }

// Ping checks that the server answers.
func (p *Pool) Ping(ctx context.Context) error { return p.pool.Ping(ctx) }

// Stat returns the pool's statistics.
func (p *Pool) Stat() *pgxpool.Stat { return p.pool.Stat() }

// Config returns the pool's configuration.
func (p *Pool) Config() *pgxpool.Config { return p.pool.Config() }

// withoutMode drops a leading pgx.QueryExecMode from args: a batch runs
// every statement in the connection's mode.
func withoutMode(args []any) []any {
	if len(args) > 0 {
		if _, ok := args[0].(pgx.QueryExecMode); ok {
			return args[1:]
		}
	}
	return args
}

// send sends b under the settings and returns its results, those of the
// settings already read. Through set_config, b goes in one pipeline (one
// implicit transaction) behind it. set_config is a SELECT and takes the
// pipeline's snapshot, a moment before b's first statement would: nothing
// runs between them, and a statement that must come before the snapshot
// (LOCK, SET TRANSACTION) has no use outside a transaction block (Begin).
func (p *Pool) send(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if p.describes {
		return p.sendInTx(ctx, b)
	}
	scoped := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	scoped.Queue(p.setSQL, p.setArgs...)
	scoped.QueuedQueries = append(scoped.QueuedQueries, withoutModes(b)...)
	br := p.pool.SendBatch(ctx, scoped)
	if _, err := br.Exec(); err != nil {
		return &failedBatch{br: br, err: err}
	}
	return br
}

// sendInTx sends b in a transaction begun with the settings (beginSQL, a
// round trip), with COMMIT queued at its end. pgx describes a statement it
// has not described on the connection in an exchange of its own before
// the batch: outside a transaction that exchange would run without the
// settings, and its parse, which locks the tables the statement reads,
// would wait on a lock with neither lock_timeout nor statement_timeout.
func (p *Pool) sendInTx(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return &failedBatch{err: err}
	}
	if _, err := conn.Exec(ctx, p.beginSQL); err != nil {
		endTx(ctx, conn)
		return &failedBatch{err: err}
	}
	tb := &pgx.Batch{QueuedQueries: withoutModes(b)}
	tb.Queue("COMMIT")
	return &txBatch{BatchResults: conn.SendBatch(ctx, tb), conn: conn, ctx: ctx}
}

// withoutModes is b's statements without a leading pgx.QueryExecMode
// argument (see withoutMode).
func withoutModes(b *pgx.Batch) []*pgx.QueuedQuery {
	qs := make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)
	for _, q := range b.QueuedQueries {
		nq := *q
		nq.Arguments = withoutMode(q.Arguments)
		qs = append(qs, &nq)
	}
	return qs
}

// endTx rolls back what is left of sendInTx's transaction (a statement
// failed before the COMMIT) and releases the connection; one that cannot
// roll back is closed by the pool on release.
func endTx(ctx context.Context, conn *pgxpool.Conn) {
	if pc := conn.Conn().PgConn(); !pc.IsClosed() && pc.TxStatus() != 'I' {
		_, _ = conn.Exec(ctx, "ROLLBACK")
	}
	conn.Release()
}

// txBatch is sendInTx's results: closing them reads the COMMIT's, ends
// the transaction and frees the connection.
type txBatch struct {
	pgx.BatchResults
	conn   *pgxpool.Conn
	ctx    context.Context
	closed bool
}

func (b *txBatch) Close() error {
	if b.closed {
		return nil
	}
	b.closed = true
	err := b.BatchResults.Close()
	endTx(b.ctx, b.conn)
	return err
}

// batchOf is a batch of one statement.
func batchOf(sql string, args []any) *pgx.Batch {
	b := &pgx.Batch{}
	b.Queue(sql, args...)
	return b
}

// Exec runs one statement.
func (p *Pool) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if p.setSQL == "" {
		return p.pool.Exec(ctx, sql, args...)
	}
	br := p.send(ctx, batchOf(sql, args))
	tag, err := br.Exec()
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	return tag, err
}

// Query runs one statement and returns its rows; Close them to free the
// connection.
func (p *Pool) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if p.setSQL == "" {
		return p.pool.Query(ctx, sql, args...)
	}
	br := p.send(ctx, batchOf(sql, args))
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// QueryRow runs one statement for at most one row.
func (p *Pool) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if p.setSQL == "" {
		return p.pool.QueryRow(ctx, sql, args...)
	}
	rows, err := p.Query(ctx, sql, args...)
	return &scopedRow{rows: rows, err: err}
}

// Begin opens a transaction under the pool's settings. Scoped, it sends
// BEGIN and the settings as SET LOCAL in one simple query: statements that
// take no snapshot, so the transaction's snapshot is that of its first
// statement, as straight to PostgreSQL. Its isolation level can still be
// set (SET TRANSACTION ISOLATION LEVEL fails with 25001 once a query has
// run), and a LOCK before its first read is taken before its snapshot (a
// REPEATABLE READ transaction that locked, then read, would otherwise miss
// what was committed while it waited for the lock).
func (p *Pool) Begin(ctx context.Context) (pgx.Tx, error) {
	if p.beginSQL == "" {
		return p.pool.Begin(ctx)
	}
	return p.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: p.beginSQL})
}

// SendBatch sends a batch under the pool's settings, as one pipeline (one
// implicit transaction; scoped with described statements, one
// transaction).
func (p *Pool) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if p.setSQL == "" {
		return p.pool.SendBatch(ctx, b)
	}
	return p.send(ctx, b)
}

// batchRows are a scoped statement's rows: closing them ends the batch and
// frees the connection; an error at the batch's end (its commit) is theirs.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	closed bool
	err    error
}

func (r *batchRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.Close()
	return false
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}

// scopedRow is pgx's QueryRow over a scoped Query.
type scopedRow struct {
	rows pgx.Rows
	err  error
}

func (r *scopedRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return pgx.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	r.rows.Close()
	return r.rows.Err()
}

// failedBatch answers every result of a batch whose settings failed with
// that failure.
type failedBatch struct {
	br  pgx.BatchResults
	err error
}

func (f *failedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, f.err }
func (f *failedBatch) Query() (pgx.Rows, error)         { return nil, f.err }
func (f *failedBatch) QueryRow() pgx.Row                { return &scopedRow{err: f.err} }
func (f *failedBatch) Tx() pgx.Tx                       { return nil }
func (f *failedBatch) Close() error {
	if f.br != nil {
		_ = f.br.Close()
	}
	return f.err
}
