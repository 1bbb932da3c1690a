package cuda

import (
	"fmt"
	"time"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

var _ backend.Stager = (*Backend)(nil)

// staging is a Backend's side of backend.Stager: its Stager, opened on the
// first Stage, the latest batch (for StageDone) and a buffer handle per
// slot allocation, made again when a slot grows.
type staging struct {
	s    *stager
	last *staged
	mems [2]*mem
	idle time.Duration // of the Stagers closed so far
}

// Stage copies parts up through the double-buffered Stager on the
// engine's copy stream (backend.Stager). Each part counts as one upload of
// its bytes, as UploadBytes counts it.
func (be *Backend) Stage(parts ...[]byte) ([]backend.Buffer, error) {
	g := &be.staging
	if g.s == nil {
		q, err := be.e.stageQueue()
		if err != nil {
			return nil, fmt.Errorf("cuda backend: staging: %w", err)
		}
		if g.s, err = newStager(q); err != nil {
			q.close()
			return nil, fmt.Errorf("cuda backend: staging: %w", err)
		}
	}
	st, err := g.s.Stage(parts...)
	if err != nil {
		return nil, fmt.Errorf("cuda backend: %w", err)
	}
	g.last = st
	i := 0
	if st.slot == &g.s.slots[1] {
		i = 1
	}
	m := g.mems[i]
	if m == nil || m.p != st.Base {
		if m != nil {
			m.p = 0 // buffers of the freed allocation no longer resolve
		}
		m = &mem{be: be, p: st.Base, n: st.Cap / 4}
		g.mems[i] = m
	}
	out := make([]backend.Buffer, len(parts))
	for k, p := range parts {
		be.ups.Add(1)
		be.upBytes.Add(int64(len(p)))
		out[k] = backend.Buffer{Mem: m, Off: int(st.Parts[k]-st.Base) / 4, Len: (len(p) + 3) / 4}
	}
	return out, nil
}

// StageDone records, on the compute stream, that the work queued so far
// is the last to read the latest Stage's buffers.
func (be *Backend) StageDone() {
	g := &be.staging
	if g.last == nil {
		return
	}
	orPanic("stage done", g.last.Done())
	g.last = nil
}

// FreeStaged waits for both streams and returns the slots' memory; the
// next Stage opens the Stager again.
func (be *Backend) FreeStaged() { orPanic("free staged", be.closeStaging()) }

func (be *Backend) closeStaging() error {
	g := &be.staging
	if g.s == nil {
		return nil
	}
	err := g.s.Close()
	for _, m := range g.mems {
		if m != nil {
			m.p = 0
		}
	}
	*g = staging{idle: g.idle + g.s.Idle()}
	return err
}

// StageIdle is the compute stream's idle time between consecutive staged
// batches (Stager.Idle), over every Stager this backend has had.
func (be *Backend) StageIdle() time.Duration {
	g := &be.staging
	if g.s == nil {
		return g.idle
	}
	return g.idle + g.s.Idle()
}
