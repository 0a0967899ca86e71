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
