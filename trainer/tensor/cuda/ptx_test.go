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
// file without go generate fails here as well as in CI's comparison), and
// none that it does not know (another package's kernels are its own
// module's, DeclareModule).
func TestPTXHasEveryKernel(t *testing.T) {
	names, err := fs.Glob(ptx, "kernels/*.ptx")
	if err != nil || len(names) == 0 {
		t.Fatalf("no embedded PTX (%v)", err)
	}
	entry := regexp.MustCompile(`\.entry (\w+)\(`)
	have := map[string]bool{}
	for _, n := range names {
		b, err := ptx.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), ".target sm_80") {
			t.Errorf("%s is not compute_80 PTX", n)
		}
		for _, m := range entry.FindAllStringSubmatch(string(b), -1) {
			if have[m[1]] {
				t.Errorf("kernel %s is defined twice", m[1])
			}
			have[m[1]] = true
		}
	}
	for _, k := range kernelNames {
		if !have[k] {
			t.Errorf("kernel %s is in no embedded PTX module", k)
		}
	}
	if len(have) != len(kernelNames) {
		t.Errorf("PTX defines %d kernels, the Go layer knows %d", len(have), len(kernelNames))
	}
}

// TestHarnessKernelTable: the CPU harness's kernel table, written from the
// sources' SP_KERNEL declarations, names exactly the kernels the Go layer
// knows (a declaration the pattern missed would leave a kernel out of the
// harness; another package's kernels are its module's).
func TestHarnessKernelTable(t *testing.T) {
	dir, err := kernelSources()
	if err != nil {
		t.Skip(err)
	}
	srcs, err := filepath.Glob(filepath.Join(dir, "*.cu"))
	if err != nil {
		t.Fatal(err)
	}
	var sources [][]byte
	for _, s := range srcs {
		b, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		sources = append(sources, b)
	}
	got := map[string]bool{}
	for _, line := range strings.Fields(string(kernelTable(sources))) {
		got[strings.TrimSuffix(strings.TrimPrefix(line, "K("), ")")] = true
	}
	for _, k := range kernelNames {
		if !got[k] {
			t.Errorf("kernel %s is not in the harness's table", k)
		}
	}
	if len(got) != len(kernelNames) {
		t.Errorf("the harness's table has %d kernels, the Go layer knows %d", len(got), len(kernelNames))
	}
}
