package engine_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// A history streamed to a file (a work process under chaos, which may run
// for days) keeps nothing in memory: every operation is on the file. One
// without a file keeps them for Ops.
func TestStreamedHistoryKeepsNothing(t *testing.T) {
	ctx, db := pgtest.Setup(t, 200, pgtest.Options{})
	var file bytes.Buffer
	streamed := engine.NewHistory(&file)
	db.Engine.Record(streamed)
	req := 0
	cycle := func(n int) {
		for i := 0; i < n; i++ {
			l, err := db.Engine.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "h", TTL: time.Minute, N: 1})
			if err != nil {
				t.Fatal(err)
			}
			req++
			if _, err := db.Engine.LeaseCommit(ctx, &engine.LeaseCommitParams{ID: l[0].ID, Token: l[0].Token, RequestID: fmt.Sprint("r", req)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	cycle(50)
	if n := len(streamed.Ops()); n != 0 {
		t.Fatalf("a history streamed to a file kept %d operations in memory", n)
	}
	if lines := strings.Count(file.String(), "\n"); lines < 100 {
		t.Fatalf("the file holds %d lines after 50 acquires and commits", lines)
	}
	kept := engine.NewHistory(nil)
	db.Engine.Record(kept)
	cycle(10)
	if n := len(kept.Ops()); n != 20 {
		t.Fatalf("a history in memory kept %d operations, want 20", n)
	}
}
