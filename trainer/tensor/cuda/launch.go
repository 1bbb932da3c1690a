package cuda

import (
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/segpipe/segpipe/trainer/internal/cudalaunch"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// The launch API for kernels whose meaning lives outside this package:
// a package that owns a .cu file's Go side (the loss's, in
// trainer/loss/losscuda) launches its kernels by name on a Backend's
// compute stream with plain arguments (trainer/internal/cudalaunch's
// values), and keeps its own types to itself. This package knows tensors,
// buffers and launches, nothing of what the arguments mean.

// Module is a kernel module another package owns (the loss's, in
// trainer/loss/losscuda): the package declares the module once, with its
// PTX and the kernels it launches, and launches them by name on a
// Backend's compute stream.
type Module struct {
	name    string
	ptx     []byte
	source  string // its CUDA C source, which the CPU harness compiles
	kernels map[string]kernel
	err     error // a name the module could not number, reported at launch
}

// DeclareModule declares the kernel module name: ptx is its compiled
// kernels (the owner embeds them, as this package does its own),
// kernels the names it launches. Its CUDA C source is <name>.cu in the
// folder kernels/ beside the calling file, including "shim.h" from this
// package's kernels/, and built by this package's kernels/build-ptx.sh.
//
// Declare a module in a package-level variable: a device loads every
// declared module's PTX with its own, and the CPU harness, built once a
// process, compiles every declared module's source, so a module declared
// after the first device or harness opened cannot be launched there. A
// kernel declared by two modules is reported by every launch; one
// missing from the PTX, by the device at its first launch.
func DeclareModule(name string, ptx []byte, kernels ...string) *Module {
	m := &Module{name: name, ptx: ptx, kernels: make(map[string]kernel, len(kernels))}
	if _, file, _, ok := runtime.Caller(1); ok {
		m.source = filepath.Join(filepath.Dir(file), "kernels", name+".cu")
	}
	for _, n := range kernels {
		k, err := ownedKernel(m, n)
		if err != nil {
			m.err = err
			break
		}
		m.kernels[n] = k
	}
	owned.Lock()
	owned.declared = append(owned.declared, m)
	owned.Unlock()
	return m
}

// Launch queues the module's kernel name on be's compute stream with
// args, in order behind the work already queued. A name the module did
// not declare, arguments that do not fit the launch block, or a launch
// the driver refuses are errors; a kernel's own fault surfaces at the
// next synchronising call, as for every launch.
func (m *Module) Launch(be *Backend, name string, g cudalaunch.Grid, args ...cudalaunch.Arg) error {
	if m.err != nil {
		return m.err
	}
	kn, ok := m.kernels[name]
	if !ok {
		return fmt.Errorf("cuda backend: module %s declares no kernel %q", m.name, name)
	}
	k := be.k
	switch g.Kind() {
	case cudalaunch.ElementGrid:
		return k.run(kn, g.N(), args...)
	case cudalaunch.BlockGrid:
		return k.perChannel(kn, g.N(), args...)
	case cudalaunch.OneBlockGrid:
		return k.wrapLaunch(kn, dim3{1, 1, 1}, k.block(), args)
	default:
		return k.wrapLaunch(kn, dim3{1, 1, 1}, dim3{1, 1, 1}, args)
	}
}

// wrapLaunch launches one kernel and names it in the error.
func (k *kernelSet) wrapLaunch(kn kernel, grid, block dim3, args []arg) error {
	if err := k.l.launch(kn, grid, block, args); err != nil {
		return fmt.Errorf("%s: %w", kn, err)
	}
	return nil
}

// ElementBlocks is the number of blocks a cudalaunch.Elements(n) launch runs (at
// least 1): the size of a kernel's per-block partial sums.
func (be *Backend) ElementBlocks(n int) int { return int(be.k.grid1(n).x) }

// Addr returns the device address of one of the Backend's buffers, at
// its offset (0 for the zero Buffer). Like every Backend method it panics
// on a buffer of another backend or one outside its allocation: that is
// a programming error, not data.
func (be *Backend) Addr(b backend.Buffer) cudalaunch.Ptr { return be.ptr(b) }

// Scratch returns at least bytes of the Backend's device workspace,
// grown as needed, and holds it for the caller until release: queue the
// launches that use it, then release (launches on the one stream run in
// order, so the next holder cannot overtake them). Between the two, do not
// call Scratch again or the optimiser's device methods, which take the
// same workspace. A failed allocation panics, as every Backend method
// does on a device error.
func (be *Backend) Scratch(bytes int) (ws cudalaunch.Ptr, release func()) {
	be.wsMu.Lock()
	held := false
	defer func() {
		if !held {
			be.wsMu.Unlock()
		}
	}()
	ws = be.scratch(bytes)
	held = true
	return ws, be.wsMu.Unlock
}
