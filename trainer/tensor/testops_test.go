package tensor

import (
	"fmt"
	"math"
	"slices"
)

// gradAlloc allocates t's gradient if needed and returns its host view.
func (t *Tensor) gradAlloc() []float32 {
	t.GradBuffer()
	return t.GradHost()
}

// Ops that no production code calls live here as test helpers: they
// exercise the tape and the gradient checker, and run as plain host code
// because the trainer never puts them on a backend.

// AddScalar returns x + s.
func (tp *Tape) AddScalar(x *Tensor, s float32) *Tensor {
	y := outputUninit(hostBackend, x.Shape...)
	for i, v := range x.Host() {
		y.Host()[i] = v + s
	}
	if tp.wants(x) {
		tp.push(func() {
			gx := x.gradAlloc()
			for i, g := range y.GradHost() {
				gx[i] += g
			}
		}, y)
	}
	return y
}

// Clamp limits x to [lo, hi]; as in PyTorch the gradient passes where
// lo ≤ x ≤ hi (boundaries included) and is zero elsewhere. Use ±Inf for an
// open side.
func (tp *Tape) Clamp(x *Tensor, lo, hi float32) *Tensor {
	y := outputUninit(hostBackend, x.Shape...)
	for i, v := range x.Host() {
		y.Host()[i] = min(max(v, lo), hi)
	}
	if tp.wants(x) {
		tp.push(func() {
			gx := x.gradAlloc()
			for i, g := range y.GradHost() {
				if v := x.Host()[i]; v >= lo && v <= hi {
					gx[i] += g
				}
			}
		}, y)
	}
	return y
}

// BCEWithLogits returns the elementwise binary cross-entropy of
// sigmoid(logits) against targets, computed stably as
// max(x,0) − x·t + log(1+e^−|x|). No reduction is applied. logits and
// targets must have the same shape; targets may require grad (d/dt = −x).
func (tp *Tape) BCEWithLogits(logits, targets *Tensor) *Tensor {
	if !SameShape(logits, targets) {
		panic(fmt.Sprintf("tensor.BCEWithLogits: logits %s vs targets %s", logits.desc(), targets.desc()))
	}
	y := outputUninit(hostBackend, logits.Shape...)
	for i, x := range logits.Host() {
		t := targets.Host()[i]
		y.Host()[i] = max(x, 0) - x*t + float32(math.Log1p(math.Exp(-math.Abs(float64(x)))))
	}
	if tp.wants(logits, targets) {
		tp.push(func() {
			if needs(logits) {
				gx := logits.gradAlloc()
				for i, g := range y.GradHost() {
					gx[i] += g * (sigmoid(logits.Host()[i]) - targets.Host()[i])
				}
			}
			if needs(targets) {
				gt := targets.gradAlloc()
				for i, g := range y.GradHost() {
					gt[i] -= g * logits.Host()[i]
				}
			}
		}, y)
	}
	return y
}

func sigmoid(v float32) float32 {
	if v >= 0 {
		return float32(1 / (1 + math.Exp(-float64(v))))
	}
	e := math.Exp(float64(v))
	return float32(e / (1 + e))
}

// IndexSelect gathers the entries idx along axis (like torch.index_select);
// indices may repeat, and the backward pass adds repeated contributions.
func (tp *Tape) IndexSelect(x *Tensor, axis int, idx []int) *Tensor {
	axis = x.axis(axis)
	d := x.Shape[axis]
	for _, i := range idx {
		if i < 0 || i >= d {
			panic(fmt.Sprintf("tensor.IndexSelect: index %d out of range for axis %d of %s", i, axis, x.desc()))
		}
	}
	idx = slices.Clone(idx)
	outer, inner := outerInner(x.Shape, axis)
	shape := slices.Clone(x.Shape)
	shape[axis] = len(idx)
	y := outputUninit(hostBackend, shape...)
	for o := 0; o < outer; o++ {
		for k, i := range idx {
			copy(y.Host()[(o*len(idx)+k)*inner:(o*len(idx)+k+1)*inner], x.Host()[(o*d+i)*inner:(o*d+i+1)*inner])
		}
	}
	if tp.wants(x) {
		tp.push(func() {
			gx := x.gradAlloc()
			for o := 0; o < outer; o++ {
				for k, i := range idx {
					dst := gx[(o*d+i)*inner : (o*d+i+1)*inner]
					for j, v := range y.GradHost()[(o*len(idx)+k)*inner : (o*len(idx)+k+1)*inner] {
						dst[j] += v
					}
				}
			}
		}, y)
	}
	return y
}
