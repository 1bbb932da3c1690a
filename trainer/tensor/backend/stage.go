package backend

import "time"

// Stager is implemented by backends that copy a batch up beside the
// compute instead of through UploadBytes: each Stage copies its parts
// into one of two staging slots and onto the device on a copy stream of
// the backend's own, and the kernels queued after Stage wait for those
// copies on the device, not on the host. While the step on one batch runs,
// the next one's copies run beside it. A backend without it (cpu, emu)
// takes a batch through UploadBytes.
//
// The caller's sequence per batch is Stage, the kernels that read the
// buffers, StageDone. A Stager is not safe for concurrent use.
type Stager interface {
	// Stage copies parts, the byte arrays of one batch, to the backend
	// and returns one buffer per part: ⌈len/4⌉ elements holding the bytes
	// in order, as UploadBytes leaves them. Each part counts in Transfers
	// as one upload of its bytes, as UploadBytes counts it. The buffers
	// alias staging memory the backend owns and must not be freed; they
	// stay valid until the next-but-one Stage, which refills their slot
	// once the work StageDone marked has run, or until FreeStaged. Errors
	// are device errors.
	Stage(parts ...[]byte) ([]Buffer, error)
	// StageDone marks the work queued so far as the last that reads the
	// latest Stage's buffers. Without it, the Stage that refills their
	// slot waits for all the work queued before it.
	StageDone()
	// FreeStaged returns the staging memory, host and device, once the
	// work queued so far is done; the buffers Stage returned are invalid
	// after it, and the next Stage allocates afresh.
	FreeStaged()
	// StageIdle is the time the device sat idle between the work of
	// consecutive staged batches — from the end of the work StageDone
	// marked to the start of the next batch's, its copies included —
	// summed since the backend was made (each gap counted once the next
	// batch's work has begun, every one after FreeStaged): the device's
	// wait for data, zero when the host and the copies keep ahead of it.
	StageIdle() time.Duration
}

// WindowExpander is implemented by backends that expand windowed mask
// stacks on the device — the `--remote … masks=windowed` transport, which
// sends per instance its window on the prototype grid and the window's
// w·h bytes instead of the dense plane — so that only the windows cross.
// A backend without it gets the dense stack the host expanded.
type WindowExpander interface {
	// WindowTable checks n = len(wins)/4 windows (x0, y0, w, h per mask, as
	// the transport's int32 values) against a rows×cols grid and a window
	// data of dataBytes bytes (the windows' bytes back to back, in order),
	// and appends to dst the table ExpandWindows reads. A window outside
	// the grid, or data that does not match the windows, is an error, as
	// in the host expansion.
	WindowTable(dst []byte, wins []int32, rows, cols, dataBytes int) ([]byte, error)
	// ExpandWindows writes into dst the dense {0,1} uint8 stack of n
	// rows×cols masks (n·rows·cols bytes, in order) from a WindowTable
	// and the window data, both in the backend's memory (staged, say):
	// inside a window each cell is the window's byte, outside 0. It is
	// the host expansion's result to the bit.
	ExpandWindows(n, rows, cols int, table, data, dst Buffer)
}
