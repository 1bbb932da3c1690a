package sysmem

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"testing/fstest"
)

func TestParsers(t *testing.T) {
	fsys := fstest.MapFS{
		"meminfo": {Data: []byte("MemFree: 10 kB\nMemTotal:       24576000 kB\n")},
		"bad":     {Data: []byte("MemTotal: lots\n")},
	}
	if got := memTotal(fsys, "meminfo"); got != 24576000<<10 {
		t.Errorf("memTotal = %d", got)
	}
	if got := memTotal(fsys, "bad"); got != 0 {
		t.Errorf("memTotal of a bad line = %d, want 0", got)
	}
	for in, want := range map[string]int64{"max\n": 0, "1073741824\n": 1 << 30, "9223372036854771712\n": 0, "": 0, "-1": 0} {
		fsys["limit"] = &fstest.MapFile{Data: []byte(in)}
		if got := limitFile(fsys, "limit"); got != want {
			t.Errorf("limitFile(%q) = %d, want %d", in, got, want)
		}
	}
	if got := limitFile(fsys, "absent"); got != 0 {
		t.Errorf("absent file: %d", got)
	}
	if got := unescape(`/mnt/my\040cgroup`); got != "/mnt/my cgroup" {
		t.Errorf("unescape = %q", got)
	}
}

// Issue 30: the limit was read at the cgroup mount's root, so under a
// systemd MemoryMax, a Kubernetes pod without a cgroup namespace or a
// Slurm job the budget was half the host. Each tree in testdata is a
// /proc and /sys as such a process sees them.
func TestTotalReadsTheProcessOwnCgroup(t *testing.T) {
	const ram = 64 << 30 // MemTotal of every tree
	for _, tc := range []struct {
		tree string
		want int64
	}{
		{"v2-systemd-unit", 512 << 20},
		{"v2-namespace", 1 << 30},
		{"v2-bind-mounted", 768 << 20},
		{"v2-parent-limit", 2 << 30},
		{"v2-no-mountinfo", 3 << 30},
		{"v1-docker", 256 << 20},
		{"v2-no-limit", ram},
		{"v2-limit-above-ram", ram},
		{"no-cgroup", ram},
	} {
		t.Run(tc.tree, func(t *testing.T) {
			if got := totalAt(os.DirFS(filepath.Join("testdata", tc.tree))); got != tc.want {
				t.Errorf("total = %d MiB, want %d MiB", got>>20, tc.want>>20)
			}
		})
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
