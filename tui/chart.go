package tui

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/NimbleMarkets/ntcharts/canvas"
	tslc "github.com/NimbleMarkets/ntcharts/linechart/timeserieslinechart"
	"github.com/charmbracelet/lipgloss"

	"github.com/pooltop-dev/pooltop/collector"
)

// chartSet is one line of a chart.
type chartSet struct {
	name   string
	points []collector.Point
	style  lipgloss.Style
}

// chartSpec is one panel of the chart grid.
type chartSpec struct {
	fields []field // the title: the current figures
	sets   []chartSet
	alarm  bool // drawn with the alert style in its title
}

// field is one figure of a chart's title: its value, then its label in a
// long and a short form. line, when not negative, is the index of the chart
// line the figure belongs to: a mark in that line's colour stands before it
// as its legend.
type field struct {
	value, long, short string
	line               int
}

// fig is a field with no line of its own.
func fig(value, long, short string) field { return field{value, long, short, -1} }

// fitTitle writes the fields in width cells: numbers first, then their
// labels; when the long labels do not fit, the short ones, then none, so
// that a figure is never cut while a label could give way.
func fitTitle(st Styles, spec chartSpec, width int) string {
	style := st.Title
	if spec.alarm {
		style = st.Alert
	}
	render := func(label func(field) string) (string, int) {
		var parts []string
		plain := 0
		for _, f := range spec.fields {
			text := f.value
			if l := label(f); l != "" {
				text += " " + l
			}
			mark := ""
			if f.line >= 0 && f.line < len(spec.sets) && len(spec.sets) > 1 {
				mark = spec.sets[f.line].style.Render("━") + " "
				plain += 2
			}
			plain += lipgloss.Width(text)
			parts = append(parts, mark+style.Render(text))
		}
		plain += 2 * max(len(parts)-1, 0)
		return strings.Join(parts, "  "), plain
	}
	for _, label := range []func(field) string{
		func(f field) string { return f.long },
		func(f field) string { return f.short },
		func(field) string { return "" },
	} {
		if t, w := render(label); w <= width {
			return t
		}
	}
	t, _ := render(func(field) string { return "" })
	return truncate(t, width)
}

// yLabelWidth keeps stacked charts aligned: every Y label has this width.
const yLabelWidth = 5

// renderChart draws a time-series chart of exactly width×height cells: a
// title line and an ntcharts braille line chart over the window ending at
// now. The data is ours (bounded rings); the chart is rebuilt from it, so
// ntcharts' own buffers never grow.
func renderChart(st Styles, spec chartSpec, width, height int, now time.Time, window time.Duration) string {
	head := pad(fitTitle(st, spec, width), width)
	if height < 2 {
		return head
	}
	ch := height - 1
	from := now.Add(-window)
	maxY, minY := 0.0, 0.0
	for _, s := range spec.sets {
		for _, p := range s.points {
			if !p.T.Before(from) && !math.IsNaN(p.V) && !math.IsInf(p.V, 0) {
				maxY, minY = math.Max(maxY, p.V), math.Min(minY, p.V)
			}
		}
	}
	maxY = niceMax(maxY)
	if minY < 0 { // a burn below zero: the pool grows
		minY = -niceMax(-minY)
	}
	xSteps := 0
	if ch >= 8 && width >= 40 {
		xSteps = 4
	}
	// Two Y labels: 0 on the bottom row and the top of the scale on the top
	// row, where a value at the top is drawn. (ntcharts' own labels are
	// placed a row's share below the value they name.)
	// Rows are counted up from the origin: without an X axis the bottom row
	// is the origin and the top one ch-1 above it; with one, the origin is
	// the axis, and the top row ch-2 above it.
	yStep := max(ch-1, 1)
	if xSteps > 0 {
		yStep = ch - 2
	}
	lc := tslc.New(width, ch,
		tslc.WithXYSteps(xSteps, yStep),
		tslc.WithXLabelFormatter(func(_ int, v float64) string { return time.Unix(int64(v), 0).Format("15:04:05") }),
		tslc.WithYLabelFormatter(func(i int, _ float64) string {
			if i == 0 {
				return fmt.Sprintf("%*s", yLabelWidth, formatFloat(minY))
			}
			return fmt.Sprintf("%*s", yLabelWidth, formatFloat(maxY))
		}),
		tslc.WithAxesStyles(st.Dim, st.Dim),
	)
	lc.SetTimeRange(from, now)
	lc.SetViewTimeRange(from, now)
	lc.SetYRange(minY, maxY)
	lc.SetViewYRange(minY, maxY)
	names := make([]string, 0, len(spec.sets))
	for _, s := range spec.sets {
		lc.SetDataSetStyle(s.name, s.style)
		for _, p := range downsample(s.points, from, now, 2*width) {
			lc.PushDataSet(s.name, tslc.TimePoint{Time: p.T, Value: p.V})
		}
		names = append(names, s.name)
	}
	lc.DrawBrailleDataSets(names)
	if len(names) == 0 {
		lc.DrawXYAxisAndLabel()
	}
	return head + "\n" + canvasString(&lc.Canvas, width, ch)
}

// downsample keeps the points of ps between from and to, and when they
// are more than four per column of braille, the largest of each of n
// equal spans of time instead: an hour of samples becomes what the chart
// can draw, and a spike stays visible.
func downsample(ps []collector.Point, from, to time.Time, n int) []collector.Point {
	in := make([]collector.Point, 0, len(ps))
	for _, p := range ps {
		if p.T.Before(from) || p.T.After(to) || math.IsNaN(p.V) || math.IsInf(p.V, 0) {
			continue
		}
		in = append(in, p)
	}
	if n < 1 || len(in) <= 2*n {
		return in
	}
	span := to.Sub(from) / time.Duration(n)
	if span <= 0 {
		return in
	}
	out := make([]collector.Point, 0, n)
	for _, p := range in {
		b := from.Add(p.T.Sub(from) / span * span)
		if k := len(out) - 1; k >= 0 && !out[k].T.Before(b) {
			out[k].V = math.Max(out[k].V, p.V)
			continue
		}
		out = append(out, collector.Point{T: b.Add(span / 2), V: p.V})
	}
	return out
}

// canvasString renders a chart's canvas. ntcharts' own View styles every
// cell on its own (about 10 ms for a large chart); this joins runs of cells
// of the same colour and styles each run once.
func canvasString(c *canvas.Model, width, height int) string {
	var b, run strings.Builder
	var runFG lipgloss.TerminalColor = lipgloss.NoColor{}
	flush := func() {
		if run.Len() == 0 {
			return
		}
		if _, none := runFG.(lipgloss.NoColor); none {
			b.WriteString(run.String())
		} else {
			b.WriteString(lipgloss.NewStyle().Foreground(runFG).Render(run.String()))
		}
		run.Reset()
	}
	for y := 0; y < height; y++ {
		for x := 0; x < width; x++ {
			cell := c.Cell(canvas.Point{X: x, Y: y})
			r := cell.Rune
			if r == 0 {
				r = ' '
			}
			fg := cell.Style.GetForeground()
			if fg != runFG {
				flush()
				runFG = fg
			}
			run.WriteRune(r)
		}
		flush()
		if y < height-1 {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// niceMax rounds a chart's top up to 1, 2 or 5 times a power of ten, so
// the Y labels are round and do not jump with every sample.
func niceMax(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

// last returns the newest value of a series, or 0.
func last(ps []collector.Point) float64 {
	if len(ps) == 0 {
		return 0
	}
	return ps[len(ps)-1].V
}

// blank is an empty box of width×height.
func blank(width, height int) string {
	line := strings.Repeat(" ", max(width, 0))
	lines := make([]string, max(height, 0))
	for i := range lines {
		lines[i] = line
	}
	return strings.Join(lines, "\n")
}
