package engine

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	mrand "math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A pool may span several PostgreSQL servers (docs/servers.md). Each id
// lives on exactly one of them with its ledger rows; the claim, the lease
// and the fenced commit of an id are single statements on that server, so
// nothing here is a cross-server transaction. What ties the servers together
// is a mark in each one's pooltop_meta: the pool's id, the server's name in
// it and how many servers the pool has.

// ServerMark is what one server of a pool spanning several says about itself.
type ServerMark struct {
	Pool    string `json:"pool"`    // the pool's id, the same on every server of it
	Name    string `json:"server"`  // this server's name in the pool: s1, s2, …
	Servers int    `json:"servers"` // how many servers the pool has
}

// The keys of the mark in pooltop_meta.
const (
	markPool    = "pool_id"
	markServer  = "server"
	markServers = "servers"
)

// ReadMark returns the server's mark; the zero ServerMark when it has none
// (a pool on one server, or a server not part of any pool yet, perhaps
// without pooltop's tables).
func (e *Engine) ReadMark(ctx context.Context) (ServerMark, error) {
	var meta bool
	if err := e.db.QueryRow(ctx, `SELECT to_regclass('pooltop_meta') IS NOT NULL`).Scan(&meta); err != nil {
		return ServerMark{}, dbError("read the server's mark", err)
	}
	if !meta {
		return ServerMark{}, nil
	}
	rows, err := e.db.Query(ctx, `SELECT key, value FROM pooltop_meta WHERE key = ANY($1)`,
		[]string{markPool, markServer, markServers})
	if err != nil {
		return ServerMark{}, dbError("read the server's mark", err)
	}
	kv, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var k, v string
		err := r.Scan(&k, &v)
		return [2]string{k, v}, err
	})
	if err != nil {
		return ServerMark{}, dbError("read the server's mark", err)
	}
	var m ServerMark
	for _, p := range kv {
		switch p[0] {
		case markPool:
			m.Pool = p[1]
		case markServer:
			m.Name = p[1]
		case markServers:
			m.Servers, _ = strconv.Atoi(p[1])
		}
	}
	return m, nil
}

// WriteMark sets the server's mark, in one statement.
func (e *Engine) WriteMark(ctx context.Context, m ServerMark) error {
	if m.Pool == "" || m.Name == "" || m.Servers < 1 {
		return invalid("server mark %+v: pool, name and a server count are all needed", m)
	}
	_, err := e.db.Exec(ctx, `
INSERT INTO pooltop_meta (key, value) VALUES ($1, $2), ($3, $4), ($5, $6)
ON CONFLICT (key) DO UPDATE SET value = excluded.value`,
		markPool, m.Pool, markServer, m.Name, markServers, strconv.Itoa(m.Servers))
	if err != nil {
		return dbError("write the server's mark", err)
	}
	return nil
}

// NewPoolID returns a fresh pool id for the marks of a new pool.
func NewPoolID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ServerName is the name of the i-th server of a pool (from 1).
func ServerName(i int) string { return "s" + strconv.Itoa(i) }

// ErrServers means the servers given do not make one pool (another pool's
// server, one missing or listed twice, different versions, none reachable).
var ErrServers = errors.New("the servers do not make one pool")

// Target is one server a caller names: the engine on it and its address
// for messages (user@host:port/db, never a password).
type Target struct {
	Addr string
	Eng  *Engine
}

// Member is one server of a Servers.
type Member struct {
	Addr string
	Eng  *Engine

	mu      sync.Mutex
	name    string // from its mark; "" while it has not been reached
	until   time.Time
	backoff time.Duration
	lastErr error
}

// Name is the member's name in the pool, "" until it has been reached.
func (m *Member) Name() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.name
}

// Down reports the error that made the member be skipped, nil when it is
// taken in turn.
func (m *Member) Down(now time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Before(m.until) {
		return m.lastErr
	}
	return nil
}

// The backoff of a server that did not answer: doubled on every failure,
// from the first to the last, and reset by an answer.
const (
	firstBackoff = 100 * time.Millisecond
	lastBackoff  = 5 * time.Second
)

func (m *Member) ready(now time.Time) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !now.Before(m.until)
}

func (m *Member) answered() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.until, m.backoff, m.lastErr = time.Time{}, 0, nil
}

func (m *Member) failed(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.backoff = min(max(2*m.backoff, firstBackoff), lastBackoff)
	m.until, m.lastErr = time.Now().Add(m.backoff), err
}

// Servers is a pool over several PostgreSQL servers. Claims start at a
// server drawn at random and go round the others in turn when it has no
// free id or does not answer; a server that does not answer is skipped,
// with a backoff, until it answers again. Everything done with a lease
// goes to the server the lease names.
type Servers struct {
	Pool    string
	Count   int // the servers the pool has, by their marks
	members []*Member

	fallthroughs, skips counterPair
}

type counterPair struct {
	mu sync.Mutex
	n  int64
}

func (c *counterPair) add() { c.mu.Lock(); c.n++; c.mu.Unlock() }
func (c *counterPair) get() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n
}

// ServersStats are the spread's counters.
type ServersStats struct {
	// Fallthroughs: claims that found no free id on a server and went on.
	Fallthroughs int64
	// Skips: claims that passed a server that was not answering.
	Skips int64
}

// SpreadStats returns the spread's counters.
func (s *Servers) SpreadStats() ServersStats {
	return ServersStats{Fallthroughs: s.fallthroughs.get(), Skips: s.skips.get()}
}

// Members lists the servers in the order given.
func (s *Servers) Members() []*Member { return s.members }

// probe is what OpenServers reads of one server.
type probe struct {
	mark    ServerMark
	version int
	err     error // the server did not answer
}

// OpenServers checks that the targets are the servers of one pool and
// returns it. A server that does not answer is kept, to be tried again
// later, as long as one does; it must be one of the servers the others'
// marks count. It refuses, with ErrServers and one line, a server of
// another pool or of none, one listed twice, servers of different major
// versions, a list missing a server of the pool, or a list none of whose
// servers answers.
func OpenServers(ctx context.Context, targets []Target) (*Servers, error) {
	if len(targets) == 0 {
		return nil, invalid("no server given")
	}
	probes := make([]probe, len(targets))
	var wg sync.WaitGroup
	for i, t := range targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			probes[i] = readProbe(pctx, t.Eng)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := &Servers{}
	byName := map[string]string{}
	version, versionAt := 0, ""
	down := 0
	var firstDown error
	for i, t := range targets {
		p := probes[i]
		m := &Member{Addr: t.Addr, Eng: t.Eng}
		s.members = append(s.members, m)
		if p.err != nil {
			if !Unreachable(p.err) {
				return nil, fmt.Errorf("%s: %w", t.Addr, p.err)
			}
			down++
			firstDown = firstErr(firstDown, fmt.Errorf("%s: %w", t.Addr, p.err))
			m.failed(p.err)
			continue
		}
		if p.mark.Pool == "" {
			return nil, fmt.Errorf("%w: %s holds no pool spanning servers (no pool_id in pooltop_meta): run `pooltop migrate` with every --dsn of the pool", ErrServers, t.Addr)
		}
		if s.Pool == "" {
			s.Pool = p.mark.Pool
		} else if p.mark.Pool != s.Pool {
			return nil, fmt.Errorf("%w: %s belongs to pool %s, %s to pool %s: list the servers of one pool", ErrServers, t.Addr, p.mark.Pool, targets[0].Addr, s.Pool)
		}
		if other, ok := byName[p.mark.Name]; ok {
			return nil, fmt.Errorf("%w: server %s of pool %s is listed twice (%s and %s reach it): list each server once", ErrServers, p.mark.Name, s.Pool, other, t.Addr)
		}
		byName[p.mark.Name] = t.Addr
		if version == 0 {
			version, versionAt = p.version, t.Addr
		} else if p.version/10000 != version/10000 {
			return nil, fmt.Errorf("%w: %s runs PostgreSQL %d and %s PostgreSQL %d: run one major version across a pool", ErrServers, versionAt, version/10000, t.Addr, p.version/10000)
		}
		s.Count = max(s.Count, p.mark.Servers)
		m.name = p.mark.Name
	}
	if down == len(targets) {
		return nil, fmt.Errorf("%w: no server answered; %w", ErrServers, firstDown)
	}
	if len(targets) < s.Count {
		var missing []string
		for i := 1; i <= s.Count; i++ {
			if _, ok := byName[ServerName(i)]; !ok {
				missing = append(missing, ServerName(i))
			}
		}
		return nil, fmt.Errorf("%w: pool %s has %d servers and the list names %d: %s missing; give every server's --dsn",
			ErrServers, s.Pool, s.Count, len(targets), strings.Join(missing, ", "))
	}
	if len(targets) > s.Count {
		return nil, fmt.Errorf("%w: pool %s has %d servers and the list names %d: one of them is not part of it (or is listed twice and did not answer)",
			ErrServers, s.Pool, s.Count, len(targets))
	}
	return s, nil
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func readProbe(ctx context.Context, e *Engine) probe {
	var p probe
	if err := e.db.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&p.version); err != nil {
		p.err = err
		return p
	}
	if err := e.CheckSchema(ctx, false); err != nil {
		p.err = err
		return p
	}
	p.mark, p.err = e.ReadMark(ctx)
	return p
}

// Unreachable reports whether err means that the server did not answer
// (refused, cut, shut down, out of connections, timed out) rather than that
// it answered with a refusal: such a server is skipped and tried again.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	for _, logical := range []error{ErrInvalidArgument, ErrPoolEmpty, ErrLeaseLost, ErrStaleToken, ErrNotFound,
		ErrRequestConflict, ErrContended, ErrTokenExhausted, ErrNoSchema, ErrNotPooltop, ErrServers, context.Canceled} {
		if errors.Is(err, logical) {
			return false
		}
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return unreachableCode(pgErr.Code)
	}
	var ce *ConnError
	if errors.As(err, &ce) && ce.Code != "" {
		return unreachableCode(ce.Code) // a password refused is an answer
	}
	return true
}

// unreachableCode says whether a SQLSTATE means the server is not there to
// answer (connection, resources, shut down, crashed, starting up) rather
// than an answer (a timeout, a lock not available, a constraint, a wrong
// password).
func unreachableCode(code string) bool {
	switch {
	case strings.HasPrefix(code, "08"), strings.HasPrefix(code, "53"):
		return true
	case code == "57P01", code == "57P02", code == "57P03":
		return true
	}
	return false
}

// ErrNoServer means every server of the pool failed lately and waits out its
// backoff; the call can be tried again.
var ErrNoServer = errors.New("no server of the pool answers")

// member returns the member named name, checking that it was reached: a
// lease names the server it was claimed on.
func (s *Servers) member(name string) (*Member, error) {
	for _, m := range s.members {
		if m.Name() == name {
			return m, nil
		}
	}
	if name == "" {
		return nil, invalid("the lease names no server: on a pool over several servers, give the server the lease was claimed on")
	}
	return nil, invalid("server %q: pool %s has no server of that name among those reached (%s)", name, s.Pool, strings.Join(s.names(), ", "))
}

func (s *Servers) names() []string {
	var out []string
	for _, m := range s.members {
		if n := m.Name(); n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// Reach makes sure a member that did not answer at the start is the server
// it should be before it is used: its mark names this pool and a server
// not reached through another address.
func (s *Servers) Reach(ctx context.Context, m *Member) error {
	if m.Name() != "" {
		return nil
	}
	mark, err := m.Eng.ReadMark(ctx)
	if err != nil {
		return err
	}
	if mark.Pool != s.Pool {
		return fmt.Errorf("%w: %s came back as a server of pool %q, not of pool %s: it is left out", ErrServers, m.Addr, mark.Pool, s.Pool)
	}
	for _, o := range s.members {
		if o != m && o.Name() == mark.Name {
			return fmt.Errorf("%w: %s came back as server %s, which %s is already: it is left out", ErrServers, m.Addr, mark.Name, o.Addr)
		}
	}
	m.mu.Lock()
	m.name = mark.Name
	m.mu.Unlock()
	return nil
}

// LeaseAcquire claims up to p.N ids on one server: the first drawn at
// random, then the others in turn while a server has no free id or does
// not answer (seed 001 §6.2: no worker is bound to a server). The leases
// name their server. ErrPoolEmpty when every server that answered was
// empty; when none answered, the last server's error.
func (s *Servers) LeaseAcquire(ctx context.Context, p *LeaseAcquireParams) ([]Lease, error) {
	n := len(s.members)
	start := mrand.IntN(n)
	empty := 0
	var lastErr error
	for i := range n {
		m := s.members[(start+i)%n]
		if !m.ready(time.Now()) {
			s.skips.add()
			continue
		}
		leases, err := s.acquireOn(ctx, m, p)
		switch {
		case err == nil:
			return leases, nil
		case errors.Is(err, ErrPoolEmpty):
			empty++
			s.fallthroughs.add()
		case ctx.Err() != nil || !Unreachable(err) && !errors.Is(err, ErrServers):
			return nil, err
		default:
			s.skips.add()
			lastErr = fmt.Errorf("%s: %w", m.Addr, err)
		}
	}
	switch {
	case empty > 0:
		return nil, ErrPoolEmpty
	case lastErr != nil:
		return nil, lastErr
	}
	// Every server waits out a backoff: say so, with the latest reason.
	why := errors.New("no reason kept")
	for _, m := range s.members {
		if err := m.Down(time.Now()); err != nil {
			why = err
		}
	}
	return nil, fmt.Errorf("%w: each failed lately and is tried again after a backoff (last: %w)", ErrNoServer, why)
}

func (s *Servers) acquireOn(ctx context.Context, m *Member, p *LeaseAcquireParams) ([]Lease, error) {
	err := s.Reach(ctx, m)
	var leases []Lease
	if err == nil {
		leases, err = m.Eng.LeaseAcquire(ctx, p)
	}
	if err != nil && (Unreachable(err) || errors.Is(err, ErrServers)) && ctx.Err() == nil {
		m.failed(err)
		return nil, err
	}
	m.answered()
	for i := range leases {
		leases[i].Server = m.Name()
	}
	return leases, err
}

// on runs f on the server named name, noting whether it answered.
func on[T any](ctx context.Context, s *Servers, name string, f func(e *Engine) (T, error)) (T, error) {
	var zero T
	m, err := s.member(name)
	if err != nil {
		return zero, err
	}
	v, err := f(m.Eng)
	if err != nil && Unreachable(err) && ctx.Err() == nil {
		m.failed(err)
		return zero, fmt.Errorf("server %s (%s): %w", name, m.Addr, err)
	}
	m.answered()
	return v, err
}

// leaseOn runs a lease operation on the server named and names it in the result.
func (s *Servers) leaseOn(ctx context.Context, server string, f func(e *Engine) (Lease, error)) (Lease, error) {
	l, err := on(ctx, s, server, f)
	if err == nil {
		l.Server = server
	}
	return l, err
}

// LeaseRenew renews the lease on the server p.Server names.
func (s *Servers) LeaseRenew(ctx context.Context, p *LeaseRenewParams) (Lease, error) {
	return s.leaseOn(ctx, p.Server, func(e *Engine) (Lease, error) { return e.LeaseRenew(ctx, p) })
}

// LeaseRelease releases the lease on the server p.Server names.
func (s *Servers) LeaseRelease(ctx context.Context, p *LeaseReleaseParams) (Lease, error) {
	return s.leaseOn(ctx, p.Server, func(e *Engine) (Lease, error) { return e.LeaseRelease(ctx, p) })
}

// LeaseTransfer transfers the lease on the server p.Server names.
func (s *Servers) LeaseTransfer(ctx context.Context, p *LeaseTransferParams) (Lease, error) {
	return s.leaseOn(ctx, p.Server, func(e *Engine) (Lease, error) { return e.LeaseTransfer(ctx, p) })
}

// LeaseCommit commits the effect on the server p.Server names, where the
// id and its ledger live: one fenced statement there.
func (s *Servers) LeaseCommit(ctx context.Context, p *LeaseCommitParams) (CommitResult, error) {
	return on(ctx, s, p.Server, func(e *Engine) (CommitResult, error) { return e.LeaseCommit(ctx, p) })
}

// LeaseCheck reads whether the lease is live, on the server p.Server names.
func (s *Servers) LeaseCheck(ctx context.Context, p *LeaseCheckParams) (bool, error) {
	return on(ctx, s, p.Server, func(e *Engine) (bool, error) { return e.LeaseCheck(ctx, p) })
}

// LeaseSuperseded is Engine.LeaseSuperseded on the server the lease names.
func (s *Servers) LeaseSuperseded(ctx context.Context, p *LeaseCheckParams) (bool, error) {
	return on(ctx, s, p.Server, func(e *Engine) (bool, error) { return e.LeaseSuperseded(ctx, p) })
}

// LeaseCommitBatch commits the items, one fenced statement on each server
// the items name (a batch's items may come from several servers: never one
// statement across them). results[i] and errs[i] describe items[i]; a
// server that fails fails its own items, with the error in errs, and the
// others are committed. The returned error is set when every server failed.
func (s *Servers) LeaseCommitBatch(ctx context.Context, holder string, items []CommitItem) ([]CommitResult, []error, error) {
	results, errs := make([]CommitResult, len(items)), make([]error, len(items))
	byServer := map[string][]int{}
	var order []string
	for i, it := range items {
		if _, ok := byServer[it.Server]; !ok {
			order = append(order, it.Server)
		}
		byServer[it.Server] = append(byServer[it.Server], i)
	}
	failed := 0
	var lastErr error
	for _, server := range order {
		at := byServer[server]
		part := make([]CommitItem, len(at))
		for k, i := range at {
			part[k] = items[i]
		}
		type batch struct {
			res  []CommitResult
			errs []error
		}
		b, err := on(ctx, s, server, func(e *Engine) (batch, error) {
			res, errs, err := e.LeaseCommitBatch(ctx, holder, part)
			return batch{res, errs}, err
		})
		if err != nil {
			failed++
			lastErr = err
			for _, i := range at {
				errs[i] = err
			}
			continue
		}
		for k, i := range at {
			results[i], errs[i] = b.res[k], b.errs[k]
		}
	}
	if failed == len(order) && lastErr != nil {
		return nil, nil, lastErr
	}
	return results, errs, nil
}

// Show reads the row of id on the server named.
func (s *Servers) Show(ctx context.Context, server string, id int64) (Row, error) {
	return on(ctx, s, server, func(e *Engine) (Row, error) { return e.Show(ctx, id) })
}

// Owner returns which of names a stable hash of the identifier picks
// (rendezvous hashing: the name whose hash with the identifier is highest).
// Adding a name moves no identifier already seeded: seeds number new ids
// above every server's highest, so old identifiers are never placed again.
func Owner(identifier string, names []string) int {
	best, bestAt := uint64(0), 0
	for i, n := range names {
		h := fnv.New64a()
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write([]byte(identifier))
		if v := mix(h.Sum64()); i == 0 || v > best {
			best, bestAt = v, i
		}
	}
	return bestAt
}

// mix spreads FNV's last bytes over the whole word (splitmix64's finaliser):
// identifiers that differ in their last digit would otherwise score close.
func mix(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// CountStatus counts the pool's rows in status st: a scan of the pool, for
// campaigns and tests, not for a dashboard.
func (e *Engine) CountStatus(ctx context.Context, st Status) (int64, error) {
	var n int64
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM resource_pool WHERE status = $1`, st).Scan(&n); err != nil {
		return 0, dbError("count "+st, err)
	}
	return n, nil
}

// Identifier is the identifier a seed gives id n, as Seed does on one server.
func Identifier(n int64) string { return fmt.Sprintf("res-%010d", n) }

const sqlSeedIDs = `
INSERT INTO resource_pool (id, identifier)
SELECT n, 'res-' || lpad(n::text, greatest(10, length(n::text)), '0') FROM unnest($1::bigint[]) AS n
ON CONFLICT DO NOTHING`

// sqlTopID is the highest id a server has had: its highest id, or its id
// sequence's last value where a reset emptied the pool past it (see
// ResetPool), so that no id comes back.
const sqlTopID = `
SELECT greatest(coalesce(max(id), 0),
                coalesce(pg_sequence_last_value(pg_get_serial_sequence('resource_pool', 'id')::regclass), 0))
FROM resource_pool`

// serversSeedChunk is how many new ids one round of Seed places.
const serversSeedChunk = 100_000

// Seed adds count UNUSED ids over the servers: numbered on from the highest
// id of any server, each placed on the server Owner picks for its
// identifier, so that an identifier (and an id) is on one server only. It
// needs every server: one that does not answer fails the seed before
// anything is written. It returns the ids added on each server.
func (s *Servers) Seed(ctx context.Context, count int) (map[string]int64, error) {
	return s.seed(ctx, count, true)
}

func (s *Servers) seed(ctx context.Context, count int, analyze bool) (map[string]int64, error) {
	if count <= 0 || count > MaxSeed {
		return nil, invalid("count %d: seed between 1 and %d ids", count, MaxSeed)
	}
	var top int64
	for _, m := range s.members {
		if err := s.Reach(ctx, m); err != nil {
			return nil, fmt.Errorf("seed: %s: %w: a seed places ids on every server; start it, or seed when it is back", m.Addr, err)
		}
		var hi int64
		if err := m.Eng.db.QueryRow(ctx, sqlTopID).Scan(&hi); err != nil {
			return nil, fmt.Errorf("seed: %s: %w", m.Addr, dbError("read the highest id", err))
		}
		top = max(top, hi)
	}
	names := s.names()
	byName := map[string]*Member{}
	for _, m := range s.members {
		byName[m.Name()] = m
	}
	added := map[string]int64{}
	for done := int64(0); done < int64(count); {
		n := min(int64(count)-done, serversSeedChunk)
		ids := make([][]int64, len(names))
		for id := top + done + 1; id <= top+done+n; id++ {
			o := Owner(Identifier(id), names)
			ids[o] = append(ids[o], id)
		}
		for i, name := range names {
			if len(ids[i]) == 0 {
				continue
			}
			tag, err := byName[name].Eng.db.Exec(ctx, sqlSeedIDs, ids[i])
			if err != nil {
				return added, fmt.Errorf("seed: server %s: %w (ids added so far are kept)", name, dbError("insert", err))
			}
			added[name] += tag.RowsAffected()
		}
		done += n
	}
	for _, name := range names {
		if !analyze {
			break
		}
		if _, err := byName[name].Eng.db.Exec(ctx, "ANALYZE resource_pool"); err != nil {
			return added, fmt.Errorf("seed: server %s: analyze: %w", name, err)
		}
	}
	return added, nil
}

// ServerAudit is one server's audit in a pool over several.
type ServerAudit struct {
	Server string      `json:"server"`
	Addr   string      `json:"addr"`
	Report AuditReport `json:"report"`
}

// Audit audits every server and adds the reports up; the findings name
// their server. It needs every server: an audit that leaves one out
// proves nothing about it.
func (s *Servers) Audit(ctx context.Context, grace time.Duration) (AuditReport, []ServerAudit, error) {
	total := AuditReport{Violations: []string{}, Findings: []Finding{}}
	var per []ServerAudit
	for _, m := range s.members {
		if err := s.Reach(ctx, m); err != nil {
			return total, per, fmt.Errorf("audit: %s: %w: verify audits every server of the pool; try again when it answers", m.Addr, err)
		}
		a, err := m.Eng.Audit(ctx, grace)
		if err != nil {
			return total, per, fmt.Errorf("audit: server %s (%s): %w", m.Name(), m.Addr, err)
		}
		per = append(per, ServerAudit{Server: m.Name(), Addr: m.Addr, Report: a})
		total.add(a, m.Name())
	}
	sort.Slice(per, func(i, j int) bool { return per[i].Server < per[j].Server })
	return total, per, nil
}

// add adds one server's audit to the pool's.
func (a *AuditReport) add(b AuditReport, server string) {
	a.Total += b.Total
	a.Unused += b.Unused
	a.Pending += b.Pending
	a.Consumed += b.Consumed
	a.Effects += b.Effects
	a.ConsumedWithoutEffect += b.ConsumedWithoutEffect
	a.DoubleFinalizations += b.DoubleFinalizations
	a.StaleEffects += b.StaleEffects
	a.UnissuedEffects += b.UnissuedEffects
	a.EffectsOnUnconsumed += b.EffectsOnUnconsumed
	a.PendingUnleased += b.PendingUnleased
	a.PendingPastGrace += b.PendingPastGrace
	a.OldestPastGraceMS = max(a.OldestPastGraceMS, b.OldestPastGraceMS)
	a.PendingForever += b.PendingForever
	a.BadStatus += b.BadStatus
	a.BadUpdatedAt += b.BadUpdatedAt
	a.TokenExhausted += b.TokenExhausted
	for _, f := range b.Findings {
		f.Text = "server " + server + ": " + f.Text
		a.Findings = append(a.Findings, f)
		a.Violations = append(a.Violations, f.Text)
	}
}

// NewReaper returns one reaper for every server: each pass reaps them in
// turn, each reclaiming the leases its own clock says have expired. A
// server that does not answer fails its part of the pass until it is back
// (counted in the reaper's errors); the others go on. Several reapers on
// one pool are safe: a reap is a compare-and-set on each row.
func (s *Servers) NewReaper(cfg ReaperConfig) (*Reaper, error) {
	engines := make([]*Engine, len(s.members))
	for i, m := range s.members {
		engines[i] = m.Eng
	}
	return newReaper(engines, cfg)
}

// StillHeld returns which of the leases (ids[i] at tokens[i]) are still
// PENDING at that token on any server (ids are unique across servers). It
// fails when a server does not answer: its leases cannot be told reclaimed.
func (s *Servers) StillHeld(ctx context.Context, ids, tokens []int64) ([]int64, error) {
	var out []int64
	for _, m := range s.members {
		if err := s.Reach(ctx, m); err != nil {
			return nil, fmt.Errorf("%s: %w", m.Addr, err)
		}
		held, err := m.Eng.StillHeld(ctx, ids, tokens)
		if err != nil {
			return nil, fmt.Errorf("server %s: %w", m.Name(), err)
		}
		out = append(out, held...)
	}
	return out, nil
}

// Refill is Seed without the ANALYZE, for a producer topping the pool up;
// it needs every server, as Seed does.
func (s *Servers) Refill(ctx context.Context, count int) (int64, error) {
	added, err := s.seed(ctx, count, false)
	var n int64
	for _, v := range added {
		n += v
	}
	return n, err
}

// SetAutovacuum turns autovacuum on the pool's tables off or back on, on
// every server that answers; the first error is returned.
func (s *Servers) SetAutovacuum(ctx context.Context, on bool) error {
	var first error
	for _, m := range s.members {
		if err := m.Eng.SetAutovacuum(ctx, on); err != nil && first == nil {
			first = fmt.Errorf("%s: %w", m.Addr, err)
		}
	}
	return first
}

// HoldFree holds free ids FOR SHARE as Engine.HoldFree does, on one server
// drawn at random among those that answer.
func (s *Servers) HoldFree(ctx context.Context, n int, hold time.Duration, held func(ids []int64)) (int, error) {
	start := mrand.IntN(len(s.members))
	for i := range s.members {
		m := s.members[(start+i)%len(s.members)]
		if m.ready(time.Now()) {
			return m.Eng.HoldFree(ctx, n, hold, held)
		}
	}
	return 0, fmt.Errorf("%w: no server answers", ErrServers)
}

// Stats adds up the engines' counters.
func (s *Servers) Stats() Stats {
	var out Stats
	for _, m := range s.members {
		st := m.Eng.Stats()
		out.OptimisticConflicts += st.OptimisticConflicts
		out.OptimisticRetries += st.OptimisticRetries
		out.PartitionFallthroughs += st.PartitionFallthroughs
	}
	return out
}

// PlanMarks returns the marks migrate writes on the servers listed, given
// the marks they have (the zero mark: none): servers of the pool keep
// their names, new ones take the next names in the order listed, and all
// are told the new count. It refuses servers of different pools, a server
// listed twice and a list that leaves out a server of the pool (its count
// would go stale).
func PlanMarks(have []ServerMark, addrs []string) ([]ServerMark, error) {
	pool, count := "", 0
	names := map[string]string{}
	for i, m := range have {
		if m.Pool == "" {
			continue
		}
		if pool != "" && m.Pool != pool {
			return nil, fmt.Errorf("%w: %s belongs to pool %s and another server listed to pool %s: migrate the servers of one pool together", ErrServers, addrs[i], m.Pool, pool)
		}
		pool = m.Pool
		if other, ok := names[m.Name]; ok {
			return nil, fmt.Errorf("%w: server %s of pool %s is listed twice (%s and %s reach it): list each server once", ErrServers, m.Name, pool, other, addrs[i])
		}
		names[m.Name] = addrs[i]
		count = max(count, m.Servers)
	}
	if len(names) < count {
		var missing []string
		for i := 1; i <= count; i++ {
			if _, ok := names[ServerName(i)]; !ok {
				missing = append(missing, ServerName(i))
			}
		}
		return nil, fmt.Errorf("%w: pool %s has %d servers and %s %s not listed: migrate needs every server of the pool, old and new, to record how many it has",
			ErrServers, pool, count, strings.Join(missing, ", "), map[bool]string{true: "is", false: "are"}[len(missing) == 1])
	}
	if pool == "" {
		pool = NewPoolID()
	}
	total := count
	for _, m := range have {
		if m.Pool == "" {
			total++
		}
	}
	out := make([]ServerMark, len(have))
	next := count
	for i, m := range have {
		name := m.Name
		if m.Pool == "" {
			next++
			name = ServerName(next)
		}
		out[i] = ServerMark{Pool: pool, Name: name, Servers: total}
	}
	return out, nil
}

// MarkNew marks fresh servers, each just migrated, as one new pool (s1,
// s2 … in the order given) and opens it: the throwaway servers of the
// demo, chaos and bench.
func MarkNew(ctx context.Context, targets []Target) (*Servers, error) {
	addrs := make([]string, len(targets))
	for i, t := range targets {
		addrs[i] = t.Addr
	}
	marks, err := PlanMarks(make([]ServerMark, len(targets)), addrs)
	if err != nil {
		return nil, err
	}
	for i, t := range targets {
		if err := t.Eng.WriteMark(ctx, marks[i]); err != nil {
			return nil, err
		}
	}
	return OpenServers(ctx, targets)
}

// ResetPool empties the pool on every server, as Engine.ResetPool does on
// one: refused while another holder has a live lease or another work
// process beats on any server. Every server must answer; each is checked
// before any is emptied. The id sequences are left past the ids emptied,
// and Seed numbers on from them, so an id (and its tokens) never comes
// back.
func (s *Servers) ResetPool(ctx context.Context, ours string) error {
	for _, m := range s.members {
		if err := s.Reach(ctx, m); err != nil {
			return fmt.Errorf("reset: %s: %w: a reset empties every server; start it, or reset when it is back", m.Addr, err)
		}
	}
	// Every server is locked and checked before any is emptied, so that
	// a refusal on one leaves them all as they were.
	txs := make([]pgx.Tx, 0, len(s.members))
	defer func() {
		for _, tx := range txs {
			_ = tx.Rollback(ctx)
		}
	}()
	seqs := make([]string, len(s.members))
	for i, m := range s.members {
		tx, err := m.Eng.db.Begin(ctx)
		if err != nil {
			return fmt.Errorf("reset: server %s: %w", m.Name(), err)
		}
		txs = append(txs, tx)
		if seqs[i], err = lockForReset(ctx, tx, ours); err != nil {
			return fmt.Errorf("server %s: %w", m.Name(), err)
		}
	}
	for i, m := range s.members {
		if err := emptyLocked(ctx, txs[i], seqs[i]); err != nil {
			return fmt.Errorf("server %s: %w", m.Name(), err)
		}
	}
	for i, m := range s.members {
		if err := txs[i].Commit(ctx); err != nil {
			return fmt.Errorf("reset: server %s: %w (the servers before it are emptied: reset again)", m.Name(), err)
		}
	}
	return nil
}

// Size is the number of ids in the pool, over every server that answers.
func (s *Servers) Size(ctx context.Context) (int64, error) {
	var total int64
	for _, m := range s.members {
		var n int64
		if err := m.Eng.db.QueryRow(ctx, "SELECT count(*) FROM resource_pool").Scan(&n); err != nil {
			if Unreachable(err) {
				continue
			}
			return 0, fmt.Errorf("server %s: %w", m.Name(), dbError("count the pool", err))
		}
		total += n
	}
	return total, nil
}
