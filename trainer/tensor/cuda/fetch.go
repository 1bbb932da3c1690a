package cuda

import (
	"errors"
	"fmt"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

var _ backend.Fetcher = (*Backend)(nil)

// fetching is a Backend's side of backend.Fetcher: a queue of its own
// (opened on the first Fetch) and the pinned result slots not in use. A
// training step has one fetch on its way at a time, so two slots serve it.
type fetching struct {
	q    stageQueue
	free []*fetchSlot
}

// fetchSlot is one fetch: pinned host memory the copy lands in and the
// event recorded after it on the compute stream.
type fetchSlot struct {
	be   *Backend
	host pinnedMem
	done event
	n    int // values in flight; -1 once read
}

// Fetch queues the copy of src into pinned memory on the compute stream,
// behind the work queued so far, and returns at once (backend.Fetcher).
// It counts one download of src's bytes, as Download does.
func (be *Backend) Fetch(src backend.Buffer) (backend.Fetched, error) {
	f := &be.fetching
	if f.q == nil {
		q, err := be.e.stageQueue()
		if err != nil {
			return nil, fmt.Errorf("cuda backend: fetch: %w", err)
		}
		f.q = q
	}
	bytes := 4 * src.Len
	var s *fetchSlot
	for i, c := range f.free {
		if len(c.host.Bytes()) >= bytes {
			s = c
			f.free = append(f.free[:i], f.free[i+1:]...)
			break
		}
	}
	if s == nil {
		host, err := f.q.pinned(max(bytes, 64))
		if err != nil {
			return nil, fmt.Errorf("cuda backend: fetch: %w", err)
		}
		ev, err := f.q.newEvent(false)
		if err != nil {
			host.Free()
			return nil, fmt.Errorf("cuda backend: fetch: %w", err)
		}
		s = &fetchSlot{be: be, host: host, done: ev}
	}
	be.downs.Add(1)
	be.downBytes.Add(int64(bytes))
	s.n = src.Len
	if err := f.q.copyDown(s.host, be.ptr(src), bytes, s.done); err != nil {
		f.free = append(f.free, s)
		return nil, fmt.Errorf("cuda backend: fetch: %w", err)
	}
	return s, nil
}

// Wait waits on the host for the copy's event, not for the work queued
// after it, and copies the values out of pinned memory.
func (s *fetchSlot) Wait(dst []float32) error {
	if s.n < 0 {
		return errors.New("cuda backend: fetched values read twice")
	}
	if len(dst) != s.n {
		return fmt.Errorf("cuda backend: fetched %d values, read into %d", s.n, len(dst))
	}
	f := &s.be.fetching
	err := f.q.syncEvent(s.done)
	if err == nil {
		copy(backend.Bytes(dst), s.host.Bytes()[:4*s.n])
	}
	s.n = -1
	f.free = append(f.free, s)
	return err
}

// closeFetching waits for the copies on their way and frees the slots and
// the queue. Fetched values not yet read are lost.
func (be *Backend) closeFetching() error {
	f := &be.fetching
	if f.q == nil {
		return nil
	}
	err := f.q.syncAll()
	for _, s := range f.free {
		err = errors.Join(err, f.q.destroyEvent(s.done), s.host.Free())
	}
	err = errors.Join(err, f.q.close())
	*f = fetching{}
	return err
}
