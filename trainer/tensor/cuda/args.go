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
)

func (k argKind) size() int {
	if k == argInt32 || k == argFloat32 {
		return 4
	}
	return 8
}

// arg is one kernel argument: its C type and its value's bits.
type arg struct {
	kind argKind
	bits uint64
}

func ptrArg(p Ptr) arg       { return arg{argPointer, uint64(p)} }
func i32Arg(v int) arg       { return arg{argInt32, uint64(uint32(int32(v)))} }
func i64Arg(v int) arg       { return arg{argInt64, uint64(int64(v))} }
func f32Arg(v float32) arg   { return arg{argFloat32, uint64(math.Float32bits(v))} }
func boolArg(v bool) arg     { return i32Arg(map[bool]int{false: 0, true: 1}[v]) }
func (a arg) String() string { return fmt.Sprintf("%c:%#x", a.kind, a.bits) }

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
		sz := a.kind.size()
		off = (off + sz - 1) &^ (sz - 1)
		if off+sz > len(block) {
			return 0, fmt.Errorf("cuda: %d kernel arguments need more than %d bytes", len(args), len(block))
		}
		binary.LittleEndian.PutUint64(block[8*i:], uint64(base)+uint64(off))
		if sz == 4 {
			binary.LittleEndian.PutUint32(block[off:], uint32(a.bits))
		} else {
			binary.LittleEndian.PutUint64(block[off:], a.bits)
		}
		off += sz
	}
	return off, nil
}
