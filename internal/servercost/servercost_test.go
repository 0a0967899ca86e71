package servercost

import (
	"os"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// Two samples around writes on a server of this machine: the WAL position
// moves by at least what was written, the server's CPU grows, and Per
// divides by the cycles.
func TestSamplesAroundWork(t *testing.T) {
	ctx, db := pgtest.Setup(t, 0, pgtest.Options{})
	s, err := Open(ctx, pgtest.DSN(), false)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The launcher's server runs on this machine; one named by
	// TEST_DATABASE_URL may not, and then has no CPU figure.
	local := pgtest.Server() != nil || s.CPU()
	if pgtest.Server() != nil && !s.CPU() {
		t.Fatal("the test server runs on this machine, but its postmaster was not found in /proc")
	}
	a, err := s.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE w AS SELECT g, repeat('x', 100) AS pad FROM generate_series(1, 20000) g`); err != nil {
		t.Fatal(err)
	}
	var spin int64
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM generate_series(1, 3000000)`).Scan(&spin); err != nil {
		t.Fatal(err)
	}
	b, err := s.Take(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.WALBytes-a.WALBytes < 20000*100 {
		t.Errorf("WAL moved %d bytes for 2 MB of rows", b.WALBytes-a.WALBytes)
	}
	if local && (!a.CPU || b.ServerCPU-a.ServerCPU < 10*time.Millisecond) {
		t.Errorf("server CPU %v → %v for a count of 3 million rows", a.ServerCPU, b.ServerCPU)
	}
	c := Per(a, b, 1000, time.Second)
	if c.WALBytes != float64(b.WALBytes-a.WALBytes)/1000 || c.ClientCPU == nil || *c.ClientCPU != 1000 || (c.ServerCPU == nil) == local || (c.WALRecords != nil) != s.Statements() {
		t.Errorf("per cycle: %+v", c)
	}
	if got := Per(a, b, 0, time.Second); got != (Cost{}) {
		t.Errorf("no cycles: %+v", got)
	}
}

// The command name in /proc's stat may hold spaces and parentheses.
func TestReadStatOfThisProcess(t *testing.T) {
	st, err := readStat(os.Getpid())
	if err != nil || st.ppid <= 0 {
		t.Fatalf("%+v %v", st, err)
	}
	if postmasterOf(os.Getpid()) != 0 {
		t.Fatal("a test process taken for a PostgreSQL backend")
	}
}
