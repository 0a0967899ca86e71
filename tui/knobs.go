package tui

import (
	"time"

	"github.com/pooltop-dev/pooltop/engine"
	"github.com/pooltop-dev/pooltop/workload"
)

// Steps of the knobs: each key moves to the next or previous value, so a
// few presses cover the whole useful range and every value is in range.
var (
	workerSteps   = []int{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512}
	rateSteps     = []float64{0, 10, 50, 100, 200, 500, 1000, 2000, 5000}
	batchSteps    = []int{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000}
	ttlSteps      = []time.Duration{100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}
	taskSteps     = []time.Duration{0, time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 500 * time.Millisecond, time.Second, 5 * time.Second}
	faultSteps    = []float64{0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5}
	refillSteps   = []float64{0, 10, 50, 100, 200, 500, 1000, 5000} // the fixed rates of refillLevels
	skewSteps     = []time.Duration{0, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second}
	intervalSteps = []time.Duration{250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}
)

// step moves v one step up (dir > 0) or down within steps, clamping at the
// ends. A value between steps moves to the neighbouring step.
func step[T int | float64 | time.Duration](steps []T, v T, dir int) T {
	if dir > 0 {
		for _, s := range steps {
			if s > v {
				return s
			}
		}
		return steps[len(steps)-1]
	}
	for i := len(steps) - 1; i >= 0; i-- {
		if steps[i] < v {
			return steps[i]
		}
	}
	return steps[0]
}

func nextStrategy(s engine.Strategy) engine.Strategy {
	return engine.Strategies[(int(s)+1)%len(engine.Strategies)]
}

// knobRow is one line of the knobs panel.
type knobRow struct{ key, name, value string }

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "OFF"
}

// knobRows are the knobs panel's lines. The knobs of the shifted-digit stories
// (request ids, clock skew, autovacuum, ack loss, transfers) take a line
// only when set away from a healthy fleet's, or when story, the preset in
// force, sets them.
func knobRows(c workload.Config, story *workload.Config) []knobRow {
	rate := "unlimited"
	if c.Rate > 0 {
		rate = formatFloat(c.Rate) + "/s"
	}
	refill := "off"
	switch {
	case c.KeepUp && c.Refill > 0:
		refill = "keep up+" + formatFloat(c.Refill)
	case c.KeepUp:
		refill = "keeps up"
	case c.Refill > 0:
		refill = formatFloat(c.Refill) + "/s"
	}
	rows := []knobRow{
		{"w W", "workers", formatInt(int64(c.Workers))},
		{"s", "strategy", c.Strategy.String()},
		{"l", "lease", onOff(c.Lease)},
		{"f F", "fencing", c.FenceMode()},
		{"n", "renewal", onOff(c.Renew)},
		{"v", "reaper", onOff(c.Reaper)},
		{"t T", "ttl", c.TTL.String()},
		{"k K", "task", c.Task.String()},
		{"b B", "batch", formatInt(int64(c.Batch))},
		{"c C", "crash", formatPercent(c.CrashRate)},
		{"p P", "pause", formatPercent(c.PauseRate) + " × " + c.PauseLength.String()},
		{"a A", "rate", rate},
		{"e E", "refill", refill},
	}
	healthy := workload.Defaults()
	shown := func(f func(workload.Config) any) bool {
		return f(c) != f(healthy) || (story != nil && f(*story) != f(healthy))
	}
	ids := "stable"
	if !c.StableRequestID {
		ids = "FRESH"
	}
	var extra []knobRow
	for _, r := range []struct {
		row knobRow
		f   func(workload.Config) any
	}{
		{knobRow{"i", "req ids", ids}, func(c workload.Config) any { return c.StableRequestID }},
		{knobRow{"", "ack loss", formatPercent(c.AckLoss)}, func(c workload.Config) any { return c.AckLoss }},
		{knobRow{"z Z", "skew", c.ClockSkew.String()}, func(c workload.Config) any { return c.ClockSkew }},
		{knobRow{"", "transfer", formatPercent(c.TransferRate)}, func(c workload.Config) any { return c.TransferRate }},
		{knobRow{"", "lock held", c.LockHeld.String()}, func(c workload.Config) any { return c.LockHeld }},
		{knobRow{"g", "report", reportText(c.ShareHold)}, func(c workload.Config) any { return c.ShareHold }},
		{knobRow{"u", "autovac", onOff(c.Autovacuum)}, func(c workload.Config) any { return c.Autovacuum }},
	} {
		if shown(r.f) {
			extra = append(extra, r.row)
		}
	}
	// Under the fencing line, so that they stay on a small screen, which
	// cuts the panel from the bottom.
	return append(rows[:4:4], append(extra, rows[4:]...)...)
}

// refillLevel is one setting of the producer.
type refillLevel struct {
	keepUp bool
	rate   float64
}

// refillLevels are the producer's settings the e/E keys step through:
// off, keeping up with consumption, then the fixed rates.
func refillLevels() []refillLevel {
	levels := []refillLevel{{false, 0}, {true, 0}}
	for _, r := range refillSteps[1:] {
		levels = append(levels, refillLevel{false, r})
	}
	return levels
}

// stepRefill moves the producer one level up or down.
func stepRefill(c workload.Config, dir int) workload.Config {
	levels := refillLevels()
	cur := 0
	for i, l := range levels {
		if l.keepUp == c.KeepUp && l.rate <= c.Refill {
			cur = i
		}
	}
	next := levels[min(max(cur+dir, 0), len(levels)-1)]
	c.KeepUp, c.Refill = next.keepUp, next.rate
	return c
}

// reportText is the report knob: off, or how long it holds free ids.
func reportText(d time.Duration) string {
	if d == 0 {
		return "off"
	}
	return "FOR SHARE " + d.String()
}
