package pgbench

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// The password never reaches pgbench's command line, where any user of the
// host reads it with ps; it goes through the environment, and the run
// still connects.
func TestPasswordNeverOnTheCommandLine(t *testing.T) {
	const secret = "carol-s3cret-pw"
	u, err := url.Parse(pgtest.DSN())
	if err != nil || u.Scheme == "" {
		t.Fatalf("the test DSN must be a URL here: %v", err)
	}
	u.User = url.UserPassword(u.User.Username(), secret) // the test server trusts loopback: any password works
	o := Options{DSN: u.String(), Schema: "public", Script: "SELECT 1;\n", Clients: 1, Transactions: 3}
	cmd, err := command(context.Background(), "pgbench", t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	if args := strings.Join(cmd.Args, " "); strings.Contains(args, secret) || strings.Contains(args, u.Host) {
		t.Fatalf("connection details on the command line: %s", args)
	}
	found := false
	for _, kv := range cmd.Env {
		found = found || kv == "PGPASSWORD="+secret
	}
	if !found {
		t.Fatal("PGPASSWORD not passed in the environment")
	}
	t.Setenv("PGHOST", "203.0.113.1") // the caller's own PG* must not redirect pgbench
	res, err := Run(context.Background(), o)
	if err != nil || res.TPS <= 0 {
		t.Fatalf("pgbench through the environment: %+v %v", res, err)
	}
}

// The partitioned cycle claims from every partition, each transaction from
// one drawn at random, and commits every claim it makes.
func TestPartitionedCycleScript(t *testing.T) {
	ctx, db := pgtest.Setup(t, 2000, pgtest.Options{Partitions: 4})
	parts, err := db.Engine.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	script := PartitionedCycleScript(time.Minute, 0, parts)
	res, err := Run(ctx, Options{DSN: pgtest.DSN(), Schema: db.Schema, Script: script, Clients: 2, Transactions: 100})
	if err != nil || res.Failed != 0 {
		t.Fatalf("pgbench: %+v %v\n%s", res, err, script)
	}
	var consumed, spread int
	if err := db.Pool.QueryRow(ctx, "SELECT count(*), count(DISTINCT tableoid) FROM resource_pool WHERE status = 'CONSUMED'").Scan(&consumed, &spread); err != nil {
		t.Fatal(err)
	}
	if consumed != 200 || spread != 4 {
		t.Fatalf("%d ids consumed from %d partitions, want 200 from 4", consumed, spread)
	}
}
