package tui

import (
	"math"
	"reflect"
	"strconv"
	"testing"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// luminance is the WCAG relative luminance of an xterm-256 colour.
func luminance(t *testing.T, c lipgloss.TerminalColor) float64 {
	t.Helper()
	col, ok := c.(lipgloss.Color)
	if !ok {
		t.Fatalf("colour %v is not an xterm-256 number", c)
	}
	n, err := strconv.Atoi(string(col))
	if err != nil || n < 0 || n > 255 {
		t.Fatalf("colour %q is not an xterm-256 number", col)
	}
	rgb := termenv.ConvertToRGB(termenv.ANSI256Color(n))
	lin := func(v float64) float64 {
		if v <= 0.03928 {
			return v / 12.92
		}
		return math.Pow((v+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(rgb.R) + 0.7152*lin(rgb.G) + 0.0722*lin(rgb.B)
}

func contrast(a, b float64) float64 { return (math.Max(a, b) + 0.05) / (math.Min(a, b) + 0.05) }

// Every style the dashboard draws is readable on a projector: a foreground
// drawn on the terminal's own background has a contrast of at least 4.5:1
// on black and 3:1 on white; one drawn on a background of its own (the
// header, the alert) at least 4.5:1 on it.
func TestPaletteContrast(t *testing.T) {
	st := newStyles(true)
	v := reflect.ValueOf(st)
	checked := 0
	for i := 0; i < v.NumField(); i++ {
		if !v.Type().Field(i).IsExported() {
			continue
		}
		style, ok := v.Field(i).Interface().(lipgloss.Style)
		if !ok {
			continue
		}
		name := v.Type().Field(i).Name
		fg := style.GetForeground()
		if _, none := fg.(lipgloss.NoColor); none {
			continue
		}
		l := luminance(t, fg)
		if bg := style.GetBackground(); bg != (lipgloss.NoColor{}) {
			if c := contrast(l, luminance(t, bg)); c < 4.5 {
				t.Errorf("%s: %.2f:1 on its background, want 4.5:1", name, c)
			}
		} else {
			if c := contrast(l, 0); c < 4.5 {
				t.Errorf("%s: %.2f:1 on black, want 4.5:1", name, c)
			}
			if c := contrast(l, 1); c < 3 {
				t.Errorf("%s: %.2f:1 on white, want 3:1", name, c)
			}
		}
		checked++
	}
	if checked < 12 {
		t.Fatalf("only %d styles have a colour", checked)
	}
	// Without colour, nothing has one.
	plain := reflect.ValueOf(newStyles(false))
	for i := 0; i < plain.NumField(); i++ {
		if !plain.Type().Field(i).IsExported() {
			continue
		}
		if style, ok := plain.Field(i).Interface().(lipgloss.Style); ok {
			if _, none := style.GetForeground().(lipgloss.NoColor); !none {
				t.Errorf("%s has a colour under NO_COLOR", plain.Type().Field(i).Name)
			}
		}
	}
}
