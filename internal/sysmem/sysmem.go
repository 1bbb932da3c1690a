// Package sysmem reports how much memory this process may use: the
// machine's physical memory, lowered to the cgroup limit when one is set
// (a container or a Kubernetes pod sees its limit, not the node's memory).
package sysmem

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Total returns the usable memory in bytes: the smaller of MemTotal in
// /proc/meminfo and the cgroup v2 (memory.max) or v1
// (memory.limit_in_bytes) limit. It returns 0 when neither is readable
// (not Linux): callers then apply no default limit.
func Total() int64 {
	total := memTotal("/proc/meminfo")
	for _, p := range []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"} {
		if lim := cgroupLimit(p); lim > 0 && (total == 0 || lim < total) {
			total = lim
		}
	}
	return total
}

func memTotal(path string) int64 {
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0
		}
		return kb << 10
	}
	return 0
}

// cgroupLimit parses a cgroup memory limit file; "max" or an absurd v1
// value (no limit set) read as 0.
func cgroupLimit(path string) int64 {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0
	}
	return n
}
