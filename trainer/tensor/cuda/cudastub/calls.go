//go:build !nocuda

package cudastub

import (
	"fmt"

	"github.com/ebitengine/purego"
)

// Calls returns how many calls the three libraries have taken so far in
// this process: the stub counts every entry point.
func (s *Stub) Calls() (uint64, error) {
	if s.calls == 0 {
		h, err := purego.Dlopen(s.Path, purego.RTLD_NOW|purego.RTLD_GLOBAL)
		if err != nil {
			return 0, fmt.Errorf("cudastub: %w", err)
		}
		if s.calls, err = purego.Dlsym(h, "segpipe_stub_calls_get"); err != nil {
			return 0, fmt.Errorf("cudastub: %w", err)
		}
	}
	n, _, _ := purego.SyscallN(s.calls)
	return uint64(n), nil
}
