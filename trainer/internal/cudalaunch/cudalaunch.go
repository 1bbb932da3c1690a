// Package cudalaunch holds the value types of a CUDA kernel launch: a
// device address, one kernel argument in the C type the kernel declares,
// and how a launch spreads over the device. They are plain values with no
// driver behind them, shared by the CUDA backend (trainer/tensor/cuda),
// which lays the arguments out for cuLaunchKernel, and the packages that
// own kernels of their own (trainer/loss/losscuda), which build them. The
// package is internal to trainer so that neither the backend's exported
// surface nor a user of the module carries them.
package cudalaunch

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Ptr is a device address (CUdeviceptr). It is a number, not a Go
// pointer: the garbage collector never follows it.
type Ptr uintptr

// Add returns p advanced by bytes.
func (p Ptr) Add(bytes int) Ptr { return p + Ptr(bytes) }

// ArgKind is the C type of one kernel argument.
type ArgKind byte

// The C types a kernel argument can have.
const (
	Pointer ArgKind = 'p' // a device pointer (8 bytes)
	Int32   ArgKind = 'i' // int (4 bytes)
	Int64   ArgKind = 'l' // long long (8 bytes)
	Float32 ArgKind = 'f' // float (4 bytes)
	Struct  ArgKind = 's' // a struct by value (its C layout, 8-aligned)
)

// Arg is one kernel argument: its C type and its value's bits (or, for a
// struct, its bytes).
type Arg struct {
	kind  ArgKind
	bits  uint64
	bytes []byte
}

// PtrArg is a device pointer argument.
func PtrArg(p Ptr) Arg { return Arg{kind: Pointer, bits: uint64(p)} }

// Int32Arg is an int argument (v truncated to 32 bits).
func Int32Arg(v int) Arg { return Arg{kind: Int32, bits: uint64(uint32(int32(v)))} }

// Int64Arg is a long long argument.
func Int64Arg(v int) Arg { return Arg{kind: Int64, bits: uint64(int64(v))} }

// Float32Arg is a float argument.
func Float32Arg(v float32) Arg { return Arg{kind: Float32, bits: uint64(math.Float32bits(v))} }

// StructArg is a struct passed by value: b is its C layout, bytes the
// caller has laid out as the kernel's struct declares.
func StructArg(b []byte) Arg { return Arg{kind: Struct, bytes: b} }

// Kind is the argument's C type.
func (a Arg) Kind() ArgKind { return a.kind }

// Bits is a scalar argument's value as the kernel reads it, zero-extended
// to 64 bits (0 for a struct).
func (a Arg) Bits() uint64 { return a.bits }

// Bytes is a struct argument's C layout (nil for a scalar).
func (a Arg) Bytes() []byte { return a.bytes }

func (a Arg) size() int {
	switch a.kind {
	case Int32, Float32:
		return 4
	case Struct:
		return len(a.bytes)
	}
	return 8
}

func (a Arg) align() int { return min(a.size(), 8) }

// Pack lays out a cuLaunchKernel kernelParams block in block, which
// starts at address base: a table of len(args) value addresses (8 bytes
// each), then each value at its natural alignment. It returns the bytes
// used. block is C memory (pinned host memory) in the real launcher: the
// table holds raw addresses, which Go memory must never hold.
func Pack(block []byte, base uintptr, args []Arg) (int, error) {
	off := 8 * len(args)
	for i, a := range args {
		sz, al := a.size(), a.align()
		off = (off + al - 1) / al * al
		if off+sz > len(block) || 8*len(args) > len(block) {
			return 0, fmt.Errorf("cuda: %d kernel arguments need more than %d bytes", len(args), len(block))
		}
		binary.LittleEndian.PutUint64(block[8*i:], uint64(base)+uint64(off))
		switch {
		case a.kind == Struct:
			copy(block[off:], a.bytes)
		case sz == 4:
			binary.LittleEndian.PutUint32(block[off:], uint32(a.bits))
		default:
			binary.LittleEndian.PutUint64(block[off:], a.bits)
		}
		off += sz
	}
	return off, nil
}

// Grid is how a launch spreads over the device.
type Grid struct {
	kind GridKind
	n    int
}

// GridKind is the shape of a Grid.
type GridKind byte

// The shapes of a launch.
const (
	ElementGrid   GridKind = iota // one thread per element, grid-stride
	BlockGrid                     // one block per row, block-stride
	OneBlockGrid                  // a single block
	OneThreadGrid                 // a single thread
)

// Elements launches a grid-stride kernel over n elements, one per thread
// per round; n ≤ 0 launches nothing.
func Elements(n int) Grid { return Grid{ElementGrid, n} }

// Blocks launches one block per row (or channel) of n, a kernel whose
// blocks stride over the rows when the grid is capped; n ≤ 0 launches
// nothing.
func Blocks(n int) Grid { return Grid{BlockGrid, n} }

// OneBlock launches a single block of the backend's block size.
func OneBlock() Grid { return Grid{kind: OneBlockGrid} }

// OneThread launches a single thread.
func OneThread() Grid { return Grid{kind: OneThreadGrid} }

// Kind is the grid's shape.
func (g Grid) Kind() GridKind { return g.kind }

// N is the element or row count of an Elements or Blocks grid.
func (g Grid) N() int { return g.n }
