package bytesize

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// FuzzSizeAndDurationFlags: --record-max and the duration flags reject
// garbage and overflow with an error, never panic, and what they accept
// is a size or duration that prints back to the same value.
func FuzzSizeAndDurationFlags(f *testing.F) {
	for _, s := range []string{"64MiB", "500KiB", "1GiB", "4096", "1e9", "-1MiB", "9223372036854775807GiB", "  2 mb ", "MiB", "", "1.5MiB", "0x10", "30s", "1h2m3s", "-5s", "9999999999h", "1ns"} {
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
	})
}
