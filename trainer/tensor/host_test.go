package tensor

import (
	"math/rand/v2"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// hostBackend is the CPU backend the package's tests make their tensors
// on: the package itself picks none (TestGradientsOnParallelPaths swaps it
// for one with a lower parallel threshold).
var hostBackend backend.HostMemory = cpu.New()

// random returns a tensor on be of uniform values in [lo, hi) drawn from r.
func random(be backend.Backend, r *rand.Rand, lo, hi float32, shape ...int) *Tensor {
	d := make([]float32, numel(shape))
	for i := range d {
		d[i] = lo + (hi-lo)*r.Float32()
	}
	return Upload(be, d, shape...)
}
