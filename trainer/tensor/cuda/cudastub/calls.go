//go:build !nocuda

package cudastub

import (
	"fmt"

	"github.com/ebitengine/purego"
)

// entry points of the stub's counters, looked up on first use.
type counters struct {
	total, names, count uintptr
	// name is bound with a Go signature: purego copies the returned C
	// string.
	name func(i uintptr) string
}

func (s *Stub) counters() (*counters, error) {
	if s.c != nil {
		return s.c, nil
	}
	h, err := purego.Dlopen(s.Path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("cudastub: %w", err)
	}
	c := &counters{}
	for sym, dst := range map[string]*uintptr{"segpipe_stub_calls_get": &c.total, "segpipe_stub_names": &c.names,
		"segpipe_stub_count": &c.count} {
		if *dst, err = purego.Dlsym(h, sym); err != nil {
			return nil, fmt.Errorf("cudastub: %w", err)
		}
	}
	name, err := purego.Dlsym(h, "segpipe_stub_name")
	if err != nil {
		return nil, fmt.Errorf("cudastub: %w", err)
	}
	purego.RegisterFunc(&c.name, name)
	s.c = c
	return c, nil
}

// Calls returns how many calls the three libraries have taken so far in
// this process: the stub counts every entry point.
func (s *Stub) Calls() (uint64, error) {
	c, err := s.counters()
	if err != nil {
		return 0, err
	}
	n, _, _ := purego.SyscallN(c.total)
	return uint64(n), nil
}

// CallsByName returns the calls so far by entry point.
func (s *Stub) CallsByName() (map[string]uint64, error) {
	c, err := s.counters()
	if err != nil {
		return nil, err
	}
	n, _, _ := purego.SyscallN(c.names)
	out := make(map[string]uint64, int(n))
	for i := range int(int32(n)) {
		k, _, _ := purego.SyscallN(c.count, uintptr(i))
		out[c.name(uintptr(i))] = uint64(k)
	}
	return out, nil
}
