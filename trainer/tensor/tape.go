package tensor

import (
	"fmt"
	"slices"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Tape records differentiable ops for reverse-mode autodiff and carries the
// backend ops run on.
//
// Every op is a method on *Tape. A nil *Tape is valid and means no_grad on
// the inputs' backend: ops compute their outputs and record nothing, so
// no intermediate is kept alive. A tape made by NewTape records an op
// whenever one of its inputs requires grad; NoGrad returns a non-recording
// tape on the same backend.
type Tape struct {
	be     backend.Backend
	record bool
	nodes  []node

	recycle bool                 // set by RecycleOutputs for the next backward
	keep    map[backend.Mem]bool // allocations RecycleOutputs must not take
}

// node is one recorded op: backward reads its outputs' gradients and
// accumulates into its inputs' gradients.
type node struct {
	outs     []*Tensor
	backward func()
}

// NewTape returns a recording tape on b; with a nil b every op runs on
// its first input's backend.
func NewTape(b backend.Backend) *Tape {
	return &Tape{be: b, record: true}
}

// NoGrad returns a tape on the same backend that records nothing.
func (tp *Tape) NoGrad() *Tape {
	return &Tape{be: tp.Backend()}
}

// Backend returns the backend ops on this tape dispatch through: nil for
// a nil tape or one made without a backend, whose ops run on their first
// input's.
func (tp *Tape) Backend() backend.Backend {
	if tp == nil {
		return nil
	}
	return tp.be
}

// on returns the backend an op whose first input is x runs on: the tape's,
// or for a nil tape or one made without a backend x's own, so that a
// no-grad pass over tensors on the emulated device stays on it.
func (tp *Tape) on(x *Tensor) backend.Backend {
	if tp != nil && tp.be != nil {
		return tp.be
	}
	return x.be
}

// Recording reports whether ops on this tape are recorded.
func (tp *Tape) Recording() bool { return tp != nil && tp.record }

// Len is the number of recorded ops.
func (tp *Tape) Len() int {
	if tp == nil {
		return 0
	}
	return len(tp.nodes)
}

// HeldElements is the number of elements in the buffers the recorded ops
// allocated for their outputs (each buffer once; views not counted): the
// activations the tape holds until its backward pass frees them.
func (tp *Tape) HeldElements() int64 {
	if tp == nil {
		return 0
	}
	seen := make(map[backend.Mem]bool)
	var n int64
	for _, nd := range tp.nodes {
		for _, o := range nd.outs {
			if o.owned && o.data.Present() && !seen[o.data.Mem] {
				seen[o.data.Mem] = true
				n += int64(o.Numel())
			}
		}
	}
	return n
}

// RecycleOutputs opts the next Backward/BackwardFrom into recycling: once
// the backward pass is done, the data buffers of every tensor produced by
// an op recorded on this tape go back to a pool that later ops draw their
// outputs from, saving the allocation, page faults and GC work of a whole
// step's activations. Tensors in keep — and every tensor sharing a data
// buffer with one of them (Reshape views, Detach copies) — are left alone.
//
// After that backward, a recycled tensor's buffer is cleared so stray use
// panics; a Detach of it must not be used either, because the memory will
// hold another step's values. Views of memory no op allocated (a Reshape
// of a parameter or of the input) lose their buffer but the memory itself
// is never taken. List in keep every
// output still needed after backward (predictions for metrics, features).
// The opt-in lasts for one backward pass.
func (tp *Tape) RecycleOutputs(keep ...*Tensor) {
	if tp == nil {
		return
	}
	tp.recycle = true
	tp.keep = make(map[backend.Mem]bool, len(keep))
	for _, t := range keep {
		if t != nil && t.data.Present() {
			tp.keep[t.data.Mem] = true
		}
	}
}

// recycleOutputs returns the data of every recorded op output not kept.
func (tp *Tape) recycleOutputs() {
	done := make(map[backend.Mem]bool)
	for _, n := range tp.nodes {
		for _, o := range n.outs {
			if !o.data.Present() {
				continue
			}
			p := o.data.Mem
			if tp.keep[p] {
				continue
			}
			// Only buffers an op allocated go back: a view (Reshape) may
			// alias a parameter or a caller's input.
			if o.owned && !done[p] {
				o.be.Free(o.data)
				done[p] = true
			}
			o.data = backend.Buffer{}
		}
	}
}

// Reset forgets every recorded op (and so releases the intermediates they
// hold) without running backward, and cancels RecycleOutputs.
func (tp *Tape) Reset() {
	if tp != nil {
		clear(tp.nodes)
		tp.nodes = tp.nodes[:0]
		tp.recycle, tp.keep = false, nil
	}
}

// Backward seeds d(loss)/d(loss) = 1 for a one-element loss and
// backpropagates; see BackwardFrom.
func (tp *Tape) Backward(loss *Tensor) error {
	if loss.Numel() != 1 {
		return fmt.Errorf("tensor: Backward needs a one-element loss, got shape %v (use BackwardFrom)", loss.Shape)
	}
	one := outputUninit(loss.be, loss.Shape...)
	loss.be.Fill(one.data, 1)
	return tp.BackwardFrom([]*Tensor{loss}, []*Tensor{one})
}

// BackwardFrom adds grads[i] to outputs[i].Grad for every i, then runs the
// recorded ops in reverse, accumulating into the Grad of every tensor that
// requires grad (parameters and intermediates alike). Gradients ADD to
// whatever Grad already holds; call ZeroGrad between steps. The tape is
// reset afterwards, releasing the graph, so it can record the next step.
func (tp *Tape) BackwardFrom(outputs, grads []*Tensor) error {
	if len(outputs) != len(grads) {
		return fmt.Errorf("tensor: BackwardFrom got %d outputs and %d gradients", len(outputs), len(grads))
	}
	for i, o := range outputs {
		if grads[i] == nil || !slices.Equal(o.Shape, grads[i].Shape) {
			return fmt.Errorf("tensor: BackwardFrom output %d has shape %v, gradient %v", i, o.Shape, shapeOf(grads[i]))
		}
	}
	if tp == nil {
		return fmt.Errorf("tensor: BackwardFrom on a nil (no_grad) tape")
	}
	for i, o := range outputs {
		if !o.RequiresGrad {
			continue // a constant output contributes nothing
		}
		o.be.Axpby(1, grads[i].data, 1, o.GradBuffer())
	}
	for i := len(tp.nodes) - 1; i >= 0; i-- {
		n := tp.nodes[i]
		live := false
		for _, o := range n.outs {
			if o.grad.Present() {
				live = true
				break
			}
		}
		if live {
			n.backward()
		}
		// Every consumer of these outputs was recorded later and has run,
		// so their gradients are spent: recycle them for the ops below.
		for _, o := range n.outs {
			if o.grad.Present() {
				o.be.Free(o.grad)
				o.grad = backend.Buffer{}
			}
		}
	}
	if tp.recycle {
		tp.recycleOutputs()
		tp.recycle, tp.keep = false, nil
	}
	tp.Reset()
	return nil
}

func shapeOf(t *Tensor) any {
	if t == nil {
		return "nil"
	}
	return t.Shape
}

// wants reports whether an op on inputs ins must be recorded.
func (tp *Tape) wants(ins ...*Tensor) bool {
	if !tp.Recording() {
		return false
	}
	for _, t := range ins {
		if t != nil && t.RequiresGrad {
			return true
		}
	}
	return false
}

// push records backward for outs and marks them as requiring grad.
func (tp *Tape) push(backward func(), outs ...*Tensor) {
	for _, o := range outs {
		o.RequiresGrad = true
		o.fromOp = true
	}
	tp.nodes = append(tp.nodes, node{outs: outs, backward: backward})
}

// needs reports whether t wants a gradient from backward.
func needs(t *Tensor) bool { return t != nil && t.RequiresGrad }
