package train

import (
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
)

// hostState is the host side of the model's state that the optimiser, the
// EMA and the run files work on: one host slice per state tensor (the
// parameters' and running statistics' values) and one per parameter
// gradient. Where the backend serves host views (cpu) the slices are the
// tensors' own memory and down/up move nothing; elsewhere (emu, cuda) they
// are host copies and down/up are the explicit, counted crossings. The
// optimiser does not run on the backend yet, so on a device every
// optimiser step pays one round trip of the state: that is the part of the
// transfer budget still to remove.
type hostState struct {
	views  bool
	state  []*tensor.Tensor
	values [][]float32 // per state tensor
	params []*tensor.Tensor
	grads  [][]float32 // per parameter
	index  []int       // params[i] is state[index[i]]
}

func newHostState(m *model.Model) *hostState {
	h := &hostState{}
	pos := map[*tensor.Tensor]int{}
	for i, p := range m.State() {
		h.state = append(h.state, p.Value)
		pos[p.Value] = i
	}
	for _, p := range m.Params() {
		h.params = append(h.params, p.Value)
		h.index = append(h.index, pos[p.Value])
	}
	be := m.Backend()
	h.views = len(h.state) > 0 && be.Host(h.state[0].Buffer()) != nil
	h.values = make([][]float32, len(h.state))
	h.grads = make([][]float32, len(h.params))
	for i, t := range h.state {
		h.values[i] = t.HostView(nil)
	}
	for i, t := range h.params {
		h.grads[i] = t.GradHostView(nil)
	}
	return h
}

// down brings the values (and the gradients when grads) to the host.
func (h *hostState) down(grads bool) {
	if h.views {
		return
	}
	for i, t := range h.state {
		t.ToHost(h.values[i])
	}
	if grads {
		for i, t := range h.params {
			t.GradToHost(h.grads[i])
		}
	}
}

// zeroGrads clears the gradients on the backend after an optimiser step
// (the host ones are cleared by the optimiser; on the CPU they are the same).
func (h *hostState) zeroGrads() {
	if h.views {
		return
	}
	for _, t := range h.params {
		t.ZeroGrad()
	}
}

// up sends the parameter values (and the gradients when grads) back.
func (h *hostState) up(grads bool) {
	if h.views {
		return
	}
	for i, t := range h.params {
		t.FromHost(h.values[h.index[i]])
		if grads {
			t.GradFromHost(h.grads[i])
		}
	}
}
