package cuda

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

// argKind is the C type of one kernel argument.
type argKind byte

const (
	argPointer argKind = 'p' // a device pointer (8 bytes)
	argInt32   argKind = 'i' // int (4 bytes)
	argInt64   argKind = 'l' // long long (8 bytes)
	argFloat32 argKind = 'f' // float (4 bytes)
	argStruct  argKind = 's' // a struct by value (its C layout, 8-aligned)
)

// arg is one kernel argument: its C type and its value's bits (or, for a
// struct, its bytes).
type arg struct {
	kind  argKind
	bits  uint64
	bytes []byte
}

func (a arg) size() int {
	switch a.kind {
	case argInt32, argFloat32:
		return 4
	case argStruct:
		return len(a.bytes)
	}
	return 8
}

func (a arg) align() int { return min(a.size(), 8) }

func ptrArg(p Ptr) arg       { return arg{kind: argPointer, bits: uint64(p)} }
func i32Arg(v int) arg       { return arg{kind: argInt32, bits: uint64(uint32(int32(v)))} }
func i64Arg(v int) arg       { return arg{kind: argInt64, bits: uint64(int64(v))} }
func f32Arg(v float32) arg   { return arg{kind: argFloat32, bits: uint64(math.Float32bits(v))} }
func structArg(b []byte) arg { return arg{kind: argStruct, bytes: b} }
func boolArg(v bool) arg {
	if v {
		return i32Arg(1)
	}
	return i32Arg(0)
}

// maxArgBytes bounds one launch's argument block: a table of pointers and
// the values they point to (the driver copies both at launch).
const maxArgBytes = 4096

// packArgs lays out a cuLaunchKernel kernelParams block in block, which
// starts at address base: a table of len(args) value addresses (8 bytes
// each), then each value at its natural alignment. It returns the bytes
// used. block is C memory (pinned host memory) in the real launcher: the
// table holds raw addresses, which Go memory must never hold.
func packArgs(block []byte, base uintptr, args []arg) (int, error) {
	off := 8 * len(args)
	for i, a := range args {
		sz, al := a.size(), a.align()
		off = (off + al - 1) / al * al
		if off+sz > len(block) || 8*len(args) > len(block) {
			return 0, fmt.Errorf("cuda: %d kernel arguments need more than %d bytes", len(args), len(block))
		}
		binary.LittleEndian.PutUint64(block[8*i:], uint64(base)+uint64(off))
		switch {
		case a.kind == argStruct:
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
