package tensor

import (
	"fmt"
	"math"
	"slices"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Tensor is a contiguous row-major float32 array in a backend's memory.
//
// Its data is a backend.Buffer: an opaque handle, never a Go slice into
// device memory. Host code reads and writes it only through explicit
// crossings: ToHost and FromHost copy (and the emulated and CUDA backends
// count every one); Host returns a view without copying where the backend
// can serve one (the CPU backend) and panics elsewhere, so host code that
// bypasses the backend fails on emu instead of silently working on CPU.
//
// The gradient has the same length and is allocated on first use.
// RequiresGrad marks tensors whose gradient is wanted: parameters set it,
// and ops set it on their outputs when recording on a Tape and any input
// requires grad. As in PyTorch, only leaves (tensors not produced by a
// recorded op: parameters, inputs) keep their gradient after Backward; the
// gradient buffers of intermediates are recycled as soon as the op that
// produced them has consumed them. A Tensor is not safe for concurrent
// mutation.
type Tensor struct {
	Shape        []int
	RequiresGrad bool
	// Name labels parameters (state-dict key) and appears in panics.
	Name string

	be         backend.Backend
	data, grad backend.Buffer
	fromOp     bool // produced by a recorded op (not a leaf)
	owned      bool // data was allocated by an op (not a view of other memory)
}

// New wraps data (not copied) as a tensor of the given shape on be, a
// backend whose memory is the host's (the CPU backend: this package
// defines tensors, the caller picks where they live). It panics when
// len(data) differs from the shape's element count.
func New(be backend.HostMemory, data []float32, shape ...int) *Tensor {
	if n := numel(shape); n != len(data) {
		panic(fmt.Sprintf("tensor.New: shape %v needs %d values, got %d", shape, n, len(data)))
	}
	return &Tensor{Shape: slices.Clone(shape), be: be, data: be.Wrap(data)}
}

// Upload copies data into a new tensor of the given shape on be.
func Upload(be backend.Backend, data []float32, shape ...int) *Tensor {
	if n := numel(shape); n != len(data) {
		panic(fmt.Sprintf("tensor.Upload: shape %v needs %d values, got %d", shape, n, len(data)))
	}
	t := empty(be, shape)
	t.be.Upload(t.data, data)
	return t
}

// UploadBytes sends the bytes px to be as they are and widens them there
// into a float32 tensor of the given shape, px[i]·scale: an image batch
// crosses as uint8, a quarter of its float size.
func UploadBytes(be backend.Backend, px []byte, scale float32, shape ...int) *Tensor {
	if n := numel(shape); n != len(px) {
		panic(fmt.Sprintf("tensor.UploadBytes: shape %v needs %d values, got %d", shape, n, len(px)))
	}
	raw := be.Alloc((len(px) + 3) / 4)
	be.UploadBytes(raw, px)
	t := WidenBytes(be, raw, scale, shape...)
	be.Free(raw)
	return t
}

// WidenBytes returns a float32 tensor of the given shape on be whose
// elements are the first numel bytes of raw, a buffer already in be's
// memory (a staged uint8 image batch), times scale: the widening
// UploadBytes does after its copy.
func WidenBytes(be backend.Backend, raw backend.Buffer, scale float32, shape ...int) *Tensor {
	if n := numel(shape); n > 4*raw.Len {
		panic(fmt.Sprintf("tensor.WidenBytes: shape %v needs %d bytes, the buffer holds %d", shape, n, 4*raw.Len))
	}
	t := empty(be, shape)
	t.be.BytesToFloat(scale, raw, t.data)
	return t
}

// ZerosOn returns a zero-filled tensor on be.
func ZerosOn(be backend.Backend, shape ...int) *Tensor {
	t := empty(be, shape)
	t.be.Fill(t.data, 0)
	return t
}

// empty allocates a tensor with unspecified contents on be. Every tensor
// has a backend, chosen by whoever makes it: there is no default.
func empty(be backend.Backend, shape []int) *Tensor {
	if be == nil {
		panic(fmt.Sprintf("tensor: a tensor of shape %v made without a backend", shape))
	}
	return &Tensor{Shape: slices.Clone(shape), be: be, data: be.Alloc(numel(shape))}
}

// HostView returns t's data as host values: the tensor's own memory where
// the backend serves a host view (CPU, no copy), otherwise a download into
// dst (grown when short). Writes to the result reach t only on the CPU.
func (t *Tensor) HostView(dst []float32) []float32 {
	if h := t.be.Host(t.data); h != nil || t.data.Len == 0 {
		return h
	}
	return t.ToHost(dst)
}

// GradHostView is HostView for the gradient (allocated if needed).
func (t *Tensor) GradHostView(dst []float32) []float32 {
	g := t.GradBuffer()
	if h := t.be.Host(g); h != nil || g.Len == 0 {
		return h
	}
	return t.GradToHost(dst)
}

// FullOn returns a tensor on be filled with v (a 0-d one, a scalar, with
// no shape).
func FullOn(be backend.Backend, v float32, shape ...int) *Tensor {
	t := empty(be, shape)
	t.be.Fill(t.data, v)
	return t
}

// ParamOn returns a zero-filled tensor on be that requires grad, named
// name.
func ParamOn(be backend.Backend, name string, shape ...int) *Tensor {
	t := ZerosOn(be, shape...)
	t.Name, t.RequiresGrad = name, true
	return t
}

// Backend returns the backend that owns t's memory.
func (t *Tensor) Backend() backend.Backend { return t.be }

// Buffer returns t's data buffer, for kernels and backend-level code.
func (t *Tensor) Buffer() backend.Buffer { return t.data }

// GradBuffer returns t's gradient buffer, allocating it zeroed on first use.
func (t *Tensor) GradBuffer() backend.Buffer {
	if !t.grad.Present() {
		t.grad = t.be.Alloc(t.data.Len)
		t.be.Fill(t.grad, 0)
	}
	return t.grad
}

// gradForWrite returns t's gradient for an op that can write every element
// of it instead of adding (canWrite: a backend form that sets, or a copy
// that covers the whole gradient): while t has none yet, a new,
// uninitialised buffer and true, and the op must write all of it; else
// GradBuffer() and false, and the op adds.
func (t *Tensor) gradForWrite(canWrite bool) (backend.Buffer, bool) {
	if canWrite && !t.grad.Present() {
		t.grad = t.be.Alloc(t.data.Len)
		return t.grad, true
	}
	return t.GradBuffer(), false
}

// HasGrad reports whether t's gradient has been allocated.
func (t *Tensor) HasGrad() bool { return t.grad.Present() }

// Host returns t's data as a host slice without copying. Only backends
// whose memory the host can address serve it (the CPU backend): elsewhere
// it panics, because host code reading device memory in place is the bug
// the emulated device exists to catch. Use ToHost and FromHost instead.
func (t *Tensor) Host() []float32 { return t.hostView(t.data, "data") }

// GradHost is Host for the gradient (nil while none is allocated).
func (t *Tensor) GradHost() []float32 {
	if !t.grad.Present() {
		return nil
	}
	return t.hostView(t.grad, "gradient")
}

func (t *Tensor) hostView(b backend.Buffer, what string) []float32 {
	if !b.Present() {
		panic(fmt.Sprintf("tensor %s: %s has been recycled", t.desc(), what))
	}
	h := t.be.Host(b)
	if h == nil && b.Len > 0 {
		panic(fmt.Sprintf("tensor %s: %s memory of the %s backend is not host-addressable; use ToHost/FromHost", t.desc(), what, t.be.Name()))
	}
	return h
}

// ToHost copies t's data into dst (grown when short) and returns it.
func (t *Tensor) ToHost(dst []float32) []float32 {
	dst = slices.Grow(dst[:0], t.data.Len)[:t.data.Len]
	t.be.Download(dst, t.data)
	return dst
}

// GradToHost copies t's gradient into dst (grown when short) and returns
// it; a tensor without a gradient gives zeros.
func (t *Tensor) GradToHost(dst []float32) []float32 {
	dst = slices.Grow(dst[:0], t.data.Len)[:t.data.Len]
	if !t.grad.Present() {
		clear(dst)
		return dst
	}
	t.be.Download(dst, t.grad)
	return dst
}

// FromHost copies len(src) == Numel() host values into t's data.
func (t *Tensor) FromHost(src []float32) {
	if len(src) != t.data.Len {
		panic(fmt.Sprintf("tensor %s: FromHost of %d values", t.desc(), len(src)))
	}
	t.be.Upload(t.data, src)
}

// GradFromHost copies host values into t's gradient (allocated if needed).
func (t *Tensor) GradFromHost(src []float32) {
	if len(src) != t.data.Len {
		panic(fmt.Sprintf("tensor %s: GradFromHost of %d values", t.desc(), len(src)))
	}
	t.be.Upload(t.GradBuffer(), src)
}

// Numel is the number of elements.
func (t *Tensor) Numel() int { return numel(t.Shape) }

// Dims is the number of axes.
func (t *Tensor) Dims() int { return len(t.Shape) }

// Dim returns the size of axis i; negative i counts from the end.
func (t *Tensor) Dim(i int) int { return t.Shape[t.axis(i)] }

// Item returns the single value of a one-element tensor (a download).
func (t *Tensor) Item() float32 {
	if t.Numel() != 1 {
		panic(fmt.Sprintf("tensor.Item: tensor %s has %d elements", t.desc(), t.Numel()))
	}
	var v [1]float32
	t.be.Download(v[:], t.data)
	return v[0]
}

// ZeroGrad sets the gradient to zero, keeping its buffer.
func (t *Tensor) ZeroGrad() {
	if t.grad.Present() {
		t.be.Fill(t.grad, 0)
	}
}

// ZeroGrad zeroes the gradients of every tensor given.
func ZeroGrad(ts ...*Tensor) {
	for _, t := range ts {
		t.ZeroGrad()
	}
}

// Detach returns a tensor sharing t's data that requires no grad, so
// whatever is computed from it sends no gradient back to t.
func (t *Tensor) Detach() *Tensor {
	return &Tensor{Shape: slices.Clone(t.Shape), be: t.be, data: t.data, Name: t.Name}
}

// Clone returns a deep copy of data and shape, without grad, on the same
// backend.
func (t *Tensor) Clone() *Tensor {
	c := empty(t.be, t.Shape)
	c.Name = t.Name
	t.be.Copy(backend.Strided{Shape: []int{t.data.Len}, Src: []int{1}, Dst: []int{1}}, t.data, c.data)
	return c
}

// SameShape reports whether a and b have identical shapes.
func SameShape(a, b *Tensor) bool { return slices.Equal(a.Shape, b.Shape) }

// String summarises the tensor (name, shape, backend; a few values when
// the host can see them without a transfer).
func (t *Tensor) String() string {
	if h := t.be.Host(t.data); h != nil || t.data.Len == 0 {
		return fmt.Sprintf("Tensor%s%v %v", nameTag(t.Name), t.Shape, h[:min(len(h), 6)])
	}
	return fmt.Sprintf("Tensor%s%v on %s", nameTag(t.Name), t.Shape, t.be.Name())
}

func nameTag(s string) string {
	if s == "" {
		return ""
	}
	return "(" + s + ")"
}

func (t *Tensor) desc() string { return nameTag(t.Name) + fmt.Sprint(t.Shape) }

func (t *Tensor) axis(i int) int {
	if i < 0 {
		i += len(t.Shape)
	}
	if i < 0 || i >= len(t.Shape) {
		panic(fmt.Sprintf("tensor: axis out of range for %s", t.desc()))
	}
	return i
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		if d < 0 {
			panic(fmt.Sprintf("tensor: negative dimension in shape %v", shape))
		}
		n *= d
	}
	return n
}

// Worst returns the largest |got−want| / (atol + rtol·|want|) over the
// elements, and its index (-1 when every element is equal): a value above
// 1 fails AllClose's tolerance. Equal values, infinities included, and a
// NaN where want has a NaN count as exact; a NaN where want has none is
// +Inf. The checks of a device backend against the CPU reference report
// it, so that a failure says by how much and where.
func Worst(got, want []float32, rtol, atol float64) (float64, int) {
	w, at := 0.0, -1
	for i := range want {
		g, r := float64(got[i]), float64(want[i])
		if g == r || math.IsNaN(r) && math.IsNaN(g) {
			continue
		}
		e := math.Abs(g-r) / (atol + rtol*math.Abs(r))
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		if e > w || at < 0 {
			w, at = e, i
		}
	}
	return w, at
}

// AllClose reports whether every |a−b| ≤ atol + rtol·|b| (NaNs never match).
func AllClose(a, b []float32, rtol, atol float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		d := math.Abs(float64(a[i]) - float64(b[i]))
		if !(d <= atol+rtol*math.Abs(float64(b[i]))) {
			return false
		}
	}
	return true
}
