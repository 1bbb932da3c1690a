// Package bytesize reads and writes byte counts as people type and read
// them ("256MiB", "1.5 GiB"): the one definition every flag and message
// of the project uses.
package bytesize

import (
	"fmt"
	"strconv"
	"strings"
)

// Format writes n in binary units with one decimal ("1.5 GiB"), or in
// bytes below 1 KiB ("512 B").
func Format(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, i := float64(n)/unit, 0
	for (v >= unit || v <= -unit) && i < 5 {
		v /= unit
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, "KMGTPE"[i])
}

// units are Parse's suffixes, longest first among those that end alike.
var units = []struct {
	suffix string
	mult   float64
}{{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40}, {"b", 1}}

// Parse reads a positive byte count such as "256MiB", "1.5GB", "64 k" or
// "4096". Suffixes are case-insensitive; KiB/MiB/GiB/TiB (and K/M/G/T)
// are powers of 1024, KB/MB/GB/TB powers of 1000. Fractions are rounded
// down to a whole byte.
func Parse(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || !(v*mult >= 1) || v*mult >= 1<<62 {
		return 0, fmt.Errorf("%q is not a positive size like 256MiB", s)
	}
	return int64(v * mult), nil
}
