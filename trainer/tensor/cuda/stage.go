package cuda

import (
	"fmt"
	"time"
)

// stager uploads batches to the device through pinned memory on a copy
// stream of its own, double-buffered: while the compute stream runs the
// step on one batch, the next one's host-to-device copies run beside it.
// Each batch's buffers (images, boxes, classes, offsets, masks…) go up as
// they are, in one pinned slot and one device allocation.
//
// Use: st := Stage(parts...), launch the step on st.Parts (the compute
// stream waits for the copies on the device, not the host), then
// st.Done() once the step's work is queued. A Stager is not safe for
// concurrent use.
type stager struct {
	q        stageQueue
	slots    [2]stageSlot
	next     int
	uploaded int64
	// seq numbers the batches staged (from 1); idle sums the compute
	// stream's gaps between consecutive batches (see Idle).
	seq  int
	idle time.Duration
}

// stageQueue is what a Stager runs on: the compute stream's memory, a
// copy stream beside it, pinned host memory and the events that order the
// two streams. A Device implements it (deviceQueue); so does the CPU
// harness in the tests, which records the events' order.
type stageQueue interface {
	// alloc and free are device memory, ordered on the compute stream.
	alloc(bytes int) (devptr, error)
	free(p devptr) error
	pinned(n int) (pinnedMem, error)
	// newEvent makes an event; timing ones can be given to elapsed.
	newEvent(timing bool) (event, error)
	destroyEvent(e event) error
	// elapsed is the time between two completed timing events.
	elapsed(start, end event) (time.Duration, error)
	// copyUp queues on the copy stream: a wait for after (none when 0),
	// the copies of src's bytes [Off, Off+N) to Dst, a record of done; and
	// makes the compute stream wait for done.
	copyUp(after, done event, src pinnedMem, copies []stageCopy) error
	// copyDown queues on the compute stream the copy of n bytes at src
	// into dst and a record of done after it.
	copyDown(dst pinnedMem, src devptr, n int, done event) error
	// record marks e at the current end of the compute stream.
	record(e event) error
	// syncEvent waits on the host until e has completed.
	syncEvent(e event) error
	// syncAll waits on the host for both streams.
	syncAll() error
	// close waits for the copy stream and destroys it.
	close() error
}

// pinnedMem is page-locked host memory a copy may read asynchronously.
type pinnedMem interface {
	Bytes() []byte
	Free() error
}

// stageCopy is one part's copy from a pinned slot to the device.
type stageCopy struct {
	Dst    devptr
	Off, N int
}

type stageSlot struct {
	host     pinnedMem
	dev      devptr
	devCap   int
	copied   event // on the copy stream, after the slot's copies
	consumed event // on the compute stream, after the step that read it
	filled   bool  // the slot holds a batch (its copies were queued)
	done     bool  // consumed is recorded after that batch's step
	// start and end are timing events on the compute stream: where the
	// slot's latest batch's work begins (after its copies) and where the
	// step that read it ends, for batches startSeq and endSeq (0: none).
	start, end       event
	startSeq, endSeq int
}

// staged is one uploaded batch.
type staged struct {
	// Parts are the device addresses of the parts given to Stage, in order.
	Parts []devptr
	// Base and Cap are the slot's device allocation, which Parts lie in;
	// it changes only when a larger batch grows the slot.
	Base devptr
	Cap  int
	s    *stager
	slot *stageSlot
	seq  int
}

// stageAlign keeps every part 256-byte aligned on the device, as cuBLAS
// and vectorised loads prefer.
const stageAlign = 256

// NewStager creates the copy stream and the slots' events.
func (d *device) NewStager() (*stager, error) {
	q, err := newDeviceQueue(d)
	if err != nil {
		return nil, err
	}
	return newStager(q)
}

func newStager(q stageQueue) (*stager, error) {
	s := &stager{q: q}
	for i := range s.slots {
		sl := &s.slots[i]
		var err error
		for _, e := range []struct {
			ev     *event
			timing bool
		}{{&sl.copied, false}, {&sl.consumed, false}, {&sl.start, true}, {&sl.end, true}} {
			if *e.ev, err = q.newEvent(e.timing); err != nil {
				return nil, err
			}
		}
	}
	return s, nil
}

// Uploaded is the number of bytes Stage has copied to the device.
func (s *stager) Uploaded() int64 { return s.uploaded }

// Stage copies parts into the next pinned slot and queues their upload on
// the copy stream; the compute stream waits for it. It blocks only while
// that slot's previous copies (two batches ago) are still running, or —
// when that batch was never marked Done — until the compute stream is
// idle.
func (s *stager) Stage(parts ...[]byte) (*staged, error) {
	sl := &s.slots[s.next]
	s.next ^= 1
	offs := make([]int, len(parts))
	total := 0
	for i, p := range parts {
		offs[i] = total
		total += (len(p) + stageAlign - 1) / stageAlign * stageAlign
	}
	total = max(total, stageAlign)
	var after event
	if sl.filled {
		// The pinned bytes are free once the copies that read them are done.
		if err := s.q.syncEvent(sl.copied); err != nil {
			return nil, err
		}
		if sl.done {
			// The device buffer is free once the step that read it is
			// done: the copy stream waits for it on the device.
			after = sl.consumed
		} else if err := s.q.syncAll(); err != nil {
			return nil, err
		}
	}
	if err := s.grow(sl, total); err != nil {
		return nil, err
	}
	hb := sl.host.Bytes()
	copies := make([]stageCopy, 0, len(parts))
	for i, p := range parts {
		copy(hb[offs[i]:], p)
		if len(p) > 0 {
			copies = append(copies, stageCopy{Dst: sl.dev.Add(offs[i]), Off: offs[i], N: len(p)})
		}
	}
	if err := s.q.copyUp(after, sl.copied, sl.host, copies); err != nil {
		return nil, fmt.Errorf("stage %d parts (%d bytes): %w", len(parts), total, err)
	}
	s.seq++
	if err := s.q.record(sl.start); err != nil {
		return nil, err
	}
	sl.filled, sl.done, sl.startSeq = true, false, s.seq
	st := &staged{Parts: make([]devptr, len(parts)), Base: sl.dev, Cap: sl.devCap, s: s, slot: sl, seq: s.seq}
	for i := range parts {
		st.Parts[i] = sl.dev.Add(offs[i])
		s.uploaded += int64(len(parts[i]))
	}
	return st, nil
}

// grow makes the slot hold n bytes on both sides. Growing waits for the
// device (it happens for the first batches only: capacities double).
func (s *stager) grow(sl *stageSlot, n int) error {
	if sl.host != nil && sl.devCap >= n {
		return nil
	}
	c := max(n, 2*sl.devCap)
	if err := s.q.syncAll(); err != nil {
		return err
	}
	if err := s.freeSlot(sl); err != nil {
		return err
	}
	h, err := s.q.pinned(c)
	if err != nil {
		return err
	}
	p, err := s.q.alloc(c)
	if err != nil {
		h.Free()
		return err
	}
	sl.host, sl.dev, sl.devCap = h, p, c
	// The allocation is ordered on the compute stream; the copy stream
	// must see it complete.
	return s.q.syncAll()
}

// freeSlot returns a slot's memory; the streams must be idle.
func (s *stager) freeSlot(sl *stageSlot) error {
	if sl.host == nil {
		return nil
	}
	err := sl.host.Free()
	if e := s.q.free(sl.dev); err == nil {
		err = e
	}
	sl.host, sl.dev, sl.devCap, sl.filled, sl.done = nil, 0, 0, false, false
	return err
}

// Done marks the batch consumed once the compute stream reaches this
// point: call it after queueing the step that reads Parts.
func (st *staged) Done() error {
	sl, s := st.slot, st.s
	if err := s.q.record(sl.consumed); err != nil {
		return err
	}
	sl.done = true
	// The slot's end event still marks the end of the batch before the
	// previous one, whose successor's start the other slot holds: that
	// gap is long past on the device, so reading it waits for nothing.
	if err := s.gap(sl, s.other(sl)); err != nil {
		return err
	}
	if err := s.q.record(sl.end); err != nil {
		return err
	}
	sl.endSeq = st.seq
	return nil
}

func (s *stager) other(sl *stageSlot) *stageSlot {
	if sl == &s.slots[0] {
		return &s.slots[1]
	}
	return &s.slots[0]
}

// gap adds to Idle the compute stream's idle time between the end of the
// batch whose step ended at prev.end and the start of the next batch's
// work at next.start, when next holds that batch: the host's time
// between queueing the two steps, and the wait for the next batch's
// copies, insofar as the device had nothing else to run.
func (s *stager) gap(prev, next *stageSlot) error {
	if prev.endSeq == 0 || next.startSeq != prev.endSeq+1 {
		return nil
	}
	if err := s.q.syncEvent(next.start); err != nil {
		return err
	}
	d, err := s.q.elapsed(prev.end, next.start)
	if err != nil {
		return err
	}
	s.idle += max(d, 0)
	prev.endSeq = 0
	return nil
}

// Idle is the time the compute stream sat idle between the work of
// consecutive staged batches — from the end of the step Done marked to
// the start of the next batch's work, its copies included — summed over
// the batches whose successor's work has begun (all of them once Close
// has run): the device's wait for data, zero when the host and the copy
// stream keep ahead of it.
func (s *stager) Idle() time.Duration { return s.idle }

// Close waits for both streams, adds the last gaps to Idle, and frees
// the slots.
func (s *stager) Close() error {
	err := s.q.syncAll()
	if err == nil {
		for i := range s.slots {
			if e := s.gap(&s.slots[i], &s.slots[1-i]); err == nil {
				err = e
			}
		}
	}
	for i := range s.slots {
		sl := &s.slots[i]
		if e := s.freeSlot(sl); err == nil {
			err = e
		}
		for _, e := range []event{sl.copied, sl.consumed, sl.start, sl.end} {
			s.q.destroyEvent(e)
		}
	}
	if e := s.q.close(); err == nil {
		err = e
	}
	return err
}

// deviceQueue is a Stager's queue on a GPU: the device's compute stream
// and a copy stream of the Stager's own.
type deviceQueue struct {
	d    *device
	copy stream
}

func newDeviceQueue(d *device) (*deviceQueue, error) {
	cs, err := d.NewStream()
	if err != nil {
		return nil, err
	}
	return &deviceQueue{d: d, copy: cs}, nil
}

func (q *deviceQueue) alloc(bytes int) (devptr, error)     { return q.d.Alloc(bytes) }
func (q *deviceQueue) free(p devptr) error                 { return q.d.Free(p) }
func (q *deviceQueue) pinned(n int) (pinnedMem, error)     { return q.d.AllocHost(n) }
func (q *deviceQueue) newEvent(timing bool) (event, error) { return q.d.NewEvent(timing) }
func (q *deviceQueue) destroyEvent(e event) error          { return q.d.DestroyEvent(e) }
func (q *deviceQueue) record(e event) error                { return q.d.Record(e, q.d.stream) }
func (q *deviceQueue) syncEvent(e event) error             { return q.d.SyncEvent(e) }

func (q *deviceQueue) elapsed(start, end event) (time.Duration, error) {
	ms, err := q.d.Elapsed(start, end)
	return time.Duration(float64(ms) * float64(time.Millisecond)), err
}

func (q *deviceQueue) copyUp(after, done event, src pinnedMem, copies []stageCopy) error {
	h, ok := src.(*hostBuffer)
	if !ok {
		return fmt.Errorf("cuda: staging from %T, not pinned memory", src)
	}
	d := q.d
	return d.Do(func() error {
		drv := d.drv
		if after != 0 {
			if err := drv.check("cuStreamWaitEvent", ccall(drv.cuStreamWaitEvent, uintptr(q.copy), uintptr(after), 0)); err != nil {
				return err
			}
		}
		for _, c := range copies {
			if err := drv.check("cuMemcpyHtoDAsync", ccall(drv.cuMemcpyHtoDAsync, uintptr(c.Dst),
				h.addr+uintptr(c.Off), uintptr(c.N), uintptr(q.copy))); err != nil {
				return err
			}
		}
		if err := drv.check("cuEventRecord", ccall(drv.cuEventRecord, uintptr(done), uintptr(q.copy))); err != nil {
			return err
		}
		return drv.check("cuStreamWaitEvent", ccall(drv.cuStreamWaitEvent, uintptr(d.stream), uintptr(done), 0))
	})
}

func (q *deviceQueue) copyDown(dst pinnedMem, src devptr, n int, done event) error {
	h, ok := dst.(*hostBuffer)
	if !ok || n > h.n {
		return fmt.Errorf("cuda: copy of %d bytes into %T, not pinned memory that holds them", n, dst)
	}
	d := q.d
	return d.Do(func() error {
		drv := d.drv
		if n > 0 {
			if err := drv.check("cuMemcpyDtoHAsync", ccall(drv.cuMemcpyDtoHAsync, h.addr, uintptr(src), uintptr(n), uintptr(d.stream))); err != nil {
				return err
			}
		}
		return drv.check("cuEventRecord", ccall(drv.cuEventRecord, uintptr(done), uintptr(d.stream)))
	})
}

func (q *deviceQueue) syncAll() error {
	if err := q.d.Sync(); err != nil {
		return err
	}
	return q.d.Do(func() error {
		return q.d.drv.check("cuStreamSynchronize", ccall(q.d.drv.cuStreamSynchronize, uintptr(q.copy)))
	})
}

func (q *deviceQueue) close() error {
	if err := q.syncAll(); err != nil {
		return err
	}
	return q.d.DestroyStream(q.copy)
}
