package loss

import (
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// StagedParts returns t's five target arrays as the bytes DeviceTargets
// holds them, in the order of its fields BoxesPerImage (int32), Classes
// (int32), Boxes (float32), IsCrowd and Masks (the loader's bytes): the
// parts a backend that stages a batch (backend.Stager) copies up as they
// are, never widened on the host. Only the B image counts are converted,
// into bpi's storage, which is returned for reuse; the other parts alias
// t.
func StagedParts(t *Targets, bpi []int32) (parts [5][]byte, scratch []int32) {
	bpi = bpi[:0]
	for _, c := range t.BoxesPerImage {
		bpi = append(bpi, int32(c))
	}
	return [5][]byte{backend.Int32Bytes(bpi), backend.Int32Bytes(t.Classes), backend.Bytes(t.Boxes), t.IsCrowd, t.Masks}, bpi
}

// Adopt makes d the targets of t whose five arrays already lie in be's
// memory as bufs, in StagedParts' order and with its byte layout (each
// buffer ⌈len/4⌉ elements of its part): what Upload leaves, without a
// copy. d does not own bufs — Free leaves them alone — and refers to them
// until the next Upload or Adopt; buffers d allocated before are kept for
// a later Upload.
func (d *DeviceTargets) Adopt(be backend.Memory, bufs [5]backend.Buffer, t *Targets) {
	d.AdoptExpanded(be, bufs, t, len(t.Masks))
}

// AdoptExpanded is Adopt for targets whose masks did not come with t
// (batch.InstancesWithoutMasks): bufs[4] is the dense {0,1} stack already in be's
// memory — expanded there from the batch's windows — and maskBytes its
// length in bytes; t.Masks is not read. ForwardOn checks maskBytes
// against the instances and the prototype grid as it checks an uploaded
// stack.
func (d *DeviceTargets) AdoptExpanded(be backend.Memory, bufs [5]backend.Buffer, t *Targets, maskBytes int) {
	if d.be != nil && d.be != be {
		d.Free()
	}
	d.be = be
	d.record(t) // the host copy and kept counts the device twin checks
	d.CrowdBytes, d.MaskBytes = len(t.IsCrowd), maskBytes
	d.BoxesPerImage, d.Classes, d.Boxes, d.IsCrowd, d.Masks = bufs[0], bufs[1], bufs[2], bufs[3], bufs[4]
}
