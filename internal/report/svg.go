package report

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// WriteSVG writes each chart that has a value as an SVG file in dir (made
// if missing), named after its title (pool-by-state.svg …), for pasting
// into a document; drawn by gonum/plot from the same points as the page.
// It returns the files written.
func (r *Report) WriteSVG(dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	times := r.byName["time"].V
	var out []string
	for _, c := range r.charts {
		var vs []*series
		for _, s := range c.Series {
			if hasValue(s.V) {
				vs = append(vs, s)
			}
		}
		if len(vs) == 0 {
			continue
		}
		values := make([][]float64, len(vs))
		for i, s := range vs {
			values[i] = s.V
		}
		keep := Downsample(len(times), MaxPoints, values...)
		p := plot.New()
		p.Title.Text = c.Title
		p.Y.Label.Text = c.Unit
		p.X.Label.Text = "time (" + r.From.Location().String() + ")"
		format := "15:04:05"
		if r.To.Sub(r.From) > 6*time.Hour {
			format = "Jan 2 15:04"
		}
		p.X.Tick.Marker = plot.TimeTicks{Format: format, Time: func(t float64) time.Time { return time.UnixMilli(int64(t)).In(r.From.Location()) }}
		p.Add(plotter.NewGrid())
		for i, s := range vs {
			for j, seg := range segments(keep, times, s.V) {
				line, err := plotter.NewLine(seg)
				if err != nil {
					return out, fmt.Errorf("chart %s, %s: %w", c.Title, s.Name, err)
				}
				line.Color = plotutil.Color(i)
				line.Width = vg.Points(1.2)
				p.Add(line)
				if j == 0 {
					p.Legend.Add(s.Name, line)
				}
			}
		}
		p.Legend.Top = true
		file := filepath.Join(dir, slug(c.Title)+".svg")
		if err := p.Save(9*vg.Inch, 3*vg.Inch, file); err != nil {
			return out, fmt.Errorf("write %s: %w", file, err)
		}
		out = append(out, file)
	}
	return out, nil
}

// segments cuts a series at the points it was not recorded, so that a gap
// shows as one.
func segments(keep []int, times, v []float64) []plotter.XYs {
	var out []plotter.XYs
	var cur plotter.XYs
	for _, k := range keep {
		if math.IsNaN(v[k]) || math.IsInf(v[k], 0) {
			if len(cur) > 0 {
				out, cur = append(out, cur), nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: times[k], Y: v[k]})
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// slug makes a chart's title a file name: lower case, words joined by -.
func slug(title string) string {
	var b strings.Builder
	dash := false
	for _, c := range strings.ToLower(title) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b.WriteRune(c)
			dash = false
		case !dash && b.Len() > 0:
			b.WriteByte('-')
			dash = true
		}
	}
	return strings.TrimSuffix(b.String(), "-")
}
