// Package termtext makes text from the database safe to write to a
// terminal: an identifier or a holder holding ESC]0;…BEL or ESC[2J would
// otherwise retitle, clear or rewrite the user's screen, and CR or LF would
// forge lines of output.
package termtext

import (
	"strconv"
	"strings"
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
