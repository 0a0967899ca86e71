package pgbench

import (
	"context"
	"fmt"
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
func TestPartitionedSkipLockedTwin(t *testing.T) {
	ctx, db := pgtest.Setup(t, 2000, pgtest.Options{Partitions: 4})
	parts, err := db.Engine.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	script, err := TwinScript(Twin{Strategy: "skip-locked"}, time.Minute, 0, parts)
	if err != nil {
		t.Fatal(err)
	}
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

// Every strategy's twin runs the engine's statements under pgbench: each
// transaction that wins its claim consumes ids with one fenced effect
// each, the optimistic one commits only what it won, and verify's
// invariants hold, on a plain and on a partitioned pool.
func TestTwinScriptsKeepTheContract(t *testing.T) {
	for _, parts := range []int{0, 4} {
		for _, tw := range []Twin{{Strategy: "skip-locked"}, {Strategy: "blocking"}, {Strategy: "optimistic"}, {Strategy: "batched", Batch: 10}} {
			t.Run(fmt.Sprintf("%s/partitions=%d", tw.Strategy, parts), func(t *testing.T) {
				ctx, db := pgtest.Setup(t, 3000, pgtest.Options{Partitions: parts})
				names, err := db.Engine.Partitions(ctx)
				if err != nil {
					t.Fatal(err)
				}
				script, err := TwinScript(tw, time.Minute, 0, names)
				if err != nil {
					t.Fatal(err)
				}
				o := Options{DSN: pgtest.DSN(), Schema: db.Schema, Script: script, Clients: 3, Transactions: 40}
				if tw.Batch > 1 {
					o.Protocol = "extended"
				}
				res, err := Run(ctx, o)
				if err != nil || res.Failed != 0 || res.CPU <= 0 {
					t.Fatalf("pgbench: %+v %v\n%s", res, err, script)
				}
				var consumed, effects, holders int
				if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM resource_pool WHERE status = 'CONSUMED'),
					(SELECT count(*) FROM business_ledger WHERE fenced), (SELECT count(DISTINCT holder) FROM business_ledger)`).Scan(&consumed, &effects, &holders); err != nil {
					t.Fatal(err)
				}
				want := 120 * max(1, tw.Batch)
				if tw.Strategy == "optimistic" {
					// A lost race commits nothing; most of 120 attempts win.
					if consumed < 40 || consumed > 120 {
						t.Fatalf("optimistic: %d ids consumed by 120 attempts", consumed)
					}
					want = consumed
				}
				if consumed != want || effects != consumed || holders != 1 {
					t.Fatalf("%d consumed, %d fenced effects, %d holders; want %d, one each, one holder", consumed, effects, holders, want)
				}
				a, err := db.Engine.Audit(ctx, 0)
				if err != nil || len(a.Violations) != 0 {
					t.Fatalf("audit: %+v %v", a, err)
				}
			})
		}
	}
}
