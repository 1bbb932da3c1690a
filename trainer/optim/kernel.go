package optim

import (
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// hostCPU is the CPU backend that host-slice Params (Data, Grad) and
// NewEMA's host state are wrapped on, without a copy.
var hostCPU = cpu.New()

// launch runs k as one fused kernel on be. Where be runs Go kernels on its
// own memory (backend.HostKernels: cpu, emu) that is RunHost, and nothing
// crosses. Elsewhere (a device without its twin of k yet) k runs on host
// copies: every buffer k resolves is downloaded on first use and uploaded
// back when k returns, each crossing counted by the backend. That round
// trip is what a device twin of the kernel replaces.
func launch(be backend.Backend, k func(backend.View)) {
	if h, ok := be.(backend.HostKernels); ok {
		h.RunHost(k)
		return
	}
	rt := &roundTrip{be: be, host: map[backend.Buffer][]float32{}}
	k(rt)
	for _, b := range rt.order {
		be.Upload(b, rt.host[b])
	}
}

// roundTrip is the View of a backend without host kernels: host copies of
// the buffers a kernel touches. Kernels resolve whole buffers, never two
// overlapping ones, so one copy per buffer is coherent.
type roundTrip struct {
	be    backend.Backend
	host  map[backend.Buffer][]float32
	order []backend.Buffer
}

func (r *roundTrip) Float32(b backend.Buffer) []float32 {
	if !b.Present() {
		return nil
	}
	if h, ok := r.host[b]; ok {
		return h
	}
	h := make([]float32, b.Len)
	r.be.Download(h, b)
	r.host[b] = h
	r.order = append(r.order, b)
	return h
}

func (r *roundTrip) Int32(b backend.Buffer) []int32 {
	return backend.Int32s(r.Float32(b))
}

func (r *roundTrip) Bytes(b backend.Buffer) []byte {
	return backend.Bytes(r.Float32(b))
}

// zeroed allocates n elements on be, set to zero (a fresh moment buffer).
func zeroed(be backend.Backend, n int) backend.Buffer {
	b := be.Alloc(n)
	be.Fill(b, 0)
	return b
}

// upload allocates a buffer on be holding a copy of v (LoadState).
func upload(be backend.Backend, v []float32) backend.Buffer {
	b := be.Alloc(len(v))
	be.Upload(b, v)
	return b
}

// download returns a host copy of b (State, checkpoints).
func download(be backend.Backend, b backend.Buffer) []float32 {
	v := make([]float32, b.Len)
	be.Download(v, b)
	return v
}
