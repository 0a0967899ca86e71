// Package servercost measures what a stretch of work cost the PostgreSQL
// server: WAL written, shared buffers hit and read, time in statements and
// the CPU time of the server's processes. Bench takes a sample before and
// after each side of a run and divides the difference by the cycles done.
//
// WAL bytes come from the WAL insert position and are always known. Records,
// buffers and statement time come from pg_stat_statements when the
// extension is installed in the database (the embedded server loads it).
// CPU comes from /proc when the server runs on this machine: the postmaster's
// own time and that of the children it has reaped, plus the time of the
// children still running, so backends that come and go (pgbench's) are
// counted as well as those that stay (pooltop's pool).
package servercost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Sampler reads the server's counters over one connection of its own.
type Sampler struct {
	conn       *pgx.Conn
	pgss       string // the pg_stat_statements view, schema-qualified; "" if absent
	postmaster int    // the server's postmaster pid on this machine; 0 if not here
	// modern: pg_stat_statements of PostgreSQL 13 or later, which counts
	// WAL records and names its time total_exec_time (before: total_time,
	// no WAL).
	modern bool
}

// Sample is the server's counters at one moment.
type Sample struct {
	WALBytes   int64 // WAL insert position
	Statements bool  // the fields below from pg_stat_statements are set
	HasWAL     bool  // WALRecords is set (PostgreSQL 13 or later)
	WALRecords int64
	SharedHit  int64
	SharedRead int64
	ExecMS     float64
	CPU        bool // ServerCPU is set
	ServerCPU  time.Duration
}

// Cost is what one cycle cost, from two samples. The JSON names are part
// of bench's contract; a figure that could not be read is left out.
type Cost struct {
	WALBytes   float64  `json:"wal_bytes"`
	WALRecords *float64 `json:"wal_records,omitempty"`
	SharedHit  *float64 `json:"shared_hit,omitempty"`
	SharedRead *float64 `json:"shared_read,omitempty"`
	ExecUS     *float64 `json:"exec_us,omitempty"`       // time in statements on the server
	ServerCPU  *float64 `json:"server_cpu_us,omitempty"` // CPU of the server's processes
	ClientCPU  *float64 `json:"client_cpu_us,omitempty"` // CPU of the client (pooltop or pgbench)
}

// Open connects to dsn and finds what can be measured there. createPgss
// creates the pg_stat_statements extension when the library is loaded and
// the extension is missing (for a server pooltop started itself).
func Open(ctx context.Context, dsn string, createPgss bool) (*Sampler, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	s := &Sampler{conn: conn}
	if createPgss {
		var loaded bool
		if err := conn.QueryRow(ctx, `SELECT 'pg_stat_statements' = ANY(string_to_array(current_setting('shared_preload_libraries'), ', '))`).Scan(&loaded); err == nil && loaded {
			_, _ = conn.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public`)
		}
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err == nil {
		s.modern = version >= 130000
	}
	var schema string
	err = conn.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace WHERE e.extname = 'pg_stat_statements'`).Scan(&schema)
	if err == nil {
		view := pgx.Identifier{schema, "pg_stat_statements"}.Sanitize()
		// The view fails when the library is not loaded: then it is not used.
		if _, err := conn.Exec(ctx, "SELECT 1 FROM "+view+" LIMIT 1"); err == nil {
			s.pgss = view
		}
	}
	var pid int
	if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err == nil {
		s.postmaster = postmasterOf(pid)
	}
	return s, nil
}

// Close closes the sampler's connection.
func (s *Sampler) Close() { _ = s.conn.Close(context.Background()) }

// Statements says whether pg_stat_statements is read.
func (s *Sampler) Statements() bool { return s.pgss != "" }

// CPU says whether the server's processes are on this machine.
func (s *Sampler) CPU() bool { return s.postmaster != 0 }

// Take reads the counters now.
func (s *Sampler) Take(ctx context.Context) (Sample, error) {
	var x Sample
	var lsn string
	if err := s.conn.QueryRow(ctx, `SELECT (pg_current_wal_insert_lsn() - '0/0')::text`).Scan(&lsn); err != nil {
		return x, err
	}
	x.WALBytes, _ = strconv.ParseInt(strings.Split(lsn, ".")[0], 10, 64)
	if s.pgss != "" {
		records, exec := "coalesce(sum(wal_records), 0)::bigint", "total_exec_time"
		if !s.modern {
			records, exec = "0::bigint", "total_time"
		}
		err := s.conn.QueryRow(ctx, `SELECT `+records+`, coalesce(sum(shared_blks_hit), 0)::bigint,
			coalesce(sum(shared_blks_read), 0)::bigint, coalesce(sum(`+exec+`), 0)::float8
			FROM `+s.pgss+` WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`).
			Scan(&x.WALRecords, &x.SharedHit, &x.SharedRead, &x.ExecMS)
		if err != nil {
			return x, fmt.Errorf("pg_stat_statements: %w", err)
		}
		x.Statements, x.HasWAL = true, s.modern
	}
	if s.postmaster != 0 {
		if cpu, err := treeCPU(s.postmaster); err == nil {
			x.ServerCPU, x.CPU = cpu, true
		}
	}
	return x, nil
}

// Per is the cost of one of cycles between a and b; clientCPU < 0 leaves
// the client's share out.
func Per(a, b Sample, cycles int64, clientCPU time.Duration) Cost {
	if cycles <= 0 {
		return Cost{}
	}
	n := float64(cycles)
	per := func(v float64) *float64 { v /= n; return &v }
	c := Cost{WALBytes: float64(b.WALBytes-a.WALBytes) / n}
	if a.Statements && b.Statements {
		if a.HasWAL && b.HasWAL {
			c.WALRecords = per(float64(b.WALRecords - a.WALRecords))
		}
		c.SharedHit = per(float64(b.SharedHit - a.SharedHit))
		c.SharedRead = per(float64(b.SharedRead - a.SharedRead))
		c.ExecUS = per(1000 * (b.ExecMS - a.ExecMS))
	}
	if a.CPU && b.CPU {
		c.ServerCPU = per(float64((b.ServerCPU - a.ServerCPU).Microseconds()))
	}
	if clientCPU >= 0 {
		c.ClientCPU = per(float64(clientCPU.Microseconds()))
	}
	return c
}

// clockTicks is USER_HZ, the unit of /proc's CPU times: 100 on Linux.
const clockTicks = 100

// postmasterOf finds the postmaster of the backend pid on this machine, or 0
// when the server runs elsewhere (no such process, or not a PostgreSQL one).
func postmasterOf(backend int) int {
	st, err := readStat(backend)
	if err != nil || !isPostgres(backend) {
		return 0
	}
	if !isPostgres(st.ppid) {
		return 0
	}
	return st.ppid
}

func isPostgres(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
	if err != nil {
		return false
	}
	name := filepath.Base(strings.SplitN(string(b), "\x00", 2)[0])
	return strings.HasPrefix(name, "postgres")
}

type stat struct {
	ppid                         int
	utime, stime, cutime, cstime int64
}

// readStat reads the fields of /proc/PID/stat that CPU accounting needs; the
// command name in parentheses may hold spaces, so fields count from its end.
func readStat(pid int) (stat, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return stat{}, err
	}
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return stat{}, errors.New("malformed stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 15 {
		return stat{}, errors.New("short stat")
	}
	// f[0] is field 3 (state): field k is f[k-3].
	num := func(k int) int64 { v, _ := strconv.ParseInt(f[k-3], 10, 64); return v }
	return stat{ppid: int(num(4)), utime: num(14), stime: num(15), cutime: num(16), cstime: num(17)}, nil
}

// treeCPU is the CPU time of the postmaster, of the children it has reaped,
// and of its children still running. A child reaped while the children are
// read would be missed (gone from /proc, not yet in the postmaster's
// figures), so the postmaster is read before and after, until no child was
// reaped in between.
func treeCPU(pm int) (time.Duration, error) {
	for try := 0; ; try++ {
		root, err := readStat(pm)
		if err != nil {
			return 0, err
		}
		children, err := childrenCPU(pm)
		if err != nil {
			return 0, err
		}
		again, err := readStat(pm)
		if err != nil {
			return 0, err
		}
		if again.cutime+again.cstime == root.cutime+root.cstime || try == 4 {
			ticks := again.utime + again.stime + again.cutime + again.cstime + children
			return time.Duration(ticks) * time.Second / clockTicks, nil
		}
	}
}

// childrenCPU is the CPU ticks of pm's children still running.
func childrenCPU(pm int) (int64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	var ticks int64
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pm {
			continue
		}
		st, err := readStat(pid)
		if err != nil || st.ppid != pm {
			continue
		}
		ticks += st.utime + st.stime
	}
	return ticks, nil
}

// SelfCPU is the user and system time this process has used.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Conn is the sampler's own connection, for the caller's bookkeeping
// queries between samples.
func (s *Sampler) Conn() *pgx.Conn { return s.conn }
