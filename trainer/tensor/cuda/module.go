package cuda

import (
	"encoding/binary"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"unsafe"

	"github.com/segpipe/segpipe/trainer/internal/cudalaunch"
)

// kernelSet returns the device's kernels, loading the embedded PTX modules
// (JIT-compiled by the driver for this GPU) on first use.
func (d *device) Kernels() (*kernelSet, error) {
	d.kernelsOnce.Do(func() { d.kernelsErr = d.Do(d.loadModules) })
	if d.kernelsErr != nil {
		return nil, d.kernelsErr
	}
	return &kernelSet{l: d, maxBlocks: max(d.SMs, 1) * 8}, nil
}

// loadModules loads this package's embedded modules and every declared
// one (DeclareModule), then resolves this package's kernels. It runs
// inside Do.
func (d *device) loadModules() error {
	files, err := fs.Glob(ptx, "kernels/*.ptx")
	if err != nil {
		return err
	}
	var names []string
	var srcs [][]byte
	for _, f := range files {
		src, err := ptx.ReadFile(f)
		if err != nil {
			return err
		}
		names, srcs = append(names, strings.TrimSuffix(path.Base(f), ".ptx")), append(srcs, src)
	}
	for _, m := range declaredModules() {
		names, srcs = append(names, m.name), append(srcs, m.ptx)
	}
	if err := d.loadPTX(names, srcs); err != nil {
		return err
	}
	d.functions = make([]uintptr, numKernels)
	for k := range numKernels {
		if err := d.resolve(k); err != nil {
			return err
		}
	}
	return nil
}

// loadPTX loads the PTX modules srcs, named names, for the JIT to compile
// for this GPU. It runs inside Do.
func (d *device) loadPTX(names []string, srcs [][]byte) error {
	// JIT options and the two log buffers live in pinned host memory: the
	// option values are raw addresses the driver writes through.
	const logBytes = 8192
	var scratch uintptr
	if err := d.drv.check("cuMemHostAlloc", ccall(d.drv.cuMemHostAlloc, uintptr(unsafe.Pointer(&scratch)), 2*logBytes+256, 0)); err != nil {
		return err
	}
	defer ccall(d.drv.cuMemFreeHost, scratch)
	mem := unsafe.Slice(*(**byte)(unsafe.Pointer(&scratch)), 2*logBytes+256)
	for i, name := range names {
		clear(mem)
		opts := []uint32{jitInfoLogBuffer, jitInfoLogBufferSize, jitErrorLogBuffer, jitErrorLogBufferSize, jitLogVerbose}
		vals := []uint64{uint64(scratch) + 256, logBytes, uint64(scratch) + 256 + logBytes, logBytes, 0}
		for i, o := range opts {
			binary.LittleEndian.PutUint32(mem[4*i:], o)
			binary.LittleEndian.PutUint64(mem[64+8*i:], vals[i])
		}
		image := append(slices.Clip(srcs[i]), 0) // cuModuleLoadDataEx reads PTX as a C string
		var mod uintptr
		r := ccall(d.drv.cuModuleLoadDataEx, uintptr(unsafe.Pointer(&mod)), uintptr(unsafe.Pointer(&image[0])),
			uintptr(len(opts)), scratch, scratch+64)
		if err := d.drv.check("cuModuleLoadDataEx", r); err != nil {
			log := strings.TrimRight(string(mem[256+logBytes:256+2*logBytes]), "\x00")
			return fmt.Errorf("load module %s: %w\n%s", name, err, log)
		}
		d.modules = append(d.modules, mod)
		d.moduleNames = append(d.moduleNames, name)
	}
	return nil
}

// resolve finds kernel k's handle: in its own module for a kernel another
// package owns (loading the module first if it was declared after the
// device loaded the others), in any module for this package's. It runs
// inside Do.
func (d *device) resolve(k kernel) error {
	if int(k) < len(d.functions) && d.functions[k] != 0 {
		return nil
	}
	module := k.module()
	if module != nil && !slices.Contains(d.moduleNames, module.name) {
		if err := d.loadPTX([]string{module.name}, [][]byte{module.ptx}); err != nil {
			return err
		}
	}
	name := append([]byte(k.String()), 0)
	for i, mod := range d.modules {
		if module != nil && d.moduleNames[i] != module.name {
			continue
		}
		var f uintptr
		if ccall(d.drv.cuModuleGetFunction, uintptr(unsafe.Pointer(&f)), mod, uintptr(unsafe.Pointer(&name[0]))) == 0 {
			if int(k) >= len(d.functions) {
				d.functions = append(d.functions, make([]uintptr, int(k)+1-len(d.functions))...)
			}
			d.functions[k] = f
			return nil
		}
	}
	if module != nil {
		return fmt.Errorf("cuda: kernel %s is not in module %s's PTX", k, module.name)
	}
	return fmt.Errorf("cuda: kernel %s is in none of the embedded modules", k)
}

// launch implements launcher from any goroutine: one Do per launch.
func (d *device) launch(k kernel, grid, block dim3, args []arg) error {
	return d.Do(func() error { return d.launchLocked(k, grid, block, args) })
}

// launchLocked packs the arguments into the device's pinned block and
// queues the kernel on the compute stream; it runs inside Do.
// The driver copies the arguments during cuLaunchKernel, so one block
// serves every launch.
func (d *device) launchLocked(k kernel, grid, block dim3, args []arg) error {
	if err := d.resolve(k); err != nil {
		return err
	}
	if _, err := cudalaunch.Pack(d.argBytes, d.args, args); err != nil {
		return err
	}
	return d.drv.check("cuLaunchKernel", ccall(d.drv.cuLaunchKernel, d.functions[k],
		uintptr(grid.x), uintptr(grid.y), uintptr(grid.z), uintptr(block.x), uintptr(block.y), uintptr(block.z),
		0, uintptr(d.stream), d.args, 0))
}

// onThread launches directly: it is only handed out inside Run, which
// holds the device.
type onThread struct{ d *device }

func (o onThread) launch(k kernel, grid, block dim3, args []arg) error {
	return o.d.launchLocked(k, grid, block, args)
}

// Run calls f inside one Do with Kernels that launch without a Do (lock
// and context check) each. f must not call the Device's own methods
// (Alloc, Upload, Gemm…): they take the mutex Run holds and would wait
// forever.
func (d *device) Run(f func(k *kernelSet) error) error {
	k, err := d.Kernels()
	if err != nil {
		return err
	}
	return d.Do(func() error { return f(&kernelSet{l: onThread{d}, maxBlocks: k.maxBlocks}) })
}
