package backend

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
}
