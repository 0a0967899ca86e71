package tui

import (
	"github.com/charmbracelet/bubbles/key"

	"github.com/pooltop-dev/pooltop/workload"
)

// keyMap is every key the dashboard answers to; the help bubble lists them.
type keyMap struct {
	Quit, Help, Pause, Faster, Slower, Reset, Fresh                 key.Binding
	WorkersDown, WorkersUp, Lease, Fencing, Renew, Reaper, Strategy key.Binding
	CrashDown, CrashUp, PauseDown, PauseUp, TTLDown, TTLUp          key.Binding
	BatchDown, BatchUp, TaskDown, TaskUp, RefillDown, RefillUp      key.Binding
	RateDown, RateUp, Preset, FenceWhere, RequestID, Autovacuum     key.Binding
	SkewDown, SkewUp, Report                                        key.Binding
	Up, Down, Soft, Hard, Doctor, Order, Filter                     key.Binding
	Window, Runbook, StopServer, WriteReport                        key.Binding
	demo                                                            bool
}

func newKeyMap(demo bool) keyMap {
	b := func(keys []string, k, h string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(k, h))
	}
	km := keyMap{
		Quit:        b([]string{"q", "ctrl+c"}, "q", "quit"),
		Help:        b([]string{"?"}, "?", "help"),
		Pause:       b([]string{" "}, "space", "pause display"),
		Slower:      b([]string{"<", ","}, "<", "poll slower"),
		Faster:      b([]string{">", "."}, ">", "poll faster"),
		Reset:       b([]string{"r"}, "r", "reset counters, charts, alerts"),
		Fresh:       b([]string{"R"}, "R", "fresh pool"),
		WorkersDown: b([]string{"w"}, "w/W", "workers −/+"),
		WorkersUp:   b([]string{"W"}, "W", "workers +"),
		Lease:       b([]string{"l"}, "l", "lease on/off"),
		Fencing:     b([]string{"f"}, "f", "fencing on/off"),
		Renew:       b([]string{"n"}, "n", "renewal on/off"),
		Reaper:      b([]string{"v"}, "v", "reaper on/off"),
		Strategy:    b([]string{"s"}, "s", "strategy"),
		CrashDown:   b([]string{"c"}, "c/C", "crash rate −/+"),
		CrashUp:     b([]string{"C"}, "C", "crash rate +"),
		PauseDown:   b([]string{"p"}, "p/P", "pause rate −/+"),
		PauseUp:     b([]string{"P"}, "P", "pause rate +"),
		TTLDown:     b([]string{"t"}, "t/T", "lease TTL −/+"),
		TTLUp:       b([]string{"T"}, "T", "lease TTL +"),
		BatchDown:   b([]string{"b"}, "b/B", "batch −/+"),
		BatchUp:     b([]string{"B"}, "B", "batch +"),
		TaskDown:    b([]string{"k"}, "k/K", "task time −/+"),
		TaskUp:      b([]string{"K"}, "K", "task time +"),
		RefillDown:  b([]string{"e"}, "e/E", "refill −/+"),
		RefillUp:    b([]string{"E"}, "E", "refill +"),
		RateDown:    b([]string{"a"}, "a/A", "rate limit −/+"),
		RateUp:      b([]string{"A"}, "A", "rate limit +"),
		Preset:      b(presetKeys(), "1-8", "scenario, !-*"),
		FenceWhere:  b([]string{"F"}, "F", "fence in app/db"),
		RequestID:   b([]string{"i"}, "i", "retry ids stable/fresh"),
		Autovacuum:  b([]string{"u"}, "u", "autovacuum on/off"),
		SkewDown:    b([]string{"z"}, "z/Z", "clock skew −/+"),
		SkewUp:      b([]string{"Z"}, "Z", "clock skew +"),
		Report:      b([]string{"g"}, "g", "report FOR SHARE on/off"),
		Up:          b([]string{"up"}, "↑/↓", "select a blocker or holder"),
		Down:        b([]string{"down"}, "↓", "next"),
		Soft:        b([]string{"x"}, "x", "cancel query / release expired"),
		Hard:        b([]string{"X"}, "X", "terminate session"),
		Doctor:      b([]string{"D"}, "D", "doctor: every check"),
		Order:       b([]string{"o"}, "o", "order blockers"),
		Filter:      b([]string{"/"}, "/", "filter by application"),
		Window:      b([]string{"h"}, "h", "chart window: fit, 1m, 15m, 1h"),
		Runbook:     b([]string{"m"}, "m", "runbook of the raised alerts"),
		StopServer:  b([]string{"S"}, "S", "stop a server hard / start it"),
		WriteReport: b([]string{"O"}, "O", "write the report (HTML) of the recording"),
		demo:        demo,
	}
	for _, k := range []*key.Binding{&km.WorkersDown, &km.WorkersUp, &km.Lease, &km.Fencing, &km.Renew, &km.Reaper, &km.Strategy,
		&km.CrashDown, &km.CrashUp, &km.PauseDown, &km.PauseUp, &km.TTLDown, &km.TTLUp, &km.BatchDown, &km.BatchUp,
		&km.TaskDown, &km.TaskUp, &km.RefillDown, &km.RefillUp, &km.RateDown, &km.RateUp, &km.Preset, &km.Reset, &km.Fresh,
		&km.FenceWhere, &km.RequestID, &km.Autovacuum, &km.SkewDown, &km.SkewUp, &km.Report} {
		k.SetEnabled(demo)
	}
	return km
}

// ShortHelp is the line always visible at the bottom.
func (k keyMap) ShortHelp() []key.Binding {
	if k.demo {
		return []key.Binding{k.Help, k.Quit, k.Pause, k.Preset, k.Lease, k.Fencing, k.CrashDown, k.PauseDown, k.WorkersDown, k.Strategy}
	}
	return []key.Binding{k.Help, k.Quit, k.Pause, k.Slower, k.Faster}
}

// FullHelp is the table shown by '?'.
func (k keyMap) FullHelp() [][]key.Binding {
	cols := [][]key.Binding{{k.Quit, k.Help, k.Pause, k.Slower, k.Faster, k.Reset, k.Fresh}, {k.Up, k.Soft, k.Hard, k.Doctor, k.Runbook, k.WriteReport, k.Order, k.Filter, k.Window}}
	if k.demo {
		cols = append(cols,
			[]key.Binding{k.Preset, k.Lease, k.Fencing, k.FenceWhere, k.Renew, k.Reaper, k.Strategy},
			[]key.Binding{k.WorkersDown, k.CrashDown, k.PauseDown, k.TTLDown, k.BatchDown, k.SkewDown},
			[]key.Binding{k.TaskDown, k.RefillDown, k.RateDown, k.RequestID, k.Autovacuum, k.Report, k.StopServer})
	}
	return cols
}

// presetKeys are the keys of the scenarios, in their order.
func presetKeys() []string {
	keys := make([]string, len(workload.Scenarios))
	for i, sc := range workload.Scenarios {
		keys[i] = sc.Key
	}
	return keys
}

// presetIndex is the scenario a key plays, or -1.
func presetIndex(k string) int {
	for i, sc := range workload.Scenarios {
		if sc.Key == k {
			return i
		}
	}
	return -1
}
