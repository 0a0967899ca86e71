package engine_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// seedAtOnce runs seeds of count ids from n goroutines at once and fails
// the test unless each added exactly count.
func seedAtOnce(t *testing.T, ctx context.Context, eng *engine.Engine, n, count int) {
	t.Helper()
	var wg sync.WaitGroup
	got := make([]int64, n)
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = eng.Seed(ctx, count)
		}()
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil || got[i] != int64(count) {
			t.Fatalf("seed %d of %d at once: added %d of %d (%v)", i, n, got[i], count, errs[i])
		}
	}
}

// identifiers counts the pool's rows and its distinct identifiers.
func identifiers(t *testing.T, ctx context.Context, schema string) (rows, distinct int64) {
	t.Helper()
	if err := pgtest.PoolQueryRow(ctx, schema, "SELECT count(*), count(DISTINCT identifier) FROM resource_pool", &rows, &distinct); err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

// Seeds running at once each add what they were asked for, and no two rows
// share an identifier, on a plain pool and on a partitioned one (whose
// unique index is on (identifier, id) and so cannot refuse a duplicate
// identifier by itself); also on a pool whose id has no sequence, where
// seeds take turns.
func TestConcurrentSeedsMakeUniqueIdentifiers(t *testing.T) {
	for _, parts := range pgtest.Shapes {
		for _, sequence := range []bool{true, false} {
			name := pgtest.ShapeName(parts)
			if !sequence {
				name += "/no-sequence"
			}
			t.Run(name, func(t *testing.T) {
				ctx, db := pgtest.Setup(t, 0, pgtest.Options{Partitions: parts, MaxConns: 8})
				if !sequence {
					if err := pgtest.Exec(ctx, "ALTER TABLE "+db.Schema+".resource_pool ALTER COLUMN id DROP IDENTITY"); err != nil {
						t.Fatal(err)
					}
				}
				seedAtOnce(t, ctx, db.Engine, 4, 3000)
				if rows, distinct := identifiers(t, ctx, db.Schema); rows != 12000 || distinct != 12000 {
					t.Fatalf("4 seeds of 3,000 at once: %d rows, %d distinct identifiers; want 12,000 of each", rows, distinct)
				}
			})
		}
	}
}

// Identifiers past 10 digits are not cut: ids around 1e10 seed in full,
// again and again.
func TestSeedPastTenDigits(t *testing.T) {
	for _, sequence := range []bool{true, false} {
		name := "sequence"
		if !sequence {
			name = "no-sequence"
		}
		t.Run(name, func(t *testing.T) {
			ctx, db := pgtest.Setup(t, 0, pgtest.Options{})
			q := db.Schema + ".resource_pool"
			if sequence {
				if err := pgtest.Exec(ctx, "SELECT setval(pg_get_serial_sequence('"+q+"', 'id'), 9999999990)"); err != nil {
					t.Fatal(err)
				}
			} else if err := pgtest.Exec(ctx, "ALTER TABLE "+q+" ALTER COLUMN id DROP IDENTITY",
				"INSERT INTO "+q+" (id, identifier) VALUES (10000000000, 'hand-made')"); err != nil {
				t.Fatal(err)
			}
			for round := 0; round < 2; round++ {
				if n, err := db.Engine.Seed(ctx, 1000); err != nil || n != 1000 {
					t.Fatalf("seed %d past 1e10: added %d of 1,000 (%v)", round, n, err)
				}
			}
			var short int64
			if err := pgtest.PoolQueryRow(ctx, db.Schema, "SELECT count(*) FROM resource_pool WHERE identifier LIKE 'res-%' AND identifier <> 'res-' || lpad(id::text, 10, '0') AND identifier <> 'res-' || id", &short); err != nil {
				t.Fatal(err)
			}
			rows, distinct := identifiers(t, ctx, db.Schema)
			want := int64(2000)
			if !sequence {
				want++
			}
			if rows != want || distinct != want || short != 0 {
				t.Fatalf("%d rows, %d distinct identifiers, %d not named after their id; want %d, %d, 0", rows, distinct, short, want, want)
			}
		})
	}
}

// Producers refilling a partitioned pool while consumers claim from it, as a
// fleet of drain workers does, never make an identifier twice, so no two
// holders ever hold the same one; each refill adds what it was asked for.
func TestRefillRaceNeverDuplicatesAnIdentifier(t *testing.T) {
	ctx, db := pgtest.Setup(t, 200, pgtest.Options{Partitions: 4, MaxConns: 12})
	const producers, rounds, each, consumers = 4, 25, 40, 4
	var wg sync.WaitGroup
	errs := make(chan error, producers+consumers)
	done := make(chan struct{})
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				if n, err := db.Engine.Refill(ctx, each); err != nil || n != each {
					errs <- fmt.Errorf("refill: added %d of %d (%v)", n, each, err)
					return
				}
			}
		}()
	}
	held := make([][]engine.Lease, consumers)
	var claims sync.WaitGroup
	for c := range consumers {
		claims.Add(1)
		go func() {
			defer claims.Done()
			for {
				select {
				case <-done:
					return
				default:
				}
				got, err := db.Engine.LeaseAcquire(ctx, &engine.LeaseAcquireParams{Holder: fmt.Sprintf("c%d", c), TTL: time.Hour, N: 5})
				if err != nil && !errors.Is(err, engine.ErrPoolEmpty) {
					errs <- fmt.Errorf("claim: %w", err)
					return
				}
				held[c] = append(held[c], got...)
			}
		}()
	}
	wg.Wait()
	close(done)
	claims.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	owner := map[string]string{}
	for c, leases := range held {
		for _, l := range leases {
			if o, ok := owner[l.Identifier]; ok {
				t.Fatalf("%s held by c%d and %s at once", l.Identifier, c, o)
			}
			owner[l.Identifier] = fmt.Sprintf("c%d", c)
		}
	}
	want := int64(200 + producers*rounds*each)
	if rows, distinct := identifiers(t, ctx, db.Schema); rows != want || distinct != want {
		t.Fatalf("%d producers refilling %d× %d ids while %d consumers claim: %d rows, %d distinct identifiers; want %d of each",
			producers, rounds, each, consumers, rows, distinct, want)
	}
}

// A seed that cannot add every id says how many it added, why, and what to
// do: here rows inserted by hand took the ids the sequence gives next.
func TestSeedSaysWhySequenceIsBehind(t *testing.T) {
	ctx, db := pgtest.Setup(t, 0, pgtest.Options{})
	if err := pgtest.Exec(ctx, "INSERT INTO "+db.Schema+".resource_pool (id, identifier) SELECT g, 'hand-' || g FROM generate_series(1, 5000) AS g"); err != nil {
		t.Fatal(err)
	}
	n, err := db.Engine.Seed(ctx, 1000)
	if !errors.Is(err, engine.ErrSeedShort) || n != 0 || !strings.Contains(err.Error(), "setval") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("seed behind ids inserted by hand: added %d (%v); want 0 and one line saying the sequence is behind", n, err)
	}
	var seq string
	if err := pgtest.PoolQueryRow(ctx, db.Schema, "SELECT pg_get_serial_sequence('resource_pool', 'id')", &seq); err != nil {
		t.Fatal(err)
	}
	if err := pgtest.Exec(ctx, "SELECT setval('"+seq+"', 5000)"); err != nil {
		t.Fatal(err)
	}
	if n, err := db.Engine.Seed(ctx, 1000); err != nil || n != 1000 {
		t.Fatalf("seed after moving the sequence on as told: added %d (%v)", n, err)
	}
}

// A seed into an empty pool inserts without ON CONFLICT; a row that a
// producer inserts meanwhile and that takes an identifier the seed makes
// fails that statement, and the seed makes its ids the careful way: it
// still adds exactly what it was asked for, every identifier once.
func TestSeedIntoAnEmptyPoolMeetsAProducer(t *testing.T) {
	ctx, db := pgtest.Setup(t, 0, pgtest.Options{})
	producer := pgtest.PeerTx(t, ctx, db.Schema)
	// Uncommitted: invisible to the seed's look at the pool, in the way of
	// its first identifier.
	if _, err := producer.Exec(ctx, "INSERT INTO resource_pool (id, identifier) OVERRIDING SYSTEM VALUE VALUES (1000000, 'res-0000000001')"); err != nil {
		t.Fatal(err)
	}
	type result struct {
		n   int64
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := db.Engine.Seed(ctx, 10)
		done <- result{n, err}
	}()
	// The seed's plain insert waits on the producer's uncommitted
	// identifier; once the producer commits, that insert fails.
	pgtest.Eventually(t, "the seed waits on the producer's row", 10*time.Second, func() bool {
		var waiting bool
		err := pgtest.PoolQueryRow(ctx, db.Schema, `SELECT EXISTS (SELECT FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO resource_pool%')`, &waiting)
		return err == nil && waiting
	})
	if err := producer.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || r.n != 10 {
		t.Fatalf("seed of 10 beside a producer: added %d (%v)", r.n, r.err)
	}
	if rows, distinct := identifiers(t, ctx, db.Schema); rows != 11 || distinct != 11 {
		t.Fatalf("%d rows, %d distinct identifiers; want 11 of each", rows, distinct)
	}
}
