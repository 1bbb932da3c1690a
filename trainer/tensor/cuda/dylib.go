package cuda

import (
	"errors"
	"fmt"
	"strings"
	"unsafe"
)

// dylib is one opened shared library.
type dylib struct {
	lib    library
	path   string
	handle uintptr
}

// openLibrary opens the first of lib's candidates that loads, after the
// dependencies found beside it. The error names the library, every path
// tried and the override variable.
func openLibrary(lib library) (*dylib, error) {
	env := processEnv()
	var tried []string
	for _, p := range lib.candidates(env) {
		for _, d := range lib.deps(p, env) {
			// A dependency that fails to load makes the library's own load
			// fail with the reason, so its error is not needed here.
			_, _ = dlopen(d)
		}
		h, err := dlopen(p)
		if err == nil {
			return &dylib{lib: lib, path: p, handle: h}, nil
		}
		if !bindingBuilt {
			return nil, fmt.Errorf("%s: %w", lib.Name, err)
		}
		tried = append(tried, fmt.Sprintf("%s (%v)", p, err))
	}
	return nil, fmt.Errorf("%w: %s (%s) not found; tried %s; set %s to its path",
		ErrUnavailable, lib.Name, strings.Join(lib.Sonames, " or "), strings.Join(tried, ", "), lib.Env)
}

// bind looks up every symbol named in syms into its *uintptr.
func (l *dylib) bind(syms map[string]*uintptr) error {
	var errs []error
	for name, dst := range syms {
		p, err := dlsym(l.handle, name)
		if err != nil || p == 0 {
			errs = append(errs, fmt.Errorf("%s", name))
			continue
		}
		*dst = p
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s at %s lacks %v (too old a version?)", ErrUnavailable, l.lib.Name, l.path, errors.Join(errs...))
	}
	return nil
}

// bindOptional looks up each symbol of syms that the library has into its
// *uintptr, leaving the others 0 for their users to refuse.
func (l *dylib) bindOptional(syms map[string]*uintptr) {
	for name, dst := range syms {
		if p, err := dlsym(l.handle, name); err == nil {
			*dst = p
		}
	}
}

// goString copies the NUL-terminated C string at p.
func goString(p uintptr) string {
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
