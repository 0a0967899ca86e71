package collector_test

import (
	"context"
	"strings"
	"testing"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// The query of a session waiting on the pool reaches the snapshot (and so
// the screen, the JSON and the recordings) with its password literals
// masked.
func TestWaiterQueryIsMasked(t *testing.T) {
	b := setup(t, 100)
	holder := pgtest.PeerTx(t, b.ctx, b.schema)
	if _, err := holder.Exec(b.ctx, "SELECT * FROM resource_pool WHERE id = 1 FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	waiter := pgtest.Conn(t, b.schema)
	done := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(context.Background(), "/* ALTER ROLE app PASSWORD 'hunter2s3cret' */ UPDATE resource_pool SET updated_at = now() WHERE id = 1")
		done <- err
	}()
	c := b.collector(t, collector.Config{})
	s := pollUntil(t, c, "the waiter seen", func(s collector.Snapshot) bool { return len(s.Waiters) > 0 })
	q := s.Waiters[0].Query
	if strings.Contains(q, "hunter2s3cret") || !strings.Contains(q, "UPDATE resource_pool") {
		t.Fatalf("the waiter's query as shown: %q", q)
	}
	_ = holder.Rollback(b.ctx)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A recording that carries a query text as it was (written by an older
// pooltop, or by hand) replays masked: the dashboard of a replay and
// replay --json read it through ReadRecording and ScanRecording.
func TestRecordingQueriesAreMaskedOnRead(t *testing.T) {
	rec := `{"pooltop_recording":1,"started":"2026-01-02T03:04:05Z"}
{"time":"2026-01-02T03:04:06Z","waiters":[{"pid":7,"query":"ALTER ROLE app PASSWORD 'hunter2s3cret'"}],"blockers":[{"pid":8,"query":"SELECT dblink_connect('host=127.0.0.1 password=dbl1nk-s3cret')","blocks":[7]}]}
{"time":"2026-01-02T03:04:07Z","waiters":[{"pid":7,"query":"UPDATE resource_pool SET status = 'CONSUMED'"}]}
`
	var r collector.Recording
	if err := collector.ReadRecording(&r, strings.NewReader(rec), "hostile"); err != nil {
		t.Fatal(err)
	}
	if len(r.Snapshots) != 2 {
		t.Fatalf("%d snapshots", len(r.Snapshots))
	}
	s := r.Snapshots[0]
	if q := s.Waiters[0].Query; strings.Contains(q, "s3cret") || !strings.Contains(q, "ALTER ROLE app PASSWORD") {
		t.Errorf("waiter's query read as %q", q)
	}
	if q := s.Blockers[0].Query; strings.Contains(q, "s3cret") || !strings.Contains(q, "dblink_connect") {
		t.Errorf("blocker's query read as %q", q)
	}
	var lines []string
	err := collector.ScanRecording(strings.NewReader(rec), "hostile", func(collector.RecordingHeader) {}, func(_ collector.Snapshot, line []byte) error {
		lines = append(lines, string(line))
		return nil
	})
	if err != nil || len(lines) != 2 || strings.Contains(lines[0], "s3cret") || lines[1] != strings.Split(rec, "\n")[2] {
		t.Fatalf("ScanRecording handed over %q (%v)", lines, err)
	}
}
