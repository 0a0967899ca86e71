// Package pgbench runs PostgreSQL's pgbench with a custom script, so that
// pooltop's figures can be set next to the same SQL driven by the reference
// client on the same server: the ceiling a Go client should approach.
package pgbench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgembed"
)

// CycleScript is the engine's single-row cycle as a pgbench script: the
// claim (a lease of ttl) and the fenced commit, the same SQL pooltop runs
// (the skip-locked twin on a plain pool, see TwinScript). With delay, each
// statement waits that long before it is sent, as pooltop's own
// connections do under bench --rtt.
func CycleScript(ttl, delay time.Duration) string {
	s, err := TwinScript(Twin{Strategy: "skip-locked"}, ttl, delay, nil)
	if err != nil {
		panic(err) // the skip-locked twin always builds
	}
	return s
}

// Options describe one pgbench run.
type Options struct {
	DSN     string
	Schema  string // search_path for the script
	Script  string // one statement per line; \gset and \set allowed
	Clients int
	// Exactly one of Transactions (per client) and Duration is used.
	Transactions int
	Duration     time.Duration
	// Latency logs every transaction to compute percentiles; it costs
	// pgbench some throughput, so the ceiling is measured without it.
	Latency bool
	// Settings are server settings for pgbench's sessions (PGOPTIONS -c).
	Settings map[string]string
	// Protocol is pgbench's -M: prepared (the default) or extended.
	Protocol string
}

// Result is what pgbench reported.
type Result struct {
	TPS    float64 // transactions per second, without connection time
	Failed int64
	P50MS  float64 // latency percentiles of the script, from the per-transaction log
	P99MS  float64
	Output string
	// CPU is the user and system time pgbench itself used: the client's
	// share of a cycle's cost.
	CPU time.Duration
}

// ErrAborted is returned, wrapped, when pgbench stopped some of its clients
// before the end (a statement failed: a \gset found no row in an empty pool,
// a connection broke): its summary is then not a figure.
var ErrAborted = errors.New("pgbench aborted clients before the end")

// Find returns the pgbench binary beside the server binaries.
func Find() (string, error) {
	dir, err := pgembed.FindBinaries()
	if err != nil {
		return "", err
	}
	p := filepath.Join(dir, "pgbench")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("pgbench not found in %s: install the PostgreSQL client package (Debian: postgresql-client)", dir)
	}
	return p, nil
}

// Literal replaces $1, $2, … in sql with the given literals and joins the
// statement onto one line, as pgbench reads one statement per line.
func Literal(sql string, args ...string) string {
	for i := len(args); i >= 1; i-- {
		sql = strings.ReplaceAll(sql, "$"+strconv.Itoa(i), args[i-1])
	}
	return strings.Join(strings.Fields(sql), " ")
}

var (
	tpsLine    = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)
	failedLine = regexp.MustCompile(`number of failed transactions: ([0-9]+)`)
)

// connEnv turns a connection string into pgbench's environment: the server
// is named by PGHOST, PGPORT, PGUSER, PGDATABASE and the password by
// PGPASSWORD, never on the command line, where any user of the host can read
// it (ps). The caller's own PG* variables are dropped, so that only the
// connection string decides where pgbench connects.
func connEnv(dsn string) ([]string, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, engine.ParseError(dsn, "the connection string", err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	ssl := "disable"
	if cfg.TLSConfig != nil {
		ssl = "require"
		for _, f := range cfg.Fallbacks {
			if f.TLSConfig == nil {
				ssl = "prefer"
			}
		}
	}
	env = append(env, "PGHOST="+cfg.Host, "PGPORT="+strconv.Itoa(int(cfg.Port)), "PGUSER="+cfg.User,
		"PGDATABASE="+cfg.Database, "PGSSLMODE="+ssl)
	if cfg.Password != "" {
		env = append(env, "PGPASSWORD="+cfg.Password)
	}
	return env, nil
}

// command builds the pgbench command line for o, with the script in dir.
func command(ctx context.Context, bin, dir string, o Options) (*exec.Cmd, error) {
	protocol := o.Protocol
	if protocol == "" {
		protocol = "prepared"
	}
	args := []string{"-n", "-M", protocol, "-c", strconv.Itoa(o.Clients), "-j", strconv.Itoa(min(o.Clients, 2)),
		"-f", filepath.Join(dir, "script.sql")}
	if o.Latency {
		args = append(args, "-l", "--log-prefix", filepath.Join(dir, "log"))
	}
	if o.Duration > 0 {
		args = append(args, "-T", strconv.Itoa(max(1, int(o.Duration.Round(time.Second)/time.Second))))
	} else {
		args = append(args, "-t", strconv.Itoa(o.Transactions))
	}
	env, err := connEnv(o.DSN)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	opts := "-c search_path=" + o.Schema
	keys := make([]string, 0, len(o.Settings))
	for k := range o.Settings {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		opts += " -c " + k + "=" + o.Settings[k]
	}
	cmd.Env = append(env, "PGOPTIONS="+opts, "PGAPPNAME=pgbench")
	return cmd, nil
}

// Run executes pgbench and parses its summary.
func Run(ctx context.Context, o Options) (Result, error) {
	bin, err := Find()
	if err != nil {
		return Result{}, err
	}
	dir, err := os.MkdirTemp("", "pooltop-pgbench-")
	if err != nil {
		return Result{}, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "script.sql")
	if err := os.WriteFile(file, []byte(o.Script), 0o644); err != nil {
		return Result{}, err
	}
	cmd, err := command(ctx, bin, dir, o)
	if err != nil {
		return Result{}, err
	}
	out, err := cmd.CombinedOutput()
	res := Result{Output: string(out)}
	if cmd.ProcessState != nil {
		res.CPU = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	if strings.Contains(res.Output, "Run was aborted") || strings.Contains(res.Output, "client(s) aborted") {
		return res, fmt.Errorf("%w: %s", ErrAborted, firstError(res.Output))
	}
	if err != nil {
		return res, fmt.Errorf("pgbench: %w: %s", err, lastLines(string(out), 3))
	}
	m := tpsLine.FindStringSubmatch(res.Output)
	if m == nil {
		return res, fmt.Errorf("pgbench printed no tps: %s", lastLines(res.Output, 3))
	}
	res.TPS, _ = strconv.ParseFloat(m[1], 64)
	if m := failedLine.FindStringSubmatch(res.Output); m != nil {
		res.Failed, _ = strconv.ParseInt(m[1], 10, 64)
	}
	if o.Latency {
		res.P50MS, res.P99MS = logPercentiles(dir)
	}
	return res, nil
}

// logPercentiles reads pgbench's per-transaction logs (the third field is
// the latency in microseconds).
func logPercentiles(dir string) (p50, p99 float64) {
	files, _ := filepath.Glob(filepath.Join(dir, "log*"))
	var lat []float64
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if len(fs) < 3 {
				continue
			}
			if v, err := strconv.ParseFloat(fs[2], 64); err == nil {
				lat = append(lat, v/1000)
			}
		}
	}
	if len(lat) == 0 {
		return 0, 0
	}
	sort.Float64s(lat)
	at := func(q float64) float64 { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
	return at(0.50), at(0.99)
}

// firstError is the first line pgbench printed about a failed statement.
func firstError(out string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "error") || strings.Contains(line, "ERROR") || strings.Contains(line, "aborted") {
			return strings.TrimSpace(line)
		}
	}
	return lastLines(out, 1)
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
