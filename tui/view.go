package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/internal/termtext"
	"github.com/pooltop-dev/pooltop/workload"
)

// Smallest terminal the layout fits.
const (
	minWidth  = 80
	minHeight = 24
	knobsW    = 30
	// knobsNarrowW is the knobs panel below 100 columns, so that two
	// charts still fit beside it.
	knobsNarrowW = 25
	// minPlotRows is the least height of a chart's plot, under its title.
	minPlotRows = 4
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
	if l.parts > 0 {
		bar += "\n" + m.viewPartitions(w)
	}
	if l.servers > 0 {
		bar += "\n" + m.viewServers(w, l.servers)
	}
	if m.opts.Knobs != nil {
		knobs = m.viewKnobs(l.knobsW, l.midH)
		bar += "\n" + m.viewBanner(w)
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
	chartsW, knobsW, midH, bottomH, helpH int
	help                                  string
	interval                              time.Duration // the charts' window depends on it
	window                                int
	proof                                 workload.Proof
	parts                                 int // 1: a line of per-partition UNUSED under the pool bar
	servers                               int // lines of per-server rows under the pool bar
}

func (m Model) layout() layout {
	l := layout{help: m.help.View(m.keys), interval: m.interval, window: m.window, proof: m.proof()}
	if m.opts.Replay != nil {
		l.help = m.help.View(m.replayKeys)
	}
	if m.showHelp && m.opts.Knobs != nil {
		l.help += "\n" + m.styles.HelpDesc.Render(presetList(m.width))
		if m.keys.StopServer.Enabled() { // the help's columns leave it out below 200 columns
			l.help += "\n" + m.styles.HelpDesc.Render("servers: S stops a server hard, S again starts it")
		}
	}
	if m.showDoctor {
		l.help = m.doctorView(m.width, max(m.height/3, 2)) + "\n" + l.help
	}
	if m.showRunbook {
		l.help = m.runbookView(m.width, max(m.height/3, 3)) + "\n" + l.help
	}
	l.helpH = lipgloss.Height(l.help)
	banner := 0
	if m.opts.Knobs != nil {
		banner = 1
		l.knobsW = knobsW
		if m.width < 100 {
			l.knobsW = knobsNarrowW
		}
	}
	if m.snap != nil && len(m.snap.Partitions) > 0 {
		l.parts = 1
	}
	if m.snap != nil && len(m.snap.Servers) > 0 {
		// A row per server, up to a sixth of the screen (a last row says
		// how many more).
		l.servers = min(len(m.snap.Servers), max(m.height/6, 2))
	}
	l.bottomH = min(max(m.height/4, 5), 14)
	l.midH = m.height - 1 - 2 - l.parts - l.servers - banner - l.bottomH - 1 - l.helpH
	if l.midH < 4 {
		l.bottomH -= 4 - l.midH
		l.midH = 4
	}
	l.chartsW = m.width - l.knobsW
	return l
}

// presetList names the scenarios behind the number keys, wrapped to width.
func presetList(width int) string {
	var lines []string
	line := "scenarios:"
	for _, sc := range workload.Scenarios {
		item := fmt.Sprintf(" %s %s", sc.Key, sc.Name)
		if lipgloss.Width(line+item) > width {
			lines = append(lines, line)
			line = "          "
		}
		line += item
	}
	lines = append(lines, line)
	// The stories' own knobs, which the help's columns leave out below 200
	// columns.
	knobs := "story knobs: F fence in app/db · i retry ids stable/fresh · z/Z clock skew · u autovacuum"
	if lipgloss.Width(knobs) > width {
		knobs = "story knobs: F fence app/db · i retry ids · z/Z skew · u autovac"
	}
	return strings.Join(append(lines, knobs), "\n")
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

// now is the clock, or in a replay the recorded time of the snapshot shown.
func (m Model) now() time.Time {
	if m.opts.Replay != nil && m.snap != nil {
		return m.snap.Time
	}
	return m.opts.Now()
}

func (m Model) viewHeader(w int) string {
	i := m.info
	where := sanitize(fmt.Sprintf("%s@%s/%s", i.User, i.Host, i.Database))
	if m.opts.Server != "" {
		where = sanitize(m.opts.Server)
	}
	if m.opts.Replay != nil && i.Host == "" {
		where = "(recorded without a header: server unknown)"
	}
	up := m.now().Sub(m.started).Round(time.Second)
	parts := []string{"pooltop " + m.opts.Mode, where, sanitize(i.Table), "PG " + sanitize(strings.Fields(i.Version + " ?")[0]),
		"up " + up.String(), "poll " + m.interval.String()}
	if w := chartWindows[m.window]; w > 0 {
		parts = append(parts, "charts "+strings.TrimSuffix(strings.TrimSuffix(w.String(), "0s"), "0m"))
	}
	if m.opts.Replay != nil { // what is replayed first, then from where
		parts = append([]string{parts[0], m.replayHeader()}, append(parts[6:], parts[1:4]...)...)
	}
	left := m.styles.Header.Render(pad(" "+strings.Join(parts, " │ "), w))
	var active []string
	if m.snap != nil {
		active = activeAlerts(m.snap.Alerts)
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

// activeAlerts names the raised alerts, each once, in order; over several
// servers each with the servers it is raised on: lock_wait(s1,s3).
func activeAlerts(alerts []collector.Alert) []string {
	var names []string
	on := map[string][]string{}
	for _, a := range alerts {
		if !a.Active {
			continue
		}
		if _, seen := on[a.Name]; !seen {
			names = append(names, a.Name)
			on[a.Name] = nil
		}
		if a.Server != "" {
			on[a.Name] = append(on[a.Name], sanitize(a.Server))
		}
	}
	for i, n := range names {
		if servers := on[n]; len(servers) > 0 {
			names[i] += "(" + strings.Join(servers, ",") + ")"
		}
	}
	return names
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
	stuck := "stuck " + formatInt(p.Stuck)
	// Starvation, last: only when claims pass over free ids, and the first
	// thing a narrow screen cuts (the demo's banner shows it too).
	starved := ""
	if p.PassedOver != nil && *p.PassedOver > 0 && p.PassedOverS != nil {
		plus := ""
		if p.PassedOverFull {
			plus = "+"
		}
		starved = " · passed over " + formatInt(*p.PassedOver) + plus + " (" + shortDuration(*p.PassedOverS) + ")"
	}
	long := fmt.Sprintf("█ UNUSED %s%s · ▓ PENDING %s%s%s · ▒ expired %s · ░ CONSUMED %s%s · %s%s · %s%s",
		est(s, "unused"), formatInt(p.Unused), est(s, "pending"), formatInt(p.Pending), pendingAge, formatInt(p.Expired),
		est(s, "consumed"), formatInt(p.Consumed), stuck, leaked, eta, starved)
	// Too wide: the glyphs stand for their names, so the figures stay whole.
	short := fmt.Sprintf("█ %s%s ▓ %s%s%s ▒ %s ░ %s%s · %s%s · %s%s",
		est(s, "unused"), formatInt(p.Unused), est(s, "pending"), formatInt(p.Pending), pendingAge, formatInt(p.Expired),
		est(s, "consumed"), formatInt(p.Consumed), stuck, leaked, eta, starved)
	// While the counters have not read the whole pool once, how far they
	// are: the ~ figures are partly extrapolated until then.
	if p.Counted != nil && *p.Counted < 1 {
		c := fmt.Sprintf("counting %d%% · ", int(100**p.Counted))
		long, short = c+long, c+short
	}
	nums := long
	if lipgloss.Width(long) > w {
		nums = short
	}
	return bar.String() + "\n" + pad(nums, w)
}

// viewPartitions is one line of the UNUSED ids of each partition, named by
// what tells them apart (p0, p1 … for resource_pool_p0 …), an estimate
// marked with ~, cut at the width.
func (m Model) viewPartitions(w int) string {
	parts := m.snap.Partitions
	prefix := parts[0].Name
	for _, p := range parts[1:] {
		for !strings.HasPrefix(p.Name, prefix) {
			prefix = prefix[:len(prefix)-1]
		}
	}
	if i := strings.LastIndex(prefix, "_"); i >= 0 && len(parts) > 1 {
		prefix = prefix[:i+1]
	} else {
		prefix = ""
	}
	line := "partitions:"
	for i, p := range parts {
		item := fmt.Sprintf(" %s ", sanitize(strings.TrimPrefix(p.Name, prefix)))
		if p.Estimated {
			item += "~"
		}
		item += formatInt(p.Unused)
		if i > 0 {
			item = " ·" + item
		}
		if lipgloss.Width(line+item) > w-2 && i < len(parts)-1 {
			line += " …"
			break
		}
		line += item
	}
	return pad(line, w)
}

// viewServers is a row per server of a watch over several, in n lines:
// its name, its counts, burn and time to empty, lock waiters, dead tuples
// and poll time, or that it does not answer and why. To fit the width the
// address goes first, then figures from the right; past n servers the
// last line says how many more there are and how many of them answer.
func (m Model) viewServers(w, n int) string {
	st := m.styles
	views := m.snap.Servers
	var lines []string
	for i, v := range views {
		if len(lines) == n-1 && len(views) > n {
			rest := views[i:]
			down := 0
			for _, r := range rest {
				if !r.Reachable {
					down++
				}
			}
			line := fmt.Sprintf("… %d more servers", len(rest))
			if down > 0 {
				line += fmt.Sprintf(", %d of them not answering", down)
			}
			lines = append(lines, pad(line, w))
			break
		}
		name := st.Title.Render(sanitize(v.Server))
		addr := sanitize(v.Addr)
		if !v.Reachable {
			line := name + " " + st.Alert.Render(" does not answer ") + " " + addr + ": " + sanitize(v.Error)
			lines = append(lines, truncate(line, w))
			continue
		}
		s := v.Snapshot
		eta := "not draining"
		if s.DepletionETAS != nil {
			eta = "empty in " + (time.Duration(*s.DepletionETAS) * time.Second).String()
		}
		items := []string{
			"unused " + est(s, "unused") + formatInt(s.Pool.Unused),
			"held " + est(s, "pending") + formatInt(s.Pool.Pending) + " (" + formatInt(s.Pool.Expired) + " expired)",
			"consumed " + formatInt(s.Pool.Consumed),
			fmt.Sprintf("burn %.1f/s", s.BurnPerS), eta,
			fmt.Sprintf("waiters %d", s.LockWaiters),
			fmt.Sprintf("dead %.1f%%", 100*s.DeadRatio),
			fmt.Sprintf("poll %.0fms", s.PollMS),
		}
		fits := func(line string) bool { return lipgloss.Width(line) <= w }
		line := name + " " + st.Dim.Render(addr) + "  " + strings.Join(items, " · ")
		if !fits(line) {
			k := len(items)
			for k > 1 && !fits(name+"  "+strings.Join(items[:k], " · ")) {
				k--
			}
			line = name + "  " + strings.Join(items[:k], " · ")
		}
		lines = append(lines, truncate(line, w))
	}
	for i := range lines {
		lines[i] = pad(lines[i], w)
	}
	return strings.Join(lines, "\n")
}

// Chart names, for the order in which a scenario wants them.
const (
	chThroughput = "throughput"
	chLatency    = "latency"
	chLockWait   = "lock wait"
	chDead       = "dead tuples"
	chBurn       = "burn"
	chLeaked     = "leaked"
	chFenced     = "fenced"
	chConflicts  = "conflicts"
	chConsumed   = "consumed"
	chExpired    = "expired"
	chClaims     = "claims"
	chTrouble    = "trouble"
	chLWLock     = "lwlock"
)

// chartOrder is the order of the charts for each scenario's proof: its own
// charts first, so that on a small screen, which shows fewer charts, the
// ones that tell its story stay.
var chartOrder = map[workload.Proof][]string{
	workload.ProofHealthy:   {chThroughput, chLatency, chLeaked, chFenced, chBurn, chLockWait, chDead, chConflicts, chTrouble, chLWLock},
	workload.ProofLeaked:    {chLeaked, chThroughput, chBurn, chLatency, chFenced, chLockWait, chDead, chConflicts, chTrouble, chLWLock},
	workload.ProofReclaimed: {chLeaked, chThroughput, chBurn, chLatency, chFenced, chTrouble, chLockWait, chDead, chConflicts, chLWLock},
	workload.ProofDouble:    {chFenced, chLeaked, chThroughput, chLatency, chBurn, chTrouble, chLockWait, chDead, chConflicts, chLWLock},
	workload.ProofFenced:    {chFenced, chLeaked, chThroughput, chLatency, chBurn, chTrouble, chLockWait, chDead, chConflicts, chLWLock},
	workload.ProofLockWait:  {chLockWait, chThroughput, chLatency, chLeaked, chBurn, chDead, chFenced, chConflicts, chTrouble, chLWLock},
	workload.ProofConflicts: {chConflicts, chThroughput, chLatency, chTrouble, chLockWait, chBurn, chLeaked, chDead, chFenced, chLWLock},
	workload.ProofDrain:     {chBurn, chTrouble, chThroughput, chLatency, chLeaked, chLockWait, chDead, chFenced, chConflicts, chLWLock},
	// The stories of the shifted digits.
	workload.ProofInApp:        {chFenced, chLeaked, chThroughput, chLatency, chBurn, chTrouble, chLockWait, chDead, chConflicts, chLWLock},
	workload.ProofPastExpiry:   {chFenced, chTrouble, chThroughput, chLeaked, chLatency, chBurn, chLockWait, chDead, chConflicts, chLWLock},
	workload.ProofTransfer:     {chFenced, chThroughput, chLatency, chLeaked, chBurn, chTrouble, chLockWait, chDead, chConflicts, chLWLock},
	workload.ProofDuplicates:   {chFenced, chThroughput, chLatency, chLeaked, chBurn, chTrouble, chLockWait, chDead, chConflicts, chLWLock},
	workload.ProofFalseReclaim: {chTrouble, chFenced, chLeaked, chThroughput, chLatency, chBurn, chLockWait, chDead, chConflicts, chLWLock},
	workload.ProofRecovery:     {chLeaked, chThroughput, chTrouble, chFenced, chLatency, chBurn, chLockWait, chDead, chConflicts, chLWLock},
	workload.ProofStarvation:   {chThroughput, chLatency, chDead, chBurn, chLeaked, chFenced, chLockWait, chConflicts, chTrouble, chLWLock},
	workload.ProofDeadTuples:   {chDead, chLatency, chThroughput, chBurn, chLeaked, chFenced, chLockWait, chConflicts, chTrouble, chLWLock},
}

// watchOrder is the order of the charts in watch mode.
var watchOrder = []string{chConsumed, chBurn, chLockWait, chDead, chExpired, chLWLock}

func (m Model) charts() []chartSpec {
	st := m.styles
	s := m.series
	snap := m.snap
	v := func(name string) float64 { return last(s[name]) }
	alarms := map[string]bool{}
	if snap != nil {
		for _, a := range snap.Alerts {
			alarms[a.Name] = a.Active
		}
	}
	lock := chartSpec{fields: []field{fig(fmt.Sprintf("%.0f ms", v(collector.SeriesLockWaitMax)), "lock wait max", "max")},
		alarm: alarms[collector.AlertLockWait], sets: []chartSet{{"wait", s[collector.SeriesLockWaitMax], st.Line1}}}
	dead := chartSpec{fields: []field{fig(formatInt(int64(v(collector.SeriesDeadTuples))), "dead tuples", "dead")},
		alarm: alarms[collector.AlertDeadTuples], sets: []chartSet{{"dead", s[collector.SeriesDeadTuples], st.Line1}}}
	burn := chartSpec{fields: []field{fig(formatFloat(v(collector.SeriesBurn))+"/s", "burn", "burn")},
		alarm: alarms[collector.AlertDepletion], sets: []chartSet{{"burn", s[collector.SeriesBurn], st.Line1}}}
	if snap != nil {
		lock.fields = append(lock.fields, fig(formatInt(int64(snap.LockWaiters)), "waiting", "waiting"))
		dead.fields = append(dead.fields, fig(fmt.Sprintf("%.0f%%", 100*snap.DeadRatio), "", ""))
		if w := snap.WorstPartition; w != nil {
			dead.fields = append(dead.fields, fig(fmt.Sprintf("%.0f%%", 100*w.DeadRatio), "worst "+sanitize(w.Name), "worst"))
		}
		if snap.Vacuum != nil {
			dead.fields = append(dead.fields, fig(fmt.Sprintf("%.0f%%", snap.Vacuum.Percent), "vacuum "+snap.Vacuum.Phase, "vacuum"))
		}
		switch {
		case snap.Pool.Unused == 0 && snap.Pool.Total > 0:
			burn.fields = append(burn.fields, fig("EMPTY", "", ""))
		case snap.DepletionETAS != nil:
			burn.fields = append(burn.fields, fig(shortDuration(*snap.DepletionETAS), "to empty", "eta"))
		}
	}
	lwlock := chartSpec{fields: []field{fig(formatInt(int64(v(collector.SeriesLWLockWaits))), "LWLock waiters", "lwlock")},
		alarm: alarms[collector.AlertLWLock], sets: []chartSet{{"lwlock", s[collector.SeriesLWLockWaits], st.Line1}}}
	if snap != nil && snap.LWLockWaitEvent != "" {
		lwlock.fields = append(lwlock.fields, fig(sanitize(snap.LWLockWaitEvent), "most on", ""))
	}
	specs := map[string]chartSpec{chLockWait: lock, chDead: dead, chBurn: burn, chLWLock: lwlock}
	order := watchOrder
	if m.opts.Knobs != nil || (snap != nil && snap.Workload != nil) {
		order = chartOrder[m.proof()]
		specs[chThroughput] = chartSpec{
			fields: []field{{formatFloat(v(collector.SeriesAcquires)), "acquires/s", "acq/s", 0}, {formatFloat(v(collector.SeriesCommits)), "commits/s", "com/s", 1}},
			sets:   []chartSet{{"acquires", s[collector.SeriesAcquires], st.Line1}, {"commits", s[collector.SeriesCommits], st.Line2}},
		}
		specs[chLatency] = chartSpec{
			fields: []field{fig(fmt.Sprintf("%.1f ms", v(collector.SeriesAcquireP99)), "p99 claim, last 5 s", "p99")},
			sets:   []chartSet{{"p99", s[collector.SeriesAcquireP99], st.Line1}},
		}
		leaked := v(collector.SeriesLeaked)
		leakStyle := st.Warn // with leases, the reaper brings them back
		if !m.cfg.Lease {
			leakStyle = st.Expired // without, they are gone for good
		}
		specs[chLeaked] = chartSpec{
			fields: []field{{formatInt(int64(leaked)), "leaked", "leaked", 0}, {formatInt(int64(v(collector.SeriesExpired))), "expired PENDING", "expired", 1}},
			alarm:  leaked > 0 && !m.cfg.Lease,
			sets:   []chartSet{{"leaked", s[collector.SeriesLeaked], leakStyle}, {"expired", s[collector.SeriesExpired], st.Line1}},
		}
		double := v(collector.SeriesDouble)
		specs[chFenced] = chartSpec{
			fields: []field{{formatFloat(v(collector.SeriesFenced)), "fenced/s", "fenced", 0}, {formatFloat(v(collector.SeriesDoublePerS)), "double/s", "dbl", 1}},
			alarm:  double > 0,
			sets:   []chartSet{{"fenced", s[collector.SeriesFenced], st.Line1}, {"double", s[collector.SeriesDoublePerS], st.Expired}},
		}
		specs[chTrouble] = chartSpec{
			fields: []field{{formatFloat(v(collector.SeriesLeasesLostPerS)), "leases lost/s", "lost", 0},
				{formatFloat(v(collector.SeriesEmptyPerS)), "empty claims/s", "empty", 1},
				{formatFloat(v(collector.SeriesErrorsPerS)), "errors/s", "err", 2}},
			alarm: v(collector.SeriesErrorsPerS) > 0,
			sets: []chartSet{{"lost", s[collector.SeriesLeasesLostPerS], st.Line1}, {"empty", s[collector.SeriesEmptyPerS], st.Line2},
				{"errors", s[collector.SeriesErrorsPerS], st.Expired}},
		}
		specs[chConflicts] = chartSpec{
			fields: []field{fig(formatFloat(v(collector.SeriesConflictsPerS)), "conflicts/s (lost version checks, retried)", "conflicts/s")},
			sets:   []chartSet{{"conflicts", s[collector.SeriesConflictsPerS], st.Line2}},
		}
	} else {
		specs[chConsumed] = chartSpec{fields: []field{fig(formatFloat(v(collector.SeriesConsumedPerS)), "consumed/s", "consumed")},
			sets: []chartSet{{"consumed", s[collector.SeriesConsumedPerS], st.Line1}}}
		specs[chExpired] = chartSpec{fields: []field{fig(formatInt(int64(v(collector.SeriesExpired))), "expired PENDING", "expired")},
			alarm: alarms[collector.AlertReaperLag], sets: []chartSet{{"expired", s[collector.SeriesExpired], st.Line1}}}
		if snap != nil && snap.Claims != nil {
			// The claims' latency from pg_stat_statements, second in line.
			order = append([]string{order[0], chClaims}, order[1:]...)
			specs[chClaims] = chartSpec{fields: []field{
				fig(fmt.Sprintf("%.2f ms", snap.Claims.MeanMS), "mean claim", "mean"),
				fig(formatFloat(snap.Claims.CallsPerS), "claims/s", "/s"),
				fig(fmt.Sprintf("%.0f ms", snap.Claims.MaxMS), "max", "max"),
			}, sets: []chartSet{{"mean", s[collector.SeriesClaimMeanMS], st.Line1}}}
		}
	}
	out := make([]chartSpec, 0, len(order))
	for _, name := range order {
		out = append(out, specs[name])
	}
	return out
}

// proof is the counter the scenario in force is about.
func (m Model) proof() workload.Proof {
	if m.scenario >= 0 && m.scenario < len(workload.Scenarios) {
		return workload.Scenarios[m.scenario].Proof
	}
	return workload.ProofHealthy
}

// proofText is the scenario's proof counter, long and short.
func (m Model) proofText() (long, short string) {
	s := m.snap
	if s == nil || s.Workload == nil {
		return "", ""
	}
	w := s.Workload
	n := func(v int64) string { return formatInt(v) }
	switch m.proof() {
	case workload.ProofLeaked:
		return "leaked " + n(int64(w.Leaked)) + ", never back", "leaked " + n(int64(w.Leaked))
	case workload.ProofReclaimed:
		// The reaper's lag counts only time nobody held the lease's row.
		return fmt.Sprintf("reclaimed %s · leaked now %s · reaper late ≤ %.1f s", n(w.Reclaimed), n(int64(w.Leaked)), w.ReaperMaxLag.Seconds()), "reclaimed " + n(w.Reclaimed)
	case workload.ProofDouble:
		return "double finalizations " + n(w.DoubleFinalizations), "double " + n(w.DoubleFinalizations)
	case workload.ProofFenced:
		return "fenced " + n(w.FencedRejections) + " · double " + n(w.DoubleFinalizations), "fenced " + n(w.FencedRejections)
	case workload.ProofLockWait:
		return fmt.Sprintf("lock waits: waiting %d, longest %.0f ms", s.LockWaiters, s.LockWaitMaxMS), fmt.Sprintf("waiting %d, %.0f ms", s.LockWaiters, s.LockWaitMaxMS)
	case workload.ProofConflicts:
		return "conflicts " + n(w.Conflicts) + " (lost version checks)", "conflicts " + n(w.Conflicts)
	case workload.ProofDrain:
		if s.Pool.Unused == 0 && s.Pool.Total > 0 {
			return "UNUSED 0 · the pool is EMPTY", "UNUSED 0 EMPTY"
		}
		eta := "not draining"
		if s.DepletionETAS != nil {
			eta = "empty in " + shortDuration(*s.DepletionETAS)
		}
		return "UNUSED " + n(s.Pool.Unused) + " · " + eta, "UNUSED " + n(s.Pool.Unused)
	case workload.ProofInApp:
		mode := "fencing " + m.cfg.FenceMode()
		return "double finalizations " + n(w.DoubleFinalizations) + " · " + mode, "double " + n(w.DoubleFinalizations) + " · " + mode
	case workload.ProofPastExpiry:
		return "past DB expiry " + n(w.PastExpiry) + " · fenced " + n(w.FencedRejections) + " · skew " + m.cfg.ClockSkew.String(),
			"past expiry " + n(w.PastExpiry) + " · fenced " + n(w.FencedRejections)
	case workload.ProofTransfer:
		return "transferred " + n(w.Transferred) + " · old holders fenced " + n(w.OldHolderRejections) + " · double " + n(w.DoubleFinalizations),
			"transferred " + n(w.Transferred) + " · fenced " + n(w.OldHolderRejections)
	case workload.ProofDuplicates:
		return "duplicates " + n(w.DuplicatesFreshID) + " (fresh ids) · " + n(w.DuplicatesStableID) + " with stable ids · replayed " + n(w.Replayed),
			"dup " + n(w.DuplicatesFreshID) + " · replayed " + n(w.Replayed)
	case workload.ProofFalseReclaim:
		lost := w.LeasesLost + w.FencedRejections
		return fmt.Sprintf("leases lost %s (renewals refused %s, fenced %s) · crashes %s", n(lost), n(w.LeasesLost), n(w.FencedRejections), n(w.Crashes)),
			"lost " + n(lost) + " · crashes " + n(w.Crashes)
	case workload.ProofRecovery:
		oldest := shortDuration(w.DeadOldest.Seconds())
		return "held by the dead " + n(int64(w.Leaked)) + " · oldest " + oldest + " · back after the " + m.cfg.TTL.String() + " lease",
			"dead-held " + n(int64(w.Leaked)) + " · oldest " + oldest
	case workload.ProofStarvation:
		ids, secs := "—", "—"
		if p := s.Pool; p.PassedOver != nil && p.PassedOverS != nil {
			ids, secs = n(*p.PassedOver), shortDuration(*p.PassedOverS)
			if p.PassedOverFull {
				ids += "+"
			}
		}
		return "free ids passed over " + ids + " · oldest " + secs + " · newer claims " + n(w.PassedOver),
			"passed over " + ids + " · oldest " + secs
	case workload.ProofDeadTuples:
		vac := "on"
		if w.AutovacuumOff {
			vac = "OFF"
		}
		return fmt.Sprintf("dead tuples %s · autovacuum %s · p99 %.1f ms", n(s.DeadTuples), vac, w.RecentAcquireLatency.P99),
			"dead " + n(s.DeadTuples) + " · autovac " + vac
	}
	return "leaked " + n(int64(w.Leaked)) + " · double " + n(w.DoubleFinalizations) + " · committed " + n(w.Committed),
		"leaked " + n(int64(w.Leaked)) + " · double " + n(w.DoubleFinalizations)
}

// viewBanner is the demo's line under the pool bar: the scenario in force,
// its proof counter, what to expect and what the last key did. The parts
// give way from the right, and the proof's long form before its digits.
func (m Model) viewBanner(w int) string {
	st := m.styles
	if m.busy != "" {
		return pad(st.Warn.Render("▶ "+m.busy), w)
	}
	name, expect := "knobs of your own", ""
	if m.scenario >= 0 && m.scenario < len(workload.Scenarios) {
		sc := workload.Scenarios[m.scenario]
		name, expect = fmt.Sprintf("%s %s", sc.Key, sc.Name), "expect: "+sc.Expect
		if m.custom {
			name += " + knobs"
		}
	}
	head := "▶ " + name
	long, short := m.proofText()
	proofStyle := st.Proof
	if s := m.snap; s != nil && s.Workload != nil && (s.Workload.DoubleFinalizations > 0 || (m.proof() == workload.ProofLeaked && s.Workload.Leaked > 0)) {
		proofStyle = st.Alert
	}
	action := ""
	if m.action != "" {
		action = "last: " + m.action
	}
	// The last key's effect stands in for what to expect until the next
	// scenario starts.
	if action != "" {
		expect = action
	}
	for _, parts := range [][]string{{long, expect}, {short, expect}, {long}, {short}} {
		text := st.Title.Render(head)
		width := lipgloss.Width(head)
		for i, p := range parts {
			if p == "" {
				continue
			}
			if i == 0 {
				text += "  " + proofStyle.Render(p)
			} else {
				text += st.Dim.Render("  · " + p)
			}
			width += lipgloss.Width(p) + 2 + 4*min(i, 1)
		}
		if width <= w {
			return pad(text, w)
		}
	}
	return pad(st.Title.Render(head)+"  "+proofStyle.Render(short), w)
}

// chartGrid is the grid for n charts in width×height: as many rows as fit
// with a title and at least minPlotRows each, up to four columns of at
// least 27 cells; the charts that do not fit are the last of the order.
func chartGrid(width, height, n int) (rows, cols int) {
	cols = min(max(width/27, 1), 4)
	rows = max(min(height/(minPlotRows+1), (n+cols-1)/cols), 1)
	return rows, max(min(cols, n), 1)
}

// viewCharts lays the charts out in a grid that fills width×height.
func (m Model) viewCharts(width, height int) string {
	specs := m.charts()
	rows, cols := chartGrid(width, height, len(specs))
	specs = specs[:min(len(specs), rows*cols)]
	window := time.Duration(max(width/cols-yLabelWidth-2, 10)*2) * m.interval // about two samples per cell of braille
	if w := chartWindows[m.window]; w > 0 {
		window = w
	}
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
	lines := []string{st.Title.Render("knobs")}
	var story *workload.Config
	if m.scenario >= 0 && m.scenario < len(workload.Scenarios) {
		c := workload.Scenarios[m.scenario].Config(1)
		story = &c
	}
	for _, r := range knobRows(m.cfg, story) {
		v := r.value
		if v == "OFF" {
			v = st.Warn.Render(v)
		}
		lines = append(lines, fmt.Sprintf("%s %s %s", st.Dim.Render(fmt.Sprintf("%-3s", r.key)), pad(r.name, 8), v))
	}
	lines = append(lines, st.Dim.Render("1-8 !-* scenarios"), st.Dim.Render("r reset R fresh ? help"))
	if m.knobErr != "" {
		lines = append(lines, st.Alert.Render(truncate(m.knobErr, width-2)))
	}
	return box(lipgloss.NewStyle().PaddingLeft(1).Render(strings.Join(lines, "\n")), width, height)
}

func (m Model) viewLocks(width, height int) string {
	st := m.styles
	lines := []string{st.Title.Render(m.locksTitle())}
	s := m.snap
	// With actions, the cursor's target is marked ›.
	sel, haveSel := m.selected()
	haveSel = haveSel && m.opts.Actions != nil
	mark := func(t target) string {
		if haveSel && t == sel {
			return st.Warn.Render("›")
		}
		return ""
	}
	switch {
	case s == nil:
	case len(s.Waiters) == 0:
		lines = append(lines, st.OK.Render("no session waits on a lock"))
	default:
		waits := waitersOf(s)
		for _, b := range m.blockers() {
			where := ""
			if b.Server != "" {
				where = sanitize(b.Server) + " "
			}
			lines = append(lines, mark(blockerTarget(b))+where+fmt.Sprintf("%d %s %s — %s", b.PID, sanitize(b.App), sanitize(b.State), sanitize(b.Query)))
			for i, pid := range b.Blocks {
				branch := "├─"
				if i == len(b.Blocks)-1 {
					branch = "└─"
				}
				w := waits[waiterKey{b.Server, pid}]
				lines = append(lines, fmt.Sprintf(" %s %d %s waits %.0f ms", branch, pid, sanitize(w.App), w.WaitMS))
			}
		}
	}
	if s != nil && len(s.Holders) > 0 {
		var parts []string
		for _, h := range s.Holders {
			name := sanitize(h.Holder)
			if h.Holder == "" {
				name = "(none)"
			}
			part := fmt.Sprintf("%s %s", name, formatInt(h.Pending))
			if h.Expired > 0 {
				part += fmt.Sprintf(" (%s expired)", formatInt(h.Expired))
				part = mark(holderTarget(h)) + part
			}
			parts = append(parts, part)
		}
		lines = append(lines, st.Dim.Render("holders: ")+strings.Join(parts, " · "))
	}
	if s != nil && len(s.Fleet) > 0 {
		lines = append(lines, fleetLines(st, s.Fleet)...)
	}
	if s != nil && s.Xmin != nil && s.Xmin.Age > 1000 {
		x := s.Xmin
		lines = append(lines, mark(xminTarget(*x))+st.Dim.Render(fmt.Sprintf("xmin held %s xacts by %d %s (%s)", formatInt(x.Age), x.PID, sanitize(x.App), sanitize(x.State))))
	}
	// One column of gutter: a row cut at the width must not run into the
	// events beside it.
	return gutter(box(strings.Join(lines, "\n"), width-1, height))
}

// fleetLines sum up the `pooltop work` processes: how many are alive and
// their cycles per second, how many stopped, then on a line of their own
// the gone ones by name with the leases they still hold (waiting for the
// reaper).
func fleetLines(st Styles, fleet []collector.Process) []string {
	var alive, stopped int
	var rate float64
	var gone []string
	for _, p := range fleet {
		switch p.State {
		case collector.ProcessAlive:
			alive++
			rate += p.CyclesPS
		case collector.ProcessStopped:
			stopped++
		default:
			gone = append(gone, fmt.Sprintf("%s %s ago, %s", sanitize(p.Name), (time.Duration(p.LastSeenS)*time.Second).String(), goneHeld(p)))
		}
	}
	line := st.Dim.Render("fleet: ") + fmt.Sprintf("%d alive %s cycles/s", alive, formatInt(int64(rate)))
	if stopped > 0 {
		line += st.Dim.Render(fmt.Sprintf(" · %d stopped", stopped))
	}
	lines := []string{line}
	if len(gone) > 0 {
		lines = append(lines, st.Warn.Render(fmt.Sprintf("%d gone: %s", len(gone), strings.Join(gone, "; "))))
	}
	return lines
}

// goneHeld says what a gone process holds: counted in the pool (falling as
// the reaper takes the leases back), or until it is counted, what its last
// heartbeat said.
func goneHeld(p collector.Process) string {
	switch {
	case !p.HeldCounted:
		return fmt.Sprintf("held %s at its last beat", formatInt(int64(p.Held)))
	case p.HeldAtLeast:
		return fmt.Sprintf("still holds ≥%s", formatInt(int64(p.Held)))
	case p.Held == 0:
		return "holds nothing now"
	}
	return fmt.Sprintf("still holds %s", formatInt(int64(p.Held)))
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
	if m.confirm != nil {
		return pad(st.Alert.Render(" "+m.confirm.what+"? y to confirm, any other key cancels "), w)
	}
	if m.opts.Replay != nil {
		if r := m.replayStatus(); r != "" {
			parts = append(parts, r)
		}
	}
	if m.notice != "" {
		parts = append(parts, st.Warn.Render(m.notice))
	}
	if line := m.doctorLine(); strings.HasPrefix(line, "doctor: FAIL") {
		parts = append(parts, st.Alert.Render(line))
	} else if line != "" {
		parts = append(parts, st.Dim.Render(line))
	}
	if m.doctorErr != "" {
		parts = append(parts, st.Dim.Render("doctor: "+sanitize(m.doctorErr)))
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

// shortDuration writes seconds as 45s, 12m05s, 3h20m, 5d.
func shortDuration(sec float64) string { return termtext.Duration(sec) }

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
