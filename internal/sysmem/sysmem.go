// Package sysmem reports how much memory this process may use: the
// machine's physical memory, lowered to the memory limit of the process's
// own cgroup when one is set (a container, a Kubernetes pod, a systemd
// unit with MemoryMax or a Slurm job sees its limit, not the node's
// memory).
//
// The cgroup is the one /proc/self/cgroup names, found below its
// hierarchy's mount point as /proc/self/mountinfo lists it, whether the
// process has a cgroup namespace (it sees itself at "/") or not (it sees
// the host's path, and the mount may be the host's whole hierarchy or only
// its own cgroup bind-mounted). The limit is the smallest of that cgroup's
// and its ancestors' up to the mount point, since a parent's limit (a
// systemd slice, a Slurm job above its step) applies to its children.
// cgroup v2 (memory.max) and v1 (memory.limit_in_bytes) are both read; on
// a hybrid host the v1 memory hierarchy is the one that limits.
package sysmem

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"path"
	"strconv"
	"strings"
)

// Total returns the usable memory in bytes: the smaller of MemTotal in
// /proc/meminfo and the process's cgroup memory limit. It returns 0 when
// neither is readable (not Linux): callers then apply no default limit.
func Total() int64 { return totalAt(os.DirFS("/")) }

// totalAt is Total on the filesystem root: the paths below are relative
// to it (proc/meminfo, proc/self/cgroup, sys/fs/cgroup/...), so tests
// point it at a tree in testdata.
func totalAt(root fs.FS) int64 {
	total := memTotal(root, "proc/meminfo")
	if lim := cgroupLimit(root); lim > 0 && (total == 0 || lim < total) {
		total = lim
	}
	return total
}

func memTotal(root fs.FS, name string) int64 {
	f, err := root.Open(name)
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

// hierarchy is a cgroup hierarchy that can hold a memory limit: where it
// is mounted, which of its cgroups the mount shows at its top (root), and
// the file that holds a cgroup's limit.
type hierarchy struct {
	mountPoint, root, file string
}

// cgroupLimit returns the memory limit of the process's cgroup, 0 when
// there is none or it cannot be read.
func cgroupLimit(root fs.FS) int64 {
	own := ownCgroups(root)
	v1, v2 := memoryMounts(root)
	if p, ok := own["memory"]; ok && v1 != nil {
		return limitBelow(root, *v1, p)
	}
	if p, ok := own[""]; ok && v2 != nil {
		return limitBelow(root, *v2, p)
	}
	return 0
}

// ownCgroups reads proc/self/cgroup: the process's cgroup path by v1
// controller, and under "" its v2 path.
func ownCgroups(root fs.FS) map[string]string {
	b, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return nil
	}
	own := map[string]string{}
	for line := range strings.Lines(string(b)) {
		// hierarchy-ID:controller-list:cgroup-path
		f := strings.SplitN(strings.TrimRight(line, "\n"), ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[0] == "0" && f[1] == "" {
			own[""] = f[2]
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			own[c] = f[2]
		}
	}
	return own
}

// memoryMounts finds the v1 memory hierarchy and the v2 hierarchy in
// proc/self/mountinfo; without it, the usual mount points with their
// whole hierarchy.
func memoryMounts(root fs.FS) (v1, v2 *hierarchy) {
	b, err := fs.ReadFile(root, "proc/self/mountinfo")
	if err != nil {
		return &hierarchy{"/sys/fs/cgroup/memory", "/", "memory.limit_in_bytes"},
			&hierarchy{"/sys/fs/cgroup", "/", "memory.max"}
	}
	for line := range strings.Lines(string(b)) {
		// id parent major:minor root mount-point options [tags...] - fstype source super-options
		pre, post, ok := strings.Cut(strings.TrimRight(line, "\n"), " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 {
			continue
		}
		h := &hierarchy{mountPoint: unescape(f[4]), root: unescape(f[3])}
		switch {
		case g[0] == "cgroup2" && v2 == nil:
			h.file = "memory.max"
			v2 = h
		case g[0] == "cgroup" && v1 == nil && len(g) >= 3 && hasOption(g[2], "memory"):
			h.file = "memory.limit_in_bytes"
			v1 = h
		}
	}
	return v1, v2
}

func hasOption(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// unescape undoes mountinfo's octal escapes (\040 for a space).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// limitBelow returns the smallest limit of the cgroup at path own and its
// ancestors visible in the mount of h. A cgroup outside the mount's root
// (the mount shows only another cgroup) is read at the mount point.
func limitBelow(root fs.FS, h hierarchy, own string) int64 {
	rel, ok := strings.CutPrefix(path.Clean(own), path.Clean(h.root))
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/") && path.Clean(h.root) != "/") {
		rel = ""
	}
	top := strings.TrimPrefix(path.Clean(h.mountPoint), "/")
	dir := path.Join(top, rel)
	var lim int64
	for {
		if n := limitFile(root, path.Join(dir, h.file)); n > 0 && (lim == 0 || n < lim) {
			lim = n
		}
		if dir == top || dir == "." || dir == "" {
			return lim
		}
		dir = path.Dir(dir)
	}
}

// limitFile parses a cgroup memory limit file; "max" or an absurd v1
// value (no limit set) read as 0.
func limitFile(root fs.FS, name string) int64 {
	b, err := fs.ReadFile(root, name)
	if err != nil {
		return 0
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0
	}
	return n
}
