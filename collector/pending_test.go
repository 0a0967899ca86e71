package collector

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"
)

// model is a PENDING index in memory: what the counter's statements would
// read from PostgreSQL, so that the planner and absorb are tested over
// thousands of polls without a server.
type model struct {
	keys []time.Time // lease expiries, sorted; farFuture stands for infinity, the zero time for -infinity
	none []time.Time // updated_at of the rows without a lease
	// stopAt: the walk's deadline falls once it has read this many
	// entries (0: never)
	stopAt int
}

func (m *model) sort() {
	sort.Slice(m.keys, func(i, j int) bool { return m.keys[i].Before(m.keys[j]) })
}

// in reports whether k lies in [lo, hi) as the SQL bounds say (hi nil is
// infinity, exclusive: leases at infinity are counted apart).
func in(k time.Time, lo, hi *time.Time) bool {
	if k.Equal(farFuture) {
		return false
	}
	return (lo == nil || !k.Before(*lo)) && (hi == nil || k.Before(*hi))
}

// count is the number of keys in [lo, hi), by binary search.
func (m *model) count(lo, hi *time.Time) int64 {
	i := 0
	if lo != nil {
		i = sort.Search(len(m.keys), func(k int) bool { return !m.keys[k].Before(*lo) })
	}
	j := sort.Search(len(m.keys), func(k int) bool { return !m.keys[k].Before(farFuture) })
	if hi != nil {
		j = min(j, sort.Search(len(m.keys), func(k int) bool { return !m.keys[k].Before(*hi) }))
	}
	return int64(max(0, j-i))
}

// answer fills q's results as the two statements would, and charges the
// server time PostgreSQL would take (0.2 µs an index entry) for the pace.
func (m *model) answer(q *pendingQuery, slices []pendingSlice, now time.Time) {
	m.answerCounts(q, slices, now)
	entries := q.walked
	for _, n := range q.counts {
		entries += n
	}
	q.rotMS = float64(entries) * 0.0002
}

func (m *model) answerCounts(q *pendingQuery, slices []pendingSlice, now time.Time) {
	q.server = now
	q.catalog = int64(len(m.keys))
	if q.walkAt >= 0 {
		s := slices[q.walkAt]
		var w []time.Time
		for _, k := range m.keys {
			if int64(len(w)) > q.walk {
				break
			}
			if in(k, s.lo, s.hi) {
				w = append(w, k)
			}
		}
		// The walk reads chunks of sliceWidth and stops, past minPending
		// entries, at its deadline (here once it has read stopAt), or past
		// walkRun entries of one key.
		got, stopped := 0, false
		for got < len(w) {
			n := min(sliceWidth, len(w)-got)
			got += n
			if n < sliceWidth || int64(got) > q.walk {
				break
			}
			ties := 0
			for i := got - 1; i >= 0 && w[i].Equal(w[got-1]); i-- {
				ties++
			}
			if ties > walkRun || got > minPending && m.stopAt > 0 && got >= m.stopAt {
				stopped = true
				break
			}
		}
		w = w[:got]
		q.walked = int64(len(w))
		if stopped {
			q.stop()
		}
		if len(w) > 0 {
			f := w[0]
			q.first = &f
		}
		for c, cut := range q.cuts {
			for _, k := range w {
				if k.Before(cut) {
					q.below[c]++
				}
			}
		}
		for rn := sliceWidth + 1; rn <= len(w); rn += sliceWidth {
			k := w[rn-1]
			r := sort.Search(len(w), func(i int) bool { return !w[i].Before(k) }) + 1
			if r > 1 && (len(q.bounds) == 0 || !q.bounds[len(q.bounds)-1].Equal(k)) {
				q.bounds, q.ranks = append(q.bounds, k), append(q.ranks, int64(r))
			}
		}
	}
	for _, i := range q.recount {
		n := m.count(slices[i].lo, slices[i].hi)
		q.counts = append(q.counts, n)
		var first *time.Time
		if n > 0 {
			lo := slices[i].lo
			j := 0
			if lo != nil {
				j = sort.Search(len(m.keys), func(k int) bool { return !m.keys[k].Before(*lo) })
			}
			k := m.keys[j]
			first = &k
		}
		q.mins = append(q.mins, first)
	}
	for c, i := range q.cutSlice {
		if q.cutSplit[c] {
			cut := q.cuts[c]
			q.splits[c] = m.count(slices[i].lo, &cut)
		}
	}
	forever := int64(len(m.keys)) - m.count(nil, nil)
	if q.askForever {
		q.forever = forever
	}
	cut := q.cuts[0]
	if q.askLow {
		q.lowN = min(m.count(&cut, nil)+forever, lowCap+1)
	}
	if q.none {
		q.leaseless = leaselessRows{n: int64(len(m.none)), counted: true}
		sample := m.none[:min(len(m.none), noneSample)]
		var stuck int64
		for _, u := range sample {
			if u.Before(q.cuts[2]) {
				stuck++
			}
			if q.leaseless.oldest == nil || u.Before(*q.leaseless.oldest) {
				u := u
				q.leaseless.oldest = &u
			}
		}
		q.leaseless.stuck = stuck
		if len(sample) < len(m.none) {
			q.leaseless.stuck, q.leaseless.sampled = int64(float64(stuck)*float64(len(m.none))/float64(len(sample))), true
		}
	}
}

type pendingTruth struct{ pending, expired, expiredOld, stuck int64 }

func (m *model) truth(now time.Time, expiredAfter, stuckAfter time.Duration) pendingTruth {
	t := pendingTruth{pending: int64(len(m.keys) + len(m.none))}
	for _, k := range m.keys {
		if k.Before(now) {
			t.expired++
		}
		if k.Before(now.Add(-expiredAfter)) {
			t.expiredOld++
		}
		if k.Before(now.Add(-stuckAfter)) {
			t.stuck++
		}
	}
	for _, u := range m.none {
		if u.Before(now.Add(-stuckAfter)) {
			t.stuck++
		}
	}
	return t
}

func figures(f pendingFigures) pendingTruth {
	return pendingTruth{f.pending, f.expired, f.expiredOld, f.stuck}
}

// The counter on a model pool: a large leak of expired leases (each its own
// expiry, plus runs of one key that bulk updates leave, and leases at
// ±infinity), rows without a lease, and a workload that claims new leases,
// commits the newest and has the reaper free the oldest, while the clock
// runs. The figures converge within a few polls and, with changes only
// where the counter looks at every poll, stay exact at every poll.
func TestPendingCounterOnAModelPool(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const expiredAfter, stuckAfter = time.Second, 5 * time.Minute
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m := &model{}
	for i := 0; i < 40_000; i++ { // leaked leases, expired from 2 hours to a minute ago
		m.keys = append(m.keys, now.Add(-time.Minute-time.Duration(rng.Int64N(int64(2*time.Hour)))))
	}
	run := now.Add(-30 * time.Minute)
	for i := 0; i < 3*sliceWidth; i++ { // a bulk update: one key for many rows
		m.keys = append(m.keys, run)
	}
	for i := 0; i < 3000; i++ { // live leases
		m.keys = append(m.keys, now.Add(time.Duration(rng.Int64N(int64(time.Minute)))))
	}
	m.keys = append(m.keys, time.Time{}, farFuture, farFuture)
	for i := 0; i < noneSample-10; i++ { // read whole at every poll; more are sampled (see below)
		m.none = append(m.none, now.Add(-time.Duration(rng.Int64N(int64(time.Hour)))))
	}
	m.sort()

	var p pendingCounter
	var lastQ *pendingQuery
	poll := func() pendingFigures {
		q := p.plan(now, expiredAfter, stuckAfter)
		lastQ = q
		m.answer(q, p.slices, now)
		return p.absorb(q, now, time.Millisecond)
	}
	converged := -1
	for i := 0; i < 40 && converged < 0; i++ {
		f := poll()
		if figures(f) == m.truth(now, expiredAfter, stuckAfter) {
			converged = i + 1
		}
		now = now.Add(time.Second)
	}
	if converged < 0 || converged > 5 {
		t.Fatalf("figures exact after %d polls, want within 5 (slices %d)", converged, len(p.slices))
	}
	for step := 0; step < 300; step++ {
		now = now.Add(time.Second)
		// Claims: new leases a minute out (past every key but infinity).
		for i := 0; i < 20; i++ {
			m.keys = append(m.keys, now.Add(time.Minute+time.Duration(rng.Int64N(int64(time.Second)))))
		}
		m.sort()
		// Commits of the newest leases; the reaper frees the oldest.
		last := p.slices[len(p.slices)-1]
		for i := 0; i < 10; i++ {
			j := len(m.keys) - 3 - rng.IntN(5)
			if in(m.keys[j], last.lo, last.hi) {
				m.keys = append(m.keys[:j], m.keys[j+1:]...)
			}
		}
		first := p.slices[0]
		for i := 0; i < 15; i++ {
			if in(m.keys[0], first.lo, first.hi) || m.keys[0].IsZero() {
				m.keys = m.keys[1:]
			}
		}
		f := poll()
		if got, want := figures(f), m.truth(now, expiredAfter, stuckAfter); got != want {
			for i, s := range p.slices {
				t.Logf("slice %d [%v, %v) n %d (model %d) known %v at %v", i, s.lo, s.hi, s.n, m.count(s.lo, s.hi), s.known, now.Sub(s.at))
			}
			t.Logf("last plan: %+v", lastQ)
			t.Fatalf("step %d: figures %+v, truth %+v (slices %d)", step, got, want, len(p.slices))
		}
	}
	// A change nowhere near the hot slices (an on-call engineer releasing a
	// holder's leases) is found by the rotation.
	m.keys = append(m.keys[:20_000], m.keys[20_500:]...)
	converged = -1
	for i := 0; i < 200 && converged < 0; i++ {
		now = now.Add(time.Second)
		if figures(poll()) == m.truth(now, expiredAfter, stuckAfter) {
			converged = i + 1
		}
	}
	if converged < 0 {
		t.Fatal("a change in the middle of the index was never found")
	}
	t.Logf("a change in the middle found after %d polls; %d slices", converged, len(p.slices))

	// More rows without a lease than are read for their age: stuck is
	// scaled from the sample and marked estimated.
	for i := 0; i < 3*noneSample; i++ {
		m.none = append(m.none, now.Add(-time.Hour))
	}
	if f := poll(); !f.estimated || f.pending != m.truth(now, expiredAfter, stuckAfter).pending {
		t.Fatalf("with %d rows without a lease: %+v", len(m.none), f)
	}
}

// The slice that holds now is cut at now, so that the next poll's split of
// it (the count of the expired leases in it) reads from the previous poll's
// cut (or later): the entries of one interval between polls, not all those of a slice
// with few live leases and, on a real server, many dead entries since the
// last vacuum. The figures stay exact.
func TestPendingSplitStartsAtThePreviousCut(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const expiredAfter, stuckAfter = time.Second, 5 * time.Minute
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m := &model{}
	for i := 0; i < 5000; i++ { // leases around now, from 10 minutes ago to 10 minutes on
		m.keys = append(m.keys, now.Add(time.Duration(rng.Int64N(int64(20*time.Minute)))-10*time.Minute))
	}
	m.sort()
	var p pendingCounter
	var prev *time.Time
	checked := 0
	for i := 0; i < 120; i++ {
		q := p.plan(now, expiredAfter, stuckAfter)
		m.answer(q, p.slices, now)
		if i >= 10 && q.walkAt < 0 && q.cutSplit[0] && prev != nil {
			s := p.slices[q.cutSlice[0]]
			if s.lo == nil || s.lo.Before(*prev) {
				t.Fatalf("poll %d: the slice holding now starts at %v, before the previous cut %v", i, s.lo, *prev)
			}
			checked++
		}
		f := p.absorb(q, now, time.Millisecond)
		if i >= 10 {
			if got, want := figures(f), m.truth(now, expiredAfter, stuckAfter); got != want {
				t.Fatalf("poll %d: figures %+v, truth %+v", i, got, want)
			}
		}
		c := q.cuts[0]
		prev = &c
		now = now.Add(time.Second)
	}
	if checked < 100 {
		t.Fatalf("the split was checked at %d polls, want 100 or more", checked)
	}
	if len(p.slices) > 3*5000/sliceWidth+10 {
		t.Fatalf("%d slices for 5,000 leases: the cuts' bounds are not merged away", len(p.slices))
	}
}

// A run of one key larger than the rotation's pace (the ordered pool's
// 10,000 leases set by one statement) is recounted when its turn has been
// saved for, not at every poll: the polls between count the other slices
// only. The figures stay exact, and the run is still recounted.
func TestPendingRotationPacesALongRun(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	const expiredAfter, stuckAfter = time.Second, 5 * time.Minute
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	run := now.Add(time.Hour)
	m := &model{}
	for i := 0; i < 10_000; i++ {
		m.keys = append(m.keys, run)
	}
	for i := 0; i < 300; i++ { // a few leases around now
		m.keys = append(m.keys, now.Add(time.Duration(rng.Int64N(int64(2*time.Minute)))-time.Minute))
	}
	m.sort()
	var p pendingCounter
	withRun, polls := 0, 0
	for i := 0; i < 200; i++ {
		q := p.plan(now, expiredAfter, stuckAfter)
		m.answer(q, p.slices, now)
		counted := false
		for _, k := range q.recount {
			if s := p.slices[k]; s.lo != nil && s.lo.Equal(run) {
				counted = true
			}
		}
		f := p.absorb(q, now, time.Millisecond)
		if i >= 20 {
			polls++
			if counted {
				withRun++
			}
			if got, want := figures(f), m.truth(now, expiredAfter, stuckAfter); got != want {
				t.Fatalf("poll %d: figures %+v, truth %+v", i, got, want)
			}
		}
		now = now.Add(time.Second)
	}
	if withRun == 0 || withRun > polls/2 {
		t.Fatalf("the run of 10,000 was recounted at %d of %d polls, want at least one and at most half", withRun, polls)
	}
	t.Logf("the run was recounted at %d of %d polls", withRun, polls)
}

// On a healthy pool (no expired lease; claims land a lease ahead and are
// consumed within seconds) the slices below now are empty, and on a server
// they hold the dead index entries of every claim consumed since the last
// vacuum: the counter recounts them every 30 s, not at every poll. The
// figures stay exact, and a lease written by hand with a past expiry into
// such a slice is seen within 30 s and a few polls.
func TestPendingSkipsTheSettledPast(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const expiredAfter, stuckAfter = time.Second, 5 * time.Minute
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m := &model{}
	for i := 0; i < 2000; i++ { // long leases, an hour ahead
		m.keys = append(m.keys, now.Add(time.Hour+time.Duration(i)*time.Millisecond))
	}
	m.sort()
	var p pendingCounter
	settledRecounts, polls := 0, 0
	var byHand time.Time
	for i := 0; i < 200; i++ {
		// claims: 50 leases 30 s ahead, and those taken 2 s ago consumed
		var keep []time.Time
		for _, k := range m.keys {
			if k.After(now.Add(28*time.Second)) || k.Equal(byHand) {
				keep = append(keep, k)
			}
		}
		m.keys = keep
		for j := 0; j < 50; j++ {
			m.keys = append(m.keys, now.Add(30*time.Second+time.Duration(rng.Int64N(int64(time.Second)))))
		}
		if i == 150 { // by hand: a lease that expired ten minutes ago
			byHand = now.Add(-10 * time.Minute)
			m.keys = append(m.keys, byHand)
		}
		m.sort()
		q := p.plan(now, expiredAfter, stuckAfter)
		m.answer(q, p.slices, now)
		settled := false
		for _, k := range q.recount {
			settled = settled || p.slices[k].n == 0 && p.slices[k].hi != nil && p.slices[k].hi.Before(now.Add(-time.Minute))
		}
		f := p.absorb(q, now, time.Millisecond)
		if i >= 20 && i < 150 {
			polls++
			if settled {
				settledRecounts++
			}
			if got, want := figures(f), m.truth(now, expiredAfter, stuckAfter); got != want {
				t.Fatalf("poll %d: figures %+v, truth %+v", i, got, want)
			}
		}
		if i == 150+40 { // 30 s, and a few polls
			if got, want := figures(f), m.truth(now, expiredAfter, stuckAfter); got != want {
				t.Fatalf("40 polls after a lease was written by hand in the past: figures %+v, truth %+v", got, want)
			}
		}
		now = now.Add(time.Second)
	}
	if settledRecounts > polls/10 {
		t.Fatalf("an empty slice long expired was recounted at %d of %d polls, want a tenth at most", settledRecounts, polls)
	}
	t.Logf("empty slices long expired recounted at %d of %d polls", settledRecounts, polls)
}

// BenchmarkPendingPlanAbsorb is the Go side of one poll's PENDING count on
// a leak of 1,000,000 leases (about 4,000 slices), as on the by-hand pools:
// a quarter expired an hour ago, a quarter ten seconds ago, a quarter an
// hour out, and claims landing two hours out at every poll. It times
// plan and absorb only, after the counter has walked the whole index.
//
//	go test -run '^$' -bench PendingPlanAbsorb ./collector/
func BenchmarkPendingPlanAbsorb(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m := &model{}
	for i := 0; i < 1_000_000; i++ {
		switch i % 3 {
		case 0:
			m.keys = append(m.keys, now.Add(-time.Hour-time.Duration(i)*time.Microsecond))
		case 1:
			m.keys = append(m.keys, now.Add(-10*time.Second-time.Duration(i)*time.Microsecond))
		default:
			m.keys = append(m.keys, now.Add(time.Hour-time.Duration(i)*time.Microsecond))
		}
	}
	m.sort()
	var p pendingCounter
	poll := func() {
		q := p.plan(now, time.Second, 5*time.Minute)
		m.answer(q, p.slices, now)
		p.absorb(q, now, time.Millisecond)
	}
	for i := 0; i < 400 && (len(p.slices) < 2 || !p.slices[len(p.slices)-2].known || uncounted(p.slices)); i++ {
		poll()
	}
	if uncounted(p.slices) {
		b.Fatalf("the index is not walked after 400 polls (%d slices)", len(p.slices))
	}
	b.ResetTimer()
	for range b.N {
		now = now.Add(250 * time.Millisecond)
		b.StopTimer()
		for range 50 { // claims since the last poll, above every key
			m.keys = append(m.keys, now.Add(2*time.Hour+time.Duration(rng.Int64N(int64(time.Second)))))
		}
		tail := m.keys[len(m.keys)-250:]
		sort.Slice(tail, func(i, j int) bool { return tail[i].Before(tail[j]) })
		b.StartTimer()
		q := p.plan(now, time.Second, 5*time.Minute)
		b.StopTimer()
		m.answer(q, p.slices, now)
		b.StartTimer()
		p.absorb(q, now, time.Millisecond)
	}
	b.ReportMetric(float64(len(p.slices)), "slices")
}

// The rotation goes on from where it stopped in the keys, whatever the
// cuts and merges did to the slices' places: each poll cuts the slices
// holding its three cuts, and an index kept across them stood on a slice
// three places lower at the next poll. At a slow pace (a slice or two a
// poll, on a busy server or on partitions) the rotation then never reached
// the slices above now, where claims land: on a real server, 300 new
// leases went uncounted for over 60 polls.
func TestPendingRotationFollowsTheKeysAcrossCuts(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var p pendingCounter
	p.per = pace{n: minPending, lo: minPending, hi: minPending, step: minPending}
	p.walk = pace{n: initPending, lo: minPending, hi: maxPending}
	// An empty, settled past, then 12 slices of 200 leases an hour ahead.
	past := now.Add(-time.Hour)
	p.slices = []pendingSlice{{hi: &past, known: true, at: now, past: true}}
	var los []time.Time
	for i := 0; i < 12; i++ {
		lo, hi := now.Add(time.Hour+time.Duration(i)*time.Second), now.Add(time.Hour+time.Duration(i+1)*time.Second)
		if i == 0 {
			lo = past
		}
		s := pendingSlice{lo: &lo, hi: &hi, n: 200, at: now, known: true, min: &lo}
		if i == 11 {
			s.hi = nil
		}
		p.slices = append(p.slices, s)
		los = append(los, lo)
	}
	recounted := map[time.Time]bool{}
	for poll := 0; poll < 24; poll++ {
		q := p.plan(now, time.Second, 5*time.Minute)
		for _, i := range q.recount {
			if s := p.slices[i]; s.lo != nil {
				recounted[*s.lo] = true
			}
		}
		// Three cuts below the rotation, as sliceAtCuts makes them: the
		// settled past in four pieces, each empty and settled.
		first := p.slices[0]
		var pieces []pendingSlice
		lo := first.lo
		for c := 3; c >= 1; c-- {
			at := first.hi.Add(-time.Duration(c) * time.Millisecond)
			pieces = append(pieces, pendingSlice{lo: lo, hi: &at, known: true, at: now, past: true})
			lo = &at
		}
		pieces = append(pieces, pendingSlice{lo: lo, hi: first.hi, known: true, at: now, past: true})
		p.slices = append(pieces, p.slices[1:]...)
		now = now.Add(10 * time.Millisecond)
	}
	for i, lo := range los {
		if !recounted[lo] {
			t.Fatalf("slice %d of 12 never recounted in 24 polls, with three cuts below the rotation at each", i)
		}
	}
}

// Walks that stop at their deadline (a cold or busy server: here each
// stops once it has read a little over minPending entries) and in runs of
// one key longer than walkRun still cover the index: the figures become
// exact, later than with whole walks, and stay exact while leases come
// and go.
func TestPendingWalksThatStopEarlyStillCover(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const expiredAfter, stuckAfter = time.Second, 5 * time.Minute
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	m := &model{stopAt: minPending + sliceWidth}
	for i := 0; i < 20_000; i++ {
		m.keys = append(m.keys, now.Add(-time.Minute-time.Duration(rng.Int64N(int64(2*time.Hour)))))
	}
	for _, at := range []time.Duration{-90 * time.Minute, -20 * time.Minute} {
		for i := 0; i < 3*walkRun; i++ { // runs of one key, longer than a walk may read
			m.keys = append(m.keys, now.Add(at))
		}
	}
	for i := 0; i < 2000; i++ {
		m.keys = append(m.keys, now.Add(time.Duration(rng.Int64N(int64(time.Minute)))))
	}
	m.sort()
	var p pendingCounter
	stops := 0
	poll := func() pendingFigures {
		q := p.plan(now, expiredAfter, stuckAfter)
		m.answer(q, p.slices, now)
		if q.stopped {
			stops++
		}
		return p.absorb(q, now, time.Millisecond)
	}
	converged := -1
	for i := 0; i < 300 && converged < 0; i++ {
		if figures(poll()) == m.truth(now, expiredAfter, stuckAfter) && !p.discovering() {
			converged = i + 1
		}
		now = now.Add(time.Second)
	}
	if converged < 0 || stops == 0 {
		t.Fatalf("figures exact after %d polls (-1: never in 300), %d walks stopped early", converged, stops)
	}
	for step := 0; step < 100; step++ {
		now = now.Add(time.Second)
		for i := 0; i < 10; i++ {
			m.keys = append(m.keys, now.Add(time.Minute+time.Duration(rng.Int64N(int64(time.Second)))))
		}
		m.sort()
		if got, want := figures(poll()), m.truth(now, expiredAfter, stuckAfter); got != want {
			t.Fatalf("step %d: figures %+v, truth %+v", step, got, want)
		}
	}
	t.Logf("exact after %d polls; %d walks stopped early", converged, stops)
}
