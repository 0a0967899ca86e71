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
