package loss

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// noHostKernels hides the emulated device's RunHost: a backend without a
// loss kernel, as the CUDA backend is until its loss twin lands, so
// ForwardOn takes the host round trip.
type noHostKernels struct{ backend.Backend }

type namedBackend struct {
	name string
	be   backend.Backend
}

// lossBackends are the backends the loss runs on: cpu and emu through
// RunHost, the device path through Go-written twins (goTwin), and the
// host round trip of a backend without a loss kernel.
func lossBackends() []namedBackend {
	return []namedBackend{{"cpu", cpu.New()}, {"emu", cpu.NewEmulated()}, {"twin", newGoTwin()},
		{"roundtrip", noHostKernels{cpu.NewEmulated()}}}
}

// outputSlices lists o's arrays in the NumOutputs order.
func outputSlices(o *Outputs) [NumOutputs][]float32 {
	return [NumOutputs][]float32{o.One2Many.Boxes, o.One2Many.Scores, o.One2Many.Coef,
		o.One2One.Boxes, o.One2One.Scores, o.One2One.Coef, o.Proto, o.Semseg}
}

func gradSlices(g *Grads) [NumOutputs][]float32 {
	return [NumOutputs][]float32{g.One2Many.Boxes, g.One2Many.Scores, g.One2Many.Coef,
		g.One2One.Boxes, g.One2One.Scores, g.One2One.Coef, g.Proto, g.Semseg}
}

// onBackend holds one backend's copy of a case and runs ForwardOn on it.
type onBackend struct {
	be         backend.Backend
	out, grads [NumOutputs]backend.Buffer
	res        backend.Buffer
	tg         DeviceTargets
}

func newOnBackend(be backend.Backend, out *Outputs) *onBackend {
	d := &onBackend{be: be, res: be.Alloc(ResultLen)}
	for i, s := range outputSlices(out) {
		d.out[i] = be.Alloc(len(s))
		be.Upload(d.out[i], s)
		d.grads[i] = be.Alloc(len(s))
	}
	return d
}

// run uploads tg, runs the loss and brings back its items, total and
// (when grads) every gradient.
func (d *onBackend) run(c *Criterion, g Geometry, tg *Targets, grads bool) ([NumComponents]float64, float64, *Grads, error) {
	d.tg.Upload(d.be, tg)
	gb := d.grads
	if !grads {
		gb = [NumOutputs]backend.Buffer{}
	}
	if err := c.ForwardOn(onOf(d.be), g, d.out, gb, &d.tg, d.res); err != nil {
		return [NumComponents]float64{}, 0, nil, err
	}
	items, total := ReadResult(d.be, d.res)
	if !grads {
		return items, total, nil, nil
	}
	var h [NumOutputs][]float32
	for i, b := range d.grads {
		h[i] = make([]float32, b.Len)
		d.be.Download(h[i], b)
	}
	return items, total, &Grads{One2Many: Branch{h[0], h[1], h[2]}, One2One: Branch{h[3], h[4], h[5]}, Proto: h[6], Semseg: h[7]}, nil
}

func sameBits(a, b []float32) int {
	if len(a) != len(b) {
		return 0
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestForwardOnIsForward runs the loss through ForwardOn on every backend
// and requires the host Forward's items, total and gradients to the bit —
// with crowd flags, without instances, and with buffers reused across
// batches whose instance counts grow and shrink.
func TestForwardOnIsForward(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var cases []*Targets
	var out *Outputs
	for _, counts := range [][]int{{3, 5}, {0, 0}, {1, 7}, {2, 1}} {
		o, tg := randomCase(rng, counts)
		if out == nil {
			out = o
		}
		if counts[1] == 7 {
			tg.IsCrowd = make([]uint8, len(tg.Classes))
			tg.IsCrowd[2], tg.IsCrowd[5] = 1, 1
		}
		cases = append(cases, tg)
	}
	for _, nb := range lossBackends() {
		t.Run(nb.name, func(t *testing.T) {
			ref, _ := NewCriterion(DefaultConfig(10))
			c, _ := NewCriterion(DefaultConfig(10))
			d := newOnBackend(nb.be, out)
			for k, tg := range cases {
				want := out.Grads()
				wres, err := ref.Forward(out, tg, want)
				if err != nil {
					t.Fatal(err)
				}
				items, total, got, err := d.run(c, out.Geometry, tg, true)
				if err != nil {
					t.Fatalf("case %d: %v", k, err)
				}
				if items != wres.Items || math.Float64bits(total) != math.Float64bits(wres.Total) {
					t.Errorf("case %d: items %v total %v, want %v %v", k, items, total, wres.Items, wres.Total)
				}
				ws, gs := gradSlices(want), gradSlices(got)
				for i := range ws {
					if j := sameBits(gs[i], ws[i]); j >= 0 {
						t.Errorf("case %d: gradient %d differs at %d", k, i, j)
					}
				}
				// The loss alone, without gradient buffers.
				items, total, _, err = d.run(c, out.Geometry, tg, false)
				if err != nil || items != wres.Items || total != wres.Total {
					t.Errorf("case %d without gradients: %v %v %v", k, items, total, err)
				}
				if k == 1 {
					d.tg.Free() // freed targets upload again from scratch
				}
			}
		})
	}
}

// TestForwardOnTransfers holds the crossings of the loss on a device: on
// emu the kernel moves nothing and the result is one download of
// ResultLen floats; the targets are five uploads of their exact bytes; a
// backend without a loss kernel pays the counted round trip.
func TestForwardOnTransfers(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	out, tg := randomCase(rng, []int{3, 4})
	tg.IsCrowd = make([]uint8, len(tg.Classes))
	n, B := int64(len(tg.Classes)), int64(len(tg.BoxesPerImage))
	targetBytes := 4*B + 4*n + 16*n + n + int64(len(tg.Masks))
	var outBytes int64
	for _, s := range outputSlices(out) {
		outBytes += int64(4 * len(s))
	}
	for _, nb := range lossBackends()[1:] {
		t.Run(nb.name, func(t *testing.T) {
			c, _ := NewCriterion(DefaultConfig(10))
			d := newOnBackend(nb.be, out)
			t0 := nb.be.Transfers()
			d.tg.Upload(nb.be, tg)
			t1 := nb.be.Transfers()
			if up := t1.Uploads - t0.Uploads; up != 5 || t1.UploadBytes-t0.UploadBytes != targetBytes || t1.Downloads != t0.Downloads {
				t.Errorf("target upload: %d calls of %d bytes, want 5 of %d", up, t1.UploadBytes-t0.UploadBytes, targetBytes)
			}
			if err := c.ForwardOn(onOf(nb.be), out.Geometry, d.out, d.grads, &d.tg, d.res); err != nil {
				t.Fatal(err)
			}
			t2 := nb.be.Transfers()
			ReadResult(nb.be, d.res)
			t3 := nb.be.Transfers()
			if t3.Downloads-t2.Downloads != 1 || t3.DownloadBytes-t2.DownloadBytes != 4*ResultLen || t3.Uploads != t2.Uploads {
				t.Errorf("ReadResult: %+v → %+v, want one download of %d bytes", t2, t3, 4*ResultLen)
			}
			up, down := t2.Uploads-t1.Uploads, t2.Downloads-t1.Downloads
			upB, downB := t2.UploadBytes-t1.UploadBytes, t2.DownloadBytes-t1.DownloadBytes
			_, host := nb.be.(backend.HostKernels)
			if _, twin := nb.be.(DeviceKernels); host || twin {
				if up != 0 || down != 0 || c.HostRoundTrips() != 0 {
					t.Errorf("ForwardOn on %s crossed: %d uploads, %d downloads", nb.name, up, down)
				}
				return
			}
			if c.HostRoundTrips() != 1 || down != NumOutputs+5 || downB != outBytes+4*int64(d.tg.BoxesPerImage.Len+d.tg.Classes.Len+d.tg.Boxes.Len+d.tg.IsCrowd.Len+d.tg.Masks.Len) ||
				up != NumOutputs+1 || upB != outBytes+4*ResultLen {
				t.Errorf("round trip %d: %d downloads / %d B, %d uploads / %d B; want %d / outputs %d B + targets, %d / %d B",
					c.HostRoundTrips(), down, downB, up, upB, NumOutputs+5, outBytes, NumOutputs+1, outBytes+4*ResultLen)
			}
		})
	}
}

// TestForwardOnRejectsBadBuffers: wrong result or gradient buffers are
// errors, not panics, on the host kernels' path and on the device twins'
// (whose checks run on the host before any launch).
func TestForwardOnRejectsBadBuffers(t *testing.T) {
	for _, be := range []backend.Backend{cpu.NewEmulated(), newGoTwin()} {
		t.Run(be.Name(), func(t *testing.T) { rejectsBadBuffers(t, be) })
	}
}

func rejectsBadBuffers(t *testing.T, be backend.Backend) {
	rng := rand.New(rand.NewPCG(3, 4))
	out, tg := randomCase(rng, []int{2, 2})
	d := newOnBackend(be, out)
	d.tg.Upload(be, tg)
	c, _ := NewCriterion(DefaultConfig(10))
	if err := c.ForwardOn(onOf(be), out.Geometry, d.out, d.grads, &d.tg, d.res.Slice(0, 3)); err == nil || !strings.Contains(err.Error(), "result") {
		t.Errorf("short result buffer: %v", err)
	}
	g := d.grads
	g[3] = backend.Buffer{}
	if err := c.ForwardOn(onOf(be), out.Geometry, d.out, g, &d.tg, d.res); err == nil || !strings.Contains(err.Error(), "absent") {
		t.Errorf("one gradient buffer absent: %v", err)
	}
	g = d.grads
	g[6] = g[6].Slice(0, 5)
	if err := c.ForwardOn(onOf(be), out.Geometry, d.out, g, &d.tg, d.res); err == nil || !strings.Contains(err.Error(), "gradient") {
		t.Errorf("short gradient buffer: %v", err)
	}
	o := d.out
	o[1] = o[1].Slice(0, 5)
	if err := c.ForwardOn(onOf(be), out.Geometry, o, d.grads, &d.tg, d.res); err == nil || !strings.Contains(err.Error(), "one2many") {
		t.Errorf("short output buffer: %v", err)
	}
	bad := d.tg
	bad.MaskBytes = 4*bad.Masks.Len + 1
	if err := c.ForwardOn(onOf(be), out.Geometry, d.out, d.grads, &bad, d.res); err == nil || !strings.Contains(err.Error(), "mask") {
		t.Errorf("mask stack longer than its buffer: %v", err)
	}
}

// onOf is the On trainer/device hands the loss for a test backend: the
// Go twins of a goTwin, RunHost of cpu and emu, neither (the round trip)
// for a backend that hides them.
func onOf(be backend.Backend) On {
	switch b := be.(type) {
	case *goTwin:
		return OnDevice(b, b)
	case backend.HostBackend:
		return OnHost(b)
	}
	return On{Backend: be}
}
