package collector

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// idModel is the pool as the UNUSED statement sees it: every id and
// whether it is UNUSED.
type idModel struct {
	unused map[int64]bool
	top    int64
}

func (m *idModel) truth() int64 { return m.count(1, m.top+1) }

// newIDModel is a pool of ids 1..top, two in three UNUSED, and a counter
// that has seen its id range.
func newIDModel(top int64) (*idModel, *unusedCounter) {
	m := &idModel{unused: map[int64]bool{}, top: top}
	for id := int64(1); id <= top; id++ {
		m.unused[id] = id%3 != 0
	}
	u := &unusedCounter{width: minChunk, top: top / minChunk}
	return m, u
}

// count is the UNUSED ids in [lo, hi).
func (m *idModel) count(lo, hi int64) int64 {
	var n int64
	for id := max(lo, 1); id < hi && id <= m.top; id++ {
		if m.unused[id] {
			n++
		}
	}
	return n
}

// answer fills q's results as sqlUnused and sqlSweep would.
func (m *idModel) answer(q *unusedQuery, w int64) {
	q.got, q.swept, q.fronted = map[int64]int64{}, map[int64]int64{}, map[int64]int64{}
	top := m.top
	q.top = &top
	var head int64
	for id := max(q.floor, 1); id <= top; id++ {
		if m.unused[id] {
			head = id
			break
		}
	}
	if head == 0 {
		return
	}
	q.head = &head
	if w == 0 {
		return
	}
	hc := head / w
	q.got[hc] = m.count(head, (hc+1)*w)
	for k := q.lo; k < q.hi; k++ { // whole chunks, wherever the head is now
		q.swept[k] = m.count(k*w, (k+1)*w)
	}
	for k := q.lookFrom(hc); k <= hc+q.look; k++ {
		q.got[k] = m.count(k*w, (k+1)*w)
	}
	for k := q.flo; k < q.fhi; k++ {
		q.fronted[k] = m.count(k*w, (k+1)*w)
	}
	if q.tail >= 0 && top > q.above {
		for k := max(q.tail, hc+1); k <= min(top/w, q.tail+maxSweep); k++ {
			q.got[k] = m.count(max(k*w, head), (k+1)*w)
		}
	}
	q.el = time.Duration(len(q.got)+len(q.swept)) * 50 * time.Microsecond // what PostgreSQL would take, for the pace
}

// The UNUSED counter on a model pool: after one sweep the count is exact,
// and it stays exact at every poll while claims take ids at the head and a
// producer adds ids at the top; the deltas the burn is made of add up to
// the true change; ids returned elsewhere are found by the sweep.
func TestUnusedCounterOnAModelPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	m, u := newIDModel(60_000)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	budget := time.Millisecond
	poll := func() unusedFigures {
		q := u.plan(now)
		m.answer(q, u.width)
		f := u.absorb(q, now, budget, 0)
		u.lowerFloor(nil, true, false)
		now = now.Add(time.Second)
		return f
	}
	for i := 0; i < 10; i++ { // the sweep doubles its chunks while cheap: 8, 16, 32, 64 cover the range
		poll()
	}
	if f := poll(); f.unused != m.truth() {
		t.Fatalf("after a sweep: %d, truth %d", f.unused, m.truth())
	}
	var sum int64
	before := m.truth()
	next := int64(1) // claims take the lowest UNUSED ids, in order
	for step := 0; step < 200; step++ {
		// Claims at the head…
		for n := 0; next <= m.top && n < 300; next++ {
			if m.unused[next] {
				m.unused[next], n = false, n+1
			}
		}
		// …and a producer at the top.
		add := rng.IntN(700)
		for i := 0; i < add; i++ {
			m.top++
			m.unused[m.top] = true
		}
		f := poll()
		if f.unused != m.truth() {
			t.Fatalf("step %d: %d, truth %d", step, f.unused, m.truth())
		}
		if !f.haveDelta {
			t.Fatalf("step %d: no delta", step)
		}
		sum += f.delta
	}
	if sum != m.truth()-before {
		t.Fatalf("the deltas add up to %d, the pool changed by %d", sum, m.truth()-before)
	}
	// A head faster than a chunk a poll, under a producer that keeps up:
	// every poll's change is the true one, so the burn reads about zero and
	// not a pool that grows (the chunks the head crosses between two polls
	// must have been counted before), also while the first sweep, which
	// starts at the top, has not reached the head yet.
	// On a busy server the sweep slows to a chunk a poll.
	*u = unusedCounter{}
	u.width, u.top = minChunk, m.top/minChunk
	u.head = next / minChunk
	budget = time.Microsecond
	for step := 0; step < 60; step++ {
		was := m.truth()
		for n := 0; next <= m.top && n < 2500; next++ {
			if m.unused[next] {
				m.unused[next], n = false, n+1
			}
		}
		for i := 0; i < 2500+step%7; i++ {
			m.top++
			m.unused[m.top] = true
		}
		f := poll()
		if step > 1 && f.delta != m.truth()-was {
			t.Fatalf("fast head, step %d: delta %d, true change %d", step, f.delta, m.truth()-was)
		}
	}
	budget = time.Millisecond
	// Ids returned to the pool far above the head: found by the sweep.
	for id := m.top - 5000; id < m.top-4000; id++ {
		m.unused[id] = true
	}
	found := false
	for i := 0; i < 200 && !found; i++ {
		found = poll().unused == m.truth()
	}
	if !found {
		t.Fatal("ids returned above the head were never counted")
	}
}

// The lock statement is chosen by version: pg_locks.waitstart exists
// from PostgreSQL 14 on.
func TestLocksQueryByVersion(t *testing.T) {
	for v, want := range map[int]string{120000: "NULL::timestamptz AS waitstart", 130011: "NULL::timestamptz AS waitstart", 140000: "waitstart AS waitstart", 150018: "waitstart AS waitstart"} {
		if q := locksQuery(v); !strings.Contains(q, want) || strings.Contains(q, "%s") {
			t.Errorf("version %d: want %q in the statement", v, want)
		}
	}
}

// Ids added far above the top (a refill from another id range, 10^12) do
// not make the counter hold a chunk for every 1,024 ids up to there: it
// cuts the range again, and its next polls count it afresh.
func TestUnusedCounterRecutsARangeThatOutgrewItsChunks(t *testing.T) {
	var u unusedCounter
	u.width, u.head, u.top = minChunk, 0, 50
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(head, top int64, got map[int64]int64) unusedFigures {
		q := u.plan(now)
		q.head, q.top, q.got = &head, &top, got
		now = now.Add(time.Second)
		return u.absorb(q, now, time.Millisecond, 0)
	}
	got := map[int64]int64{}
	for k := int64(0); k <= 50; k++ {
		got[k] = 1000
	}
	if f := at(1, 51*minChunk, got); f.unused != 51*1000 {
		t.Fatalf("before the refill: %d, want %d", f.unused, 51*1000)
	}
	const far = int64(1_000_000_000_000)
	f := at(1, far, map[int64]int64{0: 1000, far / minChunk: 5})
	if u.width < (far-1)/maxChunks {
		t.Fatalf("chunks of %d ids for a range of %d: not cut again", u.width, far)
	}
	if len(u.counts.n) > 4*maxChunks {
		t.Fatalf("%d chunks held", len(u.counts.n))
	}
	if !f.estimated || f.haveDelta {
		t.Fatalf("the poll that cut the range again: estimated %v, delta %v; want an estimate and no delta", f.estimated, f.haveDelta)
	}
}

// The sweep's pace doubles while polls are cheap, halves at a slow one, and
// then grows by one chunk a cheap poll: on a busy server, where every other
// poll is cheap by luck, it stays low instead of doubling back each time.
func TestUnusedSweepPaceBacksOffUnderLoad(t *testing.T) {
	var u unusedCounter
	u.width, u.head, u.top = minChunk, 0, 5000
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	poll := func(el time.Duration) int64 {
		q := u.plan(now)
		head, top := int64(1), int64(5000*minChunk)
		q.head, q.top, q.got, q.el = &head, &top, map[int64]int64{}, el
		u.absorb(q, now, time.Millisecond, 0)
		now = now.Add(time.Second)
		return u.per.n
	}
	for _, want := range []int64{16, 32, 64} {
		if got := poll(100 * time.Microsecond); got != want {
			t.Fatalf("cheap polls: pace %d, want %d", got, want)
		}
	}
	if got := poll(5 * time.Millisecond); got != 32 {
		t.Fatalf("a slow poll: pace %d, want 32", got)
	}
	// Under load: every other poll is cheap.
	for i := 0; i < 30; i++ {
		el := 5 * time.Millisecond
		if i%2 == 0 {
			el = 100 * time.Microsecond
		}
		poll(el)
	}
	if u.per.n > 2 {
		t.Fatalf("every other poll cheap: pace %d chunks, want at most 2", u.per.n)
	}
	for i := 0; i < 10; i++ {
		poll(100 * time.Microsecond)
	}
	if u.per.n < 10 || u.per.n > 12 {
		t.Fatalf("ten cheap polls after the load: pace %d, want one more chunk a poll", u.per.n)
	}
}

// Each poll counts, ahead of the head, only the chunks no earlier
// lookahead counted, and the chunks at the top only when the top moved:
// on a partitioned pool every chunk counted is a descent of every
// partition's index. The counts stay exact, and the deltas add up.
func TestUnusedCountsOnlyWhatChanged(t *testing.T) {
	m, u := newIDModel(200_000)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	next := int64(1)
	var sum int64
	before := m.truth()
	for step := 0; step < 120; step++ {
		if step >= 20 { // claims at the head: about a chunk a poll
			for n := 0; next <= m.top && n < 650; next++ {
				if m.unused[next] {
					m.unused[next], n = false, n+1
				}
			}
		}
		if step == 80 { // a refill at the top
			for i := 0; i < 3000; i++ {
				m.top++
				m.unused[m.top] = true
			}
		}
		q := u.plan(now)
		m.answer(q, u.width)
		budget := time.Millisecond // the first sweep, cheap …
		if step >= 20 {
			budget = time.Microsecond // … then a busy server: a chunk a poll
		}
		f := u.absorb(q, now, budget, 0)
		u.lowerFloor(nil, true, false)
		now = now.Add(time.Second)
		if step < 30 {
			before, sum = m.truth(), 0
			continue
		}
		sum += f.delta
		if f.unused != m.truth() {
			t.Fatalf("step %d: %d, truth %d", step, f.unused, m.truth())
		}
		hc := *q.head / u.width
		sweep := max(q.hi-max(q.lo, hc+1), 0)
		ahead := hc + q.look - q.lookFrom(hc) + 1
		extra := int64(len(q.got)) - 1 - sweep // beyond the head's chunk and the sweep
		if step != 80 && (ahead > 2 || extra > 2) {
			t.Fatalf("step %d: %d chunks counted ahead, %d beyond the head and the sweep; want at most 2 (the head moves a chunk a poll)", step, ahead, extra)
		}
	}
	if sum != m.truth()-before {
		t.Fatalf("the deltas add up to %d, the pool changed by %d", sum, m.truth()-before)
	}
}

// Starvation: a report holds the lowest free ids, so the lowest UNUSED id
// stays put while claims move on above it, faster than a chunk a poll,
// under a producer that keeps up, on a busy server (the sweep a chunk a
// poll). Told where claims take their ids (setFront, from passOver), the
// counter counts ahead of them as it does ahead of the head: every
// poll's change is the true one, and the burn reads about zero, not a pool
// that grows.
func TestUnusedCounterFollowsClaimsPastStarvedIds(t *testing.T) {
	for _, told := range []bool{true, false} {
		m, u := newIDModel(200_000)
		held := map[int64]bool{}
		for id := int64(1); len(held) < 20; id++ {
			if m.unused[id] {
				held[id] = true
			}
		}
		now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
		next := int64(1)
		wrong := 0
		for step := 0; step < 60; step++ {
			was := m.truth()
			for n := 0; next <= m.top && n < 2500; next++ {
				if m.unused[next] && !held[next] {
					m.unused[next], n = false, n+1
				}
			}
			for i := 0; i < 2500; i++ {
				m.top++
				m.unused[m.top] = true
			}
			q := u.plan(now)
			m.answer(q, u.width)
			f := u.absorb(q, now, time.Microsecond, 0)
			u.lowerFloor(nil, true, false)
			if told { // as the collector does after each poll
				front := next
				for !m.unused[front] {
					front++
				}
				u.setFront(front, true)
			}
			now = now.Add(time.Second)
			// The first polls learn how fast the claims move (as the head's
			// lookahead does).
			if step > 2 && f.delta != m.truth()-was {
				wrong++
				if told {
					t.Fatalf("step %d: delta %d, true change %d", step, f.delta, m.truth()-was)
				}
			}
		}
		if !told && wrong == 0 {
			t.Fatal("untold, the counter followed the claims all the same: the test shows nothing")
		}
	}
}

// A poll of a seek before any floor sends the seek alone: it plans no
// chunk of the sweep nor ahead of the claims (absorb would take a planned
// chunk without a count for an empty one) and leaves the sweep's cursor
// where it was.
func TestASeekBeforeAnyFloorSweepsNothing(t *testing.T) {
	_, u := newIDModel(60_000)
	u.seeks, u.seek, u.cursor = true, &seekState{from: 5000}, 40
	u.front, u.frontOK, u.frontMoved = 20, true, 1
	q := u.plan(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	if !q.seek || !q.seekOnly || q.seekFrom != 5000 {
		t.Fatalf("seek %v, before any floor %v, from %d: want a seek from 5000 before any floor", q.seek, q.seekOnly, q.seekFrom)
	}
	if q.lo != q.hi || q.flo != q.fhi || u.cursor != 40 {
		t.Fatalf("sweep [%d, %d), ahead [%d, %d), cursor %d: want none planned and the cursor at 40", q.lo, q.hi, q.flo, q.fhi, u.cursor)
	}
	// With a floor, the sweep goes on beside the seek.
	u.headID, u.headKnown = 3000, true
	q = u.plan(time.Date(2026, 12, 4, 12, 0, 1, 0, time.UTC))
	if q.seekOnly || q.floor != 3000 || q.seekTo != 3000 || q.lo >= q.hi {
		t.Fatalf("with a floor: before any floor %v, floor %d, seek to %d, sweep [%d, %d)", q.seekOnly, q.floor, q.seekTo, q.lo, q.hi)
	}
}

// While the live leases are too many to know the lowest, each poll looks
// for the lowest UNUSED id from the last one's, never from the start of
// the index (which walks every entry claims left dead there) until the
// reanchor: an id a holder releases below the head is found by that look,
// within 30 s, and counted from then on (on a pool where claims stop: in
// id order they would take it again at once).
func TestUnknownLiveLeasesLookFromTheStartAtTheReanchorOnly(t *testing.T) {
	m, u := newIDModel(60_000)
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	next := int64(1)
	fromStart := 0
	claims := true
	poll := func() unusedFigures {
		for n := 0; claims && next <= m.top && n < 200; next++ { // claims at the head
			if m.unused[next] {
				m.unused[next], n = false, n+1
			}
		}
		q := u.plan(now)
		if q.floor == math.MinInt64 {
			fromStart++
		}
		m.answer(q, u.width)
		f := u.absorb(q, now, time.Millisecond, 0)
		u.lowerFloor(nil, false, false) // the lowest live lease: unknown
		now = now.Add(time.Second)
		return f
	}
	for range 10 {
		poll()
	}
	fromStart = 0
	released := next - 500 // a claimed id below the head, released by its holder
	m.unused[released] = true
	claims = false // they would take it again at once: it is the lowest
	found, lookAt := 0, 0
	for i := range 60 {
		looks := fromStart
		f := poll()
		if lookAt == 0 && fromStart > looks {
			lookAt = i + 1
		}
		if found == 0 && f.unused == m.truth() {
			found = i + 1
		}
		if found > 0 && f.unused != m.truth() {
			t.Fatalf("poll %d after the release: unused %d, truth %d", i+1, f.unused, m.truth())
		}
	}
	// The poll that looks from the start finds the released id; the chunks
	// from it up to the old head are counted at the next.
	if lookAt == 0 || lookAt > 30 || found < lookAt || found > lookAt+1 {
		t.Fatalf("released id counted %d polls after its release, the first look from the start at %d: the reanchor finds it within 30 s", found, lookAt)
	}
	if fromStart != 2 {
		t.Fatalf("%d looks from the start of the index in 60 s: the floor is the last poll's head but every reanchor (30 s)", fromStart)
	}
}
