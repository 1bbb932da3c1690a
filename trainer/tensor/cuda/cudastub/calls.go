//go:build !nocuda

package cudastub

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// entry points of the stub's counters, looked up on first use.
type counters struct {
	total, names, name, count uintptr
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
		"segpipe_stub_name": &c.name, "segpipe_stub_count": &c.count} {
		if *dst, err = purego.Dlsym(h, sym); err != nil {
			return nil, fmt.Errorf("cudastub: %w", err)
		}
	}
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
		p, _, _ := purego.SyscallN(c.name, uintptr(i))
		k, _, _ := purego.SyscallN(c.count, uintptr(i))
		out[cString(p)] = uint64(k)
	}
	return out, nil
}

// cString copies the stub's static NUL-terminated name at p.
func cString(p uintptr) string {
	if p == 0 {
		return ""
	}
	b := *(**byte)(unsafe.Pointer(&p))
	n := 0
	for *(*byte)(unsafe.Add(unsafe.Pointer(b), n)) != 0 {
		n++
	}
	return string(unsafe.Slice(b, n))
}
