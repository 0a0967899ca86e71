package cli

import (
	"strings"
	"sync"
	"testing"

	"github.com/pooltop-dev/pooltop/internal/pgtest"
)

// Three `pooltop seed` at once on a partitioned pool each add what they
// were asked for, under identifiers no other row has; a seed that cannot
// add them all fails with one line saying how many it added and why.
func TestSeedCommandsAtOnce(t *testing.T) {
	t.Parallel()
	name := pgtest.UniqueName("pooltop_test_")
	pgtest.DropAtCleanup(t, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	pooltop(t, "migrate", "--dsn", pgtest.DSN(), "--schema", name, "--partitions", "4").must(t)
	var wg sync.WaitGroup
	runs := make([]result, 3)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = pooltop(t, "seed", "--dsn", pgtest.DSN(), "--schema", name, "--count", "2000")
		}()
	}
	wg.Wait()
	for i, r := range runs {
		if r.code != 0 || !strings.HasPrefix(r.stdout, "seeded 2000 ids") {
			t.Fatalf("seed %d of 3 at once: exit %d: %s%s", i, r.code, r.stdout, r.stderr)
		}
	}
	var rows, distinct int64
	if err := pgtest.PoolQueryRow(t.Context(), name, "SELECT count(*), count(DISTINCT identifier) FROM resource_pool", &rows, &distinct); err != nil {
		t.Fatal(err)
	}
	if rows != 6000 || distinct != 6000 {
		t.Fatalf("3 seeds of 2,000 at once: %d rows, %d distinct identifiers; want 6,000 of each", rows, distinct)
	}

	// Rows inserted by hand above the sequence take the ids it gives next.
	if err := pgtest.Exec(t.Context(), "INSERT INTO "+name+".resource_pool (id, identifier) SELECT g, 'hand-' || g FROM generate_series(6001, 20000) AS g"); err != nil {
		t.Fatal(err)
	}
	r := pooltop(t, "seed", "--dsn", pgtest.DSN(), "--schema", name, "--count", "1000")
	if r.code != exitError || strings.Count(r.stderr, "\n") != 1 || !strings.Contains(r.stderr, "0 of 1000") || !strings.Contains(r.stderr, "setval") {
		t.Fatalf("seed behind ids inserted by hand: exit %d, stdout %q, stderr %q; want exit 1 and one line saying why", r.code, r.stdout, r.stderr)
	}
}
