package engine_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
)

// Holders counts each holder's PENDING rows and expired leases; List
// selects them; a bulk release frees one holder's ids in batches, raises
// every token, and the old holder's late commit is then rejected.
func TestHoldersListAndBulkRelease(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 100)
		var live, dead []engine.Lease
		for i := 0; i < 5; i++ {
			live = append(live, b.acquire(t, "pod-a", time.Hour))
		}
		for i := 0; i < 3; i++ {
			dead = append(dead, b.acquire(t, "pod-b", 20*time.Millisecond))
		}
		for _, l := range dead {
			b.waitExpired(t, l)
		}
		hs, err := b.eng.Holders(b.ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(hs) != 2 || hs[0].Holder != "pod-a" || hs[0].Pending != 5 || hs[0].Expired != 0 ||
			hs[1].Holder != "pod-b" || hs[1].Pending != 3 || hs[1].Expired != 3 || hs[1].OldestS <= 0 {
			t.Fatalf("holders %+v", hs)
		}
		rows, err := b.eng.List(b.ctx, engine.ListParams{Holder: "pod-b", Expired: true, Limit: 10})
		if err != nil || len(rows) != 3 || *rows[0].Holder != "pod-b" || rows[0].Status != engine.StatusPending {
			t.Fatalf("list pod-b expired: %+v %v", rows, err)
		}
		if rows, err := b.eng.List(b.ctx, engine.ListParams{Expired: true, Limit: 10}); err != nil || len(rows) != 3 {
			t.Fatalf("list expired: %d rows, %v", len(rows), err)
		}
		if rows, err := b.eng.List(b.ctx, engine.ListParams{Limit: 4}); err != nil || len(rows) != 4 {
			t.Fatalf("list limit 4: %d rows, %v", len(rows), err)
		}

		// A dry run counts and changes nothing.
		res, err := b.eng.ReleaseHolder(b.ctx, engine.ReleaseHolderParams{Holder: "pod-a", DryRun: true})
		if err != nil || res.Released != 5 || !res.DryRun || res.TokensRaised != 0 {
			t.Fatalf("dry run %+v %v", res, err)
		}
		if r := b.row(t, live[0].ID); r.Status != engine.StatusPending || r.Token != live[0].Token {
			t.Fatalf("the dry run changed a row: %+v", r)
		}
		// --expired leaves pod-a's live leases alone.
		if res, err := b.eng.ReleaseHolder(b.ctx, engine.ReleaseHolderParams{Holder: "pod-a", Expired: true}); err != nil || res.Released != 0 {
			t.Fatalf("expired-only release of live leases: %+v %v", res, err)
		}
		res, err = b.eng.ReleaseHolder(b.ctx, engine.ReleaseHolderParams{Holder: "pod-a", Batch: 2})
		if err != nil || res.Released != 5 || res.TokensRaised != 5 {
			t.Fatalf("release pod-a: %+v %v", res, err)
		}
		for _, l := range live {
			if r := b.row(t, l.ID); r.Status != engine.StatusUnused || r.Token <= l.Token || r.Holder != nil {
				t.Fatalf("id %d after the bulk release: %+v", l.ID, r)
			}
		}
		// The zombie pod wakes and commits with the token it had: fenced.
		_, err = b.eng.LeaseCommit(b.ctx, &engine.LeaseCommitParams{ID: live[0].ID, Token: live[0].Token, Holder: "pod-a", RequestID: fmt.Sprintf("late-%d", live[0].ID)})
		if !engine.IsRejected(err) {
			t.Fatalf("the old holder's commit after a bulk release: %v, want rejected by the fence", err)
		}
		if n := b.effects(t, live[0].ID); n != 0 {
			t.Fatalf("%d effects recorded for a released id", n)
		}
		if hs, err := b.eng.Holders(b.ctx, 10); err != nil || len(hs) != 1 || hs[0].Holder != "pod-b" {
			t.Fatalf("holders after the release: %+v %v", hs, err)
		}
		if _, err := b.eng.ReleaseHolder(b.ctx, engine.ReleaseHolderParams{}); err == nil {
			t.Fatal("a release with no holder was accepted")
		}
	})
}

// On a pool built without a holder column the error says so and what to do.
func TestHoldersWithoutAHolderColumn(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 10)
		if _, err := b.pool.Exec(b.ctx, "ALTER TABLE resource_pool DROP COLUMN holder CASCADE"); err != nil {
			t.Fatal(err)
		}
		_, err := b.eng.Holders(b.ctx, 5)
		if err == nil || !strings.Contains(err.Error(), "no holder column") || !strings.Contains(err.Error(), "pooltop migrate --allow-writes") {
			t.Fatalf("holders without the column: %v", err)
		}
		_, err = b.eng.ReleaseHolder(b.ctx, engine.ReleaseHolderParams{Holder: "x", DryRun: true})
		if err == nil || !strings.Contains(err.Error(), "no holder column") {
			t.Fatalf("release without the column: %v", err)
		}
	})
}
