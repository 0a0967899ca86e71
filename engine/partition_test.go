package engine_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// partitionOf names the partition each id lives in.
func (b *bundle) partitionOf(t *testing.T, ids []int64) map[int64]string {
	t.Helper()
	rows, err := b.pool.Query(b.ctx, "SELECT id, tableoid::regclass::text FROM resource_pool WHERE id = ANY($1)", ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var id int64
		var part string
		if err := rows.Scan(&id, &part); err != nil {
			t.Fatal(err)
		}
		out[id] = part
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// The engine reads the layout: four partitions, named as migrate names them
// (quoted only where they need it); a plain pool has none.
func TestPartitionsAreFound(t *testing.T) {
	eachShape(t, func(t *testing.T, s shape) {
		b := s.setup(t, 10)
		parts, err := b.eng.Partitions(b.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(parts) != s.partitions {
			t.Fatalf("partitions %v, want %d", parts, s.partitions)
		}
		for i, p := range parts {
			if want := fmt.Sprintf("%s.resource_pool_p%d", b.schema, i); p != want {
				t.Fatalf("partition %d is %s, want %s", i, p, want)
			}
		}
	})
}

// Claims start at a partition drawn at random per attempt: forty single-row
// claims do not all come from one partition (the chance that they would is
// 4^-39), so no worker is bound to a shard.
func TestPartitionedClaimsSpread(t *testing.T) {
	b := shape{4}.setup(t, 400)
	var ids []int64
	for range 40 {
		ids = append(ids, b.acquire(t, "w", time.Minute).ID)
	}
	count := map[string]int{}
	for _, part := range b.partitionOf(t, ids) {
		count[part]++
	}
	if len(count) < 2 {
		t.Fatalf("40 claims came from %v: want them spread over the partitions", count)
	}
	t.Logf("claims by partition: %v", count)
}

// A worker whose random partition is empty falls through to the others:
// with every partition but one drained, claims of one and of n rows go on
// succeeding until the pool is empty, and then say so.
func TestPartitionedFallThroughToTheOthers(t *testing.T) {
	b := shape{4}.setup(t, 200)
	b.exec(t, `DELETE FROM resource_pool WHERE tableoid <> 'resource_pool_p2'::regclass`)
	left := b.inStatus(t, engine.StatusUnused)
	if left == 0 || left == 200 {
		t.Fatalf("%d ids left in resource_pool_p2: the hash spread nothing there", left)
	}
	claimed := 0
	for n := 1; ; n = n%10 + 1 { // claims of 1, 2, … 10 rows in turn
		ls, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: n})
		if errors.Is(err, engine.ErrPoolEmpty) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(ls) > n {
			t.Fatalf("claimed %d rows for n=%d", len(ls), n)
		}
		claimed += len(ls)
	}
	if claimed != left {
		t.Fatalf("claimed %d ids before the pool said empty, want all %d", claimed, left)
	}
	if got := b.eng.Stats().PartitionFallthroughs; got == 0 {
		t.Fatal("no claim fell through from an empty partition: the random start never drew one")
	}
}

// A partition whose free rows are all locked by other claimers is passed
// over like an empty one: the claim never waits on it.
func TestPartitionedContendedPartitionIsSkipped(t *testing.T) {
	b := shape{4}.setup(t, 100)
	tx := pgtest.PeerTx(t, b.ctx, b.schema)
	tag, err := tx.Exec(b.ctx, "SELECT id FROM resource_pool_p0 FOR UPDATE")
	if err != nil {
		t.Fatal(err)
	}
	locked := int(tag.RowsAffected())
	free := 100 - locked
	ids := []int64{}
	for range free {
		ids = append(ids, b.acquire(t, "w", time.Minute).ID)
	}
	for id, part := range b.partitionOf(t, ids) {
		if part == "resource_pool_p0" {
			t.Fatalf("claimed id %d of the locked partition", id)
		}
	}
	if _, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 1}); !errors.Is(err, engine.ErrPoolEmpty) {
		t.Fatalf("with only locked rows left: %v, want ErrPoolEmpty", err)
	}
}

// The batched cycle on a partitioned pool: n-row claims, one fenced commit
// per batch through the parent, a stale token rejected, the reaper across
// every partition, and conservation at the end.
func TestPartitionedBatchedCycle(t *testing.T) {
	const size = 300
	b := shape{4}.setup(t, size)
	committed := 0
	for round := 0; ; round++ {
		ls, err := b.eng.LeaseAcquire(b.ctx, &engine.LeaseAcquireParams{Holder: "w", TTL: time.Minute, N: 25})
		if errors.Is(err, engine.ErrPoolEmpty) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		items := make([]engine.CommitItem, len(ls))
		for i, l := range ls {
			items[i] = engine.CommitItem{ID: l.ID, Token: l.Token, RequestID: fmt.Sprint("r", l.ID)}
		}
		if round%3 == 0 { // a transfer makes one token stale before the commit
			if _, err := b.eng.LeaseTransfer(b.ctx, &engine.LeaseTransferParams{ID: ls[0].ID, Token: ls[0].Token, To: "other"}); err != nil {
				t.Fatal(err)
			}
		}
		_, errs, err := b.eng.LeaseCommitBatch(b.ctx, "w", items)
		if err != nil {
			t.Fatal(err)
		}
		for i, e := range errs {
			switch {
			case e == nil:
				committed++
			case i == 0 && round%3 == 0 && errors.Is(e, engine.ErrStaleToken):
			default:
				t.Fatalf("round %d item %d: %v", round, i, e)
			}
		}
	}
	// The transferred leases are held by "other"; expire them all and reap.
	b.exec(t, "UPDATE resource_pool SET leased_until = clock_timestamp() - interval '1 s' WHERE status = 'PENDING'")
	pending := b.inStatus(t, engine.StatusPending)
	res, err := b.eng.LeaseReap(b.ctx, &engine.LeaseReapParams{Batch: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reclaimed != pending || pending == 0 {
		t.Fatalf("reaped %d of %d expired leases", res.Reclaimed, pending)
	}
	if got := b.inStatus(t, engine.StatusConsumed); got != committed {
		t.Fatalf("%d CONSUMED, %d committed", got, committed)
	}
	b.audit(t, size)
}
