package bytesize

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// FuzzSizeAndDurationFlags: --record-max, the duration flags and the
// count flags (--pool-size, --count: pflag's int) reject garbage and
// overflow with an error, never panic, and what they accept is a value
// that prints back to the same value.
func FuzzSizeAndDurationFlags(f *testing.F) {
	for _, s := range []string{"64MiB", "500KiB", "1GiB", "4096", "1e9", "-1MiB", "9223372036854775807GiB", "  2 mb ", "MiB", "", "1.5MiB", "0x10", "30s", "1h2m3s", "-5s", "9999999999h", "1ns", "300000", "-1", "0x10", "1_000", "9223372036854775808", "1e6"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		var b Size
		if err := b.Set(s); err == nil {
			if b < 0 || int64(b) > 1<<50 {
				t.Fatalf("size %q read as %d", s, int64(b))
			}
			var again Size
			if err := again.Set(b.String()); err != nil || again != b {
				t.Fatalf("size %q read as %d, printed %q, read back as %d (%v)", s, int64(b), b.String(), int64(again), err)
			}
		} else if strings.Contains(err.Error(), "\n") {
			t.Fatalf("size %q: an error of more than one line: %q", s, err)
		}
		// Duration flags are pflag's, read by time.ParseDuration: what it
		// accepts the flag holds exactly, what it refuses is an error.
		var got time.Duration
		fs := pflag.NewFlagSet("fuzz", pflag.ContinueOnError)
		fs.DurationVar(&got, "d", 0, "")
		d, perr := time.ParseDuration(s)
		if err := fs.Set("d", s); (err == nil) != (perr == nil) || err == nil && got != d {
			t.Fatalf("duration %q: flag %v (%v), time.ParseDuration %v (%v)", s, got, err, d, perr)
		}
		// Count flags are pflag's int: what it accepts is an int64 that
		// strconv reads the same, what overflows is an error (the commands
		// then check their own range).
		var n int
		fs.IntVar(&n, "n", 0, "")
		want, nerr := strconv.ParseInt(s, 0, 64)
		if err := fs.Set("n", s); (err == nil) != (nerr == nil) || err == nil && int64(n) != want {
			t.Fatalf("count %q: flag %d (%v), strconv %d (%v)", s, n, err, want, nerr)
		} else if err == nil && strconv.Itoa(n) != strconv.FormatInt(want, 10) {
			t.Fatalf("count %q read as %d", s, n)
		}
	})
}
