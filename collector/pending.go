package collector

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// pendingCounter counts PENDING rows through the partial index on
// leased_until WHERE status = 'PENDING', exactly, without reading them all
// at every poll: during a leak a pool holds a million PENDING rows, and
// reading them all each second would cost the server more than the workers.
//
// The index's keys (lease expiries) are cut into slices of about sliceWidth
// entries, found by walking the index in key order. A slice changes only
// where leases are taken, renewed, committed or freed, and the count of one
// costs a few thousand index entries, so each poll recounts:
//
//   - the first slice, where the reaper frees the oldest leases;
//   - the last slice, where new and renewed leases land;
//   - in the slices that hold now, now minus the reaper interval and now
//     minus the stuck threshold, their entries below that time: every slice
//     below such a cut has expired by it, so "expired", "expired longer than
//     a reaper interval" and "expired longer than the stuck threshold" are
//     sums of slices plus one split each;
//   - then the others in turn, as many entries a poll as the pace allows.
//
// A slice that grows past twice the width is cut again by a walk. Until the
// first walks have covered the index, the part not walked is estimated from
// the index's size in the catalog. Leases that never expire (infinity) are
// counted apart, in one index descent; PENDING rows without a lease are
// counted from the index at every poll while there are at most noneCap of
// them, and how long they have waited is read from a sample of them. When
// there are more, each would cost a heap fetch of a page the workers keep
// changing, and a large leak's count alone would make a poll many times its
// budget: they are then counted by ranges of the table in turn, as the
// census reads a pool without a PENDING index, and their figures are
// estimated.
type pendingCounter struct {
	per    pace    // entries recounted in turn per poll, against the count budget
	walk   pace    // entries walked per poll, against walkBudgetMS
	walked int64   // entries the last walk read …
	walkMS float64 // … and its server time
	// walkStop: the server time at which a walk stops reading (0:
	// walkStopMS); walkStops counts the walks that stopped before their
	// limit and their slice's end
	walkStop  time.Duration
	walkStops int64
	slices    []pendingSlice // contiguous, ascending; the first starts at -infinity, the last ends at +infinity
	// the rotation has passed every slice below turnedTo (else it starts
	// from the first)
	turned   bool
	turnedTo time.Time
	credit   int64         // entries the rotation has saved for a slice larger than its pace
	none     leaselessRows // PENDING without a lease
	// ranged: there are more PENDING rows without a lease than noneCap, and
	// the collector counts them by reading the table a range at a time
	// (see takeRanged); canRange says it can (an index on id, or
	// PostgreSQL 14's TID range scans), else they are counted whole every
	// n/noneCap polls. rangedFreed: a range lost some since its last read.
	ranged, canRange, rangedFreed bool
	skew                          time.Duration // the server's clock minus ours, from the last poll
	polls                         int
	// forever is the count of leases at infinity, read every foreverEvery polls.
	forever int64
	// lowSkip counts down the polls until the lowest live lease id is read
	// again, after there were too many live leases to read it; live is the
	// count of live leases at the last poll.
	lowSkip int
	live    int64
	// look is how far the next count of rows without a lease through the
	// index may read: firstNoneCap at first, twice as far after each look
	// that found that many, up to noneCap+1.
	look int64
	// large: the PENDING index held more pages than the first walk reads
	// (largePending) when watch started (see plan).
	large bool
	// firstWalk: the entries the first walk reads (0: initPending).
	firstWalk int64
	// walkLater: the first poll walks nothing; the first walk is the
	// second poll's (a pool that starts in stages, see Collector.stage).
	walkLater bool
	// catalog is the index's entries by the catalog, as a walk last read
	// them at catalogAt (every catalogEvery: the statistics move slowly,
	// and reading them costs a walk about a millisecond).
	catalog   int64
	catalogAt time.Time
}

// catalogEvery is how often a walk reads the index's entries by the catalog.
const catalogEvery = 10 * time.Second

// pendingSlice holds the PENDING rows whose lease expires in [lo, hi); a nil lo is
// -infinity, a nil hi is +infinity (leases at infinity itself are counted
// apart). n is their count at time at; known is false while the slice has
// not been counted (the part of the index not walked yet).
type pendingSlice struct {
	lo, hi *time.Time
	n      int64
	min    *time.Time // the earliest key at the last count
	at     time.Time
	known  bool
	past   bool // empty and wholly expired at its last count (see settled)
}

// run says whether the slice holds a single key (many leases set in one
// statement share it): it cannot be cut further.
func (s pendingSlice) run() bool {
	return s.lo != nil && s.hi != nil && s.hi.Sub(*s.lo) <= time.Microsecond
}

// settled says whether the slice was empty when counted and wholly expired
// by then: no lease can land in it but one written with a past expiry.
func (s pendingSlice) settled() bool {
	return s.known && s.n == 0 && s.past && !knockout.settled
}

// expired marks the slice past if it is empty and wholly expired at server,
// the server's clock at its count.
func (s *pendingSlice) expired(server time.Time) {
	s.past = s.n == 0 && s.hi != nil && !server.IsZero() && !s.hi.After(server)
}

// leaselessRows is the PENDING rows without a lease.
type leaselessRows struct {
	n, stuck int64
	oldest   *time.Time // the oldest updated_at
	at       time.Time
	wait     int  // polls until the next count, when there are very many
	counted  bool // counted at least once
	sampled  bool // stuck and oldest come from part of them
}

// Tuning of the PENDING counter.
const (
	sliceWidth   = 256              // entries per slice
	noneCap      = 1024             // more rows without a lease than this are counted every n/noneCap polls
	lowCap       = 64               // the lowest id of the live leases is read while there are at most this many
	noneSample   = 256              // rows without a lease read from the table per poll, for their age
	foreverEvery = 30               // leases at infinity are counted every this many polls
	lowEvery     = 10               // polls between reads of the lowest live lease id while there are many
	firstNoneCap = 64               // rows without a lease the first look counts at most (a heap fetch each, cold)
	minPending   = 512              // entries walked or recounted in turn per poll, at least …
	maxPending   = 262_144          // … and at most
	initPending  = 2_048            // the first walk: a cold index costs a page read every few hundred entries
	maxWalk      = 16_384           // entries walked per poll at most (see absorb)
	walkStopMS   = 2 * walkBudgetMS // server time at which a walk stops reading, past minPending entries
	walkRun      = 4 * sliceWidth   // entries of one key past which a walk stops reading
	largePending = 8                // pages of the PENDING index the first walk reads about (initPending entries)
)

// pendingQuery is the plan of one poll's PENDING statements, and their results.
type pendingQuery struct {
	cuts               [3]time.Time // now, now - reaper interval, now - stuck threshold (server clock)
	walkAt             int          // slice cut again by the walk (-1: none)
	oldest             int          // the first slice that may hold a lease: the reaper's end
	walk               int64        // entries the walk reads at most
	recount            []int        // slices recounted
	cutSlice           [3]int       // slice holding each cut (-1: none)
	cutSplit           [3]bool      // the slice holding the cut is split at it (not for runs or slices not counted)
	none               bool         // count the rows without a lease
	capped             bool         // count at most cap of them …
	cap                int64        // … noneCap+1, or less while the looks grow (see look)
	askForever, askLow bool
	askCatalog         bool // the walk reads the catalog's entries (else catalog is the last read)
	catalogAlone       bool // no walk: a statement of its own reads them

	// results
	walked   int64         // entries the walk read (walk+1: it stopped before the slice's end)
	stopped  bool          // the walk stopped at walkStop or at a long run of one key (walk is then walked-1)
	walkStop time.Duration // server time at which the walk stops reading, past minPending entries
	first    *time.Time    // the walk's first key
	below    [3]int64      // entries of the walk below each cut
	bounds   []time.Time   // a key every sliceWidth entries of the walk
	ranks    []int64       // position (from 1) of each bound's first entry in the walk
	catalog  int64         // index entries according to the catalog (read by the walk, or the last read; 0 when there is none)
	// readCatalog: this poll's walk read the catalog.
	readCatalog bool
	counts      []int64
	mins        []*time.Time // the earliest key of each recounted slice
	splits      [3]int64     // entries of each cut's slice below the cut
	forever     int64        // leases that expire at infinity
	leaseless   leaselessRows
	low         *int64 // lowest id of the live leases, when there are at most lowCap
	lowN        int64  // live leases read for low (lowCap+1: more)
	server      time.Time
	walkMS      float64 // server time of the walk
	rotMS       float64 // server time of the recounts
}

// plan decides what the next poll counts. now is our clock; expiredAfter and
// stuckAfter are the alert thresholds.
func (p *pendingCounter) plan(now time.Time, expiredAfter, stuckAfter time.Duration) *pendingQuery {
	if p.per.n == 0 {
		p.per = pace{n: minPending, lo: minPending, hi: maxPending, step: minPending, ceiling: true}
		p.walk = pace{n: cmp.Or(p.firstWalk, initPending), lo: minPending, hi: maxPending, ceiling: true}
		p.slices = []pendingSlice{{}}
	}
	server := now.Add(p.skew)
	q := &pendingQuery{walkAt: -1, walk: p.walk.n, cuts: [3]time.Time{server, server.Add(-expiredAfter), server.Add(-stuckAfter)},
		catalog: p.catalog, askCatalog: p.catalogAt.IsZero() || now.Sub(p.catalogAt) >= catalogEvery,
		walkStop: cmp.Or(p.walkStop, walkStopMS*time.Millisecond)}
	q.none = !p.ranged && (p.none.wait <= 0 || !p.none.counted)
	if p.look == 0 {
		p.look = firstNoneCap
	}
	q.capped, q.cap = p.canRange, min(p.look, noneCap+1)
	q.askForever, q.askLow = p.polls%foreverEvery == 0, p.lowSkip <= 0 || p.live <= lowCap
	first := p.polls == 0
	if p.large && first {
		// The first walk of a pool it cannot cover (its figures are
		// estimated anyway) runs on one new backend, whose first read of
		// each page costs tens of µs: the lowest live lease and the rows
		// without a lease, a heap fetch each, wait for the poll after it
		// (on a pool that starts in stages, for a stage of their own: see
		// Collector.stage).
		q.none, q.askLow = false, false
	}
	p.polls++
	// Walked: a slice holding a cut that grew too wide (its split would cost
	// more and more), else the first slice not counted yet, else the first
	// that grew too wide.
	wide := func(i int) bool { s := &p.slices[i]; return s.known && s.n > 2*sliceWidth && !s.run() }
	last := len(p.slices) - 1
	// The slices holding the cuts (split at the cut below; recounted in
	// turn). The loops here run over thousands of slices at every poll
	// during a leak: they find slices by binary search and never copy one.
	for c, cut := range q.cuts {
		q.cutSlice[c] = p.holding(cut)
	}
	hot := []int{0, last, q.cutSlice[0], q.cutSlice[1], q.cutSlice[2]}
	sort.Ints(hot)
	for _, i := range hot {
		if q.walkAt < 0 && wide(i) {
			q.walkAt = i
		}
	}
	for i := range p.slices {
		if q.walkAt < 0 && !p.slices[i].known {
			q.walkAt = i
			break
		}
	}
	for i := range p.slices {
		if q.walkAt < 0 && wide(i) {
			q.walkAt = i
			break
		}
	}
	if first && p.walkLater {
		q.walkAt, q.catalogAlone = -1, true
	}
	add := func(i int) {
		if i == q.walkAt || !p.slices[i].known {
			return // the part not walked yet is never counted whole
		}
		if !q.recounts(i) {
			q.recount = append(q.recount, i)
		}
	}
	// At every poll, but for runs of one key too long to count each time.
	every := func(i int) {
		if !p.slices[i].run() || p.slices[i].n <= 8*sliceWidth {
			add(i)
		}
	}
	// The reaper's end is the first slice that may hold a lease: slices
	// before it that were empty and wholly expired when counted (settled)
	// stay empty, for a lease is set to expire in the future. Only a past
	// expiry written by hand lands there, and the rotation recounts a
	// settled slice every reanchor (30 s), as the UNUSED count looks below
	// its floor; their age does not mark the figures estimated. On a
	// healthy pool such a slice spans every claim consumed since the last
	// vacuum, each a dead index entry that a count reads.
	q.oldest = 0
	for q.oldest < last && p.slices[q.oldest].settled() {
		q.oldest++
	}
	every(q.oldest)
	every(last)
	for c, i := range q.cutSlice {
		// A split reads the slice's entries below the cut: bounded while the
		// slice is (a wide one is walked first, see above).
		q.cutSplit[c] = i >= 0 && i != q.walkAt && p.slices[i].known && (p.slices[i].n <= 8*sliceWidth || !p.slices[i].run())
	}
	for i := range p.slices {
		if s := &p.slices[i]; s.known && s.at.IsZero() {
			add(i) // a run of one key, never counted
		}
	}
	// The rotation has a budget of its own, whatever the fixed recounts
	// above cost. (It counts slice by slice: one range scan grouped by
	// width_bucket saves descents of the index but pays about three times
	// more for each entry.)
	//
	// It recounts p.per.n entries a poll on average: what a poll does not
	// spend is saved, and a slice larger than the pace waits until the polls
	// before it have saved enough; otherwise a run of leases set by one
	// statement would be recounted at every poll.
	var largest int64
	for i := range p.slices {
		largest = max(largest, p.slices[i].n)
	}
	p.credit = min(p.credit+p.per.n, max(p.per.n, largest))
	//
	// Where the rotation stands is a key, not a slice's index: cuts and
	// merges shift the indices at every poll, and an index kept across them
	// skipped slices, the newest ones above now most (cut at every poll,
	// merged, and skipped again): at a slow pace, 300 new leases there went
	// uncounted for over 60 polls (TestCountsOnEveryShape/leak).
	for k := 0; k < len(p.slices); k++ {
		next := 0
		if p.turned {
			next = p.holding(p.turnedTo)
		}
		sl := p.slices[next]
		due := !sl.settled() || now.Sub(sl.at) >= reanchor // a settled slice: every reanchor, for a past expiry written by hand
		var n int64
		if sl.known && next != q.walkAt && !q.recounts(next) && due {
			n = sl.n
		}
		if n > p.credit {
			break
		}
		p.credit -= n
		p.turned = sl.hi != nil // past the last slice: from the first again
		if p.turned {
			p.turnedTo = *sl.hi
		}
		if due {
			add(next)
		}
	}
	return q
}

// holding returns the slice that holds t (the slices are contiguous and
// ascending, from -infinity to +infinity: the first whose end is past t).
func (p *pendingCounter) holding(t time.Time) int {
	return sort.Search(len(p.slices), func(i int) bool { h := p.slices[i].hi; return h == nil || h.After(t) })
}

// recounts says whether slice i is among the slices q recounts.
func (q *pendingQuery) recounts(i int) bool {
	for _, j := range q.recount {
		if j == i {
			return true
		}
	}
	return false
}

// bound encodes a slice bound for SQL; nil is -infinity below, +infinity above.
func bound(t *time.Time, upper bool) pgtype.Timestamptz {
	switch {
	case t != nil:
		return pgtype.Timestamptz{Time: *t, Valid: true}
	case upper:
		return pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.Infinity}
	}
	return pgtype.Timestamptz{Valid: true, InfinityModifier: pgtype.NegativeInfinity}
}

// queue adds the statements to the batch. table is the quoted pool table,
// index the PENDING index (quoted); hasUpdated says whether the table has
// updated_at (how long rows without a lease have waited).
func (q *pendingQuery) queue(b *pgx.Batch, table, index string, hasUpdated bool, slices []pendingSlice) {
	los := make([]pgtype.Timestamptz, len(q.recount))
	his := make([]pgtype.Timestamptz, len(q.recount))
	for i, k := range q.recount {
		los[i], his[i] = bound(slices[k].lo, false), bound(slices[k].hi, true)
	}
	// The splits are ranges of the same list, after the slices: on a
	// partitioned pool every subquery on the pool is a scan of each
	// partition to start and descend, so the statement has as few as it can.
	var splitAt []int // the cuts split, in the order of their ranges
	for c, i := range q.cutSlice {
		if q.cutSplit[c] {
			los, his = append(los, bound(slices[i].lo, false)), append(his, bound(&q.cuts[c], true))
			splitAt = append(splitAt, c)
		}
	}
	if q.walkAt >= 0 { // else no walk this poll: nothing to send
		q.queueWalk(b, table, index, slices)
	} else if q.catalogAlone {
		q.queueCatalog(b, index)
	}
	updated := "updated_at"
	if !hasUpdated {
		updated = "NULL::timestamptz"
	}
	// The parts this poll does not ask for are left out of the text, not
	// switched off by a parameter: a subquery on the pool is started at
	// every execution whether it runs or not, on a partitioned pool a scan
	// of every partition. (In its place a constant, 0 or a NULL row, which
	// absorb does not read when the part was not asked for; the two cuts
	// stay referenced, so that their parameters keep a type.)
	forever := fmt.Sprintf(`(SELECT count(*) FROM %s WHERE status = 'PENDING' AND leased_until = 'infinity')`, table)
	if !q.askForever {
		forever = `0::bigint`
	}
	low := fmt.Sprintf(`(SELECT row(count(*), min(id)) FROM (SELECT id FROM %s WHERE status = 'PENDING' AND leased_until >= $1::timestamptz
                                           ORDER BY leased_until DESC LIMIT %d) AS l)`, table, lowCap+1)
	if !q.askLow {
		low = `(SELECT row(0::bigint, NULL::bigint) WHERE $1::timestamptz IS NULL)`
	}
	count := fmt.Sprintf(`(SELECT count(*) FROM %s WHERE status = 'PENDING' AND leased_until IS NULL)`, table)
	if q.capped {
		count = fmt.Sprintf(`(SELECT count(*) FROM (SELECT FROM %s WHERE status = 'PENDING' AND leased_until IS NULL LIMIT %d) AS c)`, table, q.cap)
	}
	none := fmt.Sprintf(`(SELECT row(%[4]s,
                   count(*), count(*) FILTER (WHERE u < $2::timestamptz), min(u))
        FROM (SELECT %[2]s AS u FROM %[1]s WHERE status = 'PENDING' AND leased_until IS NULL
              ORDER BY leased_until LIMIT %[3]d) AS x)`, table, updated, noneSample, count)
	if !q.none {
		none = `(SELECT row(0::bigint, 0::bigint, 0::bigint, NULL::timestamptz) WHERE $2::timestamptz IS NULL)`
	}
	b.Queue(fmt.Sprintf(`
SELECT now(), %[2]s, %[3]s, %[4]s,
       clock_timestamp(),
       ARRAY(SELECT (SELECT row(count(*), min(leased_until)) FROM %[1]s WHERE status = 'PENDING' AND leased_until >= s.lo AND leased_until < s.hi)
             FROM unnest($3::timestamptz[], $4::timestamptz[]) WITH ORDINALITY AS s(lo, hi, i) ORDER BY s.i),
       clock_timestamp()`, table, forever, low, none),
		q.cuts[0], q.cuts[2], los, his).QueryRow(func(row pgx.Row) error {
		var t1, t2 time.Time
		var low lowRow
		var none leaselessRow
		var counted []countRow
		if err := row.Scan(&q.server, &q.forever, &low, &none, &t1, &counted, &t2); err != nil {
			return fmt.Errorf("pending ids: %w", err)
		}
		if len(counted) != len(q.recount)+len(splitAt) {
			return fmt.Errorf("pending ids: %d counts for %d ranges", len(counted), len(q.recount)+len(splitAt))
		}
		for k, c := range splitAt {
			q.splits[c] = counted[len(q.recount)+k].n
		}
		for _, c := range counted[:len(q.recount)] {
			q.counts, q.mins = append(q.counts, c.n), append(q.mins, finite(c.min))
		}
		q.low, q.lowN = low.low, low.n
		q.leaseless = none.region()
		q.rotMS += float64(t2.Sub(t1).Microseconds()) / 1000
		return nil
	})
}

// sqlPendingCatalog is the PENDING index's entries by the catalog: per
// leaf index the lower of its own count and its table's rows times the
// share of PENDING in the table's statistics. %[1]s is the index, quoted
// as a literal.
const sqlPendingCatalog = `SELECT coalesce(sum(least(greatest(ic.reltuples, 0), greatest(tc.reltuples, 0) * coalesce(f.freq, 0))), 0)::bigint
        FROM (SELECT relid FROM pg_partition_tree(%[1]s::regclass) WHERE isleaf
              UNION ALL SELECT %[1]s::regclass WHERE NOT EXISTS (SELECT FROM pg_partition_tree(%[1]s::regclass))) AS l
        JOIN pg_class ic ON ic.oid = l.relid
        JOIN pg_index i ON i.indexrelid = l.relid
        JOIN pg_class tc ON tc.oid = i.indrelid
        JOIN pg_namespace n ON n.oid = tc.relnamespace
        CROSS JOIN LATERAL (SELECT (s.most_common_freqs[array_position(s.most_common_vals::text::text[], 'PENDING')])::float8 AS freq
                            FROM pg_stats s WHERE s.schemaname = n.nspname AND s.tablename = tc.relname
                            AND s.attname = 'status' AND NOT s.inherited) AS f`

// queueCatalog reads the catalog's entries alone: the first poll of a
// pool whose first walk is the second poll's (see
// pendingCounter.walkLater) takes PENDING from them.
func (q *pendingQuery) queueCatalog(b *pgx.Batch, index string) {
	b.Queue(fmt.Sprintf(sqlPendingCatalog, quoteLiteral(index))).QueryRow(func(row pgx.Row) error {
		if err := row.Scan(&q.catalog); err != nil {
			return fmt.Errorf("pending ids: catalog: %w", err)
		}
		q.readCatalog = true
		return nil
	})
}

// queueWalk adds the walk of slice q.walkAt to the batch.
func (q *pendingQuery) queueWalk(b *pgx.Batch, table, index string, slices []pendingSlice) {
	// The walk reads the index in key order from the slice's start and
	// returns the key at every sliceWidth-th entry with the position of its
	// first entry: consecutive positions give each new slice its exact
	// count, ties included.
	//
	// It reads the entries in chunks of sliceWidth, one recursive step a
	// chunk (c): each chunk from the last one's last key, past the entries
	// of that key already read (ties), kept as an array. A chunk's first
	// entry is then the key of a slice bound and r1 the position of the
	// first entry of its key's run; the entries below each cut are
	// counted by a binary search of each chunk (width_bucket), so that
	// nothing is sorted or numbered entry by entry. The OFFSET 0 keeps the chunk's
	// subquery from being pulled up into the step, which would run it
	// once for every reference to its array.
	//
	// The walk stops at walkStop of server time once it has read
	// minPending entries: an entry on a heap page the workers just
	// changed costs a heap fetch, ten times or more an entry on an
	// all-visible page, and a walk paced on cheap entries that ran into
	// such ones cost a poll 40-50 ms of the server's CPU. It also stops
	// past walkRun entries of one key, since each chunk reads again the
	// entries of its first key already read; the rest of a longer run is
	// left to the next walk (see cut). A walk that stopped so is taken as
	// one of fewer entries (see stop).
	//
	// Its time is measured inside the server, so that the pace follows
	// the server's work, not the round trip: from the statement's start
	// (statement_timestamp(): in a batch, when the server began this
	// statement) to the output, whose columns are computed after the
	// aggregate has read every chunk.
	//
	// The index's entries by the catalog: for each leaf index (the index
	// itself, where pg_partition_tree lists nothing), the lower of its own
	// count and its table's rows times the share of PENDING in the
	// table's statistics. The index's own count alone, on a pool whose
	// claims churn, counts entries vacuum could not yet remove (the demo's
	// leak read 7,777 PENDING for about 1,100 with it); the statistics'
	// share alone lags behind a pool that changes. A table without
	// statistics adds nothing: the walked part is all there is to show.
	from, upto := bound(slices[q.walkAt].lo, false), bound(slices[q.walkAt].hi, true)
	b.Queue(fmt.Sprintf(`
WITH RECURSIVE c(ks, last, ties, got, r1, more) AS (
    SELECT '{}'::timestamptz[], $1::timestamptz, 0::bigint, 0::bigint, 0::bigint, true
  UNION ALL
    SELECT n.ks, n.ks[cardinality(n.ks)],
           cardinality(n.ks) + 1 - array_position(n.ks, n.ks[cardinality(n.ks)])
             + CASE WHEN n.ks[cardinality(n.ks)] = c.last THEN c.ties ELSE 0 END,
           c.got + cardinality(n.ks),
           CASE WHEN n.ks[1] = c.last THEN c.got - c.ties + 1 ELSE c.got + 1 END,
           cardinality(n.ks) = least($4::bigint, $3::bigint - c.got)
    FROM c CROSS JOIN LATERAL (
        SELECT ARRAY(SELECT leased_until FROM %[1]s WHERE status = 'PENDING'
                     AND leased_until >= c.last AND leased_until < $2::timestamptz
                     ORDER BY leased_until OFFSET c.ties LIMIT least($4::bigint, $3::bigint - c.got)) AS ks
        OFFSET 0) AS n
    WHERE c.more AND c.got < $3::bigint AND c.ties <= %[4]d
      AND (c.got <= %[3]d OR clock_timestamp() < statement_timestamp() + make_interval(secs => $9::float8 / 1000))
)
SELECT statement_timestamp(), max(got), min(ks[1]),
       row(sum(width_bucket($5::timestamptz - interval '1 microsecond', ks)),
           sum(width_bucket($6::timestamptz - interval '1 microsecond', ks)),
           sum(width_bucket($7::timestamptz - interval '1 microsecond', ks))),
       coalesce(array_agg(ks[1] ORDER BY got) FILTER (WHERE got > cardinality(ks) AND cardinality(ks) > 0 AND r1 > 1), '{}'),
       coalesce(array_agg(r1 ORDER BY got) FILTER (WHERE got > cardinality(ks) AND cardinality(ks) > 0 AND r1 > 1), '{}'),
       CASE WHEN $8::bool THEN (`+fmt.Sprintf(sqlPendingCatalog, quoteLiteral(index))+`) END,
       NOT bool_or(NOT more OR got >= $3::bigint),
       clock_timestamp()
FROM c`, table, quoteLiteral(index), minPending, walkRun),
		from, upto, q.walk+1, sliceWidth, q.cuts[0], q.cuts[1], q.cuts[2], q.askCatalog, millis(q.walkStop)).QueryRow(func(row pgx.Row) error {
		var t0, t1 time.Time
		var catalog *int64
		var bounds []pgtype.Timestamptz
		var first pgtype.Timestamptz
		var below belowRow
		var stopped bool
		if err := row.Scan(&t0, &q.walked, &first, &below, &bounds, &q.ranks, &catalog, &stopped, &t1); err != nil {
			return fmt.Errorf("pending ids: walk: %w", err)
		}
		if stopped && q.walked > 0 {
			q.stop()
		}
		if catalog != nil {
			q.catalog, q.readCatalog = *catalog, true
		}
		q.first, q.below = finite(first), below
		var ranks []int64
		for i, b := range bounds {
			k := *finite(b)
			if n := len(q.bounds); n > 0 && q.bounds[n-1].Equal(k) {
				continue // a run longer than a slice: one bound
			}
			q.bounds, ranks = append(q.bounds, k), append(ranks, q.ranks[i])
		}
		q.ranks = ranks
		q.walkMS = float64(t1.Sub(t0).Microseconds()) / 1000
		return nil
	})
}

// stop takes a walk that stopped before its slice's end and before its
// limit (at walkStop, or in a long run of one key) as a walk of one
// entry fewer than it read: its last entry is where the next walk of the
// slice goes on.
func (q *pendingQuery) stop() { q.walk, q.stopped = q.walked-1, true }

func quoteLiteral(s string) string {
	out := "'"
	for _, r := range s {
		if r == '\'' {
			out += "'"
		}
		out += string(r)
	}
	return out + "'"
}

// farFuture stands for +infinity where a time is needed.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// finite returns the time, nil for NULL; -infinity is the zero time (older
// than anything), +infinity far in the future.
func finite(t pgtype.Timestamptz) *time.Time {
	if !t.Valid {
		return nil
	}
	v := t.Time
	switch t.InfinityModifier {
	case pgtype.NegativeInfinity:
		v = time.Time{}
	case pgtype.Infinity:
		v = farFuture
	}
	return &v
}

// countRow, belowRow, lowRow and leaselessRow scan composite values.
type countRow struct {
	n   int64
	min pgtype.Timestamptz
}

func (r *countRow) ScanIndex(i int) any { return []any{&r.n, &r.min}[i] }

// ScanNull: an aggregate's row is never NULL.
func (r *countRow) ScanNull() error { return nil }

type belowRow [3]int64

func (r *belowRow) ScanIndex(i int) any { return &r[i] }

// ScanNull: an aggregate's row is never NULL.
func (r *belowRow) ScanNull() error { return nil }

type lowRow struct {
	n   int64
	low *int64
}

func (r *lowRow) ScanIndex(i int) any { return []any{&r.n, &r.low}[i] }

// ScanNull: an aggregate's row is never NULL.
func (r *lowRow) ScanNull() error { return nil }

type leaselessRow struct {
	n, sampled, stuck int64
	oldest            pgtype.Timestamptz
}

func (r *leaselessRow) ScanIndex(i int) any { return []any{&r.n, &r.sampled, &r.stuck, &r.oldest}[i] }

// ScanNull: an aggregate's row is never NULL.
func (r *leaselessRow) ScanNull() error { return nil }

// region: the count is exact (read from the index alone); how many are
// stuck and the oldest are read from the table for at most noneSample rows,
// and scaled up when there are more.
func (r leaselessRow) region() leaselessRows {
	g := leaselessRows{n: r.n, stuck: r.stuck, oldest: finite(r.oldest), counted: true}
	if r.n > r.sampled && r.sampled > 0 {
		g.stuck = int64(float64(r.stuck) * float64(r.n) / float64(r.sampled))
		g.sampled = true
	}
	return g
}

// pendingFigures are the PENDING counts of one poll.
type pendingFigures struct {
	pending, expired, expiredOld, stuck int64
	// oldest is when the longest-waiting PENDING row nothing frees began to
	// wait: its lease expired, or, without a lease, it last changed.
	oldest    *time.Time
	low       *int64 // lowest id of a live lease
	lowKnown  bool   // low covers every live lease (there are few)
	estimated bool
	ageS      float64
	freed     bool // the reaper's end of the index lost rows since its last count
	server    time.Time
	// noLease is the PENDING rows without a lease (known once counted).
	noLease      int64
	noLeaseKnown bool
	// covered is the share of the PENDING index's entries that the walks
	// have reached (1 once they cover it).
	covered float64
}

// absorb takes the results of q into the counter and returns the figures.
// It is pure: tests drive it without PostgreSQL.
func (p *pendingCounter) absorb(q *pendingQuery, now time.Time, countBudget time.Duration) pendingFigures {
	f := pendingFigures{server: q.server}
	if !q.server.IsZero() {
		p.skew = q.server.Sub(now)
	}
	if q.readCatalog {
		p.catalog, p.catalogAt = q.catalog, now
	}
	var firstKey *time.Time // the earliest lease expiry, when the first non-empty slice was recounted
	for i, k := range q.recount {
		if i >= len(q.counts) {
			break
		}
		s := &p.slices[k]
		if k == q.oldest && s.known && q.counts[i] < s.n {
			f.freed = true
		}
		s.n, s.at, s.known = q.counts[i], now, true
		s.expired(q.server)
		if i < len(q.mins) && q.mins[i] != nil {
			s.min = q.mins[i]
		}
	}
	if q.askForever {
		p.forever = q.forever
	}
	q.forever = p.forever
	if q.askLow {
		p.lowSkip = 0
		if q.lowN > lowCap {
			p.lowSkip = lowEvery
		}
	} else {
		p.lowSkip--
		q.lowN = lowCap + 1 // not read: unknown
	}
	// Figures from the slices as they stand before the walk re-cuts one:
	// the splits were counted against these slices. Of the walked slice,
	// the walk itself counted the entries below each cut; what it did not
	// reach is estimated.
	var below [3]int64
	partial := false
	// Every slice before the one holding a cut (q.cutSlice) lies wholly below
	// it: one pass sums them for the three cuts.
	top := max(q.cutSlice[0], q.cutSlice[1], q.cutSlice[2])
	var acc int64
	for i := 0; i <= top; i++ {
		for c, h := range q.cutSlice {
			if h == i {
				below[c] = acc
			}
		}
		if i != q.walkAt {
			acc += p.slices[i].n
		}
	}
	for c, cut := range q.cuts {
		h := q.cutSlice[c]
		if w := q.walkAt; w >= 0 && w < h {
			if p.slices[w].known {
				below[c] += p.slices[w].n // wholly below the cut: its last count serves
			} else {
				below[c] += q.below[c]
				partial = partial || q.walked > q.walk && q.below[c] == q.walked
			}
		}
		switch s := &p.slices[h]; {
		case s.lo != nil && !s.lo.Before(cut): // starts at the cut: nothing below it
		case h == q.walkAt:
			below[c] += q.below[c]
			partial = partial || q.walked > q.walk && q.below[c] == q.walked
		case q.cutSplit[c]:
			below[c] += q.splits[c]
		default:
			partial = true // a run of one key, or not counted: estimated
			below[c] += s.n
		}
	}
	if q.walkAt >= 0 {
		p.cut(q, now)
	} else {
		if !knockout.cuts {
			p.sliceAtCuts(q, now)
		}
	}
	p.merge(q.cuts[:])
	for i := range p.slices {
		if s := &p.slices[i]; s.n > 0 || !s.known {
			firstKey = s.min
			break
		}
	}
	switch {
	case q.none:
		freedNone := p.none.counted && q.leaseless.n < p.none.n
		p.none = q.leaseless
		p.none.at = now
		p.none.wait = int(q.leaseless.n / noneCap)
		switch {
		case q.capped && q.cap <= noneCap && q.leaseless.n >= q.cap:
			// A short look found many: at least this many, estimated; the
			// next poll looks twice as far (a heap fetch each, on pages
			// this session may never have read; the third poll's session
			// is a new one).
			p.none.sampled, p.none.wait = true, 0
			if p.look = 2 * q.cap; p.look >= noneCap {
				p.look = noneCap + 1
			}
		case q.capped && q.leaseless.n > noneCap:
			// More than the cap: at least this many, estimated, until the
			// ranges of the table have been read.
			p.ranged, p.none.sampled = true, true
		}
		f.freed = f.freed || freedNone
	case p.ranged:
		f.freed = f.freed || p.rangedFreed
	default:
		p.none.wait--
	}
	var keyed, known int64
	// oldest: when the oldest part of the counts was counted, a part never
	// counted at the zero time (the figures are estimated); aged: the same
	// of the parts counted, whose age the figures show (a part never
	// counted has none: its count is the catalog's).
	oldest, aged := now, now
	exact := true
	for i := range p.slices {
		s := &p.slices[i]
		keyed += s.n
		if s.known {
			known += s.n
		}
		exact = exact && s.known
		if s.at.Before(oldest) && !s.settled() { // settled: see plan
			oldest = s.at
		}
		if s.known && !s.at.IsZero() && s.at.Before(aged) && !s.settled() {
			aged = s.at
		}
	}
	// The live leases are those walked or recounted: the part not walked
	// yet, estimated below, is of unknown expiry, and counted as live it
	// made the lowest live lease look unknowable (askLow) on a large
	// leak's first pass, and UNUSED look from the start every few polls.
	walked := keyed
	f.covered = 1
	if !exact && q.catalog > 0 {
		f.covered = min(1, float64(known+q.forever)/float64(q.catalog))
	}
	if !exact && q.catalog > keyed+q.forever {
		// The part of the index not walked yet: as large as the catalog says
		// the index is, less what the walks found.
		for i := range p.slices {
			if !p.slices[i].known {
				p.slices[i].n = q.catalog - q.forever - (keyed - p.slices[i].n)
				keyed = q.catalog - q.forever
				break
			}
		}
	}
	if p.none.at.Before(oldest) {
		oldest = p.none.at
	}
	if !p.none.at.IsZero() && p.none.at.Before(aged) {
		aged = p.none.at
	}
	f.pending = keyed + q.forever + p.none.n
	f.noLease, f.noLeaseKnown = p.none.n, p.none.counted
	f.expired, f.expiredOld = below[0], below[1]
	f.stuck = below[2] + p.none.stuck
	f.oldest = p.none.oldest
	if m := firstKey; m != nil && m.Before(q.cuts[0]) && (f.oldest == nil || m.Before(*f.oldest)) {
		f.oldest = m
	}
	p.live = max(0, walked+q.forever-f.expired)
	f.low, f.lowKnown = q.low, q.lowN <= lowCap && q.lowN == p.live
	f.ageS = now.Sub(aged).Seconds()
	f.estimated = !exact || partial || oldest.Before(now) || p.none.sampled
	// Pace: recount more entries a poll while it is cheap. Walks have a
	// larger budget: they cover the index once at start (the first polls of
	// a large leak pay for it) and then only re-cut a slice that grew. Slices
	// never counted are counted under the walk's budget too.
	budget := millis(countBudget)
	discovering := !exact || uncounted(p.slices)
	rb := budget
	if discovering {
		rb = max(budget, discoveryBudgetMS)
	}
	p.per.adjust(q.rotMS, rb)
	// At most 4,096 entries a poll, 2,048 while discovering (when the walk
	// reads too), and the walk at most 16,384: an entry on a page the
	// workers just changed costs a heap fetch, many times an entry on an
	// all-visible page, and a pace grown on cheap entries would plan
	// thousands of such entries into one poll.
	p.per.n = min(p.per.n, 8*minPending)
	if discovering {
		p.per.n = min(p.per.n, 4*minPending)
	}
	if q.walkAt >= 0 {
		p.walked, p.walkMS = q.walked, q.walkMS
		if q.stopped {
			p.walk.n = max(p.walk.lo, q.walk) // what fitted
			p.walkStops++
		}
		p.walk.adjust(q.walkMS, walkBudgetMS)
		p.walk.n = min(p.walk.n, maxWalk)
	}
	return f
}

// takeRanged takes the count of the rows without a lease from the ranges
// of the table read so far (f from the leaseless census; whole: every
// range has been read). Once there are few again, the next poll counts
// them from the index.
func (p *pendingCounter) takeRanged(f pendingFigures, now time.Time, whole bool) {
	at := now.Add(-time.Duration(f.ageS * float64(time.Second)))
	p.none = leaselessRows{n: f.pending, stuck: f.stuck, oldest: f.oldest, at: at, counted: true, sampled: true}
	p.rangedFreed = f.freed
	if whole && f.pending <= noneCap/2 {
		p.ranged = false
	}
}

// backOff: the poll failed; the next one walks a quarter as far and
// recounts half as many entries in turn.
func (p *pendingCounter) backOff() {
	if p.per.n == 0 {
		return // never planned
	}
	p.walk.backOff(4)
	p.per.backOff(2)
}

// discoveryBudgetMS is the server time a poll may spend counting while the
// slices do not yet cover the index, and walkBudgetMS the time it may spend
// walking. They keep a poll of the start-up walk near the cost of any other
// (a walk that doubles from under 20 ms stays under 40, where it halves);
// a large leak then takes more polls to be counted exactly, its figures
// marked estimated until it is. Under load the walk's time, which counts
// its wait for a CPU, shrinks the walk.
const (
	discoveryBudgetMS = 2
	walkBudgetMS      = 3
)

// discovering: the walks have not covered the index yet.
func (p *pendingCounter) discovering() bool {
	for i := range p.slices {
		if !p.slices[i].known {
			return true
		}
	}
	return false
}

func uncounted(slices []pendingSlice) bool {
	for i := range slices {
		if slices[i].at.IsZero() {
			return true
		}
	}
	return false
}

// cut replaces the walked slice by the slices the walk found: [lo, b1),
// [b1, b2), …, and [bm, hi) when the walk got to hi; otherwise the rest,
// [bm, hi), is left to the next walk.
func (p *pendingCounter) cut(q *pendingQuery, now time.Time) {
	old := p.slices[q.walkAt]
	var out []pendingSlice
	lo, rank := old.lo, int64(1)
	for i, b := range q.bounds {
		b := b
		out = append(out, pendingSlice{lo: lo, hi: &b, n: q.ranks[i] - rank, at: now, known: true})
		lo, rank = &b, q.ranks[i]
	}
	switch {
	case q.walked <= q.walk: // the walk got to the slice's end
		out = append(out, pendingSlice{lo: lo, hi: old.hi, n: q.walked - rank + 1, at: now, known: true})
	case len(q.bounds) > 0:
		out = append(out, pendingSlice{lo: lo, hi: old.hi, at: now}) // walked again from the last bound
	case q.first != nil:
		// One key's run fills the whole walk: it becomes a slice of its own,
		// [key, key + 1µs), counted at the next poll, and the rest is walked.
		key := *q.first
		next := key.Add(time.Microsecond)
		if lo == nil || lo.Before(key) {
			out = append(out, pendingSlice{lo: lo, hi: &key, at: now, known: true}) // empty
		}
		out = append(out, pendingSlice{lo: &key, hi: &next, n: q.walk, known: true}, pendingSlice{lo: &next, hi: old.hi, at: now})
	default:
		out = append(out, old)
	}
	if len(out) > 0 && q.first != nil {
		out[0].min = q.first // the walk's first key is the first new slice's earliest
	}
	// A new slice still too wide starts with a run of one key longer than a
	// slice (many leases set by one statement share their expiry): cut the
	// run off as a slice of its own, or every poll would walk it again.
	var split []pendingSlice
	for i, sl := range out {
		key := sl.lo
		if key == nil && i == 0 {
			key = q.first
		}
		if !sl.known || sl.n <= 2*sliceWidth || sl.run() || key == nil {
			split = append(split, sl)
			continue
		}
		k := *key
		next := k.Add(time.Microsecond)
		if sl.lo == nil {
			split = append(split, pendingSlice{hi: &k, at: now, known: true}) // nothing lies below the first key
		}
		split = append(split, pendingSlice{lo: &k, hi: &next, n: sl.n, min: &k, known: true}, pendingSlice{lo: &next, hi: sl.hi, known: true})
	}
	out = split
	for i := range out {
		if out[i].known && out[i].at.Equal(now) {
			out[i].expired(q.server)
		}
	}
	p.slices = slices.Replace(p.slices, q.walkAt, q.walkAt+1, out...)
}

// sliceAtCuts cuts each slice that holds one of this poll's cuts (now, now
// minus the reaper interval, now minus the stuck threshold) at the cut,
// from the splits the poll counted: the pieces below are exact now, and the
// piece above keeps the age of the slice's last count. The next poll's cut
// then falls in a slice that begins at this poll's cut, and its split reads
// the entries of one interval between polls instead of all those of the
// slice. A slice is cut by the live entries it holds, but its count reads
// the dead ones too: around now, where every claim leaves an entry that
// dies when the id is consumed, a slice with a few live leases can hold
// tens of thousands of dead ones.
func (p *pendingCounter) sliceAtCuts(q *pendingQuery, now time.Time) {
	type split struct {
		at    time.Time
		below int64 // entries from the slice's start to at
	}
	splits := map[int][]split{}
	for c, i := range q.cutSlice {
		if i >= 0 && q.cutSplit[c] {
			splits[i] = append(splits[i], split{q.cuts[c], q.splits[c]})
		}
	}
	at := slices.Sorted(maps.Keys(splits))
	for _, i := range slices.Backward(at) { // from the last: a cut slice's pieces shift those after it
		ss := splits[i]
		sort.Slice(ss, func(a, b int) bool { return ss[a].at.Before(ss[b].at) })
		s := p.slices[i]
		var pieces []pendingSlice
		lo, counted := s.lo, int64(0)
		for _, sp := range ss {
			t := sp.at
			if lo != nil && !t.After(*lo) || s.hi != nil && !t.Before(*s.hi) {
				continue // no piece below it
			}
			piece := pendingSlice{lo: lo, hi: &t, n: max(sp.below-counted, 0), at: now, known: true}
			piece.expired(q.server)
			if piece.n > 0 {
				piece.min = lo
				if s.min != nil && (lo == nil || !s.min.Before(*lo)) && s.min.Before(t) {
					piece.min = s.min
				}
			}
			pieces = append(pieces, piece)
			lo, counted = &t, max(sp.below, counted)
		}
		if len(pieces) == 0 {
			continue
		}
		upper := pendingSlice{lo: lo, hi: s.hi, n: max(s.n-counted, 0), at: s.at, known: true, min: lo, past: s.past}
		if s.min != nil && !s.min.Before(*lo) {
			upper.min = s.min
		}
		p.slices = slices.Replace(p.slices, i, i+1, append(pieces, upper)...) // in place: no copy of thousands of slices
	}
}

// merge joins neighbouring counted slices that have shrunk (the reaper
// empties them from the oldest, commits from the newest), so that their
// number stays near PENDING / sliceWidth; but never across a bound at one
// of keep, the cuts this poll sliced at (see sliceAtCuts), and never a
// settled slice with one that is not.
func (p *pendingCounter) merge(keep []time.Time) {
	if len(p.slices) < 2 {
		return
	}
	kept := func(t *time.Time) bool {
		for _, k := range keep {
			if t != nil && t.Equal(k) {
				return true
			}
		}
		return false
	}
	out := 1 // p.slices[:out] are the slices joined so far, in place
	for i := 1; i < len(p.slices); i++ {
		s := &p.slices[i]
		last := &p.slices[out-1]
		// A settled slice joins only settled ones: joined to the reaper's end,
		// it would be read again at every poll.
		settled := last.settled()
		if last.known && s.known && last.n+s.n <= sliceWidth/2 && !kept(s.lo) && settled == s.settled() {
			if last.n == 0 || last.min == nil {
				last.min = s.min
			}
			last.hi, last.n = s.hi, last.n+s.n
			if s.at.Before(last.at) {
				last.at = s.at // a settled join is recounted when its older part is due
			}
			last.past = settled
			continue
		}
		if out != i {
			p.slices[out] = *s
		}
		out++
	}
	clear(p.slices[out:])
	p.slices = p.slices[:out]
}
