package device

import (
	"time"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// HostStager is the backend.Stager of a device whose kernels run on host
// memory: each Stage copies its parts with UploadBytes, one counted
// upload a part as the cuda backend's staging counts them, into one of
// two slots reused from batch to batch (grown when short). Kernels there
// run as they are queued, so nothing waits and StageDone has nothing to
// mark. Not safe for concurrent use.
type HostStager struct {
	be    backend.Memory
	slots [2]backend.Buffer
	next  int
}

// NewHostStager returns a HostStager on be.
func NewHostStager(be backend.Memory) *HostStager { return &HostStager{be: be} }

// Stage implements backend.Stager.
func (s *HostStager) Stage(parts ...[]byte) ([]backend.Buffer, error) {
	slot := &s.slots[s.next]
	s.next ^= 1
	n := 0
	for _, p := range parts {
		n += (len(p) + 3) / 4
	}
	if !slot.Present() || slot.Len < n {
		if slot.Present() {
			s.be.Free(*slot)
		}
		*slot = s.be.Alloc(max(n, 1)) // never the zero (absent) Buffer
	}
	out := make([]backend.Buffer, len(parts))
	off := 0
	for k, p := range parts {
		out[k] = slot.Slice(off, off+(len(p)+3)/4)
		s.be.UploadBytes(out[k], p)
		off += out[k].Len
	}
	return out, nil
}

// StageDone implements backend.Stager: the work is done already.
func (s *HostStager) StageDone() {}

// FreeStaged implements backend.Stager.
func (s *HostStager) FreeStaged() {
	for i, b := range s.slots {
		if b.Present() {
			s.be.Free(b)
		}
		s.slots[i] = backend.Buffer{}
	}
}

// StageIdle implements backend.Stager: zero, as nothing runs beside the
// host.
func (s *HostStager) StageIdle() time.Duration { return 0 }
