//go:build !segpipe_poison

package cpu

// poison fills buffers handed out with unspecified contents with NaN (see
// Backend.Alloc); on only in builds with the segpipe_poison tag.
const poison = false
