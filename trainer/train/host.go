package train

import (
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
)

// hostState is the run's host boundary outside the step: the optimiser,
// clipping and the EMA run on the backend's buffers (trainer/optim), so
// the only crossings of the model's state are the explicit ones a
// checkpoint makes — the gradients pending towards the next optimiser
// step, down at a save and up at a resume. views reports whether the
// backend serves host views (cpu), where those crossings are free.
type hostState struct {
	views  bool
	params []*tensor.Tensor
}

func newHostState(m *model.Model) *hostState {
	h := &hostState{}
	for _, p := range m.Params() {
		h.params = append(h.params, p.Value)
	}
	h.views = len(h.params) > 0 && m.Backend().Host(h.params[0].Buffer()) != nil
	return h
}

// gradsToHost returns the parameters' gradients as host values: the
// tensors' own memory on the CPU, downloads elsewhere. Nil when every
// gradient is zero (none pending).
func (h *hostState) gradsToHost() [][]float32 {
	out := make([][]float32, len(h.params))
	pending := false
	for i, t := range h.params {
		out[i] = t.GradHostView(nil)
		for _, g := range out[i] {
			if g != 0 {
				pending = true
				break
			}
		}
	}
	if !pending {
		return nil
	}
	return out
}

// gradsFromHost uploads pending gradients (the CPU copies in place).
func (h *hostState) gradsFromHost(grads [][]float32) {
	for i, t := range h.params {
		t.GradFromHost(grads[i])
	}
}
