package optim

import (
	"fmt"
	"sort"
	"strings"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// Optimiser state is exchanged as named float32 buffers, "<param>.<buffer>"
// with the reference's buffer names (momentum_buffer, momentum_buffer_SGD,
// exp_avg, exp_avg_sq, step), so that a checkpoint can hold it next to the
// weights. State returns host copies (downloads from the backend);
// LoadState uploads copies. They are the optimiser's only crossings, made
// at checkpoint save and load. A parameter without entries starts fresh,
// as it would in the reference.

func paramIndex(groups []*Group) map[string]*Param {
	m := map[string]*Param{}
	for _, g := range groups {
		for _, p := range g.Params {
			m[p.Name] = p
		}
	}
	return m
}

// splitKey finds the parameter a state key belongs to.
func splitKey(params map[string]*Param, key string, buffers ...string) (*Param, string, error) {
	for _, b := range buffers {
		if name, ok := strings.CutSuffix(key, "."+b); ok {
			if p := params[name]; p != nil {
				return p, b, nil
			}
			return nil, "", fmt.Errorf("optim: state %q names no parameter of this optimiser", key)
		}
	}
	return nil, "", fmt.Errorf("optim: state %q has no known buffer suffix %v", key, buffers)
}

func checkLen(key string, v []float32, n int) error {
	if len(v) != n {
		return fmt.Errorf("optim: state %q has %d values, want %d", key, len(v), n)
	}
	return nil
}

// sortedKeys lists a state map's keys in order, for deterministic loading
// and error messages.
func sortedKeys(m map[string][]float32) []string {
	k := make([]string, 0, len(m))
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return k
}

// State implements Optimizer.
func (o *SGD) State() map[string][]float32 {
	out := map[string][]float32{}
	for p, b := range o.buf {
		out[p.Name+".momentum_buffer"] = download(o.be, b)
	}
	return out
}

// LoadState implements Optimizer.
func (o *SGD) LoadState(st map[string][]float32) error {
	params := paramIndex(o.groups)
	for _, k := range sortedKeys(st) {
		p, _, err := splitKey(params, k, "momentum_buffer")
		if err != nil {
			return err
		}
		if err := checkLen(k, st[k], p.Value.Len); err != nil {
			return err
		}
	}
	buf := map[*Param]backend.Buffer{}
	for _, k := range sortedKeys(st) {
		p, _, _ := splitKey(params, k, "momentum_buffer")
		buf[p] = upload(o.be, st[k])
	}
	for _, b := range o.buf {
		o.be.Free(b)
	}
	o.buf = buf
	return nil
}

// State implements Optimizer.
func (o *MuSGD) State() map[string][]float32 {
	out := map[string][]float32{}
	for p, s := range o.state {
		if s.first {
			continue
		}
		out[p.Name+".momentum_buffer_SGD"] = download(o.be, s.sgd)
		if s.muon.Present() {
			out[p.Name+".momentum_buffer"] = download(o.be, s.muon)
		}
	}
	return out
}

// LoadState implements Optimizer.
func (o *MuSGD) LoadState(st map[string][]float32) error {
	params := paramIndex(o.groups)
	muon := map[*Param]bool{}
	for _, g := range o.groups {
		for _, p := range g.Params {
			muon[p] = g.UseMuon
		}
	}
	// Validate everything before the first upload, so that a bad state
	// leaves the optimiser as it was.
	type have struct{ sgd, muon []float32 }
	found := map[*Param]*have{}
	for _, k := range sortedKeys(st) {
		p, b, err := splitKey(params, k, "momentum_buffer_SGD", "momentum_buffer")
		if err != nil {
			return err
		}
		if err := checkLen(k, st[k], p.Value.Len); err != nil {
			return err
		}
		h := found[p]
		if h == nil {
			h = &have{}
			found[p] = h
		}
		if b == "momentum_buffer" {
			if !muon[p] {
				return fmt.Errorf("optim: state %q: %s is not in a Muon group", k, p.Name)
			}
			h.muon = st[k]
		} else {
			h.sgd = st[k]
		}
	}
	for p, h := range found {
		if h.sgd == nil || (muon[p] && h.muon == nil) {
			return fmt.Errorf("optim: state for %s is incomplete", p.Name)
		}
	}
	state := map[*Param]*musgdState{}
	for p, h := range found {
		s := &musgdState{sgd: upload(o.be, h.sgd)}
		if h.muon != nil {
			s.muon = upload(o.be, h.muon)
		}
		state[p] = s
	}
	for _, s := range o.state {
		o.be.Free(s.sgd)
		o.be.Free(s.muon)
	}
	o.state = state
	return nil
}

// State implements Optimizer.
func (o *AdamW) State() map[string][]float32 {
	out := map[string][]float32{}
	for p, s := range o.state {
		out[p.Name+".exp_avg"] = download(o.be, s.m)
		out[p.Name+".exp_avg_sq"] = download(o.be, s.v)
		out[p.Name+".step"] = []float32{float32(s.t)}
	}
	return out
}

// LoadState implements Optimizer.
func (o *AdamW) LoadState(st map[string][]float32) error {
	params := paramIndex(o.groups)
	type have struct {
		m, v []float32
		t    int
	}
	found := map[*Param]*have{}
	for _, k := range sortedKeys(st) {
		p, b, err := splitKey(params, k, "exp_avg_sq", "exp_avg", "step")
		if err != nil {
			return err
		}
		s := found[p]
		if s == nil {
			s = &have{t: -1}
			found[p] = s
		}
		switch b {
		case "step":
			if len(st[k]) != 1 || st[k][0] < 1 || st[k][0] != float32(int(st[k][0])) {
				return fmt.Errorf("optim: state %q: step must be one positive integer, got %v", k, st[k])
			}
			s.t = int(st[k][0])
		case "exp_avg":
			if err := checkLen(k, st[k], p.Value.Len); err != nil {
				return err
			}
			s.m = st[k]
		default:
			if err := checkLen(k, st[k], p.Value.Len); err != nil {
				return err
			}
			s.v = st[k]
		}
	}
	for p, s := range found {
		if s.m == nil || s.v == nil || s.t < 1 {
			return fmt.Errorf("optim: state for %s is incomplete", p.Name)
		}
	}
	state := map[*Param]*adamState{}
	for p, s := range found {
		state[p] = &adamState{m: upload(o.be, s.m), v: upload(o.be, s.v), t: s.t}
	}
	for _, s := range o.state {
		o.be.Free(s.m)
		o.be.Free(s.v)
	}
	o.state = state
	return nil
}
