package cli

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// TestFleetThroughPgBouncer runs pooltop behind a real PgBouncer in
// transaction mode, where a server connection serves another client after
// every transaction and startup parameters are refused: a fleet of three
// `pooltop work` processes (12 workers on 4 server connections), each with
// its reaper, cycles through it; seed, lease, watch, doctor and verify go
// through it too. verify then finds no effect twice and no id lost, and
// the settings held where they had to: the seed wrote into its schema,
// watch could not write.
func TestFleetThroughPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.MigratedSchema(t)
	via := pgtest.Bouncer(t, "transaction")
	db := []string{"--dsn", via, "--schema", schema}

	// migrate passes on a schema that is up to date, and names where to
	// run it on one that is not.
	pooltop(t, append([]string{"migrate"}, db...)...).must(t)
	fresh := pgtest.Schema(t)
	r := pooltop(t, "migrate", "--dsn", via, "--schema", fresh)
	if r.code == 0 || !strings.Contains(r.stderr, "pooler") || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("migrate of a new schema through PgBouncer: exit %d, %q; want one line naming the pooler", r.code, r.stderr)
	}

	pooltop(t, append([]string{"seed", "--count", "20000"}, db...)...).must(t)
	var here int
	if err := pgtest.PoolQueryRow(ctx, schema, "SELECT count(*) FROM resource_pool", &here); err != nil || here != 20000 {
		t.Fatalf("the schema holds %d ids after seeding 20,000 through PgBouncer (%v)", here, err)
	}

	// By hand: a lease, its commit, a stale token fenced.
	r = pooltop(t, append([]string{"lease", "acquire", "--holder", "hand", "--ttl", "1m", "--json"}, db...)...).must(t)
	l := decode[[]engine.Lease](t, r.stdout)[0]
	pooltop(t, append([]string{"lease", "commit", "--id", strconv.FormatInt(l.ID, 10), "--token", strconv.FormatInt(l.Token, 10), "--request-id", "by-hand"}, db...)...).must(t)

	procs := []*workProcess{}
	for _, name := range []string{"a", "b", "c"} {
		procs = append(procs, startWork(t, append(db, "--name", name, "--workers", "4", "--duration", "4s", "--ttl", "2s", "--json")...))
	}
	// watch through PgBouncer while the fleet runs: snapshots with the
	// fleet in them, and no write possible from its pool.
	r = pooltop(t, "watch", "--dsn", via, "--table", schema+".resource_pool", "--headless", "--json", "--count", "3", "--interval", "300ms").must(t)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("watch printed %d snapshots, want 3: %s", len(lines), r.stdout)
	}
	var snap collector.Snapshot
	if err := json.Unmarshal([]byte(lines[2]), &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Pool.Unused+snap.Pool.Pending+snap.Pool.Consumed != 20000 {
		t.Fatalf("watch through PgBouncer counts %+v, not the 20,000 ids", snap.Pool)
	}
	var committed int64
	for _, p := range procs {
		if code := p.wait(t); code != 0 {
			t.Fatalf("work through PgBouncer: exit %d\n%s", code, p.stderr.String())
		}
		sum := decode[workSummary](t, p.stdout.String())
		if sum.Committed == 0 || sum.Held != 0 {
			t.Fatalf("work %s through PgBouncer: %+v\n%s", sum.Name, sum, p.stderr.String())
		}
		committed += sum.Committed
	}
	t.Logf("the fleet committed %d effects through PgBouncer", committed)

	r = pooltop(t, append([]string{"verify", "--json"}, db...)...).must(t)
	audit := decode[engine.AuditReport](t, r.stdout)
	if audit.DoubleFinalizations != 0 || audit.ConsumedWithoutEffect != 0 || audit.Total != 20000 || audit.Effects != committed+1 ||
		audit.Pending != 0 || len(audit.Violations) != 0 {
		t.Fatalf("verify through PgBouncer: %+v (the fleet committed %d, by hand 1)", audit, committed)
	}

	r = pooltop(t, "doctor", "--dsn", via, "--table", schema+".resource_pool", "--json")
	var checks []collector.Check
	if err := json.Unmarshal([]byte(r.stdout), &checks); err != nil {
		t.Fatalf("doctor: %v: %s%s", err, r.stdout, r.stderr)
	}
	found := false
	for _, c := range checks {
		if c.Check == "pooler" {
			found = strings.Contains(c.Evidence, "through a pooler")
		}
	}
	if !found {
		t.Fatalf("doctor through PgBouncer does not say so: %+v", checks)
	}
}

// In session mode PgBouncer keeps a server connection per client, but still
// refuses pooltop's startup parameters: the same commands work.
func TestCommandsThroughPgBouncerSessionMode(t *testing.T) {
	t.Parallel()
	schema := pgtest.MigratedSchema(t)
	db := []string{"--dsn", pgtest.Bouncer(t, "session"), "--schema", schema}
	pooltop(t, append([]string{"seed", "--count", "100"}, db...)...).must(t)
	r := pooltop(t, append([]string{"lease", "acquire", "--holder", "hand", "--ttl", "1m", "--json"}, db...)...).must(t)
	l := decode[[]engine.Lease](t, r.stdout)[0]
	pooltop(t, append([]string{"lease", "commit", "--id", strconv.FormatInt(l.ID, 10), "--token", strconv.FormatInt(l.Token, 10), "--request-id", "s1"}, db...)...).must(t)
	r = pooltop(t, append([]string{"verify", "--json"}, db...)...).must(t)
	if a := decode[engine.AuditReport](t, r.stdout); a.Total != 100 || a.Effects != 1 || a.DoubleFinalizations != 0 {
		t.Fatalf("verify through PgBouncer in session mode: %+v", a)
	}
}

// bench and chaos need PostgreSQL itself (VACUUM between runs, pgbench):
// through a pooler they say so in one line, before anything is written.
func TestLoadCommandsRefusePgBouncer(t *testing.T) {
	t.Parallel()
	via := pgtest.Bouncer(t, "transaction")
	for _, args := range [][]string{
		{"bench", "--dsn", via, "--duration", "1s"},
		{"chaos", "--dsn", via, "--duration", "1s"},
	} {
		r := pooltop(t, args...)
		if r.code == 0 || !strings.Contains(r.stderr, "connection pooler") || strings.Count(r.stderr, "\n") != 1 {
			t.Fatalf("%s through PgBouncer: exit %d, %q; want one line naming the pooler", args[0], r.code, r.stderr)
		}
	}
}
