package termtext

import "testing"

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"res-0000000001":      "res-0000000001",
		"\x1b]0;owned\x07":    `\x1b]0;owned\a`,
		"a\x1b[2Jb":           `a\x1b[2Jb`,
		"line1\r\nline2":      "line1  line2",
		"caf\u00e9 \u00fcber": "caf\u00e9 \u00fcber",
		"c1\u009bcsi":         `c1\u009bcsi`,
		"bad\xffutf8":         `bad\ufffdutf8`,
	} {
		if got := Escape(in); got != want {
			t.Errorf("Escape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCount(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 7: "7", 999: "999", 1000: "1,000", -1000: "-1,000", -999: "-999",
		1234567: "1,234,567", -123456: "-123,456", 100000: "100,000"} {
		if got := Count(n); got != want {
			t.Errorf("Count(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestRateAndDuration(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 0.575498: "0.6", 12.4: "12", 3412: "3.4k", 45_000: "45k", 1_234_567: "1.2M", -90_000: "-90k"} {
		if got := Rate(v); got != want {
			t.Errorf("Rate(%v) = %q, want %q", v, got, want)
		}
	}
	for sec, want := range map[float64]string{45: "45s", 725: "12m05s", 12_000: "3h20m", 6_000_000: "69d"} {
		if got := Duration(sec); got != want {
			t.Errorf("Duration(%v) = %q, want %q", sec, got, want)
		}
	}
}
