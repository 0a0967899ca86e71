package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"

	"github.com/pooltop-dev/pooltop/collector"
)

// Smallest terminal the layout fits.
const (
	minWidth  = 80
	minHeight = 24
	knobsW    = 30
)

// View renders the whole screen: every region has a fixed size, so frames
// line up and nothing flickers.
func (m Model) View() string {
	if m.width == 0 || m.height == 0 {
		return ""
	}
	if m.width < minWidth || m.height < minHeight {
		msg := fmt.Sprintf("pooltop needs at least %d×%d (this terminal is %d×%d): enlarge it, or press q to quit", minWidth, minHeight, m.width, m.height)
		return lipgloss.Place(m.width, m.height, lipgloss.Center, lipgloss.Center, lipgloss.NewStyle().Width(min(m.width, 50)).Render(msg))
	}
	w := m.width
	l := m.layout()
	header := m.viewHeader(w)
	bar := m.viewPool(w)
	status := m.viewStatus(w)
	var knobs string
	if m.opts.Knobs != nil {
		knobs = m.viewKnobs(knobsW, l.midH)
	}
	charts := m.chartCache.view
	if m.chartCache.l != l {
		charts = m.viewCharts(l.chartsW, l.midH)
	}
	middle := lipgloss.JoinHorizontal(lipgloss.Top, charts, knobs)
	left := w / 2
	bottom := lipgloss.JoinHorizontal(lipgloss.Top, m.viewLocks(left, l.bottomH), m.viewEvents(w-left, l.bottomH))
	return strings.Join([]string{header, bar, middle, bottom, status, box(l.help, w, l.helpH)}, "\n")
}

// layout is the size of each region for the current terminal.
type layout struct {
	chartsW, midH, bottomH, helpH int
	help                          string
	interval                      time.Duration // the charts' window depends on it
}

func (m Model) layout() layout {
	l := layout{help: m.help.View(m.keys), interval: m.interval}
	l.helpH = lipgloss.Height(l.help)
	l.bottomH = min(max(m.height/4, 5), 14)
	l.midH = m.height - 1 - 2 - l.bottomH - 1 - l.helpH
	if l.midH < 4 {
		l.bottomH -= 4 - l.midH
		l.midH = 4
	}
	l.chartsW = m.width
	if m.opts.Knobs != nil {
		l.chartsW -= knobsW
	}
	return l
}

// chartCache holds the chart grid rendered for a layout: charts change only
// when data arrives or the layout changes, not on every frame.
type chartCache struct {
	l    layout
	view string
}

// cacheCharts renders the charts for the current data and layout.
func (m *Model) cacheCharts() {
	if m.width < minWidth || m.height < minHeight {
		m.chartCache = chartCache{}
		return
	}
	l := m.layout()
	m.chartCache = chartCache{l: l, view: m.viewCharts(l.chartsW, l.midH)}
}

// box fixes s to exactly width×height.
func box(s string, width, height int) string {
	lines := strings.Split(s, "\n")
	out := make([]string, height)
	for i := range out {
		if i < len(lines) {
			out[i] = pad(lines[i], width)
		} else {
			out[i] = strings.Repeat(" ", width)
		}
	}
	return strings.Join(out, "\n")
}

func (m Model) now() time.Time { return m.opts.Now() }

func (m Model) viewHeader(w int) string {
	i := m.info
	where := sanitize(fmt.Sprintf("%s@%s/%s", i.User, i.Host, i.Database))
	if m.opts.Server != "" {
		where = sanitize(m.opts.Server)
	}
	up := m.now().Sub(m.started).Round(time.Second)
	parts := []string{"pooltop " + m.opts.Mode, where, sanitize(i.Table), "PG " + sanitize(strings.Fields(i.Version + " ?")[0]),
		"up " + up.String(), "poll " + m.interval.String()}
	left := m.styles.Header.Render(pad(" "+strings.Join(parts, " │ "), w))
	var active []string
	if m.snap != nil {
		for _, a := range m.snap.Alerts {
			if a.Active {
				active = append(active, a.Name)
			}
		}
	}
	if len(active) == 0 {
		return left
	}
	tag := m.styles.Alert.Render(" ALERT " + strings.Join(active, " ") + " ")
	tw := lipgloss.Width(tag)
	if tw >= w {
		return truncate(tag, w)
	}
	return truncate(left, w-tw) + tag
}

// est marks a figure that is an estimate.
func est(s *collector.Snapshot, name string) string {
	for _, e := range s.Pool.Estimated {
		if e == name {
			return "~"
		}
	}
	return ""
}

func (m Model) viewPool(w int) string {
	st := m.styles
	if m.snap == nil {
		return box(st.Dim.Render("waiting for the first poll…"), w, 2)
	}
	p := m.snap.Pool
	expired := min(p.Expired, p.Pending)
	held := p.Pending - expired
	total := max(p.Unused+p.Pending+p.Consumed, 1)
	// The bar: one glyph per share of the pool, distinct even without colour.
	segs := []struct {
		n     int64
		glyph string
		style lipgloss.Style
	}{{p.Unused, "█", st.Unused}, {held, "▓", st.Pending}, {expired, "▒", st.Expired}, {p.Consumed, "░", st.Consumed}}
	var bar strings.Builder
	used := 0
	for i, s := range segs {
		n := int(float64(w) * float64(s.n) / float64(total))
		if s.n > 0 && n == 0 {
			n = 1 // a non-empty share is always visible
		}
		if i == len(segs)-1 {
			n = w - used
		}
		n = max(0, min(n, w-used))
		used += n
		bar.WriteString(s.style.Render(strings.Repeat(s.glyph, n)))
	}
	s := m.snap
	eta := "not draining"
	if p.Unused == 0 && p.Total > 0 {
		eta = st.Alert.Render("EMPTY")
	} else if s.DepletionETAS != nil {
		eta = "empty in " + shortDuration(*s.DepletionETAS)
	}
	leaked := ""
	if s.Workload != nil {
		leaked = " · leaked " + formatInt(int64(s.Workload.Leaked))
	}
	pendingAge := ""
	if est(s, "pending") != "" && p.PendingAgeS >= 5 {
		pendingAge = " (" + shortDuration(p.PendingAgeS) + " old)"
	}
	nums := fmt.Sprintf("█ UNUSED %s%s · ▓ PENDING %s%s%s · ▒ expired %s · ░ CONSUMED %s%s · stuck %s%s · %s",
		est(s, "unused"), formatInt(p.Unused), est(s, "pending"), formatInt(p.Pending), pendingAge, formatInt(p.Expired),
		est(s, "consumed"), formatInt(p.Consumed), formatInt(p.Stuck), leaked, eta)
	return bar.String() + "\n" + pad(nums, w)
}

func (m Model) charts() []chartSpec {
	st := m.styles
	s := m.series
	snap := m.snap
	var specs []chartSpec
	if m.opts.Knobs != nil || (snap != nil && snap.Workload != nil) {
		specs = append(specs, chartSpec{
			title: fmt.Sprintf("throughput/s  acquires %s  commits %s", formatFloat(last(s[collector.SeriesAcquires])), formatFloat(last(s[collector.SeriesCommits]))),
			sets:  []chartSet{{"acquires", s[collector.SeriesAcquires], st.Line1}, {"commits", s[collector.SeriesCommits], st.Line2}},
		}, chartSpec{
			title: fmt.Sprintf("p99 acquire latency  %.1f ms", last(s[collector.SeriesAcquireP99])),
			sets:  []chartSet{{"p99", s[collector.SeriesAcquireP99], st.Line1}},
		})
	} else {
		specs = append(specs, chartSpec{
			title: fmt.Sprintf("consumed/s  %s", formatFloat(last(s[collector.SeriesConsumedPerS]))),
			sets:  []chartSet{{"consumed", s[collector.SeriesConsumedPerS], st.Line1}},
		})
	}
	lockTitle := fmt.Sprintf("lock wait max  %.0f ms", last(s[collector.SeriesLockWaitMax]))
	deadTitle := fmt.Sprintf("dead tuples  %s", formatInt(int64(last(s[collector.SeriesDeadTuples]))))
	burnTitle := fmt.Sprintf("burn  %s/s", formatFloat(last(s[collector.SeriesBurn])))
	lockAlarm, deadAlarm, burnAlarm := false, false, false
	if snap != nil {
		lockTitle += fmt.Sprintf("  %d waiting", snap.LockWaiters)
		deadTitle += fmt.Sprintf("  %.0f%%", 100*snap.DeadRatio)
		if w := snap.WorstPartition; w != nil {
			deadTitle += fmt.Sprintf("  worst %s %.0f%%", sanitize(w.Name), 100*w.DeadRatio)
		}
		if snap.Vacuum != nil {
			deadTitle += fmt.Sprintf("  vacuum %s %.0f%%", snap.Vacuum.Phase, snap.Vacuum.Percent)
		}
		if snap.DepletionETAS != nil {
			burnTitle += "  empty in " + shortDuration(*snap.DepletionETAS)
		}
		for _, a := range snap.Alerts {
			switch a.Name {
			case collector.AlertLockWait:
				lockAlarm = a.Active
			case collector.AlertDeadTuples:
				deadAlarm = a.Active
			case collector.AlertDepletion:
				burnAlarm = a.Active
			}
		}
	}
	specs = append(specs,
		chartSpec{title: lockTitle, alarm: lockAlarm, sets: []chartSet{{"wait", s[collector.SeriesLockWaitMax], st.Line1}}},
		chartSpec{title: deadTitle, alarm: deadAlarm, sets: []chartSet{{"dead", s[collector.SeriesDeadTuples], st.Line1}}},
		chartSpec{title: burnTitle, alarm: burnAlarm, sets: []chartSet{{"burn", s[collector.SeriesBurn], st.Line1}}},
	)
	if snap == nil || snap.Workload != nil || m.opts.Knobs != nil {
		leaked := last(s[collector.SeriesLeaked])
		specs = append(specs, chartSpec{
			title: fmt.Sprintf("leaked %s  expired PENDING %s", formatInt(int64(leaked)), formatInt(int64(last(s[collector.SeriesExpired])))),
			alarm: leaked > 0,
			sets:  []chartSet{{"leaked", s[collector.SeriesLeaked], st.Expired}, {"expired", s[collector.SeriesExpired], st.Line2}},
		})
		double := last(s[collector.SeriesDouble])
		specs = append(specs, chartSpec{
			title: fmt.Sprintf("fenced/s %s  double finalizations %s", formatFloat(last(s[collector.SeriesFenced])), formatInt(int64(double))),
			alarm: double > 0,
			sets:  []chartSet{{"fenced", s[collector.SeriesFenced], st.Line1}, {"double", s[collector.SeriesDouble], st.Expired}},
		})
	} else {
		specs = append(specs, chartSpec{
			title: fmt.Sprintf("expired PENDING %s", formatInt(int64(last(s[collector.SeriesExpired])))),
			sets:  []chartSet{{"expired", s[collector.SeriesExpired], st.Line1}},
		})
	}
	return specs
}

// viewCharts lays the charts out in a grid that fills width×height.
func (m Model) viewCharts(width, height int) string {
	specs := m.charts()
	maxCols := min(max(width/42, 2), 4)
	rows := (len(specs) + maxCols - 1) / maxCols
	cols := (len(specs) + rows - 1) / rows // as few empty cells as the rows allow
	for rows > 1 && height/rows < 3 {      // too short: show fewer charts
		specs = specs[:len(specs)-cols+max(0, cols*rows-len(specs))]
		rows = (len(specs) + cols - 1) / cols
	}
	window := time.Duration(max(width/cols-yLabelWidth-2, 10)*2) * m.interval // about two samples per cell of braille
	var lines []string
	for r := 0; r < rows; r++ {
		h := height / rows
		if r < height%rows {
			h++
		}
		var row []string
		for c := 0; c < cols; c++ {
			cw := width / cols
			if c == cols-1 {
				cw = width - cw*(cols-1)
			}
			i := r*cols + c
			if i >= len(specs) {
				row = append(row, blank(cw, h))
				continue
			}
			row = append(row, box(renderChart(m.styles, specs[i], cw-1, h, m.now(), window), cw, h))
		}
		lines = append(lines, lipgloss.JoinHorizontal(lipgloss.Top, row...))
	}
	return box(strings.Join(lines, "\n"), width, height)
}

func (m Model) viewKnobs(width, height int) string {
	st := m.styles
	title := "knobs"
	if m.preset != "" {
		title += " · " + m.preset
	}
	lines := []string{st.Title.Render(title)}
	for _, r := range knobRows(m.cfg) {
		v := r.value
		if v == "OFF" {
			v = st.Warn.Render(v)
		}
		lines = append(lines, fmt.Sprintf("%s %s %s", st.Dim.Render(fmt.Sprintf("%-3s", r.key)), pad(r.name, 8), v))
	}
	lines = append(lines, st.Dim.Render("1-8 scenario  r reset"))
	if m.knobErr != "" {
		lines = append(lines, st.Alert.Render(truncate(m.knobErr, width-2)))
	}
	return box(lipgloss.NewStyle().PaddingLeft(1).Render(strings.Join(lines, "\n")), width, height)
}

func (m Model) viewLocks(width, height int) string {
	st := m.styles
	lines := []string{st.Title.Render("who blocks whom")}
	s := m.snap
	switch {
	case s == nil:
	case len(s.Waiters) == 0:
		lines = append(lines, st.OK.Render("no session waits on a lock"))
	default:
		waits := map[int32]collector.Waiter{}
		for _, w := range s.Waiters {
			waits[w.PID] = w
		}
		for _, b := range s.Blockers {
			lines = append(lines, fmt.Sprintf("%d %s %s — %s", b.PID, sanitize(b.App), sanitize(b.State), sanitize(b.Query)))
			for i, pid := range b.Blocks {
				branch := "├─"
				if i == len(b.Blocks)-1 {
					branch = "└─"
				}
				w := waits[pid]
				lines = append(lines, fmt.Sprintf(" %s %d %s waits %.0f ms", branch, pid, sanitize(w.App), w.WaitMS))
			}
		}
	}
	if s != nil && s.Xmin != nil && s.Xmin.Age > 1000 {
		lines = append(lines, st.Dim.Render(fmt.Sprintf("xmin held %s xacts by %d %s (%s)", formatInt(s.Xmin.Age), s.Xmin.PID, sanitize(s.Xmin.App), sanitize(s.Xmin.State))))
	}
	// One column of gutter: a row cut at the width must not run into the
	// events beside it.
	return gutter(box(strings.Join(lines, "\n"), width-1, height))
}

// gutter adds a blank column on the right of every line of s.
func gutter(s string) string { return strings.ReplaceAll(s, "\n", " \n") + " " }

func (m Model) viewEvents(width, height int) string {
	st := m.styles
	evs := m.events
	if n := height - 1; len(evs) > n {
		evs = evs[len(evs)-n:]
	}
	lines := []string{st.Title.Render("events")}
	for _, e := range evs {
		text := e.Time.Format("15:04:05") + " " + sanitize(e.Text)
		switch e.Kind {
		case collector.EventDouble, collector.EventAlert, collector.EventCrash:
			text = st.Warn.Render(text)
		case collector.EventCleared:
			text = st.OK.Render(text)
		}
		lines = append(lines, text)
	}
	return box(strings.Join(lines, "\n"), width, height)
}

func (m Model) viewStatus(w int) string {
	st := m.styles
	var parts []string
	if m.err != nil {
		since := m.now().Sub(m.errSince).Round(time.Second)
		parts = append(parts, st.Alert.Render(fmt.Sprintf(" disconnected, retrying (%s): %s ", since, sanitize(firstLine(m.err.Error())))))
	}
	if m.paused {
		parts = append(parts, st.Warn.Render("PAUSED (space resumes)"))
	}
	if m.snap != nil {
		parts = append(parts, st.Dim.Render(fmt.Sprintf("poll %.1f ms · %s/%s connections", m.snap.PollMS,
			formatInt(int64(m.snap.Connections)), formatInt(int64(m.snap.MaxConnections)))))
		for _, l := range m.snap.Limits {
			parts = append(parts, st.Dim.Render(sanitize(l)))
		}
	}
	return pad(strings.Join(parts, "  "), w)
}

// shortDuration writes seconds as 45s, 12m, 3h20m, 5d.
func shortDuration(sec float64) string {
	d := time.Duration(sec) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
