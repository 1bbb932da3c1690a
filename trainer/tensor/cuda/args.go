package cuda

import "github.com/segpipe/segpipe/trainer/internal/cudalaunch"

// devptr is a device address (CUdeviceptr); arg is one kernel argument.
// Both are cudalaunch's, so that a package owning kernels of its own
// (trainer/loss/losscuda) builds the same values this package lays out.
type (
	devptr = cudalaunch.Ptr
	arg    = cudalaunch.Arg
)

func ptrArg(p devptr) arg    { return cudalaunch.PtrArg(p) }
func i32Arg(v int) arg       { return cudalaunch.Int32Arg(v) }
func i64Arg(v int) arg       { return cudalaunch.Int64Arg(v) }
func f32Arg(v float32) arg   { return cudalaunch.Float32Arg(v) }
func structArg(b []byte) arg { return cudalaunch.StructArg(b) }
func boolArg(v bool) arg {
	if v {
		return i32Arg(1)
	}
	return i32Arg(0)
}

// maxArgBytes bounds one launch's argument block: a table of pointers and
// the values they point to (the driver copies both at launch).
const maxArgBytes = 4096
