package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// dsnWithPassword is the test database's DSN with a password in it (the
// test server trusts loopback, so any password will do), and the password.
func dsnWithPassword(t *testing.T) (string, string) {
	t.Helper()
	u, err := url.Parse(pgtest.DSN())
	if err != nil || u.Scheme == "" {
		t.Fatalf("the test DSN is not a URL: %v", err)
	}
	if pw, ok := u.User.Password(); ok {
		return u.String(), pw
	}
	const pw = "Rec0rd-s3cret-pw"
	u.User = url.UserPassword(u.User.Username(), pw)
	return u.String(), pw
}

// lines splits NDJSON into its lines.
func lines(b []byte) [][]byte {
	var out [][]byte
	for _, l := range bytes.Split(bytes.TrimSpace(b), []byte("\n")) {
		if len(l) > 0 {
			out = append(out, l)
		}
	}
	return out
}

// A recording of watch holds a header, then the very lines --json prints,
// with no password: neither the DSN's nor one in a query of a session on
// the pool. Replayed headless, it prints those lines back; so does the
// --json output alone (a recording without header, as older pooltops made).
func TestRecordWatchAndReplay(t *testing.T) {
	t.Parallel()
	db := migrated(t, 20)
	schema := db[3]
	dsn, pw := dsnWithPassword(t)
	ctx := context.Background()
	// A session waiting on a lock, whose query carries the password.
	tx := pgtest.PeerTx(t, ctx, schema)
	if _, err := tx.Exec(ctx, "UPDATE resource_pool SET updated_at = now() WHERE id = 1"); err != nil {
		t.Fatal(err)
	}
	done := waitingSession(t, ctx, schema, "UPDATE resource_pool SET updated_at = now() /* dblink password="+pw+" */ WHERE id = 1")

	file := filepath.Join(t.TempDir(), "watch.ndjson")
	r := pooltop(t, "watch", "--dsn", dsn, "--schema", schema, "--headless", "--json", "--count", "3", "--interval", "250ms", "--record", file).must(t)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(pw)) || strings.Contains(r.stdout, pw) || strings.Contains(r.stderr, pw) {
		t.Fatalf("the password is in the recording or the output:\n%s", raw)
	}
	if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("recording mode %v (%v), want 0600", st.Mode(), err)
	}
	got := lines(raw)
	if len(got) != 4 {
		t.Fatalf("%d lines, want a header and 3 snapshots:\n%s", len(got), raw)
	}
	h := decode[collector.RecordingHeader](t, string(got[0]))
	if h.Format != 1 || h.Mode != "watch" || h.IntervalS != 0.25 || h.Started.IsZero() || !strings.HasSuffix(h.Source.Table, ".resource_pool") || h.Source.Host == "" {
		t.Fatalf("header %s", got[0])
	}
	out := lines([]byte(r.stdout))
	if !reflect.DeepEqual(out, got[1:]) {
		t.Fatalf("the recording's snapshots are not the --json lines:\n%s\n---\n%s", r.stdout, raw)
	}
	s := decode[collector.Snapshot](t, string(got[1]))
	if len(s.Waiters) != 1 || !strings.Contains(s.Waiters[0].Query, "dblink password=") {
		t.Fatalf("the recording shows waiters %+v, want the one whose query names a password (masked)", s.Waiters)
	}

	rep := pooltop(t, "replay", file, "--headless", "--json").must(t)
	if !reflect.DeepEqual(lines([]byte(rep.stdout)), got[1:]) {
		t.Fatalf("replay printed\n%s\nwant the recorded snapshots", rep.stdout)
	}
	// The --json output alone, with no header, replays to the same lines.
	old := filepath.Join(t.TempDir(), "old.ndjson")
	if err := os.WriteFile(old, []byte(r.stdout), 0o600); err != nil {
		t.Fatal(err)
	}
	rep = pooltop(t, "replay", old, "--headless", "--json").must(t)
	if rep.stdout != r.stdout {
		t.Fatalf("a header-less recording replayed to\n%s\nwant\n%s", rep.stdout, r.stdout)
	}
	text := pooltop(t, "replay", old, "--headless").must(t)
	if n := strings.Count(text.stdout, "\n"); n != 3 || !strings.Contains(text.stdout, "unused 20 pending 0") {
		t.Fatalf("replay --headless printed %q", text.stdout)
	}
}

// A demo run, recorded headless, replays headless to the same objects,
// workload figures included.
func TestRecordDemoAndReplay(t *testing.T) {
	t.Parallel()
	schema := scratch(t)
	file := filepath.Join(t.TempDir(), "demo.ndjson")
	pooltop(t, "--dsn", pgtest.DSN(), "--schema", schema, "--headless", "--count", "4", "--interval", "250ms",
		"--pool-size", "2000", "--record", file).must(t)
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	got := lines(raw)
	if len(got) != 5 || decode[collector.RecordingHeader](t, string(got[0])).Mode != "demo" {
		t.Fatalf("recording:\n%s", raw)
	}
	rep := pooltop(t, "replay", file, "--headless", "--json").must(t)
	back := lines([]byte(rep.stdout))
	if len(back) != 4 {
		t.Fatalf("replay printed %d lines, want 4", len(back))
	}
	for i := range back {
		var a, b map[string]any
		if err := json.Unmarshal(got[i+1], &a); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(back[i], &b); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("snapshot %d replayed as\n%s\nrecorded\n%s", i, back[i], got[i+1])
		}
		if a["workload"] == nil {
			t.Fatalf("snapshot %d of the demo has no workload: %s", i, got[i+1])
		}
	}
}

// The recording rotates at --record-max: FILE.1 holds the older part,
// each file starts with the header, and both replay in order.
func TestRecordRotates(t *testing.T) {
	t.Parallel()
	db := migrated(t, 5)
	file := filepath.Join(t.TempDir(), "r.ndjson")
	pooltop(t, append([]string{"watch", "--headless", "--json", "--count", "12", "--interval", "250ms", "--record", file, "--record-max", "4KiB"}, db...)...).must(t)
	var all [][]byte
	for _, name := range []string{file + ".1", file} {
		raw, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if len(raw) > 4<<10 {
			t.Fatalf("%s is %d bytes, past --record-max", name, len(raw))
		}
		ls := lines(raw)
		if !bytes.Contains(ls[0], []byte(`"pooltop_recording":1`)) {
			t.Fatalf("%s does not start with the header: %s", name, ls[0])
		}
		all = append(all, ls[1:]...)
	}
	rep := pooltop(t, "replay", file+".1", file, "--headless", "--json").must(t)
	if !reflect.DeepEqual(lines([]byte(rep.stdout)), all) {
		t.Fatal("FILE.1 FILE do not replay as recorded")
	}
	for _, bad := range [][]string{{"replay"}, {"replay", filepath.Join(t.TempDir(), "missing")}} {
		if r := pooltop(t, bad...); r.code == exitOK || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q", bad, r.code, r.stderr)
		}
	}
	notes := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(notes, []byte("not a recording\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := pooltop(t, "replay", notes, "--headless"); r.code != exitError || !strings.Contains(r.stderr, "not a pooltop snapshot") {
		t.Errorf("replay of a text file: exit %d, stderr %q", r.code, r.stderr)
	}
}

// waitingSession runs query on a session of its own, which must wait on a
// lock another session holds, and returns once it waits (seen in pg_locks);
// the channel gets the statement's result when it ends.
func waitingSession(t *testing.T, ctx context.Context, schema, query string) <-chan error {
	t.Helper()
	waiter := pgtest.Conn(t, schema)
	var pid int32
	if err := waiter.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(ctx, query)
		done <- err
	}()
	probe := pgtest.Conn(t, schema)
	pgtest.Eventually(t, "the session waiting on the lock", 30*time.Second, func() bool {
		var n int
		if err := probe.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE pid = $1 AND NOT granted", pid).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	return done
}
