package optim

import (
	"fmt"
	"sort"
	"strings"
)

// Optimiser state is exchanged as named float32 buffers, "<param>.<buffer>"
// with the reference's buffer names (momentum_buffer, momentum_buffer_SGD,
// exp_avg, exp_avg_sq, step), so that a checkpoint can hold it next to the
// weights. State returns copies; LoadState copies in. A parameter without
// entries starts fresh, as it would in the reference.

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
		out[p.Name+".momentum_buffer"] = append([]float32(nil), b...)
	}
	return out
}

// LoadState implements Optimizer.
func (o *SGD) LoadState(st map[string][]float32) error {
	params := paramIndex(o.groups)
	buf := map[*Param][]float32{}
	for _, k := range sortedKeys(st) {
		p, _, err := splitKey(params, k, "momentum_buffer")
		if err != nil {
			return err
		}
		if err := checkLen(k, st[k], len(p.Data)); err != nil {
			return err
		}
		buf[p] = append([]float32(nil), st[k]...)
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
		out[p.Name+".momentum_buffer_SGD"] = append([]float32(nil), s.sgd...)
		if s.muon != nil {
			out[p.Name+".momentum_buffer"] = append([]float32(nil), s.muon...)
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
	state := map[*Param]*musgdState{}
	get := func(p *Param) *musgdState {
		s := state[p]
		if s == nil {
			s = &musgdState{}
			state[p] = s
		}
		return s
	}
	for _, k := range sortedKeys(st) {
		p, b, err := splitKey(params, k, "momentum_buffer_SGD", "momentum_buffer")
		if err != nil {
			return err
		}
		if err := checkLen(k, st[k], len(p.Data)); err != nil {
			return err
		}
		v := append([]float32(nil), st[k]...)
		if b == "momentum_buffer" {
			if !muon[p] {
				return fmt.Errorf("optim: state %q: %s is not in a Muon group", k, p.Name)
			}
			get(p).muon = v
		} else {
			get(p).sgd = v
		}
	}
	for p, s := range state {
		if s.sgd == nil || (muon[p] && s.muon == nil) {
			return fmt.Errorf("optim: state for %s is incomplete", p.Name)
		}
	}
	o.state = state
	return nil
}

// State implements Optimizer.
func (o *AdamW) State() map[string][]float32 {
	out := map[string][]float32{}
	for p, s := range o.state {
		out[p.Name+".exp_avg"] = append([]float32(nil), s.m...)
		out[p.Name+".exp_avg_sq"] = append([]float32(nil), s.v...)
		out[p.Name+".step"] = []float32{float32(s.t)}
	}
	return out
}

// LoadState implements Optimizer.
func (o *AdamW) LoadState(st map[string][]float32) error {
	params := paramIndex(o.groups)
	state := map[*Param]*adamState{}
	for _, k := range sortedKeys(st) {
		p, b, err := splitKey(params, k, "exp_avg_sq", "exp_avg", "step")
		if err != nil {
			return err
		}
		s := state[p]
		if s == nil {
			s = &adamState{t: -1}
			state[p] = s
		}
		switch b {
		case "step":
			if len(st[k]) != 1 || st[k][0] < 1 || st[k][0] != float32(int(st[k][0])) {
				return fmt.Errorf("optim: state %q: step must be one positive integer, got %v", k, st[k])
			}
			s.t = int(st[k][0])
		case "exp_avg":
			if err := checkLen(k, st[k], len(p.Data)); err != nil {
				return err
			}
			s.m = append([]float32(nil), st[k]...)
		default:
			if err := checkLen(k, st[k], len(p.Data)); err != nil {
				return err
			}
			s.v = append([]float32(nil), st[k]...)
		}
	}
	for p, s := range state {
		if s.m == nil || s.v == nil || s.t < 1 {
			return fmt.Errorf("optim: state for %s is incomplete", p.Name)
		}
	}
	o.state = state
	return nil
}
