// Package bytesize reads and prints sizes such as 64MiB for command-line
// flags (a pflag.Value).
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// Size is a size flag: a number of bytes with an optional KiB, MiB or
// GiB (or K, M, G, KB, MB, GB, all powers of 1024).
type Size int64

func (b Size) String() string {
	for _, u := range []struct {
		name string
		n    int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if int64(b) >= u.n && int64(b)%u.n == 0 {
			return fmt.Sprintf("%d%s", int64(b)/u.n, u.name)
		}
	}
	return strconv.FormatInt(int64(b), 10)
}

// Set reads a size such as 64MiB, 500KB or 1024 (bytes); it is the
// pflag.Value that --record-max is.
func (b *Size) Set(s string) error {
	t := strings.ToUpper(strings.TrimSpace(s))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		n      int64
	}{{"GIB", 1 << 30}, {"MIB", 1 << 20}, {"KIB", 1 << 10}, {"GB", 1 << 30}, {"MB", 1 << 20}, {"KB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.n
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<50)/mult {
		return fmt.Errorf("%q: give a size such as 64MiB or 500KiB", s)
	}
	*b = Size(n * mult)
	return nil
}

// Type names the value in --help.
func (b *Size) Type() string { return "size" }
