package losscuda

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// TestModulesNameEveryKernel holds each module's list to the kernels its
// source declares and its PTX defines: a kernel added to a .cu file
// without its name here could not be launched, one named here but missing
// fails at its first launch on a device.
func TestModulesNameEveryKernel(t *testing.T) {
	for module, names := range map[string][]string{"loss_assign": assignKernels, "loss_mask": maskKernels} {
		for file, decl := range map[string]*regexp.Regexp{
			module + ".cu":  regexp.MustCompile(`(?m)^SP_KERNEL void (\w+)\(`),
			module + ".ptx": regexp.MustCompile(`\.entry (\w+)\(`),
		} {
			src, err := os.ReadFile(filepath.Join("kernels", file))
			if err != nil {
				t.Fatal(err)
			}
			var declared []string
			for _, m := range decl.FindAllSubmatch(src, -1) {
				declared = append(declared, string(m[1]))
			}
			slices.Sort(declared)
			want := slices.Sorted(slices.Values(names))
			if !slices.Equal(declared, want) {
				t.Errorf("%s declares %v, the Go side names %v", file, declared, want)
			}
		}
	}
}
