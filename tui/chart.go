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
	title string // with the current figures
	sets  []chartSet
	alarm bool // drawn with the alert style in its title
}

// yLabelWidth keeps stacked charts aligned: every Y label has this width.
const yLabelWidth = 5

// renderChart draws a time-series chart of exactly width×height cells: a
// title line and an ntcharts braille line chart over the window ending at
// now. The data is ours (bounded rings); the chart is rebuilt from it, so
// ntcharts' own buffers never grow.
func renderChart(st Styles, spec chartSpec, width, height int, now time.Time, window time.Duration) string {
	title := st.Title
	if spec.alarm {
		title = st.Alert
	}
	head := pad(title.Render(truncate(spec.title, width)), width)
	if height < 2 {
		return head
	}
	ch := height - 1
	from := now.Add(-window)
	maxY := 0.0
	for _, s := range spec.sets {
		for _, p := range s.points {
			if !p.T.Before(from) && !math.IsNaN(p.V) && !math.IsInf(p.V, 0) {
				maxY = math.Max(maxY, p.V)
			}
		}
	}
	maxY = niceMax(maxY)
	xSteps := 0
	if ch >= 6 && width >= 40 {
		xSteps = 4
	}
	lc := tslc.New(width, ch,
		tslc.WithXYSteps(xSteps, 2),
		tslc.WithXLabelFormatter(func(_ int, v float64) string { return time.Unix(int64(v), 0).Format("15:04:05") }),
		tslc.WithYLabelFormatter(func(_ int, v float64) string { return fmt.Sprintf("%*s", yLabelWidth, formatFloat(v)) }),
		tslc.WithAxesStyles(st.Dim, st.Dim),
	)
	lc.SetTimeRange(from, now)
	lc.SetViewTimeRange(from, now)
	lc.SetYRange(0, maxY)
	lc.SetViewYRange(0, maxY)
	names := make([]string, 0, len(spec.sets))
	for _, s := range spec.sets {
		lc.SetDataSetStyle(s.name, s.style)
		for _, p := range s.points {
			if p.T.Before(from) || p.T.After(now) || math.IsNaN(p.V) || math.IsInf(p.V, 0) {
				continue
			}
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
