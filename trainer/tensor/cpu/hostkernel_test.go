package cpu

import (
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// A host kernel reads and writes the backend's own memory on cpu and emu
// alike and counts no transfer; only Upload and Download cross.
func TestRunHost(t *testing.T) {
	for _, be := range []*Backend{New(), NewEmulated()} {
		x := be.Alloc(3)
		be.Upload(x, []float32{1, 2, 3})
		before := be.Transfers()
		be.RunHost(func(v backend.View) {
			f := v.Float32(x)
			for i := range f {
				f[i] *= 2
			}
			if b := v.Bytes(x.Slice(0, 1)); len(b) != 4 {
				t.Errorf("%s: Bytes of one element: %d bytes", be.Name(), len(b))
			}
			if v.Float32(backend.Buffer{}) != nil {
				t.Errorf("%s: the zero Buffer resolved to memory", be.Name())
			}
		})
		if got := be.Transfers(); got != before {
			t.Errorf("%s: RunHost counted crossings: %+v -> %+v", be.Name(), before, got)
		}
		out := make([]float32, 3)
		be.Download(out, x)
		if out[0] != 2 || out[1] != 4 || out[2] != 6 {
			t.Errorf("%s: host kernel wrote %v, want [2 4 6]", be.Name(), out)
		}
	}
}
