package cuda

import (
	"io/fs"
	"regexp"
	"strings"
	"testing"
)

// TestPTXHasEveryKernel checks the embedded PTX: compute_80, and one
// .entry for every kernel the Go layer launches (a kernel added to a .cu
// file without go generate fails here as well as in CI's comparison).
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
