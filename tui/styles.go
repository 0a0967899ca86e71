package tui

import (
	"fmt"
	"github.com/pooltop-dev/pooltop/internal/termtext"
	"math"
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"
)

// Styles are every style the dashboard uses, built in one place. With
// NO_COLOR (or an ASCII profile) they carry no colour, only layout.
type Styles struct {
	Header, Title, Value, Dim, Alert, OK, Warn, Border lipgloss.Style
	Unused, Pending, Expired, Consumed                 lipgloss.Style
	Line1, Line2                                       lipgloss.Style
	color                                              bool
}

func newStyles(color bool) Styles {
	s := Styles{color: color}
	base := lipgloss.NewStyle()
	s.Header, s.Title, s.Value, s.Dim, s.Alert, s.OK, s.Warn = base.Bold(true), base.Bold(true), base, base, base.Bold(true), base, base.Bold(true)
	s.Border = base.Border(lipgloss.NormalBorder(), false, false, false, false)
	s.Unused, s.Pending, s.Expired, s.Consumed, s.Line1, s.Line2 = base, base, base, base, base, base
	if !color {
		return s
	}
	s.Header = s.Header.Foreground(lipgloss.Color("15")).Background(lipgloss.Color("24"))
	s.Title = s.Title.Foreground(lipgloss.Color("81"))
	s.Dim = s.Dim.Foreground(lipgloss.Color("245"))
	s.Alert = s.Alert.Foreground(lipgloss.Color("15")).Background(lipgloss.Color("160"))
	s.OK = s.OK.Foreground(lipgloss.Color("77"))
	s.Warn = s.Warn.Foreground(lipgloss.Color("214"))
	s.Unused = s.Unused.Foreground(lipgloss.Color("77"))
	s.Pending = s.Pending.Foreground(lipgloss.Color("75"))
	s.Expired = s.Expired.Foreground(lipgloss.Color("203"))
	s.Consumed = s.Consumed.Foreground(lipgloss.Color("242"))
	s.Line1 = s.Line1.Foreground(lipgloss.Color("81"))
	s.Line2 = s.Line2.Foreground(lipgloss.Color("214"))
	return s
}

// sanitize makes text from the database safe to print: control characters
// (escape sequences above all) are shown escaped, never sent to the terminal.
func sanitize(s string) string { return termtext.Escape(s) }

// formatInt writes 1234567 as 1,234,567.
func formatInt(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		return "-" + s
	}
	return s
}

// formatFloat writes a rate compactly: 0.5, 12, 3.4k, 1.2M.
func formatFloat(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case a >= 1e4:
		return fmt.Sprintf("%.0fk", v/1e3)
	case a >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	case a >= 10 || a == 0:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func formatPercent(f float64) string {
	if f == 0 {
		return "0"
	}
	return strconv.FormatFloat(100*f, 'f', -1, 64) + "%"
}

// truncate cuts s (which may carry styles) to width cells.
func truncate(s string, width int) string {
	if width <= 0 {
		return ""
	}
	return ansi.Truncate(s, width, "…")
}

// pad fits s to exactly width cells.
func pad(s string, width int) string {
	s = truncate(s, width)
	if w := lipgloss.Width(s); w < width {
		s += strings.Repeat(" ", width-w)
	}
	return s
}
