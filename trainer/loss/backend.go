package loss

import (
	"fmt"
	"math"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// NumOutputs is the number of head outputs ForwardOn reads and writes
// gradients for. Their buffers are passed in the order of the Outputs
// fields: one-to-many boxes, scores, coefficients; one-to-one boxes,
// scores, coefficients; prototypes; semantic logits.
const NumOutputs = 8

// ResultLen is the length in float32 elements of the result buffer
// ForwardOn writes: the NumComponents loss items, then the total, each a
// float64 stored as two elements (low word first) so that the logged
// numbers are the host Forward's to the bit. ReadResult decodes it.
const ResultLen = 2 * (NumComponents + 1)

// DeviceTargets is a batch's ground truth in a backend's memory, in the
// layout ForwardOn reads: BoxesPerImage (B int32), Classes (N int32),
// Boxes (N×4 float32, xyxy canvas pixels), IsCrowd (the loader's {0,1}
// flags, CrowdBytes bytes: N, or 0 for a batch without the column) and
// Masks (the loader's {0,1} uint8 stack, MaskBytes bytes). The byte
// arrays cross as they are, four to an element, never widened on the
// host. Upload fills it and reuses its buffers from one batch to the
// next; the zero value is ready to use.
type DeviceTargets struct {
	BoxesPerImage, Classes, Boxes backend.Buffer
	IsCrowd, Masks                backend.Buffer
	// CrowdBytes and MaskBytes are the byte lengths of IsCrowd and Masks
	// (N and N·ProtoH·ProtoW for a batch that fits the outputs).
	CrowdBytes, MaskBytes int
	// Kept is, per image, the number of instances the loss keeps (those
	// not flagged iscrowd), as Upload saw them; its maximum is the slot
	// width M of the padded targets a device twin builds.
	Kept []int

	be    backend.Memory
	alloc [5]backend.Buffer // whole allocations behind the five views
	bpi   []int32
	// host is Upload's record of the small host arrays (all but the
	// masks), which a device twin's host-side checks read: the checks
	// Forward makes, without a crossing. recorded says it is current.
	host     Targets
	recorded bool
}

// Upload copies t into be's memory: five uploads, whatever the batch, of
// 4·B + 4·N + 16·N + N + N·Hp·Wp bytes. Buffers of the previous batch are
// reused while large enough. t is not validated here; ForwardOn refuses
// what Forward refuses. Upload also keeps a host copy of everything but
// the masks (20 bytes an instance) and fills Kept, so that a device twin
// checks the batch and sizes its scratch on the host.
func (d *DeviceTargets) Upload(be backend.Memory, t *Targets) {
	if d.be != nil && d.be != be {
		d.Free()
	}
	d.be = be
	d.record(t)
	d.CrowdBytes, d.MaskBytes = len(t.IsCrowd), len(t.Masks)
	d.bpi = d.bpi[:0]
	for _, c := range t.BoxesPerImage {
		d.bpi = append(d.bpi, int32(c))
	}
	d.BoxesPerImage = d.buffer(0, len(d.bpi))
	be.UploadBytes(d.BoxesPerImage, backend.Int32Bytes(d.bpi))
	d.Classes = d.buffer(1, len(t.Classes))
	be.UploadBytes(d.Classes, backend.Int32Bytes(t.Classes))
	d.Boxes = d.buffer(2, len(t.Boxes))
	be.Upload(d.Boxes, t.Boxes)
	d.IsCrowd = d.buffer(3, (len(t.IsCrowd)+3)/4)
	be.UploadBytes(d.IsCrowd, t.IsCrowd)
	d.Masks = d.buffer(4, (len(t.Masks)+3)/4)
	be.UploadBytes(d.Masks, t.Masks)
}

// record keeps the host copy and the kept counts. t may be malformed
// (it is checked later), so nothing here indexes past its arrays.
func (d *DeviceTargets) record(t *Targets) {
	h := &d.host
	h.BoxesPerImage = append(h.BoxesPerImage[:0], t.BoxesPerImage...)
	h.Classes = append(h.Classes[:0], t.Classes...)
	h.Boxes = append(h.Boxes[:0], t.Boxes...)
	crowd := h.IsCrowd[:0]
	h.IsCrowd = nil
	if t.IsCrowd != nil {
		h.IsCrowd = append(crowd, t.IsCrowd...)
	}
	d.Kept = d.Kept[:0]
	k := 0
	for _, n := range t.BoxesPerImage {
		kept := 0
		for range max(n, 0) {
			if k >= len(t.IsCrowd) || t.IsCrowd[k] == 0 {
				kept++
			}
			k++
		}
		d.Kept = append(d.Kept, kept)
	}
	d.recorded = true
}

// buffer returns n elements of allocation i, reallocated when short.
func (d *DeviceTargets) buffer(i, n int) backend.Buffer { return reuse(d.be, &d.alloc[i], n) }

// reuse returns n elements of the allocation *whole, which is replaced
// by a new one on be when absent or short.
func reuse(be backend.Memory, whole *backend.Buffer, n int) backend.Buffer {
	if !whole.Present() || whole.Len < n {
		if whole.Present() {
			be.Free(*whole)
		}
		*whole = be.Alloc(max(n, 1)) // never the zero (absent) Buffer
	}
	return whole.Slice(0, n)
}

// freeAll returns the present allocations to be and forgets them.
func freeAll(be backend.Memory, whole []backend.Buffer) {
	for i, b := range whole {
		if b.Present() {
			be.Free(b)
		}
		whole[i] = backend.Buffer{}
	}
}

// Free returns d's buffers to their backend; d can be reused.
func (d *DeviceTargets) Free() {
	freeAll(d.be, d.alloc[:])
	*d = DeviceTargets{bpi: d.bpi[:0], Kept: d.Kept[:0], host: d.host}
}

// ForwardOn is Forward on a backend's memory, as one fused loss kernel:
// out holds the NumOutputs head outputs (the model's output tensors'
// buffers, in the order NumOutputs names), t the batch's targets, grads
// receives d(Total)/d(output) in the same order (overwritten; all absent
// computes the loss only), and res (at least ResultLen elements) the loss
// items and the total, which ReadResult brings to the host in one
// download. Errors are Forward's (bad sizes, empty boxes).
//
// Where it runs was chosen when the device opened (on, the device's
// Loss). With host kernels (cpu, emu) the kernel is Forward itself, run
// through RunHost on views of the backend's memory: one definition of the
// loss, no copy of the outputs, nothing crossing, results bit-identical
// to Forward on host slices. With DeviceKernels (cuda) it runs the device
// twin: the host checks what Forward checks (sizes, and the targets
// through the record Upload kept) and queues the seven kernels; nothing
// crosses. With neither it takes the host round trip — the eight outputs
// and the five target arrays downloaded, the loss run on the host, the
// eight gradients and the result uploaded — which HostRoundTrips counts.
func (c *Criterion) ForwardOn(on On, g Geometry, out, grads [NumOutputs]backend.Buffer, t *DeviceTargets, res backend.Buffer) error {
	if res.Len < ResultLen {
		return fmt.Errorf("loss: result buffer holds %d elements, want %d", res.Len, ResultLen)
	}
	withGrads := grads[0].Present()
	for _, b := range grads {
		if b.Present() != withGrads {
			return fmt.Errorf("loss: some gradient buffers are absent: pass all %d or none", NumOutputs)
		}
	}
	if t.CrowdBytes < 0 || t.MaskBytes < 0 || 4*t.IsCrowd.Len < t.CrowdBytes || 4*t.Masks.Len < t.MaskBytes {
		return fmt.Errorf("loss: device targets: crowd and mask buffers hold %d and %d bytes, not the %d and %d their counts say",
			4*t.IsCrowd.Len, 4*t.Masks.Len, t.CrowdBytes, t.MaskBytes)
	}
	be := on.Backend
	if hk := on.Host; hk != nil {
		var err error
		hk.RunHost(func(v backend.View) {
			var o [NumOutputs][]float32
			for i, b := range out {
				o[i] = v.Float32(b)
			}
			var gr [NumOutputs][]float32
			if withGrads {
				for i, b := range grads {
					gr[i] = v.Float32(b)
				}
			}
			tg := c.dev.targets(v.Int32(t.BoxesPerImage), v.Int32(t.Classes), v.Float32(t.Boxes),
				v.Bytes(t.IsCrowd)[:t.CrowdBytes], v.Bytes(t.Masks)[:t.MaskBytes])
			err = c.forwardSlices(g, o, gr, tg, withGrads, v.Float32(res))
		})
		return err
	}
	if dk := on.Device; dk != nil {
		return c.forwardTwin(be, dk, g, out, grads, t, res, withGrads)
	}
	return c.roundTrip(be, g, out, grads, t, res, withGrads)
}

// roundTrip is the host path of ForwardOn on a backend without a loss
// kernel: exactly the crossings a device twin removes.
func (c *Criterion) roundTrip(be backend.Backend, g Geometry, out, grads [NumOutputs]backend.Buffer, t *DeviceTargets, res backend.Buffer, withGrads bool) error {
	c.roundTrips++
	h := &c.dev
	var o, gr [NumOutputs][]float32
	for i, b := range out {
		h.outs[i] = growF32(h.outs[i], b.Len)
		be.Download(h.outs[i], b)
		o[i] = h.outs[i]
		if withGrads {
			h.grads[i] = growF32(h.grads[i], grads[i].Len)
			gr[i] = h.grads[i]
		}
	}
	var raw [5][]float32
	for i, b := range [5]backend.Buffer{t.BoxesPerImage, t.Classes, t.Boxes, t.IsCrowd, t.Masks} {
		h.raw[i] = growF32(h.raw[i], b.Len)
		be.Download(h.raw[i], b)
		raw[i] = h.raw[i]
	}
	tg := h.targets(backend.Int32s(raw[0]), backend.Int32s(raw[1]), raw[2],
		backend.Bytes(raw[3])[:t.CrowdBytes], backend.Bytes(raw[4])[:t.MaskBytes])
	var words [ResultLen]float32
	if err := c.forwardSlices(g, o, gr, tg, withGrads, words[:]); err != nil {
		return err
	}
	if withGrads {
		for i, b := range grads {
			be.Upload(b, gr[i])
		}
	}
	be.Upload(res.Slice(0, ResultLen), words[:])
	return nil
}

// HostRoundTrips counts the ForwardOn calls that ran on the host because
// their device opened with neither host kernels nor the loss's device
// twins (each one downloaded the outputs and targets and uploaded the
// gradients).
func (c *Criterion) HostRoundTrips() int { return c.roundTrips }

// forwardSlices runs Forward on the eight output and gradient slices and
// writes the result words.
func (c *Criterion) forwardSlices(g Geometry, o, gr [NumOutputs][]float32, tg *Targets, withGrads bool, res []float32) error {
	out := Outputs{Geometry: g,
		One2Many: Branch{o[0], o[1], o[2]}, One2One: Branch{o[3], o[4], o[5]},
		Proto: o[6], Semseg: o[7]}
	var grads *Grads
	if withGrads {
		grads = &Grads{One2Many: Branch{gr[0], gr[1], gr[2]}, One2One: Branch{gr[3], gr[4], gr[5]},
			Proto: gr[6], Semseg: gr[7]}
	}
	r, err := c.Forward(&out, tg, grads)
	if err != nil {
		return err
	}
	putResult(res, &r)
	return nil
}

// putResult writes r's items and total as ForwardOn's result words.
func putResult(res []float32, r *Result) {
	for k, v := range r.Items {
		putFloat64(res[2*k:], v)
	}
	putFloat64(res[2*NumComponents:], r.Total)
}

// ReadResult brings the result buffer ForwardOn wrote to the host (one
// download of ResultLen elements) and decodes the loss items and the
// total.
func ReadResult(be backend.Memory, res backend.Buffer) (items [NumComponents]float64, total float64) {
	var w [ResultLen]float32
	be.Download(w[:], res.Slice(0, ResultLen))
	return DecodeResult(w)
}

// DecodeResult decodes the loss items and the total from the ResultLen
// words of a result buffer, as they came down (ReadResult, or a
// backend.Fetcher's copy of res.Slice(0, ResultLen)).
func DecodeResult(w [ResultLen]float32) (items [NumComponents]float64, total float64) {
	for k := range items {
		items[k] = getFloat64(w[2*k:])
	}
	return items, getFloat64(w[2*NumComponents:])
}

// deviceScratch is the host side of ForwardOn: the targets' int slice and,
// for the round trip, host copies of everything that crossed.
type deviceScratch struct {
	tg    Targets
	outs  [NumOutputs][]float32
	grads [NumOutputs][]float32
	raw   [5][]float32 // the five target arrays, as downloaded
}

// targets assembles device-resident target arrays as Targets; only the
// image counts are converted (B values), the rest are aliased.
func (h *deviceScratch) targets(bpi, classes []int32, boxes []float32, crowd, masks []byte) *Targets {
	h.tg.BoxesPerImage = h.tg.BoxesPerImage[:0]
	for _, c := range bpi {
		h.tg.BoxesPerImage = append(h.tg.BoxesPerImage, int(c))
	}
	h.tg.Classes, h.tg.Boxes, h.tg.IsCrowd, h.tg.Masks = classes, boxes, crowd, masks
	if len(crowd) == 0 {
		h.tg.IsCrowd = nil // no flags: as a batch without the column
	}
	return &h.tg
}

func putFloat64(w []float32, v float64) {
	b := math.Float64bits(v)
	w[0], w[1] = math.Float32frombits(uint32(b)), math.Float32frombits(uint32(b>>32))
}

func getFloat64(w []float32) float64 {
	return math.Float64frombits(uint64(math.Float32bits(w[0])) | uint64(math.Float32bits(w[1]))<<32)
}
