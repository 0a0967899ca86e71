package tui

import (
	"strconv"
	"strings"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/x/ansi"

	"github.com/pooltop-dev/pooltop/internal/termtext"
)

// Styles are every style the dashboard uses, built in one place. With
// NO_COLOR (or an ASCII profile) they carry no colour, only layout.
type Styles struct {
	Header, Title, Value, Dim, Alert, OK, Warn, Border lipgloss.Style
	Unused, Pending, Expired, Consumed                 lipgloss.Style
	Line1, Line2                                       lipgloss.Style
	Proof                                              lipgloss.Style // the banner's proof counter
	HelpKey, HelpDesc                                  lipgloss.Style
	color                                              bool
}

// The palette. Every foreground is readable on a black terminal (contrast
// at least 4.5:1, as projectors wash dark greys out) and on a white one (at
// least 3:1); the header and the alert are white on their own background.
// TestPaletteContrast checks it.
const (
	colBlue   = "33"  // titles, PENDING, the first line of a chart
	colGrey   = "244" // hints, axes, CONSUMED
	colGreen  = "64"  // UNUSED, all is well
	colOrange = "166" // warnings, the second line of a chart
	colRed    = "196" // expired, leaked for good, double finalizations
	colWhite  = "15"  // on the header and alert backgrounds
	colNavy   = "24"  // header background
	colAlert  = "160" // alert background
)

func newStyles(color bool) Styles {
	s := Styles{color: color}
	base := lipgloss.NewStyle()
	s.Header, s.Title, s.Value, s.Dim, s.Alert, s.OK, s.Warn = base.Bold(true), base.Bold(true), base, base, base.Bold(true), base, base.Bold(true)
	s.Border = base.Border(lipgloss.NormalBorder(), false, false, false, false)
	s.Unused, s.Pending, s.Expired, s.Consumed, s.Line1, s.Line2 = base, base, base, base, base, base
	s.Proof, s.HelpKey, s.HelpDesc = base.Bold(true), base.Bold(true), base
	if !color {
		return s
	}
	fg := func(st lipgloss.Style, c string) lipgloss.Style { return st.Foreground(lipgloss.Color(c)) }
	s.Header = fg(s.Header, colWhite).Background(lipgloss.Color(colNavy))
	s.Alert = fg(s.Alert, colWhite).Background(lipgloss.Color(colAlert))
	s.Title, s.Pending, s.Line1, s.Proof = fg(s.Title, colBlue), fg(s.Pending, colBlue), fg(s.Line1, colBlue), fg(s.Proof, colBlue)
	s.Dim, s.Consumed, s.HelpKey, s.HelpDesc = fg(s.Dim, colGrey), fg(s.Consumed, colGrey), fg(s.HelpKey, colGrey), fg(s.HelpDesc, colGrey)
	s.OK, s.Unused = fg(s.OK, colGreen), fg(s.Unused, colGreen)
	s.Warn, s.Line2 = fg(s.Warn, colOrange), fg(s.Line2, colOrange)
	s.Expired = fg(s.Expired, colRed)
	return s
}

// sanitize makes text from the database safe to print: control characters
// (escape sequences above all) are shown escaped, never sent to the terminal.
func sanitize(s string) string { return termtext.Escape(s) }

// formatInt writes 1234567 as 1,234,567.
func formatInt(n int64) string { return termtext.Count(n) }

// formatFloat writes a rate compactly: 0.5, 12, 3.4k, 1.2M.
func formatFloat(v float64) string { return termtext.Rate(v) }

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
