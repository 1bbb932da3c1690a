package bytesize

import (
	"math"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64 // -1: an error
	}{
		{"256MiB", 256 << 20}, {"256mib", 256 << 20}, {"1GiB", 1 << 30}, {"1.5GB", 1500000000},
		{"4096", 4096}, {"10 KB", 10000}, {"2k", 2048}, {"64M", 64 << 20}, {"7B", 7}, {"2T", 2 << 40},
		{"", -1}, {"-1MiB", -1}, {"0", -1}, {"MiB", -1}, {"1e30TB", -1}, {"NaN", -1}, {"12XB", -1},
	} {
		got, err := Parse(tc.in)
		if tc.want < 0 {
			if err == nil {
				t.Errorf("Parse(%q) = %d, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.0 KiB"}, {1536, "1.5 KiB"}, {256 << 20, "256.0 MiB"},
		{3 << 30, "3.0 GiB"}, {-2048, "-2.0 KiB"}, {math.MaxInt64, "8.0 EiB"},
	} {
		if got := Format(tc.in); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// FuzzParse: any text is a size or an error, never a panic; a size is
// positive, and what Format writes of it reads back within the rounding
// of its one decimal.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"256MiB", "1.5GB", "4096", "10 KB", "", "-1", "1e30TB", "NaN", "0x10", "inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err != nil {
			return
		}
		if n < 1 {
			t.Fatalf("Parse(%q) = %d", s, n)
		}
		out := Format(n)
		back, err := Parse(strings.ReplaceAll(out, " ", ""))
		if err != nil {
			t.Fatalf("Format(%d) = %q does not read back: %v", n, out, err)
		}
		if d := math.Abs(float64(back - n)); n >= 1024 && d > 0.06*float64(n) {
			t.Fatalf("%q → %d → %q → %d", s, n, out, back)
		}
	})
}
