package tui

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
	"github.com/muesli/termenv"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/workload"
)

// updating reports -update, the golden-file flag that teatest defines.
func updating() bool {
	f := flag.Lookup("update")
	return f != nil && f.Value.String() == "true"
}

func TestMain(m *testing.M) {
	lipgloss.SetColorProfile(termenv.Ascii)
	os.Exit(m.Run())
}

// clock is the fixed time of every canned snapshot.
var clock = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

// fakeSource serves canned snapshots and series.
type fakeSource struct {
	mu     sync.Mutex
	snap   collector.Snapshot
	err    error
	polls  int
	series map[string][]collector.Point
	events []collector.Event
}

func (f *fakeSource) Poll(context.Context) (collector.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.polls++
	return f.snap, f.err
}
func (f *fakeSource) Series(n string) []collector.Point { return f.series[n] }
func (f *fakeSource) Events() []collector.Event         { return f.events }
func (f *fakeSource) Info() collector.Info {
	return collector.Info{Host: "db.internal:5432", Database: "pool", User: "oncall", Version: "15.18 (Debian)", Table: "public.resource_pool", Monitor: true}
}

// canned builds a source with two minutes of history.
func canned(withWorkload bool) *fakeSource {
	eta := 2712.0
	acq, com := 3400.0, 3350.0
	s := collector.Snapshot{
		Time: clock,
		Pool: collector.Pool{Unused: 184_210, Pending: 42, Expired: 3, Consumed: 15_748, Stuck: 0, Total: 200_000,
			Estimated: []string{"consumed"}},
		LockWaiters: 2, LockWaitMaxMS: 74, LockWaitP95MS: 70,
		Waiters: []collector.Waiter{
			{PID: 4242, App: "pooltop-workload", WaitMS: 74, BlockedBy: []int32{4100}},
			{PID: 4243, App: "evil\x1b[31mapp", WaitMS: 12, BlockedBy: []int32{4100}},
		},
		Blockers:   []collector.Blocker{{PID: 4100, App: "psql", State: "idle in transaction", Query: "UPDATE resource_pool SET …", Blocks: []int32{4242, 4243}}},
		DeadTuples: 12_000, LiveTuples: 200_000, DeadRatio: 0.057,
		Connections: 21, MaxConnections: 300, BurnPerS: 67.9, DepletionETAS: &eta, PollMS: 3.2,
		Alerts:  []collector.Alert{{Name: "lock_wait", Active: true, Message: "longest lock wait 74 ms"}, {Name: "depletion", Active: false}},
		Holders: []engine.Holder{{Holder: "pod-7", Pending: 30, Expired: 3, OldestS: 95}, {Holder: "pod-8", Pending: 12}},
	}
	if withWorkload {
		s.AcquiresPerS, s.CommitsPerS = &acq, &com
		s.Workload = &workload.Snapshot{Leaked: 5, DoubleFinalizations: 0}
	}
	f := &fakeSource{snap: s, series: map[string][]collector.Point{}}
	for i := 0; i < 120; i++ {
		t := clock.Add(time.Duration(i-119) * time.Second)
		x := float64(i)
		add := func(n string, v float64) { f.series[n] = append(f.series[n], collector.Point{T: t, V: v}) }
		add(collector.SeriesAcquires, 3000+float64(i%20)*20)
		add(collector.SeriesCommits, 2950+float64(i%20)*20)
		add(collector.SeriesAcquireP99, 4+float64(i%7))
		add(collector.SeriesLockWaitMax, float64((i*37)%80))
		add(collector.SeriesDeadTuples, 1000*float64(i%40))
		add(collector.SeriesBurn, 60+x/10)
		add(collector.SeriesLeaked, float64(i/24))
		add(collector.SeriesExpired, float64(i%4))
		add(collector.SeriesFenced, float64(i%3))
		add(collector.SeriesDouble, 0)
		add(collector.SeriesConsumedPerS, 3300)
	}
	f.events = []collector.Event{
		{Time: clock.Add(-30 * time.Second), Kind: "reclaimed", Text: "reaper reclaimed 12 expired leases"},
		{Time: clock.Add(-20 * time.Second), Kind: "fenced", Text: "3 zombie commits rejected by the fence"},
		{Time: clock.Add(-10 * time.Second), Kind: "alert", Text: "ALERT lock_wait: longest lock wait 74 ms"},
	}
	return f
}

// fakeKnobs records the configs the dashboard sets.
type fakeKnobs struct {
	mu            sync.Mutex
	cfg           workload.Config
	resets, fresh int
	played        []int
}

func (k *fakeKnobs) Config() workload.Config { k.mu.Lock(); defer k.mu.Unlock(); return k.cfg }
func (k *fakeKnobs) SetConfig(c workload.Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	k.cfg = c
	return nil
}
func (k *fakeKnobs) Reset() { k.mu.Lock(); k.resets++; k.mu.Unlock() }
func (k *fakeKnobs) Play(i int) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.played = append(k.played, i)
	k.cfg = workload.Scenarios[i].Config(k.cfg.Seed)
	return nil
}
func (k *fakeKnobs) Fresh() error { k.mu.Lock(); k.fresh++; k.mu.Unlock(); return nil }

func newTestModel(src Source, knobs Knobs, w, h int) Model {
	o := Options{Source: src, Mode: "watch", Now: func() time.Time { return clock }}
	if knobs != nil {
		o.Knobs, o.Mode = knobs, "demo"
	}
	m := New(o)
	mm, _ := m.Update(tea.WindowSizeMsg{Width: w, Height: h})
	return mm.(Model)
}

// run feeds a message and runs the command it returns, once, feeding its message back.
func run(t *testing.T, m Model, msg tea.Msg) (Model, tea.Msg) {
	t.Helper()
	mm, cmd := m.Update(msg)
	m = mm.(Model)
	if cmd == nil {
		return m, nil
	}
	return m, cmd()
}

// polled returns a model that has applied one poll of src.
func polled(t *testing.T, src Source, knobs Knobs, w, h int) Model {
	t.Helper()
	m := newTestModel(src, knobs, w, h)
	m, msg := run(t, m, tickMsg{gen: 0})
	if _, ok := msg.(pollMsg); !ok {
		t.Fatalf("tick did not poll: %T", msg)
	}
	mm, _ := m.Update(msg)
	return mm.(Model)
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if updating() {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./tui -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the golden file (go test ./tui -update after checking):\n%s", name, got)
	}
}

func TestGoldenViews(t *testing.T) {
	kn := &fakeKnobs{cfg: workload.Defaults()}
	for _, c := range []struct {
		name  string
		knobs Knobs
		w, h  int
	}{{"demo_100x30", kn, 100, 30}, {"demo_200x60", kn, 200, 60}, {"watch_100x30", nil, 100, 30}, {"watch_200x60", nil, 200, 60}} {
		t.Run(c.name, func(t *testing.T) {
			m := polled(t, canned(c.knobs != nil), c.knobs, c.w, c.h)
			v := m.View()
			lines := strings.Split(v, "\n")
			if len(lines) != c.h {
				t.Fatalf("%d lines, want %d", len(lines), c.h)
			}
			for i, l := range lines {
				if w := lipgloss.Width(l); w != c.w {
					t.Fatalf("line %d is %d wide, want %d: %q", i, w, c.w, l)
				}
			}
			golden(t, c.name, v)
		})
	}
}

func TestViewEscapesControlCharacters(t *testing.T) {
	m := polled(t, canned(false), nil, 120, 40)
	v := m.View()
	if strings.Contains(v, "\x1b") {
		t.Fatal("an escape sequence from the database reached the screen")
	}
	if !strings.Contains(v, `evil\x1b[31mapp`) {
		t.Fatalf("the application name is not shown escaped:\n%s", v)
	}
}

func TestTooSmallTerminal(t *testing.T) {
	m := polled(t, canned(true), &fakeKnobs{cfg: workload.Defaults()}, 60, 20)
	if v := m.View(); !strings.Contains(v, "needs at least 80×24") || strings.Contains(v, "UNUSED") {
		t.Fatalf("small terminal view:\n%s", v)
	}
}

func TestKnobKeysAndLimits(t *testing.T) {
	kn := &fakeKnobs{cfg: workload.Defaults()}
	m := polled(t, canned(true), kn, 100, 30)
	press := func(keys string) {
		for _, r := range keys {
			var msg tea.Msg
			m, msg = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
			if msg != nil {
				mm, _ := m.Update(msg)
				m = mm.(Model)
			}
		}
	}
	press("l")
	if kn.Config().Lease || m.cfg.Lease {
		t.Fatal("l did not turn leases off")
	}
	press("f")
	if kn.Config().Fencing {
		t.Fatal("f did not turn fencing off")
	}
	press("s")
	if kn.Config().Strategy.String() != "blocking" {
		t.Fatalf("s gave %v", kn.Config().Strategy)
	}
	press(strings.Repeat("W", 20))
	if kn.Config().Workers != workload.MaxWorkers {
		t.Fatalf("W×20 gave %d workers, want the limit %d", kn.Config().Workers, workload.MaxWorkers)
	}
	press(strings.Repeat("w", 20))
	if kn.Config().Workers != 0 {
		t.Fatalf("w×20 gave %d workers, want 0", kn.Config().Workers)
	}
	press(strings.Repeat("C", 10))
	if got := kn.Config().CrashRate; got != faultSteps[len(faultSteps)-1] {
		t.Fatalf("crash rate %v", got)
	}
	press("P")
	if c := kn.Config(); c.PauseRate == 0 || c.PauseLength <= c.TTL {
		t.Fatalf("pause %v × %v with ttl %v: a pause must outlast the lease", c.PauseRate, c.PauseLength, c.TTL)
	}
	if v := m.View(); !strings.Contains(v, "crash rate 20% → 50%") && !strings.Contains(v, "last: pause rate") {
		t.Fatalf("the banner does not say what the last key did:\n%s", v)
	}
	press("4")
	if c := kn.Config(); c.Fencing || c.PauseRate == 0 || m.scenario != 3 || m.custom || len(kn.played) != 1 || kn.played[0] != 3 {
		t.Fatalf("preset 4: %+v (scenario %d, custom %v, played %v)", c, m.scenario, m.custom, kn.played)
	}
	if v := m.View(); !strings.Contains(v, "▶ 4 pause-no-fencing") || !strings.Contains(v, "expect: zombies commit") {
		t.Fatalf("no banner for preset 4:\n%s", v)
	}
	press("f")
	if v := m.View(); !strings.Contains(v, "▶ 4 pause-no-fencing + knobs") || !strings.Contains(v, "fencing OFF → on") {
		t.Fatalf("the banner does not show the knob turned after the preset:\n%s", v)
	}
	press("r")
	if kn.resets != 1 || !strings.Contains(m.View(), "counters, charts and alerts reset") {
		t.Fatalf("r reset %d times:\n%s", kn.resets, m.View())
	}
	press("R")
	if kn.fresh != 1 {
		t.Fatalf("R made %d fresh pools", kn.fresh)
	}
	press("l")
	if v := m.View(); !strings.Contains(v, "lease    OFF") {
		t.Fatalf("the knobs panel does not show the change:\n%s", v)
	}
	// Watch mode has no knobs: the same keys do nothing.
	w := polled(t, canned(false), nil, 100, 30)
	if _, cmd := w.Update(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'l'}}); cmd != nil {
		t.Fatal("a knob key did something in watch mode")
	}
}

func TestStaleTicksAndIntervalChanges(t *testing.T) {
	src := canned(false)
	m := newTestModel(src, nil, 100, 30)
	m, msg := run(t, m, tickMsg{gen: 0})
	if msg == nil || !m.inFlight {
		t.Fatal("the first tick did not start a poll")
	}
	// A second tick while the poll is out does not start another.
	if _, cmd := m.Update(tickMsg{gen: 0}); cmd != nil {
		t.Fatal("two polls in flight")
	}
	m, _ = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'>'}})
	if m.interval != 500*time.Millisecond || m.gen != 1 {
		t.Fatalf("interval %v gen %d", m.interval, m.gen)
	}
	mm, cmd := m.Update(msg) // the old poll's result arrives and re-arms the tick
	m = mm.(Model)
	if cmd == nil || m.inFlight || m.snap == nil {
		t.Fatal("the poll result was not applied or did not re-arm the tick")
	}
	if _, cmd := m.Update(tickMsg{gen: 0}); cmd != nil {
		t.Fatal("a stale tick started a poll")
	}
	if _, cmd := m.Update(tickMsg{gen: 1}); cmd == nil {
		t.Fatal("a current tick did not start a poll")
	}
	for i := 0; i < 20; i++ {
		m, _ = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'>'}})
	}
	if m.interval != intervalSteps[0] {
		t.Fatalf("interval went below the limit: %v", m.interval)
	}
}

func TestDisconnectKeepsHistoryAndRecovers(t *testing.T) {
	src := canned(false)
	m := polled(t, src, nil, 100, 30)
	src.mu.Lock()
	src.err = errors.New("failed to connect to `user=oncall`: connection refused")
	src.mu.Unlock()
	m, msg := run(t, m, tickMsg{gen: 0})
	mm, _ := m.Update(msg)
	m = mm.(Model)
	v := m.View()
	if !strings.Contains(v, "disconnected, retrying") || !strings.Contains(v, "184,210") {
		t.Fatalf("during the outage:\n%s", v)
	}
	src.mu.Lock()
	src.err = nil
	src.snap.Pool.Unused = 100
	src.mu.Unlock()
	m, msg = run(t, m, tickMsg{gen: 0})
	mm, _ = m.Update(msg)
	m = mm.(Model)
	if v := m.View(); strings.Contains(v, "disconnected") || !strings.Contains(v, "UNUSED 100 ") {
		t.Fatalf("after recovery:\n%s", v)
	}
}

func TestPauseFreezesTheDisplay(t *testing.T) {
	src := canned(false)
	m := polled(t, src, nil, 100, 30)
	m, _ = run(t, m, tea.KeyMsg{Type: tea.KeySpace, Runes: []rune{' '}})
	src.mu.Lock()
	src.snap.Pool.Unused = 7
	src.mu.Unlock()
	m, msg := run(t, m, tickMsg{gen: 0})
	mm, _ := m.Update(msg)
	m = mm.(Model)
	if v := m.View(); !strings.Contains(v, "PAUSED") || strings.Contains(v, "UNUSED 7 ") {
		t.Fatalf("paused view changed:\n%s", v)
	}
	m, _ = run(t, m, tea.KeyMsg{Type: tea.KeySpace, Runes: []rune{' '}})
	if v := m.View(); !strings.Contains(v, "UNUSED 7 ") {
		t.Fatalf("resumed view did not catch up:\n%s", v)
	}
}

// A frame at 200×60 must render in well under 5 ms.
func BenchmarkView200x60(b *testing.B) {
	m := New(Options{Source: canned(true), Knobs: &fakeKnobs{cfg: workload.Defaults()}, Now: func() time.Time { return clock }})
	mm, _ := m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
	m = mm.(Model)
	msg := pollCmd(m.opts.Source, 0, time.Second)()
	mm, _ = m.Update(msg)
	m = mm.(Model)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		_ = m.View()
	}
}

var _ = fmt.Sprint

// Long and wide text in the blocking tree (CJK, emoji, combining marks, a
// very long query) stays in its column: every line is exactly as wide as
// the screen, and the events column starts where it always does.
func TestBlockerRowsStayInTheirColumn(t *testing.T) {
	src := canned(false)
	q := strings.Repeat("UPDATE 資源プール SET status = 'PENDING' 🔒👩‍💻 e\u0301 ", 20)
	src.snap.Blockers = []collector.Blocker{{PID: 4100, App: "アプリ🙂" + strings.Repeat("x", 80), State: "idle in transaction", Query: q, Blocks: []int32{4242, 4243}}}
	for _, size := range [][2]int{{100, 30}, {80, 24}, {200, 60}} {
		m := polled(t, src, nil, size[0], size[1])
		for i, l := range strings.Split(m.View(), "\n") {
			if w := lipgloss.Width(l); w != size[0] {
				t.Fatalf("%dx%d: line %d is %d wide: %q", size[0], size[1], i, w, l)
			}
			if strings.Contains(l, "events") && !strings.HasPrefix(ansiStrip(l)[size[0]/2:], "events") {
				t.Fatalf("%dx%d: the events column moved: %q", size[0], size[1], l)
			}
		}
		// A gutter of one space keeps a cut blocker row from running into
		// the events column.
		var bottom bool
		for _, l := range strings.Split(ansiStrip(m.View()), "\n") {
			bottom = bottom || strings.Contains(l, "who blocks whom")
			if strings.HasPrefix(l, "poll ") {
				break // the status line: the bottom panels end above it
			}
			if !bottom {
				continue
			}
			if w := lipgloss.Width(l); w > size[0]/2 {
				col := []rune(ansiStrip(l))
				// the cell just before the events column is a space
				x, cut := 0, -1
				for i, c := range col {
					if x == size[0]/2-1 {
						cut = i
						break
					}
					x += lipgloss.Width(string(c))
				}
				if cut >= 0 && col[cut] != ' ' {
					t.Fatalf("%dx%d: the blocking tree runs into the events column: %q", size[0], size[1], l)
				}
			}
		}
	}
}

func ansiStrip(s string) string { return ansi.Strip(s) }

// At every size from 80×24 up, each chart has a title and at least four
// rows of plot, and at least four charts show in the demo.
func TestChartsKeepTheirRows(t *testing.T) {
	for _, sz := range [][2]int{{80, 24}, {90, 28}, {100, 30}, {120, 40}, {200, 60}} {
		for _, demo := range []bool{true, false} {
			var kn Knobs
			if demo {
				kn = &fakeKnobs{cfg: workload.Defaults()}
			}
			m := polled(t, canned(demo), kn, sz[0], sz[1])
			l := m.layout()
			n := len(m.charts())
			rows, cols := chartGrid(l.chartsW, l.midH, n)
			if l.midH/rows < minPlotRows+1 {
				t.Errorf("%dx%d demo %v: %d rows of %d lines", sz[0], sz[1], demo, rows, l.midH/rows)
			}
			if shown := min(n, rows*cols); shown < 4 {
				t.Errorf("%dx%d demo %v: %d charts shown", sz[0], sz[1], demo, shown)
			}
		}
	}
}

// A title gives way label by label and never cuts a figure.
func TestTitlesKeepTheirFigures(t *testing.T) {
	st := newStyles(false)
	spec := chartSpec{
		fields: []field{{"3.4k", "acquires/s", "acq/s", 0}, {"3,312", "commits/s", "com/s", 1}},
		sets:   []chartSet{{"a", nil, st.Line1}, {"b", nil, st.Line2}},
	}
	for w := 16; w <= 60; w++ { // a chart is at least 27 cells wide
		got := ansiStrip(fitTitle(st, spec, w))
		if lipgloss.Width(got) > w || !strings.Contains(got, "3.4k") || !strings.Contains(got, "3,312") {
			t.Fatalf("width %d: %q", w, got)
		}
	}
	if got := fitTitle(st, spec, 60); !strings.Contains(got, "acquires/s") {
		t.Fatalf("long labels at 60: %q", got)
	}
	if got := fitTitle(st, spec, 27); !strings.Contains(got, "acq/s") {
		t.Fatalf("short labels at 27: %q", got)
	}
}

// ? names the scenarios behind the number keys.
func TestHelpNamesTheScenarios(t *testing.T) {
	for _, size := range [][2]int{{100, 30}, {80, 24}} {
		m := polled(t, canned(true), &fakeKnobs{cfg: workload.Defaults()}, size[0], size[1])
		m, _ = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'?'}})
		v := m.View()
		for _, want := range []string{"F fence", "i retry ids", "z/Z", "u autovac"} {
			if !strings.Contains(v, want) {
				t.Fatalf("%dx%d: help lacks %q:\n%s", size[0], size[1], want, v)
			}
		}
		for _, sc := range workload.Scenarios {
			if !strings.Contains(v, sc.Key+" "+sc.Name) {
				t.Fatalf("%dx%d: help lacks %s %s:\n%s", size[0], size[1], sc.Key, sc.Name, v)
			}
		}
	}
}

// fakeActions records what the dashboard asked for.
type fakeActions struct {
	mu               sync.Mutex
	cancelled, ended []int32
	released         []string
}

func (a *fakeActions) Cancel(pid int32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cancelled = append(a.cancelled, pid)
	return nil
}
func (a *fakeActions) Terminate(pid int32) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.ended = append(a.ended, pid)
	return nil
}
func (a *fakeActions) ReleaseExpired(h string) (int64, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.released = append(a.released, h)
	return 3, nil
}

// Actions need --allow-actions; each asks for a y first, and a key other
// than y cancels it.
func TestActionsAskAndAreRefusedWithout(t *testing.T) {
	key := func(s string) tea.KeyMsg {
		switch s {
		case "down":
			return tea.KeyMsg{Type: tea.KeyDown}
		case "up":
			return tea.KeyMsg{Type: tea.KeyUp}
		}
		return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)}
	}
	press := func(m Model, keys ...string) Model {
		for _, k := range keys {
			var msg tea.Msg
			m, msg = run(t, m, key(k))
			if msg != nil {
				mm, _ := m.Update(msg)
				m = mm.(Model)
			}
		}
		return m
	}
	// Without actions: refused, and nothing is marked.
	w := press(polled(t, canned(false), nil, 100, 30), "X")
	if v := w.View(); !strings.Contains(v, "actions are off: start pooltop watch with --allow-actions") || strings.Contains(v, "›") {
		t.Fatalf("without actions:\n%s", v)
	}

	a := &fakeActions{}
	src := canned(false)
	m := newTestModel(src, nil, 100, 30)
	m.opts.Actions = a
	m, msg := run(t, m, tickMsg{gen: 0})
	mm, _ := m.Update(msg)
	m = mm.(Model)
	if v := m.View(); !strings.Contains(v, "›4100 psql") {
		t.Fatalf("the cursor is not on the blocker:\n%s", v)
	}
	m = press(m, "X")
	if v := m.View(); !strings.Contains(v, "terminate backend 4100 (psql, idle in transaction)? y to confirm") {
		t.Fatalf("no confirmation asked:\n%s", v)
	}
	m = press(m, "n")
	if len(a.ended) != 0 || !strings.Contains(m.View(), "cancelled: terminate backend 4100") {
		t.Fatalf("n did not cancel: %v\n%s", a.ended, m.View())
	}
	m = press(m, "X", "y")
	if len(a.ended) != 1 || a.ended[0] != 4100 || !strings.Contains(m.View(), "terminated backend 4100") {
		t.Fatalf("terminate: %v\n%s", a.ended, m.View())
	}
	m = press(m, "x", "y")
	if len(a.cancelled) != 1 || a.cancelled[0] != 4100 {
		t.Fatalf("cancel: %v", a.cancelled)
	}
	// Down to the holder with expired leases, and release them.
	m = press(m, "down", "down")
	if v := m.View(); !strings.Contains(v, "›pod-7 30 (3 expired)") {
		t.Fatalf("the cursor is not on pod-7:\n%s", v)
	}
	m = press(m, "x", "y")
	if len(a.released) != 1 || a.released[0] != "pod-7" || !strings.Contains(m.View(), "released 3 expired leases of pod-7") {
		t.Fatalf("release: %v\n%s", a.released, m.View())
	}
}

// doctorFake is a source with a pool doctor.
type doctorFake struct {
	*fakeSource
	checks []collector.Check
}

func (d doctorFake) Doctor(context.Context, collector.Snapshot) ([]collector.Check, error) {
	return d.checks, nil
}

// The doctor's failing checks stand in the status line; D shows them all.
func TestDoctorOnTheDashboard(t *testing.T) {
	src := doctorFake{canned(false), []collector.Check{
		{Check: "unused_index", Status: collector.CheckOK, Evidence: "claims use x"},
		{Check: "reaper_index", Status: collector.CheckFail, Evidence: "no partial index on leased_until", Remedy: "CREATE INDEX CONCURRENTLY …"},
		{Check: "autovacuum", Status: collector.CheckWarn, Evidence: "30% dead"},
	}}
	m := newTestModel(src, nil, 100, 30)
	// The first poll's result brings the doctor in.
	m, poll := run(t, m, m.Init()())
	mm, cmd := m.Update(poll)
	m = mm.(Model)
	b, ok := cmd().(tea.BatchMsg)
	if !ok {
		t.Fatal("the first poll did not start the doctor")
	}
	for _, c := range b {
		if msg, ok := c().(doctorMsg); ok {
			mm, _ = m.Update(msg)
			m = mm.(Model)
		}
	}
	if v := m.View(); !strings.Contains(v, "doctor: FAIL reaper_index · warn autovacuum (D: details)") {
		t.Fatalf("no doctor line:\n%s", v)
	}
	m, _ = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'D'}})
	if v := m.View(); !strings.Contains(v, "FAIL reaper_index") || !strings.Contains(v, "→ CREATE INDEX CONCURRENTLY") {
		t.Fatalf("D shows no findings:\n%s", v)
	}
	for _, sz := range [][2]int{{80, 24}, {100, 30}} {
		mm, _ := m.Update(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
		if v := mm.(Model).View(); strings.Count(v, "\n") != sz[1]-1 {
			t.Fatalf("%dx%d with the doctor open: %d lines", sz[0], sz[1], strings.Count(v, "\n")+1)
		}
	}
}

// o orders the blocking tree (most waiters, longest wait, pid) and / filters
// it by application name; the action cursor follows what is shown.
func TestSessionsOrderAndFilter(t *testing.T) {
	src := canned(false)
	s := src.snap
	s.Waiters = []collector.Waiter{{PID: 11, App: "api-7", WaitMS: 500}, {PID: 21, App: "batch", WaitMS: 5}, {PID: 22, App: "batch", WaitMS: 6}}
	s.Blockers = []collector.Blocker{{PID: 10, App: "api-1", State: "idle in transaction", Blocks: []int32{11}},
		{PID: 20, App: "batch-0", State: "active", Blocks: []int32{21, 22}}}
	src.snap = s
	m := polled(t, src, nil, 100, 30)
	m.opts.Actions = &fakeActions{}
	first := func() string {
		v := m.View()
		i, j := strings.Index(v, "10 api-1"), strings.Index(v, "20 batch-0")
		switch {
		case i >= 0 && (j < 0 || i < j):
			return "api"
		case j >= 0:
			return "batch"
		}
		return ""
	}
	press := func(keys ...tea.KeyMsg) {
		for _, k := range keys {
			m, _ = run(t, m, k)
		}
	}
	r := func(s string) tea.KeyMsg { return tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune(s)} }
	if f := first(); f != "batch" {
		t.Fatalf("most waiters first: %s\n%s", f, m.View())
	}
	press(r("o"))
	if f := first(); f != "api" || !strings.Contains(m.View(), "who blocks whom · by longest wait") {
		t.Fatalf("longest wait first: %s\n%s", f, m.View())
	}
	if tg, _ := m.selected(); tg.pid != 10 {
		t.Fatalf("the cursor is on %+v, not the first blocker shown", tg)
	}
	press(r("/"), r("b"), r("a"), r("t"), tea.KeyMsg{Type: tea.KeyEnter})
	v := m.View()
	if strings.Contains(v, "10 api-1") || !strings.Contains(v, "20 batch-0") || !strings.Contains(v, "app ~ bat") {
		t.Fatalf("filtered on bat:\n%s", v)
	}
	press(r("/"), tea.KeyMsg{Type: tea.KeyEnter})
	if v := m.View(); !strings.Contains(v, "10 api-1") || !strings.Contains(v, "20 batch-0") {
		t.Fatalf("an empty filter shows all:\n%s", v)
	}
}

// The stories of the shifted digits play from them, each with its banner and
// the knob row of its story; F, i, u and z/Z turn their knobs.
func TestLaterStoryKeys(t *testing.T) {
	kn := &fakeKnobs{cfg: workload.Defaults()}
	m := polled(t, canned(true), kn, 100, 30)
	press := func(keys string) {
		t.Helper()
		for _, r := range keys {
			var msg tea.Msg
			m, msg = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
			if msg != nil {
				mm, _ := m.Update(msg)
				m = mm.(Model)
			}
		}
	}
	for i, sc := range workload.Scenarios[8:] {
		press(sc.Key)
		if m.scenario != 8+i || kn.played[len(kn.played)-1] != 8+i {
			t.Fatalf("key %s played %v, scenario %d; want %d %s", sc.Key, kn.played, m.scenario, 8+i, sc.Name)
		}
		if v := m.View(); !strings.Contains(v, "▶ "+sc.Key+" "+sc.Name) {
			t.Fatalf("no banner for %s:\n%s", sc.Name, v)
		}
	}
	press("!")
	if v := m.View(); !strings.Contains(v, "fencing  in app") || !strings.Contains(v, "fencing in app") {
		t.Fatalf("fence-in-app does not say where the fence is:\n%s", v)
	}
	press("F")
	if c := kn.Config(); !c.Fencing || c.FenceInApp || !strings.Contains(m.View(), "fencing in app → on") {
		t.Fatalf("F did not move the fence into the database: %+v\n%s", c, m.View())
	}
	press("$")
	if v := m.View(); !strings.Contains(v, "req ids  FRESH") {
		t.Fatalf("lost-ack does not show its request ids:\n%s", v)
	}
	press("i")
	if c := kn.Config(); !c.StableRequestID || !strings.Contains(m.View(), "req ids  stable") {
		t.Fatalf("i did not make the request ids stable: %+v\n%s", c, m.View())
	}
	press("@")
	press("z")
	if c := kn.Config(); c.ClockSkew != 500*time.Millisecond {
		t.Fatalf("z gave a skew of %v, want 500ms", c.ClockSkew)
	}
	press("zzZ")
	if c := kn.Config(); c.ClockSkew != 500*time.Millisecond {
		t.Fatalf("z z Z gave a skew of %v, want 500ms", c.ClockSkew)
	}
	press("&")
	if v := m.View(); !strings.Contains(v, "autovac  OFF") {
		t.Fatalf("vacuum-off does not show autovacuum off:\n%s", v)
	}
	press("u")
	if c := kn.Config(); !c.Autovacuum {
		t.Fatal("u did not turn autovacuum back on")
	}
	// A healthy fleet's panel has no story rows.
	press("1")
	if v := m.View(); strings.Contains(v, "req ids") || strings.Contains(v, "autovac") || strings.Contains(v, "skew") {
		t.Fatalf("story rows on a healthy fleet:\n%s", v)
	}
}

// m shows the runbook of each raised alert, from the catalogue, and the
// screen keeps its size.
func TestRunbookOfTheRaisedAlert(t *testing.T) {
	m := polled(t, canned(false), nil, 100, 30)
	if v := m.View(); strings.Contains(v, "look at:") {
		t.Fatalf("a runbook before m:\n%s", v)
	}
	m, _ = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'m'}})
	v := m.View()
	if !strings.Contains(v, "lock_wait (page):") || !strings.Contains(v, "look at: who blocks whom") || strings.Contains(v, "depletion (page)") {
		t.Fatalf("m shows no runbook of the raised lock_wait (and none of the calm depletion):\n%s", v)
	}
	for _, sz := range [][2]int{{80, 24}, {100, 30}} {
		mm, _ := m.Update(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
		if v := mm.(Model).View(); strings.Count(v, "\n") != sz[1]-1 {
			t.Fatalf("%dx%d with the runbook open: %d lines", sz[0], sz[1], strings.Count(v, "\n")+1)
		}
	}
	m, _ = run(t, m, tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{'m'}})
	if v := m.View(); strings.Contains(v, "look at:") {
		t.Fatalf("m again does not hide the runbook:\n%s", v)
	}
}
