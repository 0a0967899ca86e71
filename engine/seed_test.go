package engine_test

import (
	"context"
	"sync"
	"testing"

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
