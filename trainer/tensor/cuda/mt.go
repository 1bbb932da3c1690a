package cuda

import (
	"encoding/binary"
	"fmt"
)

// Multi-tensor launches: an elementwise step over a list of tensors (an
// optimiser group's parameters, every gradient, every averaged state
// tensor) as one launch instead of one per tensor. A small model has
// hundreds of tensors, many of a few hundred elements, so per-tensor
// launches cost more in fixed launch overhead than in the work they do.
//
// The list travels as a table in device memory (MtRow and MtChunk in
// kernels/optim.cu): a row per tensor with up to four pointers, its length
// and a flag, then chunks of at most mtChunk elements naming their row and
// first element. Tables are built on the host and cached on the device by
// content, so a training run uploads each distinct list once (a handful:
// one per group and state of the momentum flag, the gradients, the EMA)
// and its steps upload nothing. These uploads are launch arguments that
// outgrow a kernel's parameter space, not data, and are not counted in
// Transfers; TableBytes reports them.

// mtChunk is the most elements one chunk (one block's turn) covers.
const mtChunk = 1 << 14

// mtRowBytes and mtChunkBytes are sizeof(MtRow) and sizeof(MtChunk).
const (
	mtRowBytes   = 48
	mtChunkBytes = 16
)

// mtMaxTables bounds the cache; past it every table is dropped and
// rebuilt on demand (a list that changes every call would otherwise grow
// it without end).
const mtMaxTables = 256

// mtList is one tensor list being described: per tensor up to four
// device pointers, a length and a flag.
type mtList struct {
	ptrs  [][4]devptr
	ns    []int
	flags []int32
}

func (l *mtList) add(n int, flag bool, ptrs ...devptr) {
	var p [4]devptr
	copy(p[:], ptrs)
	f := int32(0)
	if flag {
		f = 1
	}
	l.ptrs, l.ns, l.flags = append(l.ptrs, p), append(l.ns, n), append(l.flags, f)
}

// mtTable is a list's table on the device.
type mtTable struct {
	mem     devptr
	bytes   int
	chunks  devptr
	nchunks int
}

// encode lays out the table's bytes.
func (l *mtList) encode() []byte {
	nchunks := 0
	for _, n := range l.ns {
		nchunks += (n + mtChunk - 1) / mtChunk
	}
	b := make([]byte, 0, len(l.ns)*mtRowBytes+nchunks*mtChunkBytes)
	for i, p := range l.ptrs {
		for _, x := range p {
			b = binary.LittleEndian.AppendUint64(b, uint64(x))
		}
		b = binary.LittleEndian.AppendUint64(b, uint64(l.ns[i]))
		b = binary.LittleEndian.AppendUint32(b, uint32(l.flags[i]))
		b = binary.LittleEndian.AppendUint32(b, 0)
	}
	for i, n := range l.ns {
		for s := 0; s < n; s += mtChunk {
			b = binary.LittleEndian.AppendUint32(b, uint32(i))
			b = binary.LittleEndian.AppendUint32(b, 0)
			b = binary.LittleEndian.AppendUint64(b, uint64(s))
		}
	}
	return b
}

// table returns l's table on the device, uploading it on first use.
func (be *Backend) table(l *mtList) (mtTable, error) {
	key := l.encode()
	be.mtMu.Lock()
	defer be.mtMu.Unlock()
	if t, ok := be.mt[string(key)]; ok {
		return t, nil
	}
	if len(be.mt) >= mtMaxTables {
		be.dropTables()
	}
	p, err := be.e.alloc(len(key))
	if err != nil {
		return mtTable{}, fmt.Errorf("multi-tensor table of %d bytes: %w", len(key), err)
	}
	if err := be.e.upload(p, key); err != nil {
		be.e.free(p)
		return mtTable{}, fmt.Errorf("multi-tensor table: %w", err)
	}
	rows := len(l.ns) * mtRowBytes
	t := mtTable{mem: p, bytes: len(key), chunks: p.Add(rows), nchunks: (len(key) - rows) / mtChunkBytes}
	if be.mt == nil {
		be.mt = map[string]mtTable{}
	}
	be.mt[string(key)] = t
	be.tableBytes += int64(len(key))
	return t, nil
}

// dropTables frees every cached table; the caller holds mtMu. Frees are
// queued behind the launches that read them.
func (be *Backend) dropTables() {
	for k, t := range be.mt {
		be.e.free(t.mem)
		delete(be.mt, k)
	}
}

// TableBytes is the number of bytes of multi-tensor tables the Backend
// has uploaded (launch arguments, not counted in Transfers).
func (be *Backend) TableBytes() int64 {
	be.mtMu.Lock()
	defer be.mtMu.Unlock()
	return be.tableBytes
}

// mtRun launches a multi-tensor kernel over t with the arguments after
// the table's.
func (k *kernelSet) mtRun(kn kernel, t mtTable, args ...arg) error {
	if t.nchunks == 0 {
		return nil
	}
	a := append([]arg{ptrArg(t.mem), ptrArg(t.chunks), i64Arg(t.nchunks), i64Arg(mtChunk)}, args...)
	grid := dim3{uint32(max(min(t.nchunks, k.maxBlocks), 1)), 1, 1}
	if err := k.l.launch(kn, grid, k.block(), a); err != nil {
		return fmt.Errorf("%s: %w", kn, err)
	}
	return nil
}
