package sysmem

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestParsers(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	if got := memTotal(write("meminfo", "MemFree: 10 kB\nMemTotal:       24576000 kB\n")); got != 24576000<<10 {
		t.Errorf("memTotal = %d", got)
	}
	if got := memTotal(write("bad", "MemTotal: lots\n")); got != 0 {
		t.Errorf("memTotal of a bad line = %d, want 0", got)
	}
	for in, want := range map[string]int64{"max\n": 0, "1073741824\n": 1 << 30, "9223372036854771712\n": 0, "": 0, "-1": 0} {
		if got := cgroupLimit(write("limit", in)); got != want {
			t.Errorf("cgroupLimit(%q) = %d, want %d", in, got, want)
		}
	}
	if got := cgroupLimit(filepath.Join(dir, "absent")); got != 0 {
		t.Errorf("absent file: %d", got)
	}
}

func TestTotalOnLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	if got := Total(); got < 64<<20 {
		t.Errorf("Total() = %d bytes: not a plausible machine", got)
	}
}
