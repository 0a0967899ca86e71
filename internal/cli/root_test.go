package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/goleak"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/workload"
)

// The database starts before the tests and stops after them; goleak then
// checks that nothing was left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(removeBinary{pgtest.Runner{M: m}}) }

// removeBinary runs the tests, then removes the pooltop binary that binary
// built for them.
type removeBinary struct{ pgtest.Runner }

func (r removeBinary) Run() int {
	code := r.Runner.Run()
	if builtBin != "" {
		_ = os.RemoveAll(filepath.Dir(builtBin))
	}
	return code
}

type result struct {
	code           int
	stdout, stderr string
}

// pooltop runs one command line in-process, as the binary would. Its
// deadline only ends a command that hangs: the suite shares two cores, and
// a bench of six runs on a 200,000-id pool took over a minute when two
// .ci/run ran at once.
func pooltop(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	code := run(ctx, args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

func (r result) must(t *testing.T) result {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	return r
}

func decode[T any](t *testing.T, s string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("decode %q: %v", s, err)
	}
	return v
}

// migrated returns the flags that point at a fresh migrated schema with size ids.
func migrated(t *testing.T, size int) []string {
	t.Helper()
	schema := pgtest.Schema(t)
	db := []string{"--dsn", pgtest.DSN(), "--schema", schema}
	pooltop(t, append([]string{"migrate"}, db...)...).must(t)
	if size > 0 {
		pooltop(t, append([]string{"seed", "--count", fmt.Sprint(size)}, db...)...).must(t)
	}
	return db
}

func TestLeaseCommandsDriveTheLifecycle(t *testing.T) {
	t.Parallel()
	db := migrated(t, 5)
	lease := func(args ...string) result { return pooltop(t, append(append([]string{"lease"}, args...), db...)...) }

	ls := decode[[]engine.Lease](t, lease("acquire", "--holder", "worker-a", "--ttl", "1m", "--n", "2", "--json").must(t).stdout)
	if len(ls) != 2 || ls[0].Token != 1 || ls[0].LeasedUntil == nil {
		t.Fatalf("acquire: %+v", ls)
	}
	a := ls[0]
	id, tok := fmt.Sprint(a.ID), fmt.Sprint(a.Token)
	b := decode[engine.Lease](t, lease("transfer", "--id", id, "--token", tok, "--to", "worker-b", "--json").must(t).stdout)
	if b.Token != a.Token+1 || b.Holder != "worker-b" {
		t.Fatalf("transfer: %+v", b)
	}
	old := lease("commit", "--id", id, "--token", tok, "--request-id", "r-a")
	if old.code != exitStaleToken || !strings.Contains(old.stderr, "stale fencing token") {
		t.Fatalf("old holder's commit: exit %d, %s", old.code, old.stderr)
	}
	res := decode[engine.CommitResult](t, lease("commit", "--id", id, "--token", fmt.Sprint(b.Token), "--request-id", "r-b", "--json").must(t).stdout)
	if res.Replayed || res.ResourceID != a.ID {
		t.Fatalf("commit: %+v", res)
	}
	row := decode[engine.Row](t, lease("show", "--id", id, "--json").must(t).stdout)
	if row.Status != "CONSUMED" || row.Effects != 1 || row.Token != b.Token {
		t.Fatalf("show: %+v", row)
	}
	second := fmt.Sprint(ls[1].ID)
	rel := lease("release", "--id", second, "--token", "1").must(t)
	if !strings.Contains(rel.stdout, "UNUSED at token 2") {
		t.Fatalf("release: %s", rel.stdout)
	}
	if r := lease("renew", "--id", second, "--token", "1", "--ttl", "1m"); r.code != exitStaleToken {
		t.Fatalf("renew after release: exit %d %s", r.code, r.stderr)
	}
	short := decode[[]engine.Lease](t, lease("acquire", "--holder", "c", "--ttl", "1ms", "--json").must(t).stdout)[0]
	pgtest.Eventually(t, "reap reclaiming the 1ms lease", 10*time.Second, func() bool {
		return decode[map[string]int](t, lease("reap", "--json").must(t).stdout)["reclaimed"] == 1
	})
	if r := lease("commit", "--id", fmt.Sprint(short.ID), "--token", "1", "--request-id", "late"); r.code != exitStaleToken {
		t.Fatalf("commit after reap: exit %d %s", r.code, r.stderr)
	}
}

func TestExitCodesAndBadInput(t *testing.T) {
	t.Parallel()
	db := migrated(t, 1)
	cases := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"lease", "acquire", "--holder", "a", "--ttl", "0s"}, exitUsage, "ttl 0s: must be positive"},
		{[]string{"lease", "acquire", "--holder", "a", "--ttl", "-5s"}, exitUsage, "must be positive"},
		{[]string{"lease", "acquire", "--holder", "a", "--ttl", "1m", "--n", "0"}, exitUsage, "claim between 1 and"},
		{[]string{"lease", "acquire", "--holder", "a", "--ttl", "1m", "--n", "1000000"}, exitUsage, "claim between 1 and"},
		{[]string{"lease", "acquire", "--ttl", "1m"}, exitUsage, "--holder is required"},
		{[]string{"lease", "acquire", "--holder", "a", "--ttl", "soon"}, exitUsage, "invalid argument"},
		{[]string{"lease", "acquire", "--holder", "a", "--ttl", "1m", "--strategy", "fast"}, exitUsage, "use skip-locked"},
		{[]string{"lease", "show", "--id", "999"}, exitError, "no such id"},
		{[]string{"lease", "release", "--id", "999", "--token", "0"}, exitError, "no such id"},
		{[]string{"lease", "release", "--id", "1", "--token", "-1"}, exitUsage, "never negative"},
		{[]string{"lease", "renew", "--id", "1", "--token", "0", "--ttl", "1m"}, exitLeaseLost, "lease lost"},
		{[]string{"lease", "frobnicate"}, exitUsage, "unknown command"},
		{[]string{"lease", "show", "--id", "1", "extra"}, exitUsage, "unknown command"},
		{[]string{"seed", "--count", "0"}, exitUsage, "--count 0"},
		{[]string{"watch", "--headless", "--interval", "1ms"}, exitUsage, "--interval 1ms: between 250ms and 1m0s"},
		{[]string{"--headless", "--interval", "2m"}, exitUsage, "--interval 2m0s: between 250ms and 1m0s"},
		{[]string{"bench", "--rtt", "-1ms"}, exitUsage, "--rtt -1ms: 0, or between 1ms and 1s"},
		{[]string{"bench", "--rtt", "500us"}, exitUsage, "--rtt 500µs: 0, or between 1ms and 1s"},
		{[]string{"watch", "--headless", "--alert-dead-ratio", "NaN"}, exitUsage, "--alert-dead-ratio NaN"},
		{[]string{"watch", "--headless", "--alert-connections", "0"}, exitUsage, "--alert-connections 0"},
		{[]string{"watch", "--headless", "--alert-lock-wait", "0s"}, exitUsage, "--alert-lock-wait 0s"},
		{[]string{"watch", "--headless", "--alert-connections", "1.5"}, exitUsage, "--alert-connections 1.5"},
		{[]string{"chaos", "--duration", "1ns"}, exitUsage, "--duration 1ns: between 1s and 24h"},
	}
	for _, c := range cases {
		r := pooltop(t, append(c.args, db...)...)
		if r.code != c.code || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("pooltop %s: exit %d, stderr %q; want exit %d and one line containing %q",
				strings.Join(c.args, " "), r.code, r.stderr, c.code, c.want)
		}
	}
	pooltop(t, append([]string{"lease", "acquire", "--holder", "a", "--ttl", "1m"}, db...)...).must(t)
	if r := pooltop(t, append([]string{"lease", "acquire", "--holder", "a", "--ttl", "1m"}, db...)...); r.code != exitPoolEmpty {
		t.Errorf("acquire on an empty pool: exit %d %s", r.code, r.stderr)
	}
}

func TestConnectionFailuresNeverPrintThePassword(t *testing.T) {
	t.Parallel()
	const secret = "hunter2-s3cret"
	cases := []struct{ name, dsn, want string }{
		{"unreachable", "postgres://alice:" + secret + "@127.0.0.1:1/db", "connection refused"},
		{"malformed port", "postgres://alice:" + secret + "@localhost:notaport/db", "parse --dsn"},
		{"malformed url", "postgres://alice:" + secret + "@[::1/db", "parse --dsn"},
		{"key=value", "host=127.0.0.1 port=1 user=alice password=" + secret, "connection refused"},
		{"unterminated quote", "host=127.0.0.1 user=alice password='" + secret + " TAIL", "parse --dsn"},
		{"escaped space", `host=127.0.0.1 password=` + secret + `\ TAIL port=abc`, "parse --dsn"},
	}
	cfg, err := pgx.ParseConfig(pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	if srv := pgtest.Server(); srv != nil {
		// Make the embedded server ask this user for a password.
		hba := filepath.Join(srv.DataDir(), "pg_hba.conf")
		old, err := os.ReadFile(hba)
		if err != nil {
			t.Fatal(err)
		}
		line := "host all pw_user 127.0.0.1/32 scram-sha-256\n"
		if !bytes.HasPrefix(old, []byte(line)) {
			if err := os.WriteFile(hba, append([]byte(line), old...), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		conn, err := pgx.Connect(context.Background(), pgtest.DSN())
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		for _, q := range []string{
			"DO $$ BEGIN CREATE ROLE pw_user LOGIN PASSWORD 'right-one'; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
			"SELECT pg_reload_conf()",
		} {
			if _, err := conn.Exec(context.Background(), q); err != nil {
				t.Fatal(err)
			}
		}
		cases = append(cases, struct{ name, dsn, want string }{"wrong password",
			fmt.Sprintf("postgres://pw_user:%s@%s:%d/%s", secret, cfg.Host, cfg.Port, cfg.Database), "password authentication failed"})
	}
	for _, c := range cases {
		r := pooltop(t, "lease", "show", "--id", "1", "--dsn", c.dsn)
		if r.code != exitError || !strings.Contains(r.stderr, c.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%s: exit %d, stderr %q; want exit 1 and one line with %q", c.name, r.code, r.stderr, c.want)
		}
		if strings.Contains(r.stdout+r.stderr, secret) || strings.Contains(r.stderr, "TAIL") {
			t.Errorf("%s: password printed: %q", c.name, r.stderr)
		}
	}
	// Over several pools, a server that refuses the password is one line
	// and an exit, with the others fine; none is printed.
	if last := cases[len(cases)-1]; last.name == "wrong password" {
		good := emptyDB(t)
		pooltop(t, "migrate", "--dsn", good).must(t)
		for _, args := range [][]string{
			{"watch", "--headless", "--count", "1"}, {"doctor"}, {"verify"},
		} {
			r := pooltop(t, append(args, "--dsn", good, "--dsn", last.dsn)...)
			if r.code != exitError || !strings.Contains(r.stdout+r.stderr, last.want) || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stdout+r.stderr, secret) {
				t.Errorf("%v over a good server and one whose password is wrong: exit %d, stdout %q, stderr %q", args, r.code, r.stdout, r.stderr)
			}
		}
	}
	// migrate connects on its own (goose): the same one line.
	r := pooltop(t, "migrate", "--dsn", cases[0].dsn)
	if r.code != exitError || !strings.Contains(r.stderr, "connection refused: is PostgreSQL running") || strings.Count(r.stderr, "\n") != 1 || strings.Contains(r.stderr, secret) {
		t.Errorf("migrate, unreachable: exit %d, stderr %q", r.code, r.stderr)
	}
}

// Through DATABASE_URL and the PG* variables too (not parallel: it sets the
// environment): the message names the variable, and holds no password.
func TestBadConnectionSettingsFromTheEnvironment(t *testing.T) {
	const secret = "env-dsn-s3cret"
	t.Setenv("DATABASE_URL", "host=127.0.0.1 password='"+secret+" TAIL")
	r := pooltop(t, "lease", "show", "--id", "1")
	if r.code != exitError || !strings.Contains(r.stderr, "parse DATABASE_URL") || strings.Contains(r.stderr, secret) ||
		strings.Contains(r.stderr, "TAIL") || strings.Count(r.stderr, "\n") != 1 {
		t.Errorf("DATABASE_URL: exit %d, %q", r.code, r.stderr)
	}
	t.Setenv("DATABASE_URL", "")
	t.Setenv("PGHOST", "127.0.0.1")
	t.Setenv("PGPORT", "abc")
	r = pooltop(t, "watch", "--headless", "--count", "1")
	if r.code != exitError || !strings.Contains(r.stderr, "PGPORT=abc") || strings.Contains(r.stderr, "cannot parse ``") {
		t.Errorf("PGPORT=abc: exit %d, %q", r.code, r.stderr)
	}
}

// PGPASSWORD is never printed either (not parallel: it sets the environment).
func TestPGPasswordNeverPrinted(t *testing.T) {
	const secret = "env-s3cret-pw"
	t.Setenv("PGPASSWORD", secret)
	for _, dsn := range []string{"postgres://alice@127.0.0.1:1/db", "postgres://alice@localhost:bad/db"} {
		r := pooltop(t, "lease", "show", "--id", "1", "--dsn", dsn)
		if r.code != exitError || strings.Contains(r.stderr, secret) {
			t.Errorf("exit %d, stderr %q", r.code, r.stderr)
		}
	}
}

func TestDatabaseWithoutSchemaOrMarker(t *testing.T) {
	t.Parallel()
	empty := pgtest.Schema(t)
	r := pooltop(t, "lease", "acquire", "--holder", "a", "--ttl", "1m", "--dsn", pgtest.DSN(), "--schema", empty)
	if r.code != exitError || !strings.Contains(r.stderr, "pooltop migrate") {
		t.Fatalf("no schema: exit %d %q", r.code, r.stderr)
	}
	r = pooltop(t, "lease", "acquire", "--holder", "a", "--ttl", "1m", "--dsn", pgtest.DSN(), "--schema", "no_such_schema")
	if r.code != exitError || !strings.Contains(r.stderr, "pooltop migrate") {
		t.Fatalf("missing schema: exit %d %q", r.code, r.stderr)
	}
	r = pooltop(t, "lease", "show", "--id", "1", "--dsn", pgtest.DSN(), "--schema", "bad;name")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--schema") {
		t.Fatalf("bad schema name: exit %d %q", r.code, r.stderr)
	}
	for _, sys := range []string{"information_schema", "pg_catalog", "PG_toast"} {
		r = pooltop(t, "migrate", "--dsn", pgtest.DSN(), "--schema", sys)
		if r.code != exitUsage || !strings.Contains(r.stderr, "belongs to PostgreSQL itself") {
			t.Fatalf("--schema %s: exit %d %q", sys, r.code, r.stderr)
		}
	}

	db := migrated(t, 2)
	conn, err := pgx.Connect(context.Background(), pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "DELETE FROM "+pgx.Identifier{db[3], "pooltop_meta"}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	acquire := append([]string{"lease", "acquire", "--holder", "oncall", "--ttl", "1m"}, db...)
	r = pooltop(t, acquire...)
	if r.code != exitError || !strings.Contains(r.stderr, "--allow-writes") {
		t.Fatalf("unmarked database: exit %d %q", r.code, r.stderr)
	}
	pooltop(t, append([]string{"lease", "show", "--id", "1"}, db...)...).must(t) // reading is allowed
	pooltop(t, append(acquire, "--allow-writes")...).must(t)
}

func TestConcurrentMigrateAndIdempotence(t *testing.T) {
	t.Parallel()
	schema := pgtest.Schema(t)
	var wg sync.WaitGroup
	results := make([]result, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = pooltop(t, "migrate", "--json", "--dsn", pgtest.DSN(), "--schema", schema)
		}()
	}
	wg.Wait()
	for _, r := range results {
		r.must(t)
		if v := decode[map[string]any](t, r.stdout); v["version"] != float64(2) {
			t.Fatalf("version %v", v["version"])
		}
	}
}

// Text from the database never reaches the terminal raw: an identifier or
// a holder holding escape sequences or line breaks is shown escaped.
func TestLeaseOutputEscapesControlCharacters(t *testing.T) {
	t.Parallel()
	db := migrated(t, 0)
	conn, err := pgx.Connect(context.Background(), pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), "INSERT INTO "+pgx.Identifier{db[3], "resource_pool"}.Sanitize()+
		" (identifier) VALUES (E'evil\\x1b]0;owned\\x07\\x1b[2J\\r\\nFAKE LINE')"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"lease", "acquire", "--holder", "h\x1b[31mred", "--ttl", "1m"},
		{"lease", "show", "--id", "1"},
	} {
		r := pooltop(t, append(args, db...)...).must(t)
		if strings.ContainsAny(r.stdout+r.stderr, "\x1b\x07\r") || strings.Contains(r.stdout, "\nFAKE LINE") {
			t.Errorf("pooltop %s printed raw control characters: %q", strings.Join(args, " "), r.stdout)
		}
		if !strings.Contains(r.stdout, `evil\x1b]0;owned\a`) {
			t.Errorf("pooltop %s: identifier not shown escaped: %q", strings.Join(args, " "), r.stdout)
		}
	}
}

// The on-call path: who holds the ids, which of them, free a dead pod's ids
// (dry run first), and the pod's late commit is fenced.
func TestLeaseListByHolderAndBulkRelease(t *testing.T) {
	t.Parallel()
	db := migrated(t, 20)
	lease := func(args ...string) result { return pooltop(t, append(append([]string{"lease"}, args...), db...)...) }
	dead := decode[[]engine.Lease](t, lease("acquire", "--holder", "pod-7", "--ttl", "1h", "--n", "4", "--json").must(t).stdout)
	lease("acquire", "--holder", "pod-8", "--ttl", "1h", "--n", "2").must(t)

	hs := decode[[]engine.Holder](t, lease("list", "--by-holder", "--json").must(t).stdout)
	if len(hs) != 2 || hs[0].Holder != "pod-7" || hs[0].Pending != 4 || hs[1].Holder != "pod-8" || hs[1].Pending != 2 {
		t.Fatalf("by holder: %+v", hs)
	}
	if out := lease("list", "--by-holder").must(t).stdout; !strings.Contains(out, "HOLDER") || !strings.Contains(out, "pod-7") {
		t.Fatalf("by holder, text:\n%s", out)
	}
	rows := decode[[]engine.LeaseRow](t, lease("list", "--holder", "pod-7", "--json").must(t).stdout)
	if len(rows) != 4 || *rows[0].Holder != "pod-7" {
		t.Fatalf("list pod-7: %+v", rows)
	}
	dry := decode[engine.ReleaseResult](t, lease("release", "--holder", "pod-7", "--dry-run", "--json").must(t).stdout)
	if dry.Released != 4 || !dry.DryRun {
		t.Fatalf("dry run: %+v", dry)
	}
	res := decode[engine.ReleaseResult](t, lease("release", "--holder", "pod-7", "--batch", "3", "--json").must(t).stdout)
	if res.Released != 4 || res.TokensRaised != 4 {
		t.Fatalf("release: %+v", res)
	}
	late := lease("commit", "--id", fmt.Sprint(dead[0].ID), "--token", fmt.Sprint(dead[0].Token), "--request-id", "late-7")
	if late.code != exitStaleToken {
		t.Fatalf("pod-7's commit after the bulk release: exit %d %s", late.code, late.stderr)
	}
	for _, bad := range [][]string{
		{"release", "--holder", "pod-7", "--id", "1", "--token", "1"},
		{"release", "--expired", "--id", "1", "--token", "1"},
		{"release", "--holder", ""},
		{"list", "--by-holder", "--expired"},
		{"list", "--limit", "0"},
	} {
		if r := lease(bad...); r.code != exitUsage || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
			t.Fatalf("lease %v: exit %d, stderr %q; want one usage line", bad, r.code, r.stderr)
		}
	}
}

// The doctor passes a pool pooltop built, and on a hand-built pool with no
// PENDING index and PENDING rows without a lease names both, with the SQL
// that fixes them, and exits 6.
func TestDoctor(t *testing.T) {
	t.Parallel()
	db := migrated(t, 50)
	ok := pooltop(t, append([]string{"doctor", "--json"}, db...)...).must(t)
	checks := decode[[]collector.Check](t, ok.stdout)
	if len(checks) < 9 {
		t.Fatalf("%d checks: %+v", len(checks), checks)
	}
	for _, c := range checks {
		if c.Status == collector.CheckFail {
			t.Fatalf("a pooltop pool fails %s: %s", c.Check, c.Evidence)
		}
	}

	schema := pgtest.Schema(t)
	conn := pgtest.Conn(t, schema)
	for _, sql := range []string{
		`CREATE TABLE resource_pool (id bigserial PRIMARY KEY, identifier text UNIQUE NOT NULL, status text NOT NULL DEFAULT 'UNUSED',
		   leased_until timestamptz, lease_token bigint NOT NULL DEFAULT 0, updated_at timestamptz DEFAULT now())`,
		`CREATE INDEX ON resource_pool (id) WHERE status = 'UNUSED'`,
		`INSERT INTO resource_pool (identifier) SELECT 'r-' || g FROM generate_series(1, 100) g`,
		`UPDATE resource_pool SET status = 'PENDING', lease_token = 1 WHERE id <= 7`,
	} {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	r := pooltop(t, "doctor", "--dsn", pgtest.DSN(), "--schema", schema)
	if r.code != exitViolation {
		t.Fatalf("doctor on a hand-built pool: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"FAIL  reaper_index", "CREATE INDEX CONCURRENTLY ON", "(leased_until) WHERE status = 'PENDING'",
		"FAIL  unleased_pending", "7 of 7 PENDING rows have no lease", "WARN  fencing"} {
		if !strings.Contains(r.stdout, want) {
			t.Fatalf("doctor output lacks %q:\n%s", want, r.stdout)
		}
	}
	if !strings.Contains(r.stderr, "reaper_index, unleased_pending") {
		t.Fatalf("stderr: %s", r.stderr)
	}
}

// --version answers, and the root help names every scenario.
func TestVersionAndScenariosInHelp(t *testing.T) {
	t.Parallel()
	v := pooltop(t, "--version").must(t)
	if !strings.HasPrefix(v.stdout, "pooltop ") || !strings.Contains(v.stdout, "go1.") {
		t.Fatalf("--version: %q", v.stdout)
	}
	h := pooltop(t, "--help").must(t)
	for _, sc := range workload.Scenarios {
		if !strings.Contains(h.stdout, sc.Key+" "+sc.Name) {
			t.Fatalf("--help lacks scenario %s:\n%s", sc.Name, h.stdout)
		}
	}
}
