package cuda

import (
	"fmt"
)

// Stager uploads batches to the device through pinned memory on a copy
// stream of its own, double-buffered: while the compute stream runs the
// step on one batch, the next one's host-to-device copies run beside it.
// Each batch's buffers (images, boxes, classes, offsets, masks…) go up as
// they are, in one pinned slot and one device allocation.
//
// Use: st := Stage(parts...), launch the step on st.Parts (the compute
// stream waits for the copies on the device, not the host), then
// st.Done() once the step's work is queued. A Stager is not safe for
// concurrent use.
type Stager struct {
	d        *Device
	copy     Stream
	slots    [2]stageSlot
	next     int
	uploaded int64
}

type stageSlot struct {
	host     *HostBuffer
	dev      Ptr
	devCap   int
	copied   Event // on the copy stream, after the slot's copies
	consumed Event // on the compute stream, after the step that read it
	used     bool
}

// Staged is one uploaded batch.
type Staged struct {
	// Parts are the device addresses of the parts given to Stage, in order.
	Parts []Ptr
	s     *Stager
	slot  *stageSlot
}

// stageAlign keeps every part 256-byte aligned on the device, as cuBLAS
// and vectorised loads prefer.
const stageAlign = 256

// NewStager creates the copy stream and the slots' events.
func (d *Device) NewStager() (*Stager, error) {
	cs, err := d.NewStream()
	if err != nil {
		return nil, err
	}
	s := &Stager{d: d, copy: cs}
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.copied, err = d.NewEvent(false); err != nil {
			return nil, err
		}
		if sl.consumed, err = d.NewEvent(false); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Uploaded is the number of bytes Stage has copied to the device.
func (s *Stager) Uploaded() int64 { return s.uploaded }

// Stage copies parts into the next pinned slot and queues their upload on
// the copy stream; the compute stream waits for it. It blocks only while
// that slot's previous copies (two batches ago) are still running.
func (s *Stager) Stage(parts ...[]byte) (*Staged, error) {
	sl := &s.slots[s.next]
	s.next ^= 1
	offs := make([]int, len(parts))
	total := 0
	for i, p := range parts {
		offs[i] = total
		total += (len(p) + stageAlign - 1) / stageAlign * stageAlign
	}
	total = max(total, stageAlign)
	if sl.used {
		// The pinned bytes are free once the copies that read them are done.
		if err := s.d.SyncEvent(sl.copied); err != nil {
			return nil, err
		}
	}
	if err := s.grow(sl, total); err != nil {
		return nil, err
	}
	hb := sl.host.Bytes()
	for i, p := range parts {
		copy(hb[offs[i]:], p)
	}
	d := s.d
	err := d.Do(func() error {
		drv := d.drv
		if sl.used {
			// The device buffer is free once the step that read it is done.
			if err := drv.check("cuStreamWaitEvent", ccall(drv.cuStreamWaitEvent, uintptr(s.copy), uintptr(sl.consumed), 0)); err != nil {
				return err
			}
		}
		for i, p := range parts {
			if len(p) == 0 {
				continue
			}
			if err := drv.check("cuMemcpyHtoDAsync", ccall(drv.cuMemcpyHtoDAsync, uintptr(sl.dev.Add(offs[i])),
				sl.host.addr+uintptr(offs[i]), uintptr(len(p)), uintptr(s.copy))); err != nil {
				return err
			}
		}
		if err := drv.check("cuEventRecord", ccall(drv.cuEventRecord, uintptr(sl.copied), uintptr(s.copy))); err != nil {
			return err
		}
		return drv.check("cuStreamWaitEvent", ccall(drv.cuStreamWaitEvent, uintptr(d.stream), uintptr(sl.copied), 0))
	})
	if err != nil {
		return nil, fmt.Errorf("stage %d parts (%d bytes): %w", len(parts), total, err)
	}
	st := &Staged{Parts: make([]Ptr, len(parts)), s: s, slot: sl}
	for i := range parts {
		st.Parts[i] = sl.dev.Add(offs[i])
		s.uploaded += int64(len(parts[i]))
	}
	return st, nil
}

// grow makes the slot hold n bytes on both sides. Growing waits for the
// device (it happens for the first batches only: capacities double).
func (s *Stager) grow(sl *stageSlot, n int) error {
	if sl.host != nil && sl.devCap >= n {
		return nil
	}
	c := max(n, 2*sl.devCap)
	if err := s.d.Sync(); err != nil {
		return err
	}
	if err := s.d.Do(func() error {
		return s.d.drv.check("cuStreamSynchronize", ccall(s.d.drv.cuStreamSynchronize, uintptr(s.copy)))
	}); err != nil {
		return err
	}
	if sl.host != nil {
		if err := sl.host.Free(); err != nil {
			return err
		}
		if err := s.d.Free(sl.dev); err != nil {
			return err
		}
	}
	h, err := s.d.AllocHost(c)
	if err != nil {
		return err
	}
	p, err := s.d.Alloc(c)
	if err != nil {
		return err
	}
	sl.host, sl.dev, sl.devCap = h, p, c
	// The allocation is ordered on the compute stream; the copy stream
	// must see it complete.
	return s.d.Sync()
}

// Done marks the batch consumed once the compute stream reaches this
// point: call it after queueing the step that reads Parts.
func (st *Staged) Done() error {
	st.slot.used = true
	return st.s.d.Record(st.slot.consumed, st.s.d.stream)
}

// Close waits for both streams and frees the slots.
func (s *Stager) Close() error {
	if err := s.d.Sync(); err != nil {
		return err
	}
	err := s.d.DestroyStream(s.copy)
	for i := range s.slots {
		sl := &s.slots[i]
		if sl.host != nil {
			_ = sl.host.Free()
			_ = s.d.Free(sl.dev)
		}
		_ = s.d.DestroyEvent(sl.copied)
		_ = s.d.DestroyEvent(sl.consumed)
	}
	return err
}
