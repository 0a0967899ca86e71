package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/pooltop-dev/pooltop/collector"
)

// Player is a recording being replayed (collector.Replay): the dashboard
// moves its play head, and polls its Source for the snapshot there.
type Player interface {
	// Seek moves the play head to the last snapshot at or before t.
	Seek(t time.Time)
	// Step moves the play head by n snapshots.
	Step(n int)
	// Head is the time and index of the snapshot at the play head.
	Head() (time.Time, int)
	// Bounds are the first and last snapshots' times, and their number.
	Bounds() (first, last time.Time, n int)
}

// replayTick is how often, in real time, a playing replay moves on.
const replayTick = 100 * time.Millisecond

// replaySpeeds are the speeds < and > step through.
var replaySpeeds = []float64{0.25, 0.5, 1, 2, 4, 8, 16, 32, 64}

// replay is the state of the play head as the dashboard drives it.
type replay struct {
	playing bool
	speed   int       // index of replaySpeeds
	at      time.Time // recorded time the play head is at, between snapshots when playing
	index   int       // of the snapshot shown
	// prompting: the user types a time to go to (g).
	prompting bool
	input     string
	msg       string // the last word of the prompt (a time not understood)
}

// replayKeys are the keys of the replay, listed by the help bubble.
type replayKeys struct {
	Play, Slower, Faster, Back, Forward, Minus, Plus, Start, End, GoTo key.Binding
	all                                                                keyMap
}

func newReplayKeys(all keyMap) replayKeys {
	b := func(keys []string, k, h string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(k, h))
	}
	return replayKeys{
		Play:    b([]string{" "}, "space", "play/pause"),
		Slower:  b([]string{"<", ","}, "<", "slower"),
		Faster:  b([]string{">", "."}, ">", "faster"),
		Back:    b([]string{"left"}, "←", "one snapshot back"),
		Forward: b([]string{"right"}, "→", "one snapshot on"),
		Minus:   b([]string{"["}, "[", "1 min back"),
		Plus:    b([]string{"]"}, "]", "1 min on"),
		Start:   b([]string{"home"}, "home", "start"),
		End:     b([]string{"end"}, "end", "end"),
		GoTo:    b([]string{"g"}, "g", "go to a time"),
		all:     all,
	}
}

// ShortHelp is the line always visible at the bottom.
func (k replayKeys) ShortHelp() []key.Binding {
	return []key.Binding{k.all.Help, k.all.Quit, k.Play, k.Slower, k.Faster, k.Back, k.Minus, k.Plus, k.GoTo, k.all.Window}
}

// FullHelp is the table shown by '?'.
func (k replayKeys) FullHelp() [][]key.Binding {
	return [][]key.Binding{{k.all.Quit, k.all.Help, k.Play, k.Slower, k.Faster}, {k.Back, k.Forward, k.Minus, k.Plus, k.Start, k.End, k.GoTo},
		{k.all.Window, k.all.Up, k.all.Order, k.all.Filter, k.all.WriteReport}}
}

// move moves the play head and shows what is there. It runs on the UI
// goroutine, unlike a poll: a replay reads memory (a seek back rebuilds an
// hour of series in a few milliseconds), and moves made in the order of
// the keys can never land out of order.
func (m *Model) move(how func(Player)) {
	p, src := m.opts.Replay, m.opts.Source
	how(p)
	msg := pollMsg{gen: m.gen, series: make(map[string][]collector.Point, len(chartSeries))}
	msg.snap, msg.err = src.Poll(context.Background())
	for _, n := range chartSeries {
		msg.series[n] = src.Series(n)
	}
	msg.events = src.Events()
	_, m.replay.index = p.Head()
	m.apply(msg)
}

// replayTickCmd schedules the play loop's next move.
func (m Model) replayTickCmd() tea.Cmd {
	gen := m.gen
	return tea.Tick(replayTick, func(time.Time) tea.Msg { return tickMsg{gen: gen} })
}

// replayTicked moves a playing replay on by a tick at its speed.
func (m Model) replayTicked() (Model, tea.Cmd) {
	r := &m.replay
	if m.snap == nil {
		m.move(func(Player) {}) // the first snapshot
	}
	if r.playing {
		_, last, _ := m.opts.Replay.Bounds()
		r.at = r.at.Add(time.Duration(float64(replayTick) * replaySpeeds[r.speed]))
		if !r.at.Before(last) {
			r.at, r.playing = last, false
		}
		at := r.at
		m.move(func(p Player) { p.Seek(at) })
	}
	return m, m.replayTickCmd()
}

// replayKey handles the keys of the replay; ok is false for the others.
func (m Model) replayKey(msg tea.KeyMsg) (Model, tea.Cmd, bool) {
	p, r, k := m.opts.Replay, &m.replay, m.replayKeys
	first, last, _ := p.Bounds()
	seek := func(t time.Time) tea.Cmd {
		t = clampTime(t, first, last)
		r.at = t
		m.move(func(p Player) { p.Seek(t) })
		return nil
	}
	if r.prompting {
		switch msg.Type {
		case tea.KeyEsc:
			r.prompting = false
		case tea.KeyEnter:
			r.prompting = false
			t, err := replayTime(r.input, r.at, first)
			if err != nil {
				r.msg = err.Error()
				return m, nil, true
			}
			r.msg = ""
			return m, seek(t), true
		case tea.KeyBackspace:
			if len(r.input) > 0 {
				r.input = r.input[:len(r.input)-1]
			}
		case tea.KeyRunes:
			r.input += string(msg.Runes)
		}
		return m, nil, true
	}
	switch {
	case key.Matches(msg, k.Play):
		r.playing = !r.playing
		if r.playing && !r.at.Before(last) {
			return m, seek(first), true // played to the end: again from the start
		}
		return m, nil, true
	case key.Matches(msg, k.Slower):
		r.speed = max(r.speed-1, 0)
		return m, nil, true
	case key.Matches(msg, k.Faster):
		r.speed = min(r.speed+1, len(replaySpeeds)-1)
		return m, nil, true
	case key.Matches(msg, k.Back), key.Matches(msg, k.Forward):
		n := 1
		if key.Matches(msg, k.Back) {
			n = -1
		}
		r.playing = false
		m.move(func(p Player) { p.Step(n) })
		r.at, _ = p.Head()
		return m, nil, true
	case key.Matches(msg, k.Minus):
		return m, seek(r.at.Add(-time.Minute)), true
	case key.Matches(msg, k.Plus):
		return m, seek(r.at.Add(time.Minute)), true
	case key.Matches(msg, k.Start):
		return m, seek(first), true
	case key.Matches(msg, k.End):
		r.playing = false
		return m, seek(last), true
	case key.Matches(msg, k.GoTo):
		r.prompting, r.input, r.msg = true, "", ""
		return m, nil, true
	}
	return m, nil, false
}

func clampTime(t, first, last time.Time) time.Time {
	if t.Before(first) {
		return first
	}
	if t.After(last) {
		return last
	}
	return t
}

// replayTime reads a time typed at the prompt: HH:MM or HH:MM:SS on the
// day of the play head (in its zone), or an offset from the start of the
// recording (+90s, +5m).
func replayTime(s string, at, first time.Time) (time.Time, error) {
	s = strings.TrimSpace(s)
	if strings.HasPrefix(s, "+") {
		d, err := time.ParseDuration(s[1:])
		if err != nil {
			return time.Time{}, fmt.Errorf("%q: give HH:MM:SS, or +5m from the start", s)
		}
		return first.Add(d), nil
	}
	for _, layout := range []string{"15:04:05", "15:04"} {
		if t, err := time.ParseInLocation(layout, s, at.Location()); err == nil {
			y, mo, d := at.Date()
			return time.Date(y, mo, d, t.Hour(), t.Minute(), t.Second(), 0, at.Location()), nil
		}
	}
	return time.Time{}, fmt.Errorf("%q: give HH:MM:SS, or +5m from the start", s)
}

// replayHeader is the header's account of the replay: REPLAY, the
// recorded time at the play head, play or pause and the speed.
func (m Model) replayHeader() string {
	r := m.replay
	state := "paused"
	if r.playing {
		state = "playing"
	}
	_, _, n := m.opts.Replay.Bounds()
	at := r.at
	if m.snap != nil {
		at = m.snap.Time
	}
	return fmt.Sprintf("REPLAY %s │ %s %sx │ %d/%d", at.Format("2006-01-02 15:04:05"), state, speedText(replaySpeeds[r.speed]), r.index+1, n)
}

func speedText(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

// replayStatus is the status line's word on the replay: the prompt.
func (m Model) replayStatus() string {
	r := m.replay
	switch {
	case r.prompting:
		return m.styles.Warn.Render(" go to (HH:MM:SS, or +5m from the start): " + sanitize(r.input) + "▏ enter goes, esc cancels ")
	case r.msg != "":
		return m.styles.Alert.Render(" " + sanitize(r.msg) + " ")
	}
	return ""
}
