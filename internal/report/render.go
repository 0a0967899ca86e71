package report

import (
	_ "embed"
	"fmt"
	"html/template"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/pooltop-dev/pooltop/internal/termtext"
)

// uPlot (MIT, github.com/leeoniya/uPlot): small, fast on a day of points,
// with drag-to-zoom and a legend that follows the cursor. Inlined so that
// the page opens from a mail attachment with no network.
var (
	//go:embed assets/uPlot.iife.min.js
	uplotJS string
	//go:embed assets/uPlot.min.css
	uplotCSS string
	//go:embed assets/uPlot.LICENSE
	uplotLicense string
)

// WriteHTML writes the page.
func (r *Report) WriteHTML(w io.Writer) error {
	return page.Execute(w, r.view())
}

// view is what the template shows.
type view struct {
	Title, Where, Mode, Window, Drawn string
	Summary                           [][2]string
	Peaks                             []Peak
	Alerts                            []alertRow
	Events                            []eventRow
	Data                              template.JS
	UplotJS                           template.JS
	UplotCSS                          template.CSS
	UplotLicense                      string
}

type alertRow struct{ Name, Server, From, To, Up, Message, Runbook string }
type eventRow struct{ Time, Kind, Text string }

func (r *Report) view() view {
	v := view{Title: r.Title, Mode: r.Mode, UplotJS: template.JS(uplotJS), UplotCSS: template.CSS(uplotCSS), UplotLicense: uplotLicense}
	if i := r.Source; i.Host != "" {
		v.Where = fmt.Sprintf("%s@%s/%s, table %s, PostgreSQL %s", i.User, i.Host, i.Database, i.Table, strings.Fields(i.Version + " ?")[0])
	}
	span := r.To.Sub(r.From)
	v.Window = fmt.Sprintf("%s to %s (%s, %s snapshots)", r.From.Format("2006-01-02 15:04:05 MST"), r.To.Format("2006-01-02 15:04:05 MST"),
		span.Round(time.Second), termtext.Count(int64(r.Snapshots)))
	alertTime := map[string]time.Duration{}
	for _, a := range r.Alerts {
		to, end := a.To, a.To.Format("15:04:05")
		if to.IsZero() {
			to, end = r.To, "still raised at the end"
		}
		up := to.Sub(a.From).Round(time.Second)
		alertTime[a.Name] += up
		name := a.Name
		if a.Server != "" {
			name += " (" + a.Server + ")"
		}
		v.Alerts = append(v.Alerts, alertRow{Name: name, Server: a.Server, From: a.From.Format("15:04:05"), To: end, Up: up.String(), Message: a.Message, Runbook: a.Runbook})
	}
	v.Summary = [][2]string{
		{"window", v.Window},
		{"ids consumed", termtext.Count(r.Consumed)},
		{"ids added (refills)", termtext.Count(r.Added)},
		{"shortest time to empty", emptiest(r)},
		{"double finalizations", termtext.Count(r.Doubles)},
		{"stale-token rejections", termtext.Count(r.Fenced)},
	}
	if len(r.Servers) > 0 {
		v.Summary = append(v.Summary, [2]string{"servers", strings.Join(r.Servers, ", ")})
	}
	for name, d := range alertTime {
		v.Summary = append(v.Summary, [2]string{"alert " + name + " up", d.String()})
	}
	v.Peaks = r.Peaks
	for _, e := range r.Events {
		v.Events = append(v.Events, eventRow{Time: e.Time.Format("15:04:05"), Kind: e.Kind, Text: e.Text})
	}
	var b strings.Builder
	drawn := r.writeData(&b)
	v.Data = template.JS(b.String())
	v.Drawn = fmt.Sprintf("Every one of the %s snapshots is drawn", termtext.Count(int64(r.Snapshots)))
	if drawn < r.Snapshots {
		v.Drawn = fmt.Sprintf("The window holds %s snapshots; each chart is drawn with at most %s points: every stretch of snapshots keeps its first point and each series' lowest and highest, so no peak is lost. The summary, peaks, alerts and events use every snapshot",
			termtext.Count(int64(r.Snapshots)), termtext.Count(int64(MaxPoints)))
	}
	return v
}

// emptiest is the shortest time to empty of the window as the dashboard
// writes it, and when; "not draining" when it never was.
func emptiest(r *Report) string {
	if r.Emptiest == nil {
		return "not draining"
	}
	return termtext.Duration(*r.Emptiest) + " at " + r.EmptiestAt.Format("15:04:05")
}

// writeData writes the charts as a JSON array, each with its own x (Unix
// seconds) downsampled to MaxPoints, null where a value was not recorded;
// it returns the most points a chart kept. Charts with no value at all are
// left out.
func (r *Report) writeData(b *strings.Builder) int {
	times := r.byName["time"].V
	most := 0
	b.WriteString("[")
	first := true
	for _, c := range r.charts {
		var vs [][]float64
		var names []string
		for _, s := range c.Series {
			if hasValue(s.V) {
				vs, names = append(vs, s.V), append(names, s.Name)
			}
		}
		if len(vs) == 0 {
			continue
		}
		keep := Downsample(len(times), MaxPoints, vs...)
		most = max(most, len(keep))
		if !first {
			b.WriteString(",")
		}
		first = false
		fmt.Fprintf(b, `{"title":%s,"unit":%s,"names":[`, strconv.Quote(c.Title), strconv.Quote(c.Unit))
		for i, n := range names {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(strconv.Quote(n))
		}
		b.WriteString(`],"data":[`)
		writeNums(b, keep, times, 1.0/1000, 'f', 3)
		for _, v := range vs {
			b.WriteString(",")
			writeNums(b, keep, v, 1, 'g', 7)
		}
		b.WriteString("]}")
	}
	b.WriteString("]")
	return most
}

func hasValue(v []float64) bool {
	for _, x := range v {
		if !math.IsNaN(x) {
			return true
		}
	}
	return false
}

// writeNums writes v at keep, scaled, formatted as strconv's fmt and prec.
func writeNums(b *strings.Builder, keep []int, v []float64, scale float64, format byte, prec int) {
	b.WriteString("[")
	for i, k := range keep {
		if i > 0 {
			b.WriteString(",")
		}
		x := v[k] * scale
		if math.IsNaN(x) || math.IsInf(x, 0) {
			b.WriteString("null")
			continue
		}
		b.WriteString(strconv.FormatFloat(x, format, prec, 64))
	}
	b.WriteString("]")
}

var page = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<script>(function(){
  // Script errors and console errors are written on the page's root, for
  // a reader of its DOM (the browser test).
  function note(m){ var d = document.documentElement; d.setAttribute("data-errors", (d.getAttribute("data-errors") || "") + m + ";"); }
  window.addEventListener("error", function(e){ note(String(e.message)); });
  var err = console.error; console.error = function(){ note(Array.prototype.join.call(arguments, " ")); return err.apply(console, arguments); };
})();</script>
<title>{{.Title}}</title>
<style>{{.UplotCSS}}
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em auto;max-width:1100px;padding:0 1em;color:#222}
h1{font-size:1.5em;margin:0 0 .2em}h2{font-size:1.15em;margin:1.6em 0 .5em;border-bottom:1px solid #ddd}
table{border-collapse:collapse;width:100%}td,th{text-align:left;padding:.2em .6em .2em 0;vertical-align:top;border-bottom:1px solid #eee}
.muted{color:#666}.chart{margin:.8em 0 1.4em}.chart h3{font-size:1em;margin:0 0 .2em}
.alert{color:#a00;font-weight:600}footer{margin-top:3em;font-size:.8em;color:#888;white-space:pre-wrap}
</style></head><body>
<h1>{{.Title}}</h1>
<p class="muted">{{if .Where}}{{.Where}} · {{end}}{{if .Mode}}recorded by pooltop {{.Mode}} · {{end}}{{.Window}}</p>
<h2>Summary</h2>
<table id="summary">{{range .Summary}}<tr><th>{{index . 0}}</th><td>{{index . 1}}</td></tr>{{end}}</table>
<h2>Peaks</h2>
<table id="peaks"><tr><th>figure</th><th>highest</th><th>at</th></tr>{{range .Peaks}}<tr><td>{{.Name}}</td><td data-peak="{{.Name}}">{{.Text}}</td><td>{{.At.Format "15:04:05"}}</td></tr>{{end}}</table>
<h2>Alerts</h2>
{{if .Alerts}}<table id="alerts"><tr><th>alert</th><th>raised</th><th>cleared</th><th>up</th><th>what it said, and the runbook</th></tr>
{{range .Alerts}}<tr><td class="alert">{{.Name}}</td><td>{{.From}}</td><td>{{.To}}</td><td>{{.Up}}</td><td>{{.Message}}<br><span class="muted">{{.Runbook}}</span></td></tr>
{{end}}</table>{{else}}<p>No alert was raised in this window.</p>{{end}}
<h2>Charts</h2>
<p class="muted">One time axis for all charts: drag across a chart to zoom every chart in, double-click to zoom out, the buttons (or ← →) move the window; the legend under a chart gives the values at the cursor. {{.Drawn}}.</p>
<p><button id="earlier">◀ earlier</button> <button id="later">later ▶</button> <button id="whole">the whole window</button></p>
<div id="charts"></div>
<h2>Events</h2>
{{if .Events}}<table id="events"><tr><th>time</th><th>kind</th><th>event</th></tr>{{range .Events}}<tr><td>{{.Time}}</td><td>{{.Kind}}</td><td>{{.Text}}</td></tr>{{end}}</table>{{else}}<p>No event in this window.</p>{{end}}
<footer>Made by pooltop report. Charts drawn by uPlot:
{{.UplotLicense}}</footer>
<script>{{.UplotJS}}</script>
<script>
(function(){
  var charts = {{.Data}};
  var colors = ["#1f77b4","#d62728","#ff7f0e","#7f7f7f","#2ca02c","#9467bd","#8c564b","#e377c2","#17becf","#bcbd22"];
  var plots = [], syncing = false;
  var root = document.getElementById("charts");
  var width = Math.min(root.clientWidth || 1000, 1100);
  charts.forEach(function(c){
    var box = document.createElement("div"); box.className = "chart";
    var h = document.createElement("h3"); h.textContent = c.title + (c.unit ? " (" + c.unit + ")" : ""); box.appendChild(h);
    root.appendChild(box);
    var series = [{}];
    c.names.forEach(function(n, i){ series.push({label: n, stroke: colors[i % colors.length], width: 1.5, spanGaps: false}); });
    var opts = {width: width, height: 220, series: series, cursor: {sync: {key: "pooltop"}, drag: {x: true, y: false}},
      scales: {x: {time: true}}, axes: [{}, {size: 84}],
      hooks: {setScale: [function(u, key){
        if (key !== "x" || syncing) return;
        syncing = true;
        plots.forEach(function(p){ if (p !== u) p.setScale("x", {min: u.scales.x.min, max: u.scales.x.max}); });
        syncing = false;
      }]}};
    var p = new uPlot(opts, c.data, box);
    p.pooltopTitle = c.title;
    plots.push(p);
  });
  // Pan: move the window shown by half its width, within the recording.
  function pan(dir){
    if (!plots.length) return;
    var x = plots[0].scales.x, d = plots[0].data[0];
    var lo = d[0], hi = d[d.length-1], w = x.max - x.min, step = w / 2 * dir;
    var min = Math.max(lo, Math.min(x.min + step, hi - w)), max = min + w;
    plots[0].setScale("x", {min: min, max: max});
  }
  function whole(){ if (plots.length) { var d = plots[0].data[0]; plots[0].setScale("x", {min: d[0], max: d[d.length-1]}); } }
  document.getElementById("earlier").onclick = function(){ pan(-1); };
  document.getElementById("later").onclick = function(){ pan(1); };
  document.getElementById("whole").onclick = whole;
  document.addEventListener("keydown", function(e){ if (e.key === "ArrowLeft") pan(-1); if (e.key === "ArrowRight") pan(1); });
  window.pooltopCharts = plots;
  // What the charts hold, for a reader of the page's DOM (the browser test):
  // each chart's series and the highest value it was given.
  var drawn = plots.map(function(p){
    return {title: p.pooltopTitle, series: p.series.slice(1).map(function(s, i){
      var hi = null; p.data[i+1].forEach(function(v){ if (v !== null && (hi === null || v > hi)) hi = v; });
      return {name: s.label, max: hi};
    })};
  });
  var pre = document.createElement("pre"); pre.id = "drawn"; pre.hidden = true; pre.textContent = JSON.stringify(drawn);
  document.body.appendChild(pre);
  document.body.setAttribute("data-charts", String(plots.length));
})();
</script>
</body></html>
`))
