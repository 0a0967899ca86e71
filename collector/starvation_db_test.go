package collector_test

import (
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// A reader holds the lowest free ids FOR SHARE: claims (SKIP LOCKED) pass
// over them and take newer ones. The collector counts them as passed over,
// with the claims that passed them, and not before: claims in id order
// pass over nothing. Once the reader ends, claims take them and the figure
// goes back to 0.
func TestStarvationPassedOverByClaims(t *testing.T) {
	for _, parts := range pgtest.Shapes {
		t.Run(pgtest.ShapeName(parts), func(t *testing.T) {
			ctx, db := pgtest.Setup(t, 5000, pgtest.Options{MaxConns: 4, Partitions: parts})
			c := newCollector(t, ctx, collector.Config{Table: db.Schema + ".resource_pool"})
			// claim takes n ids one claim at a time: on partitions each claim
			// picks one at random, and 40 reach every one of 4 but once in
			// 10^5 runs.
			claim := func(n int) {
				t.Helper()
				for range n {
					if _, err := db.Engine.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 1}); err != nil {
						t.Fatal(err)
					}
				}
			}
			poll := func() collector.Pool {
				t.Helper()
				s, err := c.Poll(ctx)
				if err != nil {
					t.Fatal(err)
				}
				return s.Pool
			}
			if p := poll(); p.PassedOver != nil {
				t.Fatalf("first poll: passed over %d, want null (nothing to compare with)", *p.PassedOver)
			}
			for range 3 { // claims in id order
				claim(40)
				if p := poll(); p.PassedOver == nil || *p.PassedOver != 0 {
					t.Fatalf("claims in id order: passed over %v, want 0", p.PassedOver)
				}
			}
			reader := pgtest.PeerTx(t, ctx, db.Schema)
			if _, err := reader.Exec(ctx, `SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 5 FOR SHARE`); err != nil {
				t.Fatal(err)
			}
			// Claims passed them: on one table all 40 of each interval, on
			// partitions those of their own partition.
			least := int64(70)
			if parts > 0 {
				least = 3
			}
			var p collector.Pool
			for range 3 {
				claim(40)
				p = poll()
			}
			if p.PassedOver == nil || *p.PassedOver != 5 || p.PassedOverS == nil || *p.PassedOverS <= 0 || p.PassedOverBy < least || p.PassedOverFull {
				t.Fatalf("reader holds 5 free ids: passed over %v for %v s by %d (full %v), want 5, > 0 s, by >= %d claims",
					deref(p.PassedOver), deref(p.PassedOverS), p.PassedOverBy, p.PassedOverFull, least)
			}
			if err := reader.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			claim(40)
			if p = poll(); p.PassedOver == nil || *p.PassedOver != 0 {
				t.Fatalf("reader gone, claims took its ids: passed over %v, want 0", deref(p.PassedOver))
			}
		})
	}
}

// deref is *p, or "null".
func deref[T any](p *T) any {
	if p == nil {
		return "null"
	}
	return *p
}
