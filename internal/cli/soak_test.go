package cli

import (
	"context"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"

	"github.com/pooltop-dev/pooltop/collector"
	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/internal/demo"
	"github.com/pooltop-dev/pooltop/internal/pgtest"
	"github.com/pooltop-dev/pooltop/tui"
	"github.com/pooltop-dev/pooltop/workload"
)

// BenchmarkHourOfPolls runs the demo's pieces (workload, collector,
// dashboard model at 200×60) through 3,600 polls — an hour at 1 Hz, played
// back to back — and reports the process's RSS and Go heap after the first
// 600 and after all 3,600 polls: memory must stay flat (≤ 60 MB RSS).
//
//	go test -run '^$' -bench HourOfPolls -benchtime 1x .
func BenchmarkHourOfPolls(b *testing.B) {
	ctx := context.Background()
	schema := pgtest.MigratedSchema(b)
	pool := pgtest.Pool(b, schema, pgtest.Options{MaxConns: 4})
	eng := engine.New(pool)
	if _, err := eng.Seed(ctx, 50_000); err != nil {
		b.Fatal(err)
	}
	cfg := workload.Defaults()
	cfg.Workers, cfg.CrashRate, cfg.Refill = 2, 0.01, 100 // some leaked ids and refills too
	wl, err := workload.New(eng, cfg)
	if err != nil {
		b.Fatal(err)
	}
	wl.Start(ctx)
	defer wl.Stop()
	col, err := collector.New(ctx, collector.Config{DSN: pgtest.DSN(), Table: schema + ".resource_pool", Workload: wl})
	if err != nil {
		b.Fatal(err)
	}
	defer col.Close()
	var m tea.Model = tui.New(tui.Options{Source: col, Knobs: &demo.Stage{Pool: demo.OneServer(engine.WrapPool(pool), eng), Workload: wl, Collector: col}, Mode: "demo"})
	m, _ = m.Update(tea.WindowSizeMsg{Width: 200, Height: 60})
	poll := m.Init()
	for i := 0; i < b.N; i++ {
		var rss600, heap600 float64
		for n := 1; n <= 3600; n++ {
			msg := poll() // a tick: it starts a poll
			cmd := func() tea.Cmd { var c tea.Cmd; m, c = m.Update(msg); return c }()
			if cmd == nil {
				b.Fatalf("poll %d: the tick started no poll", n)
			}
			m, _ = m.Update(cmd()) // the poll's result
			_ = m.View()
			poll = func() tea.Msg { return m.Init()() }
			if n == 600 {
				rss600, heap600 = rssMB(), heapMB()
			}
		}
		b.ReportMetric(rss600, "rss_MB_at_600")
		b.ReportMetric(rssMB(), "rss_MB_at_3600")
		b.ReportMetric(heap600, "heap_MB_at_600")
		b.ReportMetric(heapMB(), "heap_MB_at_3600")
	}
}

func heapMB() float64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ms.HeapInuse) / (1 << 20)
}

// rssMB reads the resident set size of this process from /proc.
func rssMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}
