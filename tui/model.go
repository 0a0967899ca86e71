// Package tui is pooltop's dashboard: a Bubble Tea program that shows one
// pool live from the collector's snapshots and, in the demo, turns the
// workload's knobs. It runs no SQL: polls happen in commands that call the
// collector, and knob changes go to the workload through a small interface.
package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/help"
	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/workload"
)

// Source is where the dashboard's data comes from: the collector, or a fake
// in tests.
type Source interface {
	Poll(ctx context.Context) (collector.Snapshot, error)
	Series(name string) []collector.Point
	Events() []collector.Event
	Info() collector.Info
}

// Knobs is the demo as the dashboard sees it (nil in watch mode): the
// workload's knobs, and the scenarios.
type Knobs interface {
	Config() workload.Config
	SetConfig(workload.Config) error
	// Reset starts counters, charts and alerts again from zero.
	Reset()
	// Play starts scenario i of workload.Scenarios on a fresh pool.
	Play(i int) error
	// Fresh makes a fresh pool for the knobs in force.
	Fresh() error
}

// Options configure the dashboard.
type Options struct {
	Source Source
	Knobs  Knobs // nil: watch mode, read-only
	// Actions, when set, let the user cancel or terminate a blocking
	// session and release a holder's expired leases from the screen.
	Actions Actions
	Mode    string // shown in the header: "demo" or "watch"
	// Server, when set, names the server in the header instead of
	// user@host/database (the demo's "embedded 127.0.0.1:port").
	Server   string
	Interval time.Duration
	Color    bool
	// Scenario names the preset of workload.Scenarios the demo started
	// with; "" for knobs of the user's own.
	Scenario string
	// Now is the clock; tests pin it so the view is reproducible.
	Now func() time.Time
	// Replay, when set, is the recording Source plays: the dashboard shows
	// REPLAY and the recorded time, and its keys move the play head.
	Replay Player
	// Report, when set, writes the report (pooltop report) of what has
	// been recorded so far and returns the file's path: the key O.
	Report func() (string, error)
}

// messages
type (
	tickMsg struct{ gen int }
	pollMsg struct {
		gen    int
		snap   collector.Snapshot
		err    error
		series map[string][]collector.Point
		events []collector.Event
		// info is the source's, read after the poll (a watch over several
		// servers learns theirs as they answer); nil from a replay.
		info *collector.Info
	}
	knobMsg struct {
		cfg workload.Config
		err error
	}
	resetMsg struct{}
	// playMsg: a scenario (i ≥ 0) or a fresh pool (i < 0) is ready.
	playMsg struct {
		i   int
		cfg workload.Config
		err error
	}
	// reportMsg: the report was written (Options.Report).
	reportMsg struct {
		path string
		err  error
	}
	// serverMsg: a server was stopped or started again (ServerFault).
	serverMsg struct {
		what string
		err  error
	}
)

// ServerFault is a demo over throwaway servers whose dashboard can stop
// one of them hard and start it again (the key S): the outage of a server
// of the pool, live. The Knobs implement it when they can.
type ServerFault interface {
	// ToggleServer stops the server hard (an immediate shutdown) when it
	// runs and starts it again when stopped, and says what it did.
	ToggleServer() (string, error)
}

// chartSeries are the series the charts draw, copied on each poll.
var chartSeries = []string{collector.SeriesAcquires, collector.SeriesCommits, collector.SeriesAcquireP99,
	collector.SeriesLockWaitMax, collector.SeriesLWLockWaits, collector.SeriesDeadTuples, collector.SeriesBurn, collector.SeriesLeaked,
	collector.SeriesExpired, collector.SeriesFenced, collector.SeriesDouble, collector.SeriesConsumedPerS,
	collector.SeriesDoublePerS, collector.SeriesConflictsPerS, collector.SeriesClaimMeanMS,
	collector.SeriesLeasesLostPerS, collector.SeriesEmptyPerS, collector.SeriesErrorsPerS}

// Model is the root model: it routes keys, owns the poll loop and lays out
// the panels.
type Model struct {
	opts   Options
	info   collector.Info
	keys   keyMap
	help   help.Model
	styles Styles

	width, height int
	interval      time.Duration
	gen           int  // tick generation: ticks of an older one are stale
	inFlight      bool // one poll at a time
	paused        bool
	showHelp      bool
	started       time.Time

	snap     *collector.Snapshot
	series   map[string][]collector.Point
	events   []collector.Event
	held     *pollMsg // newest poll while the display is paused
	err      error
	errSince time.Time
	polls    int

	cfg     workload.Config
	knobErr string
	// scenario is the index of the scenario last started (-1: none);
	// custom, that knobs were turned since. busy says what is being
	// prepared (a fresh pool); action is what the last key did.
	scenario int
	custom   bool
	// The action cursor over targets(), an action awaiting its y, and the
	// last word about actions.
	cursor  int
	confirm *pendingAction
	notice  string
	// The blocking tree's order (an index of sessionOrders) and its
	// filter on application names, being typed while filtering.
	order     int
	filter    string
	filtering bool
	// doctor holds the last findings of the pool doctor (nil: none yet);
	// showDoctor shows them in full.
	doctor     []collector.Check
	doctorErr  string
	showDoctor bool
	// showRunbook shows the runbooks of the raised alerts (m).
	showRunbook bool
	// doctorAsked: the doctor has run, or runs, after the first poll.
	doctorAsked bool
	busy        string
	action      string

	chartCache chartCache
	// window is the charts' time span, an index of chartWindows.
	window int

	replay     replay
	replayKeys replayKeys
}

// chartWindows are the charts' time spans the window key steps through:
// 0 is as much as the width shows at two samples a cell.
var chartWindows = []time.Duration{0, time.Minute, 15 * time.Minute, time.Hour}

// New builds the model. It reads the workload's knobs once; afterwards the
// model keeps its own copy, updated from every change it makes.
func New(o Options) Model {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Interval == 0 {
		o.Interval = time.Second
	}
	if o.Mode == "" {
		o.Mode = "watch"
		if o.Knobs != nil {
			o.Mode = "demo"
		}
	}
	m := Model{
		opts: o, info: o.Source.Info(), keys: newKeyMap(o.Knobs != nil), help: help.New(),
		styles: newStyles(o.Color), interval: o.Interval, started: o.Now(), series: map[string][]collector.Point{},
		scenario: -1,
	}
	_, faults := o.Knobs.(ServerFault)
	m.keys.StopServer.SetEnabled(faults)
	m.keys.WriteReport.SetEnabled(o.Report != nil)
	m.replayKeys = newReplayKeys(m.keys)
	if o.Replay != nil {
		first, _, _ := o.Replay.Bounds()
		m.replay = replay{playing: true, speed: 2, at: first}
	}
	m.help.Styles.ShortKey, m.help.Styles.FullKey = m.styles.HelpKey, m.styles.HelpKey
	m.help.Styles.ShortDesc, m.help.Styles.FullDesc = m.styles.HelpDesc, m.styles.HelpDesc
	m.help.Styles.ShortSeparator, m.help.Styles.FullSeparator, m.help.Styles.Ellipsis = m.styles.HelpDesc, m.styles.HelpDesc, m.styles.HelpDesc
	if o.Knobs != nil {
		m.cfg = o.Knobs.Config()
		for i, sc := range workload.Scenarios {
			if sc.Name == o.Scenario {
				m.scenario = i
			}
		}
	}
	return m
}

// Init starts the poll loop with an immediate poll; the doctor runs once
// the first poll is in.
func (m Model) Init() tea.Cmd {
	return func() tea.Msg { return tickMsg{gen: m.gen} }
}

// pollCmd polls in a command goroutine and copies what the view needs, so
// nothing on the UI goroutine waits for the database.
func pollCmd(src Source, gen int, timeout time.Duration) tea.Cmd {
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		snap, err := src.Poll(ctx)
		msg := pollMsg{gen: gen, snap: snap, err: err, series: make(map[string][]collector.Point, len(chartSeries))}
		for _, n := range chartSeries {
			msg.series[n] = src.Series(n)
		}
		msg.events = src.Events()
		info := src.Info()
		msg.info = &info
		return msg
	}
}

func (m Model) tick() tea.Cmd {
	gen := m.gen
	return tea.Tick(m.interval, func(time.Time) tea.Msg { return tickMsg{gen: gen} })
}

func setConfigCmd(k Knobs, cfg workload.Config) tea.Cmd {
	return func() tea.Msg { return knobMsg{cfg: cfg, err: k.SetConfig(cfg)} }
}

// Update handles one message.
func (m Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
		m.help.Width = msg.Width
		m.cacheCharts()
		return m, nil
	case tickMsg:
		if msg.gen != m.gen || m.inFlight {
			return m, nil // stale: the interval changed, or a poll is still out
		}
		if m.opts.Replay != nil {
			return m.replayTicked()
		}
		m.inFlight = true
		return m, pollCmd(m.opts.Source, m.gen, m.interval+5*time.Second)
	case pollMsg:
		m.inFlight = false
		if m.paused {
			m.held = &msg
		} else {
			m.apply(msg)
		}
		if !m.doctorAsked && m.snap != nil {
			m.doctorAsked = true
			if d := doctorCmd(m.opts.Source, m.snap); d != nil {
				return m, tea.Batch(m.tick(), d)
			}
		}
		return m, m.tick()
	case knobMsg:
		if msg.err != nil {
			m.knobErr = msg.err.Error()
		} else {
			m.cfg, m.knobErr = msg.cfg, ""
		}
		return m, nil
	case doctorMsg:
		m.doctor, m.doctorErr = msg.checks, ""
		if msg.err != nil {
			m.doctorErr = firstLine(msg.err.Error())
		}
		m.cacheCharts()
		return m, nil
	case actionMsg:
		if msg.err != nil {
			m.notice = "failed: " + firstLine(msg.err.Error())
		} else {
			m.notice = msg.done
		}
		return m, nil
	case resetMsg:
		m.action = "counters, charts and alerts reset"
		return m, nil
	case reportMsg:
		if msg.err != nil {
			m.notice = "report failed: " + firstLine(msg.err.Error())
		} else {
			m.notice = "report written: " + msg.path
		}
		return m, nil
	case serverMsg:
		m.busy = ""
		if msg.err != nil {
			m.knobErr = msg.err.Error()
		} else {
			m.action, m.knobErr = msg.what, ""
		}
		return m, nil
	case playMsg:
		m.busy = ""
		if msg.err != nil {
			m.knobErr = msg.err.Error()
			return m, nil
		}
		m.cfg, m.knobErr = msg.cfg, ""
		if msg.i >= 0 {
			m.scenario, m.custom, m.action = msg.i, false, ""
		} else {
			m.action = "a fresh pool"
		}
		m.cacheCharts()
		return m, nil
	case tea.KeyMsg:
		return m.key(msg)
	}
	return m, nil
}

// apply takes a poll result into the model. On error the last good data
// stays on screen and the error is shown.
func (m *Model) apply(msg pollMsg) {
	if msg.err != nil {
		if m.err == nil {
			m.errSince = m.opts.Now()
		}
		m.err = msg.err
		return
	}
	m.err = nil
	m.polls++
	if msg.info != nil {
		m.info = *msg.info
	}
	snap := msg.snap
	m.snap = &snap
	m.series = msg.series
	m.events = msg.events
	m.cacheCharts()
}

func (m Model) key(msg tea.KeyMsg) (tea.Model, tea.Cmd) {
	k := m.keys
	if m.opts.Replay != nil && (m.replay.prompting || !m.filtering) {
		if mm, cmd, ok := m.replayKey(msg); ok {
			mm.cacheCharts()
			return mm, cmd
		}
	}
	if key.Matches(msg, k.Window) && !m.filtering {
		m.window = (m.window + 1) % len(chartWindows)
		m.cacheCharts()
		return m, nil
	}
	if m.confirm == nil { // a pending confirmation takes the next key
		if mm, ok := m.sessionKey(msg); ok {
			return mm, nil
		}
	}
	if mm, cmd, ok := m.actionKey(msg); ok {
		return mm, cmd
	}
	switch {
	case key.Matches(msg, k.Quit):
		return m, tea.Quit
	case key.Matches(msg, k.Help):
		m.showHelp = !m.showHelp
		m.help.ShowAll = m.showHelp
		m.cacheCharts()
		return m, nil
	case key.Matches(msg, k.Runbook):
		m.showRunbook = !m.showRunbook
		m.cacheCharts()
		return m, nil
	case key.Matches(msg, k.WriteReport):
		write := m.opts.Report
		m.notice = "writing the report…"
		return m, func() tea.Msg { path, err := write(); return reportMsg{path, err} }
	case key.Matches(msg, k.Doctor):
		m.showDoctor = !m.showDoctor
		m.cacheCharts()
		if m.showDoctor {
			return m, doctorCmd(m.opts.Source, m.snap) // a fresh reading
		}
		return m, nil
	case key.Matches(msg, k.Pause):
		m.paused = !m.paused
		if !m.paused && m.held != nil {
			m.apply(*m.held)
			m.held = nil
		}
		return m, nil
	case key.Matches(msg, k.Slower), key.Matches(msg, k.Faster):
		dir := 1
		if key.Matches(msg, k.Faster) {
			dir = -1
		}
		next := step(intervalSteps, m.interval, dir)
		if next == m.interval {
			return m, nil
		}
		m.interval = next
		m.cacheCharts()
		m.gen++ // the tick already scheduled is now stale
		if m.inFlight {
			return m, nil // the poll's result re-arms the tick
		}
		return m, m.tick()
	}
	if m.opts.Knobs == nil {
		return m, nil
	}
	if m.busy != "" {
		return m, nil // a fresh pool is being made: knobs wait for it
	}
	knobs := m.opts.Knobs
	switch {
	case key.Matches(msg, k.Reset):
		return m, func() tea.Msg { knobs.Reset(); return resetMsg{} }
	case key.Matches(msg, k.Fresh):
		m.busy = "making a fresh pool…"
		return m, func() tea.Msg { err := knobs.Fresh(); return playMsg{i: -1, cfg: knobs.Config(), err: err} }
	case key.Matches(msg, k.Preset):
		i := presetIndex(msg.String())
		if i < 0 {
			return m, nil
		}
		m.busy = fmt.Sprintf("starting %s %s on a fresh pool…", workload.Scenarios[i].Key, workload.Scenarios[i].Name)
		return m, func() tea.Msg { err := knobs.Play(i); return playMsg{i: i, cfg: knobs.Config(), err: err} }
	case key.Matches(msg, k.StopServer):
		f, ok := knobs.(ServerFault)
		if !ok {
			return m, nil
		}
		m.busy = "stopping or starting a server…"
		return m, func() tea.Msg { what, err := f.ToggleServer(); return serverMsg{what, err} }
	}
	cfg, changed := m.turn(msg)
	if !changed {
		return m, nil
	}
	m.custom = true
	m.action = strings.Join(cfg.Changes(m.cfg), ", ")
	return m, setConfigCmd(m.opts.Knobs, cfg)
}

// turn applies a knob key to a copy of the config.
func (m Model) turn(msg tea.KeyMsg) (workload.Config, bool) {
	k, c := m.keys, m.cfg
	switch {
	case key.Matches(msg, k.Lease):
		c.Lease = !c.Lease
	case key.Matches(msg, k.Fencing):
		c.Fencing = !c.Fencing
	case key.Matches(msg, k.Renew):
		c.Renew = !c.Renew
	case key.Matches(msg, k.Reaper):
		c.Reaper = !c.Reaper
	case key.Matches(msg, k.Strategy):
		c.Strategy = nextStrategy(c.Strategy)
	case key.Matches(msg, k.FenceWhere):
		c.FenceInApp = c.Fencing && !c.FenceInApp
		c.Fencing = true
	case key.Matches(msg, k.RequestID):
		c.StableRequestID = !c.StableRequestID
	case key.Matches(msg, k.Autovacuum):
		c.Autovacuum = !c.Autovacuum
	case key.Matches(msg, k.Report):
		c.ShareHold = workload.ShareHoldOn
		if m.cfg.ShareHold > 0 {
			c.ShareHold = 0
		}
	default:
		// The stepped knobs: a key down and a key up each.
		for _, s := range []struct {
			down, up key.Binding
			move     func(c *workload.Config, dir int)
		}{
			{k.WorkersDown, k.WorkersUp, func(c *workload.Config, d int) { c.Workers = step(workerSteps, c.Workers, d) }},
			{k.CrashDown, k.CrashUp, func(c *workload.Config, d int) { c.CrashRate = step(faultSteps, c.CrashRate, d) }},
			{k.PauseDown, k.PauseUp, func(c *workload.Config, d int) {
				c.PauseRate = step(faultSteps, c.PauseRate, d)
				if d > 0 && c.PauseLength <= c.TTL { // a pause shorter than the lease shows nothing
					c.PauseLength = c.TTL + c.TTL/2
				}
			}},
			{k.TTLDown, k.TTLUp, func(c *workload.Config, d int) { c.TTL = step(ttlSteps, c.TTL, d) }},
			{k.BatchDown, k.BatchUp, func(c *workload.Config, d int) { c.Batch = step(batchSteps, c.Batch, d) }},
			{k.TaskDown, k.TaskUp, func(c *workload.Config, d int) { c.Task = step(taskSteps, c.Task, d) }},
			{k.RefillDown, k.RefillUp, func(c *workload.Config, d int) { *c = stepRefill(*c, d) }},
			{k.RateDown, k.RateUp, func(c *workload.Config, d int) { c.Rate = step(rateSteps, c.Rate, d) }},
			{k.SkewDown, k.SkewUp, func(c *workload.Config, d int) { c.ClockSkew = step(skewSteps, c.ClockSkew, d) }},
		} {
			switch {
			case key.Matches(msg, s.down):
				s.move(&c, -1)
				return c, c != m.cfg
			case key.Matches(msg, s.up):
				s.move(&c, 1)
				return c, c != m.cfg
			}
		}
		return c, false
	}
	return c, c != m.cfg
}

// Run shows the dashboard until the user quits or ctx ends, and restores
// the terminal.
func Run(ctx context.Context, o Options, opts ...tea.ProgramOption) error {
	opts = append([]tea.ProgramOption{tea.WithAltScreen(), tea.WithContext(ctx)}, opts...)
	_, err := tea.NewProgram(New(o), opts...).Run()
	if errors.Is(err, tea.ErrProgramKilled) && ctx.Err() != nil {
		return nil // SIGTERM or Ctrl-C outside the program: a normal end
	}
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	return nil
}
