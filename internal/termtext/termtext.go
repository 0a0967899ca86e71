// Package termtext makes text from the database safe to write to a
// terminal: an identifier or a holder holding ESC]0;…BEL or ESC[2J would
// otherwise retitle, clear or rewrite the user's screen, and CR or LF would
// forge lines of output. It also writes figures the way the dashboard
// shows them (Count, Rate, Duration), for every page that shows them too.
package termtext

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Escape writes control characters (C0, DEL, C1, and invalid UTF-8) as Go
// escapes, and tabs and line breaks as spaces; printable text is unchanged.
func Escape(s string) string {
	clean := true
	for _, r := range s {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t' || r == '\r':
			b.WriteByte(' ')
		case r == unicode.ReplacementChar:
			b.WriteString(`\ufffd`) // invalid UTF-8 (or a replacement character), shown as such
		case unicode.IsControl(r):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// Count writes an integer with thousands separators: 1234567 as 1,234,567.
func Count(n int64) string {
	s := strconv.FormatInt(n, 10)
	sign := 0
	if n < 0 {
		sign = 1
	}
	for i := len(s) - 3; i > sign; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// Rate writes a rate compactly, as the dashboard does: 0.5, 12, 3.4k, 1.2M.
func Rate(v float64) string {
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

// Duration writes seconds as the dashboard does: 45s, 12m05s, 3h20m, 5d.
func Duration(sec float64) string {
	d := time.Duration(sec) * time.Second
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}
