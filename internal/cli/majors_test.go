package cli

import (
	"context"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/jackc/pgx/v5"
	dto "github.com/prometheus/client_model/go"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/migrations"
	"github.com/pooltop-dev/pooltop/tui"
)

// truth is what the test made of a pool, to hold pooltop's figures to.
type truth struct {
	unused, pending, expired, consumed, noLease, stuck, total int64
	live, dead                                                int64
	// the partitions' UNUSED ids, and dead and live tuples, by name
	partUnused, partDead, partLive map[string]int64
	// the session waiting on a row lock and the one holding it, since
	// when the waiter's statement was sent
	waiter, holder int32
	waitSent       time.Time
	// the session holding back the xmin horizon, and how many
	// transactions at least ran since its snapshot
	xmin    int32
	xminAge int64
	// the vacuum running on vacuumed (a leaf) and that leaf's pages
	vacuumed string
	pages    int64
	// when the rows without a lease were last changed (two hours before
	// the update that made them so)
	changed time.Time
}

// What pooltop shows of a pool, on the dashboard, in watch's JSON and in
// its metrics, is the truth the test made, on whatever server the tests
// run on: .ci/old-postgres runs them on PostgreSQL 12 to 18, where the
// views pooltop reads differ (pg_locks has waitstart from 14 on,
// pg_stat_statements renamed its times in 13 and names tables by name
// from 18 on, pg_stat_progress_vacuum renamed its dead-tuple columns in
// 17, the statistics moved to shared memory in 15 and flush on their own
// schedule). A figure read from a view that differs would be missing, or
// off, here: the ids of each state, the lock waiter and who blocks it,
// the dead and live tuples after known updates (kept from pruning by the
// session that holds the xmin horizon, which the test names), a running
// vacuum's pages, and, on a partitioned pool, each partition's. Not
// parallel: the xmin holder is the server's oldest, and the lock waiter
// the database's only one, while no other test runs.
func TestWatchShowsTheTruthOnThisMajor(t *testing.T) {
	for _, partitions := range pgtest.Shapes {
		t.Run(pgtest.ShapeName(partitions), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			db, schema, tr := poolOfKnownTruth(t, ctx, partitions)

			// The JSON of watch's polls, and its metrics after the last.
			b := start(t, append([]string{"watch", "--headless", "--json", "--interval", "250ms", "--listen", "127.0.0.1:0"}, db...)...)
			url := b.metricsAt(t)
			snapshots := func() []collector.Snapshot {
				lines := strings.Split(b.stdout.String(), "\n")
				out := make([]collector.Snapshot, 0, len(lines))
				for _, l := range lines[:len(lines)-1] { // the last one may be unfinished
					out = append(out, decode[collector.Snapshot](t, l))
				}
				return out
			}
			// The first poll gives each partition its share of the pool,
			// marked estimated; the second looks for where each one's
			// UNUSED ids begin, and the next count them one a poll: by poll
			// 2 + partitions each has been counted (the test reads twice as
			// many).
			polls := 1
			if partitions > 0 {
				polls = 2 + 2*partitions
			}
			pgtest.Eventually(t, "the snapshots", 30*time.Second, func() bool { return len(snapshots()) >= polls })
			fams := scrape(t, url)
			at, _, ok := value(fams, "pooltop_last_poll_timestamp_seconds")
			if !ok {
				t.Fatal("no pooltop_last_poll_timestamp_seconds")
			}
			var ss []collector.Snapshot
			pgtest.Eventually(t, "the snapshot of the poll scraped", 30*time.Second, func() bool {
				ss = snapshots()
				return math.Abs(float64(ss[len(ss)-1].Time.UnixNano())/1e9-at) < 1e-6
			})
			if code := b.stop(); code != exitOK {
				t.Fatalf("watch exit %d: %s", code, b.stderr.String())
			}
			for i, s := range ss {
				truthInSnapshot(t, s, tr, i+1, i+1 >= polls)
			}
			truthInMetrics(t, fams, ss[len(ss)-1], tr)

			// The dashboard of polls of its own, with the claim statements'
			// figures from pg_stat_statements: read at polls 2 and 7, the
			// second reading's rate is of the claims run between the two.
			c, err := collector.New(ctx, collector.Config{DSN: pgtest.DSN(), Table: schema + ".resource_pool"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			src := &polled{Collector: c}
			screen := dashboard(t, src, 200, 60, max(polls, 7), func(poll int) {
				if poll == 2 {
					claims(t, ctx, schema, claimsRun)
				}
			})
			last := src.snaps[len(src.snaps)-1]
			truthInSnapshot(t, last, tr, len(src.snaps), true)
			truthOnDashboard(t, screen, tr)
			cs := src.snaps[6].Claims
			if cs == nil || last.Claims == nil || *last.Claims != *cs {
				t.Fatalf("claim statements %+v at poll 7, %+v at the last; want the reading of poll 7 at both", cs, last.Claims)
			}
			if ran := cs.CallsPerS * src.snaps[6].Time.Sub(src.snaps[1].Time).Seconds(); math.Abs(ran-claimsRun) > 1e-6 ||
				cs.MeanMS <= 0 || cs.MaxMS < cs.MeanMS {
				t.Errorf("claim statements %+v: %.6f between polls 2 and 7, want %d, a mean and a longest", cs, ran, claimsRun)
			}
			if want := fmt.Sprintf("%.2f ms mean claim", cs.MeanMS); !strings.Contains(screen, want) {
				t.Errorf("the dashboard has no %q:\n%s", want, screen)
			}
		})
	}
}

// claimsRun is how many claim statements the test runs between two
// readings of pg_stat_statements.
const claimsRun = 20

// claims runs n claim statements (SKIP LOCKED) on schema's pool.
func claims(t *testing.T, ctx context.Context, schema string, n int) {
	t.Helper()
	conn := pgtest.Conn(t, schema)
	for range n {
		if _, err := conn.Exec(ctx, "SELECT id FROM resource_pool WHERE status = 'UNUSED' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"); err != nil {
			t.Fatal(err)
		}
	}
}

// polled is a collector that keeps the snapshots of its polls.
type polled struct {
	*collector.Collector
	snaps []collector.Snapshot
}

func (p *polled) Poll(ctx context.Context) (collector.Snapshot, error) {
	s, err := p.Collector.Poll(ctx)
	if err == nil {
		p.snaps = append(p.snaps, s)
	}
	return s, err
}

// poolOfKnownTruth makes a pool of 2,000 ids (partitions: hash-partitioned
// in that many) whose every figure the test knows, and returns the flags
// that point at it, its schema and the truth.
func poolOfKnownTruth(t *testing.T, ctx context.Context, partitions int) ([]string, string, truth) {
	t.Helper()
	const size = 2000
	schema := pgtest.Schema(t)
	db := []string{"--dsn", pgtest.DSN(), "--schema", schema}
	pooltop(t, append([]string{"migrate", "--partitions", fmt.Sprint(partitions)}, db...)...).must(t)
	pooltop(t, append([]string{"seed", "--count", fmt.Sprint(size)}, db...)...).must(t)
	leaves := []string{"resource_pool"}
	if partitions > 0 {
		leaves = leaves[:0]
		for i := range partitions {
			leaves = append(leaves, migrations.PartitionName(i))
		}
	}
	conn := pgtest.Conn(t, schema)
	// pgtest's server loads pg_stat_statements; the extension is created
	// where a test needs it. A claim statement runs before the first
	// reading, which finds it by its text.
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements SCHEMA public"); err != nil {
		t.Fatalf("pg_stat_statements is needed for this test (the server's contrib modules; pgtest preloads it): %v", err)
	}
	claims(t, ctx, schema, 1)
	exec := func(c *pgx.Conn, sql string, args ...any) {
		t.Helper()
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	// No autovacuum: the dead tuples stay as the updates leave them.
	for _, l := range leaves {
		exec(conn, "ALTER TABLE "+l+" SET (autovacuum_enabled = false)")
	}
	tuples := func() (inserted, live, dead int64) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT sum(pg_stat_get_tuples_inserted(l::regclass))::bigint,
			sum(pg_stat_get_live_tuples(l::regclass))::bigint, sum(pg_stat_get_dead_tuples(l::regclass))::bigint
			FROM unnest($1::text[]) AS l`, leaves).Scan(&inserted, &live, &dead); err != nil {
			t.Fatal(err)
		}
		return inserted, live, dead
	}
	// The statistics reach the views a moment after the statement, or
	// after the session ends, on every major in its own way: the seed's
	// rows, counted after a vacuum, would count twice.
	pgtest.Eventually(t, "the statistics of the seed", 30*time.Second, func() bool { i, _, _ := tuples(); return i == size })
	exec(conn, "VACUUM resource_pool")
	pgtest.Eventually(t, "the statistics of the vacuum", 30*time.Second, func() bool { _, l, d := tuples(); return l == size && d == 0 })

	// The session holding back the xmin horizon, from before the updates:
	// what they leave dead stays, no page pruned.
	xmin := pgtest.Conn(t, schema)
	xtx, err := xmin.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = xtx.Rollback(context.Background()) })
	tr := truth{total: size, live: size, partUnused: map[string]int64{}, partDead: map[string]int64{}, partLive: map[string]int64{}}
	if err := xtx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&tr.xmin); err != nil {
		t.Fatal(err)
	}

	// The states, each an update of its own on a session that then
	// ends (and sends its statistics): ids 1-100 consumed, 101-140
	// leased for an hour, 141-155 leased until an hour ago, 156-160
	// PENDING with no lease, unchanged for two hours.
	upd, err := pgx.Connect(ctx, pgtest.DSN())
	if err != nil {
		t.Fatal(err)
	}
	exec(upd, "SET search_path TO "+pgx.Identifier{schema}.Sanitize())
	var lo int64
	if err := upd.QueryRow(ctx, "SELECT min(id) FROM resource_pool").Scan(&lo); err != nil {
		t.Fatal(err)
	}
	states := []struct {
		n   int64
		set string
	}{
		{100, "status = 'CONSUMED', lease_token = 1, updated_at = now()"},
		{40, "status = 'PENDING', leased_until = now() + interval '1 hour', holder = 'live', lease_token = 1, updated_at = now()"},
		{15, "status = 'PENDING', leased_until = now() - interval '1 hour', holder = 'gone', lease_token = 1, updated_at = now() - interval '1 hour'"},
		{5, "status = 'PENDING', leased_until = NULL, lease_token = 1, updated_at = now() - interval '2 hours'"},
	}
	from := lo
	for _, st := range states {
		tag, err := upd.Exec(ctx, "UPDATE resource_pool SET "+st.set+" WHERE id >= $1 AND id < $2", from, from+st.n)
		if err != nil || tag.RowsAffected() != st.n {
			t.Fatalf("UPDATE %s: %v rows, %v", st.set, tag.RowsAffected(), err)
		}
		from += st.n
		tr.xminAge++
	}
	tr.changed = time.Now().Add(-2 * time.Hour)
	tr.consumed, tr.expired, tr.noLease = states[0].n, states[2].n, states[3].n
	tr.pending = states[1].n + states[2].n + states[3].n
	tr.stuck = tr.expired + tr.noLease
	tr.unused = size - tr.consumed - tr.pending
	tr.dead = from - lo
	rows, err := upd.Query(ctx, `SELECT tableoid::regclass::text, count(*) FILTER (WHERE status = 'UNUSED'),
		count(*) FILTER (WHERE id < $1), count(*) FROM resource_pool GROUP BY 1`, from)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name string
		var unused, dead, live int64
		if err := rows.Scan(&name, &unused, &dead, &live); err != nil {
			t.Fatal(err)
		}
		tr.partUnused[name], tr.partDead[name], tr.partLive[name] = unused, dead, live
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if err := upd.Close(ctx); err != nil {
		t.Fatal(err)
	}
	pgtest.Eventually(t, "the statistics of the updates", 30*time.Second, func() bool { _, l, d := tuples(); return l == size && d == tr.dead })

	// A session waiting on the row another holds: the last UNUSED id.
	holder := pgtest.PeerTx(t, ctx, schema)
	if err := holder.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&tr.holder); err != nil {
		t.Fatal(err)
	}
	lock := "UPDATE resource_pool SET updated_at = now() WHERE id = $1"
	last := lo + size - 1
	if _, err := holder.Exec(ctx, lock, last); err != nil {
		t.Fatal(err)
	}
	tr.xminAge++
	waiter := pgtest.Conn(t, schema)
	if err := waiter.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&tr.waiter); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	tr.waitSent = time.Now()
	go func() { _, err := waiter.Exec(context.Background(), lock, last); done <- err }()
	t.Cleanup(func() { _ = holder.Rollback(context.Background()); <-done })
	pgtest.Eventually(t, "the waiter waiting", 30*time.Second, func() bool {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'", tr.waiter).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})

	// A vacuum of the first leaf, in its heap's first page for as long as
	// the test runs: a VACUUM FREEZE waits for the page's cleanup lock
	// (it has rows to freeze, older than the xmin holder), and a cursor
	// keeps the page pinned.
	tr.vacuumed = leaves[0]
	pin, err := pgtest.Conn(t, schema).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pin.Rollback(context.Background()) })
	if _, err := pin.Exec(ctx, "DECLARE pin CURSOR FOR SELECT id FROM "+tr.vacuumed); err != nil {
		t.Fatal(err)
	}
	if _, err := pin.Exec(ctx, "FETCH 1 FROM pin"); err != nil {
		t.Fatal(err)
	}
	vac := pgtest.Conn(t, schema)
	var vacPID int32
	if err := vac.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&vacPID); err != nil {
		t.Fatal(err)
	}
	vacDone := make(chan error, 1)
	go func() { _, err := vac.Exec(context.Background(), "VACUUM (FREEZE) "+tr.vacuumed); vacDone <- err }()
	t.Cleanup(func() {
		_ = pgtest.Exec(context.Background(), fmt.Sprintf("SELECT pg_cancel_backend(%d)", vacPID))
		<-vacDone
	})
	pgtest.Eventually(t, "the vacuum under way", 30*time.Second, func() bool {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_stat_progress_vacuum WHERE pid = $1", vacPID).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	if err := conn.QueryRow(ctx, "SELECT pg_relation_size($1::regclass) / current_setting('block_size')::int", tr.vacuumed).Scan(&tr.pages); err != nil {
		t.Fatal(err)
	}
	return db, schema, tr
}

// truthInSnapshot holds the snapshot of poll n to the truth; counted: by
// then each partition has been counted.
func truthInSnapshot(t *testing.T, s collector.Snapshot, tr truth, n int, counted bool) {
	t.Helper()
	p := s.Pool
	for _, f := range []struct {
		name      string
		got, want int64
	}{
		{"unused", p.Unused, tr.unused}, {"pending", p.Pending, tr.pending}, {"expired", p.Expired, tr.expired},
		{"consumed", p.Consumed, tr.consumed}, {"stuck", p.Stuck, tr.stuck}, {"expired_old", p.ExpiredOld, tr.expired},
		{"total", p.Total, tr.total}, {"live_tuples", s.LiveTuples, tr.live}, {"dead_tuples", s.DeadTuples, tr.dead},
		{"lock_waiters", int64(s.LockWaiters), 1},
	} {
		if f.got != f.want {
			t.Errorf("%s %d, want %d", f.name, f.got, f.want)
		}
	}
	if len(p.Estimated) > 0 {
		t.Errorf("estimated %v: a pool this small is counted whole", p.Estimated)
	}
	if p.NoLease == nil || *p.NoLease != tr.noLease {
		t.Errorf("no_lease %v, want %d", deref64(p.NoLease), tr.noLease)
	}
	// The longest-waiting PENDING row that nothing frees: the rows without
	// a lease, unchanged for two hours.
	if want := time.Since(tr.changed).Seconds(); p.OldestPendingS == nil || math.Abs(*p.OldestPendingS-want) > 60 {
		t.Errorf("oldest_pending_s %v, want about %.0f", p.OldestPendingS, want)
	}
	if want := float64(tr.dead) / float64(tr.dead+tr.live); math.Abs(s.DeadRatio-want) > 1e-9 {
		t.Errorf("dead_ratio %v, want %v", s.DeadRatio, want)
	}

	// The waiter, behind the holder, since it sent its statement at most.
	if len(s.Waiters) != 1 {
		t.Fatalf("waiters %+v, want the one session %d", s.Waiters, tr.waiter)
	}
	w := s.Waiters[0]
	waited := float64(s.Time.Sub(tr.waitSent).Milliseconds()) + float64(s.PollMS) + 50
	if w.PID != tr.waiter || !slices.Equal(w.BlockedBy, []int32{tr.holder}) || w.WaitEvent != "Lock:transactionid" ||
		w.State != "active" || w.WaitMS <= 0 || w.WaitMS > waited || !strings.Contains(w.Query, "UPDATE resource_pool") {
		t.Errorf("waiter %+v, want %d waiting on transactionid behind %d for 0 to %.0f ms", w, tr.waiter, tr.holder, waited)
	}
	if s.LockWaitMaxMS != w.WaitMS || s.LockWaitUnplannedMaxMS == nil || *s.LockWaitUnplannedMaxMS != w.WaitMS {
		t.Errorf("lock_wait_max_ms %v, unplanned %v; want the waiter's %v", s.LockWaitMaxMS, s.LockWaitUnplannedMaxMS, w.WaitMS)
	}
	if len(s.Blockers) != 1 || s.Blockers[0].PID != tr.holder || !slices.Equal(s.Blockers[0].Blocks, []int32{tr.waiter}) ||
		s.Blockers[0].State != "idle in transaction" {
		t.Errorf("blockers %+v, want %d (idle in transaction) blocking %d", s.Blockers, tr.holder, tr.waiter)
	}

	if x := s.Xmin; x == nil || x.PID != tr.xmin || x.Age < tr.xminAge || x.State != "idle in transaction" || x.XactS == nil || *x.XactS <= 0 {
		t.Errorf("xmin_holder %+v, want %d, idle in transaction, %d transactions old or more", x, tr.xmin, tr.xminAge)
	}

	if v := s.Vacuum; v == nil || v.Phase != "scanning heap" || v.HeapTotal != tr.pages || v.HeapScanned < 0 || v.HeapScanned > v.HeapTotal ||
		math.Abs(v.Percent-100*float64(v.HeapScanned)/float64(v.HeapTotal)) > 1e-9 {
		t.Errorf("vacuum %+v, want the heap of %s (%d pages) being scanned", v, tr.vacuumed, tr.pages)
	}

	if len(tr.partLive) > 1 {
		if len(s.Partitions) != len(tr.partLive) {
			t.Fatalf("partitions %+v, want %d", s.Partitions, len(tr.partLive))
		}
		// A partition's count, where counted at the poll, and every one
		// once each has been (those not counted at the poll are marked
		// estimated: the pool may have changed since).
		for _, pu := range s.Partitions {
			if want, ok := tr.partUnused[pu.Name]; !ok || ((counted || !pu.Estimated) && pu.Unused != want) {
				t.Errorf("poll %d: partition %+v, want %d UNUSED ids", n, pu, want)
			}
		}
		// The worst is the partition of the highest dead ratio.
		ratio := func(name string) float64 {
			return float64(tr.partDead[name]) / float64(tr.partDead[name]+tr.partLive[name])
		}
		wp := s.WorstPartition
		if wp == nil || wp.Dead != tr.partDead[wp.Name] || wp.Live != tr.partLive[wp.Name] || wp.Partitions != len(tr.partLive) {
			t.Errorf("worst_partition %+v, want one of %v dead, %v live", wp, tr.partDead, tr.partLive)
		} else {
			for name := range tr.partLive {
				if ratio(name) > ratio(wp.Name)+1e-12 {
					t.Errorf("worst_partition %s (dead ratio %.4f); %s's is higher (%.4f)", wp.Name, ratio(wp.Name), name, ratio(name))
				}
			}
		}
	} else if s.WorstPartition != nil || len(s.Partitions) != 0 {
		t.Errorf("a plain table has worst_partition %+v, partitions %+v", s.WorstPartition, s.Partitions)
	}
	if s.MaxConnections <= 0 || s.Connections <= 0 || s.Connections > s.MaxConnections {
		t.Errorf("connections %d of %d", s.Connections, s.MaxConnections)
	}
}

func deref64(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

// truthInMetrics holds /metrics, scraped after the poll of snapshot s,
// to the truth.
func truthInMetrics(t *testing.T, fams map[string]*dto.MetricFamily, s collector.Snapshot, tr truth) {
	t.Helper()
	gauges := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"pooltop_pool_ids", []string{"state=unused"}, float64(tr.unused)},
		{"pooltop_pool_ids", []string{"state=pending"}, float64(tr.pending)},
		{"pooltop_pool_ids", []string{"state=expired"}, float64(tr.expired)},
		{"pooltop_pool_ids", []string{"state=consumed"}, float64(tr.consumed)},
		{"pooltop_pool_stuck_ids", nil, float64(tr.stuck)},
		{"pooltop_pool_no_lease_ids", nil, float64(tr.noLease)},
		{"pooltop_pool_reaper_lag_ids", nil, float64(tr.expired)},
		{"pooltop_lock_waiters", nil, 1},
		{"pooltop_dead_tuples", nil, float64(tr.dead)},
		{"pooltop_live_tuples", nil, float64(tr.live)},
		// The wait the snapshot shows (held to the truth there).
		{"pooltop_lock_wait_max_seconds", nil, s.LockWaitMaxMS / 1000},
		{"pooltop_lock_wait_unplanned_max_seconds", nil, s.LockWaitMaxMS / 1000},
		{"pooltop_max_connections", nil, float64(s.MaxConnections)},
	}
	for name, n := range tr.partUnused {
		if len(tr.partLive) > 1 {
			gauges = append(gauges, struct {
				name   string
				labels []string
				want   float64
			}{"pooltop_partition_unused_ids", []string{"partition=" + name}, float64(n)})
		}
	}
	for _, g := range gauges {
		v, typ, ok := value(fams, g.name, g.labels...)
		if !ok || typ != dto.MetricType_GAUGE || math.Abs(v-g.want) > 1e-9*math.Max(1, math.Abs(g.want)) {
			t.Errorf("%s%v = %v (%v, present %v), want a gauge of %v", g.name, g.labels, v, typ, ok, g.want)
		}
	}
	for _, st := range []string{"unused", "pending", "consumed"} {
		if v, _, ok := value(fams, "pooltop_pool_ids_estimated", "state="+st); ok && v != 0 {
			t.Errorf("pooltop_pool_ids_estimated{state=%s} = %v: a pool this small is counted whole", st, v)
		}
	}
}

// dashboard is the dashboard of watch at width×height after polls polls
// of src, without colours; after(n) runs after poll n.
func dashboard(t *testing.T, src tui.Source, width, height, polls int, after func(int)) string {
	t.Helper()
	var m tea.Model = tui.New(tui.Options{Source: src, Mode: "watch", Interval: time.Minute, Now: time.Now})
	m, _ = m.Update(tea.WindowSizeMsg{Width: width, Height: height})
	for n := range polls {
		tick := m.(tui.Model).Init()() // a tick of the model's generation: poll now
		var poll tea.Cmd
		m, poll = m.Update(tick)
		if poll == nil {
			t.Fatal("the tick did not poll")
		}
		m, _ = m.Update(poll())
		after(n + 1)
	}
	return ansi.ReplaceAllString(m.View(), "")
}

var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[A-Za-z]`)

// truthOnDashboard finds the truth on the dashboard: the pool's line, the
// lock waiter under its blocker, the dead tuples, the vacuum and the xmin
// holder.
func truthOnDashboard(t *testing.T, screen string, tr truth) {
	t.Helper()
	want := []string{
		fmt.Sprintf("█ UNUSED %s · ▓ PENDING %s · ▒ expired %s · ░ CONSUMED %s · stuck %s",
			thousands(tr.unused), thousands(tr.pending), thousands(tr.expired), thousands(tr.consumed), thousands(tr.stuck)),
		fmt.Sprintf("%d pooltop-test-peer idle in transaction", tr.holder),
		fmt.Sprintf("└─ %d pooltop-test-peer waits ", tr.waiter),
		fmt.Sprintf("%s dead ", thousands(tr.dead)),
		"% vacuum",
		"1 waiting",
	}
	if len(tr.partLive) > 1 {
		// ~: not counted at this poll.
		var parts []string
		for i := range len(tr.partLive) {
			parts = append(parts, fmt.Sprintf(`p%d ~?%s`, i, thousands(tr.partUnused[migrations.PartitionName(i)])))
		}
		if re := regexp.MustCompile("partitions: " + strings.Join(parts, " · ")); !re.MatchString(screen) {
			t.Errorf("the dashboard has no %q:\n%s", re, screen)
		}
	}
	for _, w := range want {
		if !strings.Contains(screen, w) {
			t.Errorf("the dashboard has no %q:\n%s", w, screen)
		}
	}
}

// thousands formats n as the dashboard does (1,234).
func thousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
