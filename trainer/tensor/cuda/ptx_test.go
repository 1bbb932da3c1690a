package cuda

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestPTXHasEveryKernel checks the embedded PTX: compute_80, and one
// .entry for every kernel the Go layer launches (a kernel added to a .cu
// file without go generate fails here as well as in CI's comparison); a
// module holds this package's kernels only, or none (another package's,
// which checks its own list).
func TestPTXHasEveryKernel(t *testing.T) {
	names, err := fs.Glob(ptx, "kernels/*.ptx")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded PTX (%v)", err)
	}
	entry := regexp.MustCompile(`\.entry (\w+)\(`)
	own := map[string]bool{}
	for _, k := range kernelNames {
		own[k] = true
	}
	have := map[string]bool{}
	for _, n := range names {
		b, err := ptx.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), ".target sm_80") {
			t.Errorf("%s is not compute_80 PTX", n)
		}
		var mine, theirs []string
		for _, m := range entry.FindAllStringSubmatch(string(b), -1) {
			if have[m[1]] {
				t.Errorf("kernel %s is defined twice", m[1])
			}
			have[m[1]] = true
			if own[m[1]] {
				mine = append(mine, m[1])
			} else {
				theirs = append(theirs, m[1])
			}
		}
		if len(mine) > 0 && len(theirs) > 0 {
			t.Errorf("%s defines %v, kernels the Go layer does not know", n, theirs)
		}
	}
	for _, k := range kernelNames {
		if !have[k] {
			t.Errorf("kernel %s is in no embedded PTX module", k)
		}
	}
}

// TestHarnessKernelTable: the CPU harness's kernel table, written from the
// sources' SP_KERNEL declarations, names every kernel the Go layer knows,
// and a source's other kernels only in a module of another package (a declaration the pattern missed would leave a kernel out of the
// harness).
func TestHarnessKernelTable(t *testing.T) {
	dir, err := kernelSources()
	if err != nil {
		t.Skip(err)
	}
	srcs, err := filepath.Glob(filepath.Join(dir, "*.cu"))
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]bool{}
	for _, k := range kernelNames {
		own[k] = true
	}
	got := map[string]bool{}
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		// A module is this package's (every kernel in kernelNames) or
		// another package's (none: its owner checks its own list).
		var mine, theirs []string
		for _, line := range strings.Fields(string(kernelTable([][]byte{b}))) {
			k := strings.TrimSuffix(strings.TrimPrefix(line, "K("), ")")
			got[k] = true
			if own[k] {
				mine = append(mine, k)
			} else {
				theirs = append(theirs, k)
			}
		}
		if len(mine) > 0 && len(theirs) > 0 {
			t.Errorf("%s: kernels %v are in the harness's table, not in kernelNames", filepath.Base(s), theirs)
		}
	}
	for _, k := range kernelNames {
		if !got[k] {
			t.Errorf("kernel %s is not in the harness's table", k)
		}
	}
}
