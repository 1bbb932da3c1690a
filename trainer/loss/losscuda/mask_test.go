package losscuda

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"

	"github.com/segpipe/segpipe/internal/testenv/shared"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/loss/internal/lossgolden"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
	"github.com/segpipe/segpipe/trainer/tensor/cuda/cudatest"
)

// The mask side of the loss on the device (LossOwners, LossMask,
// LossSemseg) against trainer/loss's Forward: with the box and class
// parts left out, Forward's coefficient and prototype gradients come only
// from the mask term and its semantic-logit gradient only from the
// semantic term, and Result gives both values (÷ B and the gain). The
// device methods must not cross to the host.

// maskGeometry is a small batch geometry: square (128 px, 32×32 masks,
// 16×16 semantic logits) or not (128×96 px, 32×24 masks, 13×10 logits, a
// non-integer nearest resize). Five coefficients, three classes (class 0
// is the one the semantic target leaves out).
func maskGeometry(b int, rect bool) loss.Geometry {
	if rect {
		return loss.Geometry{B: b, NC: 3, NM: 5, Levels: []loss.Level{{H: 12, W: 16, Stride: 8}, {H: 6, W: 8, Stride: 16}, {H: 3, W: 4, Stride: 32}},
			ProtoH: 24, ProtoW: 32, SemH: 10, SemW: 13}
	}
	return loss.Geometry{B: b, NC: 3, NM: 5, Levels: []loss.Level{{H: 16, W: 16, Stride: 8}, {H: 8, W: 8, Stride: 16}, {H: 4, W: 4, Stride: 32}},
		ProtoH: 32, ProtoW: 32, SemH: 16, SemW: 16}
}

// maskBatch draws outputs and targets with counts[b] instances in image
// b, listed in random order of size: ellipses and rectangles that
// overlap, pairs of equal-area rectangles, an empty mask in the image
// with the most instances, boxes on even pixels (the crop's halfway
// cases) and some past the canvas edge, and (crowd) about one instance in
// six flagged crowd, all of the last image's (an image left with none,
// its masks still in the stack). With big, every mask spans half the grid or more
// and every box is fractional in mask pixels.
func maskBatch(rng *rand.Rand, g loss.Geometry, counts []int, crowd, big bool) (*loss.Outputs, *loss.Targets) {
	A := g.Anchors()
	norm := func(s float64) float32 { return float32(rng.NormFloat64() * s) }
	fill := func(n int, f func() float32) []float32 {
		s := make([]float32, n)
		for i := range s {
			s[i] = f()
		}
		return s
	}
	out := &loss.Outputs{Geometry: g}
	for _, br := range []*loss.Branch{&out.One2Many, &out.One2One} {
		br.Boxes = fill(g.B*4*A, func() float32 { return 0.5 + 2*rng.Float32() })
		br.Scores = fill(g.B*g.NC*A, func() float32 { return norm(1.5) })
		br.Coef = fill(g.B*g.NM*A, func() float32 { return norm(1) })
	}
	out.Proto = fill(g.B*g.NM*g.ProtoH*g.ProtoW, func() float32 { return norm(1) })
	out.Semseg = fill(g.B*g.NC*g.SemH*g.SemW, func() float32 { return norm(2) })

	H, W := g.ProtoH, g.ProtoW
	hw := H * W
	tg := &loss.Targets{BoxesPerImage: counts}
	most := slices.Max(counts)
	for _, n := range counts {
		for j := 0; j < n; j++ {
			m := make([]uint8, hw)
			// Rectangles in mask pixels; every third one repeats the
			// previous one's size elsewhere (equal areas).
			rw, rh := 3+rng.IntN(W/2), 3+rng.IntN(H/2)
			if big {
				rw, rh = W/2+rng.IntN(W/2), H/2+rng.IntN(H/2)
			}
			if j%3 == 2 {
				prev := tg.Boxes[len(tg.Boxes)-4:]
				rw, rh = int(prev[2]-prev[0])/4, int(prev[3]-prev[1])/4
			}
			x0, y0 := rng.IntN(W-rw+1), rng.IntN(H-rh+1)
			ellipse := j%3 == 0
			for y := y0; y < y0+rh; y++ {
				for x := x0; x < x0+rw; x++ {
					dx := (float64(x-x0)+0.5)/float64(rw)*2 - 1
					dy := (float64(y-y0)+0.5)/float64(rh)*2 - 1
					if !ellipse || dx*dx+dy*dy <= 1 {
						m[y*W+x] = 1
					}
				}
			}
			if n == most && j == n-1 {
				clear(m) // an empty mask: the smallest, painted last
			}
			bx := []float32{float32(4 * x0), float32(4 * y0), float32(4 * (x0 + rw)), float32(4 * (y0 + rh))}
			jitter := rng.IntN(4)
			if big {
				jitter = 1
			}
			switch jitter {
			case 0: // halfway in mask pixels: 4k+2 canvas pixels
				bx[0] += 2
				bx[3] -= 2
			case 1: // fractional
				bx[0] += rng.Float32() * 3
				bx[2] -= rng.Float32() * 3
			case 2: // past the canvas edge
				bx[2] += 12
				bx[1] -= 6
			}
			tg.Boxes = append(tg.Boxes, bx...)
			tg.Classes = append(tg.Classes, int32(rng.IntN(g.NC)))
			tg.Masks = append(tg.Masks, m...)
		}
	}
	if crowd {
		tg.IsCrowd = make([]uint8, len(tg.Classes))
		last := len(tg.IsCrowd) - counts[len(counts)-1]
		for i := range tg.IsCrowd {
			if i >= last || rng.IntN(6) == 0 {
				tg.IsCrowd[i] = 1
			}
		}
	}
	return out, tg
}

// paddedHost is the padded, crowd-free layout LossTargets produces, built
// on the host: slot j of image b is its j-th non-crowd instance.
type paddedHost struct {
	M                   int
	labels, valid, src  []int32
	count               []int32
	boxes               []float32
	keptClass, keptMask [][]int32 // per image: classes, source indices
}

func padTargets(tg *loss.Targets) *paddedHost {
	B := len(tg.BoxesPerImage)
	p := &paddedHost{count: make([]int32, B), keptClass: make([][]int32, B), keptMask: make([][]int32, B)}
	k := 0
	for b, n := range tg.BoxesPerImage {
		for range n {
			if tg.IsCrowd == nil || tg.IsCrowd[k] == 0 {
				p.keptClass[b] = append(p.keptClass[b], tg.Classes[k])
				p.keptMask[b] = append(p.keptMask[b], int32(k))
			}
			k++
		}
		p.count[b] = int32(len(p.keptMask[b]))
		p.M = max(p.M, len(p.keptMask[b]))
	}
	p.labels, p.valid, p.src = make([]int32, B*p.M), make([]int32, B*p.M), make([]int32, B*p.M)
	p.boxes = make([]float32, 4*B*p.M)
	for b := range B {
		for j := range p.M {
			s := b*p.M + j
			p.src[s] = -1
			if j >= len(p.keptMask[b]) {
				continue
			}
			k := p.keptMask[b][j]
			p.src[s], p.labels[s] = k, p.keptClass[b][j]
			bx := tg.Boxes[4*k : 4*k+4]
			copy(p.boxes[4*s:], bx)
			if bx[0]+bx[1]+bx[2]+bx[3] > 0 {
				p.valid[s] = 1
			}
		}
	}
	return p
}

// bruteOwners paints each image's non-crowd masks in order of decreasing
// area (a stable sort) and reads the semantic target off the result, as
// the package doc of trainer/loss states the rule.
func bruteOwners(g loss.Geometry, tg *loss.Targets, p *paddedHost) (owner []int32, sem []float32) {
	hw := g.ProtoH * g.ProtoW
	shw := g.SemH * g.SemW
	owner = make([]int32, g.B*hw)
	sem = make([]float32, g.B*g.NC*shw)
	for b := range g.B {
		n := len(p.keptMask[b])
		if n == 0 {
			continue
		}
		mask := func(j int) []uint8 { k := int(p.keptMask[b][j]); return tg.Masks[k*hw : (k+1)*hw] }
		area := make([]int, n)
		order := make([]int, n)
		for j := range n {
			order[j] = j
			for _, v := range mask(j) {
				if v != 0 {
					area[j]++
				}
			}
		}
		slices.SortStableFunc(order, func(x, y int) int { return area[y] - area[x] })
		own := owner[b*hw : (b+1)*hw]
		for _, j := range order {
			for i, v := range mask(j) {
				if v != 0 {
					own[i] = int32(j + 1)
				}
			}
		}
		bg := p.keptClass[b][order[n-1]]
		src := func(d, out, in int) int {
			return min(int(math.Floor(float64(float32(d)*(float32(in)/float32(out))))), in-1)
		}
		for y := range g.SemH {
			for x := range g.SemW {
				c := bg
				if o := own[src(y, g.SemH, g.ProtoH)*g.ProtoW+src(x, g.SemW, g.ProtoW)]; o > 0 {
					c = p.keptClass[b][o-1]
				}
				if c != 0 {
					sem[((b*g.NC+int(c))*g.SemH+y)*g.SemW+x] = 1
				}
			}
		}
	}
	return owner, sem
}

func i32Bytes(s []int32) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s))
}

// devUpload copies a []float32 or []int32 into a new buffer of its length
// (at least one element is allocated).
func devUpload(be backend.Backend, data any) backend.Buffer {
	switch s := data.(type) {
	case []float32:
		b := be.Alloc(max(len(s), 1)).Slice(0, len(s))
		be.Upload(b, s)
		return b
	case []int32:
		b := be.Alloc(max(len(s), 1)).Slice(0, len(s))
		be.UploadBytes(b, i32Bytes(s))
		return b
	}
	panic(fmt.Sprintf("devUpload of %T", data))
}

func devFloats(be backend.Backend, b backend.Buffer) []float32 {
	v := make([]float32, b.Len)
	be.Download(v, b)
	return v
}

func devInts(be backend.Backend, b backend.Buffer) []int32 {
	f := devFloats(be, b)
	v := make([]int32, len(f))
	for i, x := range f {
		v[i] = int32(math.Float32bits(x))
	}
	return v
}

func devFloat64(be backend.Backend, b backend.Buffer) float64 {
	w := devFloats(be, b.Slice(0, 2))
	return math.Float64frombits(uint64(math.Float32bits(w[0])) | uint64(math.Float32bits(w[1]))<<32)
}

func (p *paddedHost) upload(be backend.Backend) *loss.DevicePadded {
	return &loss.DevicePadded{M: p.M, Labels: devUpload(be, p.labels), Boxes: devUpload(be, p.boxes),
		Valid: devUpload(be, p.valid), Src: devUpload(be, p.src), Count: devUpload(be, p.count)}
}

// uploadAssignment lays out a Go assignment as DeviceAssignment.
func uploadAssignment(be backend.Backend, a *loss.Assignment, scoreSum float64) *loss.DeviceAssignment {
	fg := make([]int32, len(a.FG))
	for i, f := range a.FG {
		if f {
			fg[i] = 1
		}
	}
	ss := math.Float64bits(scoreSum)
	return &loss.DeviceAssignment{FG: devUpload(be, fg), GTIdx: devUpload(be, a.GTIdx), Labels: devUpload(be, a.Labels),
		Boxes: devUpload(be, a.Boxes), ScoreValue: devUpload(be, a.ScoreValue),
		NumFG: devUpload(be, []int32{int32(a.NumFG)}), ScoreSum: devUpload(be, []int32{int32(uint32(ss)), int32(uint32(ss >> 32))})}
}

// gradTol is the gradients' tolerance: relative to each element, with a
// floor of gradTol times the tensor's largest magnitude (sums of terms of
// both signs). valueTol is the float64 terms' relative tolerance.
const (
	gradTol  = 1e-5
	valueTol = 1e-12
)

// lossWorst collects the worst errors per quantity for the log.
type lossWorst map[string]float64

func (w lossWorst) grad(t *testing.T, what string, got, want []float32) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	big := 0.0
	for _, v := range want {
		big = max(big, math.Abs(float64(v)))
	}
	e, at := tensor.Worst(got, want, gradTol, max(big, 1e-30)*gradTol)
	if e > 1 {
		t.Errorf("%s: element %d = %v, want %v (largest |want| %g)", what, at, got[at], want[at], big)
	}
	w[what] = max(w[what], e*gradTol)
}

func (w lossWorst) value(t *testing.T, what string, got, want float64) {
	t.Helper()
	e := math.Abs(got - want)
	if want != 0 {
		e /= math.Abs(want)
	}
	if e > valueTol || math.IsNaN(got) {
		t.Errorf("%s = %.17g, want %.17g (relative error %.3g)", what, got, want, e)
	}
	w[what] = max(w[what], e)
}

func (w lossWorst) log(t *testing.T) {
	names := make([]string, 0, len(w))
	for k := range w {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		t.Logf("%s: worst relative error %.3g", k, w[k])
	}
}

// maskCases are the batches the comparison runs: image counts, geometry,
// crowd flags; topK, when set, replaces the branches' top-k (and turns
// off one-to-one's second stage) so that an image with one large
// instance gets exactly that many positives: 50 and 49 put the crop rule's
// boundary (cropRoundBelow) on both sides.
var maskCases = []struct {
	name   string
	counts []int
	rect   bool
	crowd  bool
	topK   [2]int
}{
	{"crowded and empty", []int{12, 0, 3, 2}, false, true, [2]int{}},
	{"rectangular", []int{2, 14, 0, 1}, true, false, [2]int{}},
	{"many instances", []int{16, 9, 3}, false, true, [2]int{}},
	{"one image", []int{5}, true, false, [2]int{}},
	{"only crowd", []int{3}, false, true, [2]int{}},
	{"no instances", []int{0, 0}, false, false, [2]int{}},
	{"crop boundary", []int{1, 1}, false, false, [2]int{50, 49}},
}

// maskTally counts the images of the compared branches on each side of
// the crop rule's boundary.
type maskTally struct{ rounded, fractional int }

// compareLossMask runs every case on be (and the loss goldens' batch,
// where ../shared holds it): the owner map and semantic target against
// bruteOwners (exactly), then the mask term of both branches and the
// semantic term, values and gradients, against Forward. Every device
// computation runs twice and must repeat its bits.
func compareLossMask(t *testing.T, be *cuda.Backend) {
	rng := rand.New(rand.NewPCG(7, 8))
	w := lossWorst{}
	var n maskTally
	for _, mc := range maskCases {
		t.Run(mc.name, func(t *testing.T) {
			g := maskGeometry(len(mc.counts), mc.rect)
			out, tg := maskBatch(rng, g, mc.counts, mc.crowd, mc.topK[0] > 0)
			cfg := loss.DefaultConfig(10)
			if mc.topK[0] > 0 {
				cfg.One2Many.TopK, cfg.One2One.TopK, cfg.One2One.TopK2 = mc.topK[0], mc.topK[1], 0
			}
			checkLossMask(t, be, w, &n, out, tg, cfg, mc.topK)
		})
	}
	t.Run("golden", func(t *testing.T) {
		out, tg, overlap := goldenMaskBatch(t)
		owner := checkLossMask(t, be, w, &n, out, tg, loss.DefaultConfig(100), [2]int{})
		hw := out.ProtoH * out.ProtoW
		for i, v := range overlap {
			if owner[i] != int32(v) {
				t.Fatalf("owner map differs from the golden overlap map at image %d cell %d: %d, want %d", i/hw, i%hw, owner[i], v)
			}
		}
	})
	if n.rounded == 0 || n.fractional == 0 {
		t.Errorf("the cases have %d images with 1–49 positives and %d with 50 or more; both crop rules need some", n.rounded, n.fractional)
	}
	w.log(t)
}

// goldenMaskBatch is the loss goldens' batch (lossgolden.Read) in the
// loader's layout, with its train outputs (the one-to-one branch its own
// copy of the one-to-many); overlap is the reference's overlap map.
func goldenMaskBatch(t *testing.T) (out *loss.Outputs, tg *loss.Targets, overlap []uint8) {
	c, err := lossgolden.Read(shared.Path(t, "goldens/loss"))
	if err != nil {
		t.Fatal(err)
	}
	g := loss.Geometry{B: c.B, NC: c.NC, NM: c.NM, ProtoH: c.ProtoH, ProtoW: c.ProtoW, SemH: c.SemH, SemW: c.SemW}
	for _, l := range c.Levels {
		g.Levels = append(g.Levels, loss.Level{H: l.H, W: l.W, Stride: l.Stride})
	}
	out = &loss.Outputs{Geometry: g, Proto: c.Proto, Semseg: c.Semseg,
		One2Many: loss.Branch{Boxes: c.Boxes, Scores: c.Scores, Coef: c.Coef},
		One2One:  loss.Branch{Boxes: slices.Clone(c.Boxes), Scores: slices.Clone(c.Scores), Coef: slices.Clone(c.Coef)}}
	tg = &loss.Targets{BoxesPerImage: c.BoxesPerImage, Classes: c.Classes, Boxes: c.TargetBoxes, Masks: c.Masks}
	return out, tg, c.Overlap
}

// checkLossMask runs one batch through Forward and through the device
// kernels on be and compares; it returns the device's owner map.
func checkLossMask(t *testing.T, be *cuda.Backend, w lossWorst, n *maskTally, out *loss.Outputs, tg *loss.Targets, cfg loss.Config, topK [2]int) []int32 {
	g := out.Geometry
	c, err := loss.NewCriterion(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := out.Grads()
	res, err := c.Forward(out, tg, want)
	if err != nil {
		t.Fatal(err)
	}
	asg := [2]*loss.Assignment{}
	asg[0], asg[1] = c.Assignments()
	o2m, o2o := c.Weights()
	B, hw := g.B, g.ProtoH*g.ProtoW

	p := padTargets(tg)
	var dt loss.DeviceTargets
	dt.Upload(be, tg)
	dp := p.upload(be)
	owner, sem := be.Alloc(B*hw), be.Alloc(B*g.NC*g.SemH*g.SemW)
	noCrossing(t, be, "LossOwners", func() { New(be).LossOwners(g, &dt, dp, owner, sem) })
	wantOwner, wantSem := bruteOwners(g, tg, p)
	gotOwner, gotSem := devInts(be, owner), devFloats(be, sem)
	if i := firstDiff(i32sAsF32(gotOwner), i32sAsF32(wantOwner)); i >= 0 {
		t.Fatalf("owner map differs at %d (image %d pixel %d): %d, want %d", i, i/hw, i%hw, gotOwner[i], wantOwner[i])
	}
	if i := firstDiff(gotSem, wantSem); i >= 0 {
		t.Fatalf("semantic target differs at %d: %v, want %v", i, gotSem[i], wantSem[i])
	}
	New(be).LossOwners(g, &dt, dp, owner, sem)
	if firstDiff(i32sAsF32(devInts(be, owner)), i32sAsF32(gotOwner)) >= 0 || firstDiff(devFloats(be, sem), gotSem) >= 0 {
		t.Fatal("the owner map or semantic target changed on a second run")
	}

	coef := [2]backend.Buffer{devUpload(be, out.One2Many.Coef), devUpload(be, out.One2One.Coef)}
	proto := devUpload(be, out.Proto)
	wantCoef := [2][]float32{want.One2Many.Coef, want.One2One.Coef}
	for i, wt := range [2]float64{o2m, o2o} {
		branch := [2]string{"one2many", "one2one"}[i]
		da := uploadAssignment(be, asg[i], res.ScoreSum[i])
		counts := positives(asg[i])
		for _, k := range counts {
			if k >= 50 {
				n.fractional++
			} else if k > 0 {
				n.rounded++
			}
		}
		t.Logf("%s: positives per image %v", branch, counts)
		if k := topK[i]; k > 0 && slices.ContainsFunc(counts, func(n int) bool { return n != k }) {
			t.Fatalf("%s: positives per image %v, want %d in each", branch, counts, k)
		}
		scale := wt * float64(B) * cfg.BoxGain
		var bits [][]float32
		for run := range 2 {
			coefG := be.Alloc(len(out.One2Many.Coef))
			be.Fill(coefG, 0)
			protoG := backend.Buffer{}
			if i == 0 {
				protoG = be.Alloc(len(out.Proto))
				be.Fill(protoG, 0)
			}
			terms := be.Alloc(2)
			noCrossing(t, be, "LossMask", func() { New(be).LossMask(g, da, dp, owner, coef[i], proto, scale, coefG, protoG, terms) })
			v := devFloat64(be, terms)
			if asg[i].NumFG > 0 {
				w.value(t, "mask term", v, [2][loss.NumComponents]float64{res.One2Many, res.One2One}[i][loss.Seg]/float64(B)/cfg.BoxGain)
			} else if v != 0 {
				t.Errorf("%s: mask term %v without positives, want 0", branch, v)
			}
			got := [][]float32{devFloats(be, coefG), devFloats(be, terms)}
			w.grad(t, "mask coef gradient", got[0], wantCoef[i])
			if i == 0 {
				got = append(got, devFloats(be, protoG))
				w.grad(t, "mask proto gradient", got[2], want.Proto)
			}
			if run == 0 {
				bits = got
			} else {
				for k := range got {
					if firstDiff(got[k], bits[k]) >= 0 {
						t.Errorf("%s: output %d of the mask term changed on a second run", branch, k)
					}
				}
			}
		}
	}

	// A branch without positives on a batch with instances: the
	// term is 0 and the gradients keep what they held.
	if p.M > 0 {
		none := *asg[0]
		none.FG, none.NumFG = make([]bool, len(asg[0].FG)), 0
		da := uploadAssignment(be, &none, 0)
		coefG, protoG, terms := be.Alloc(len(out.One2Many.Coef)), be.Alloc(len(out.Proto)), be.Alloc(2)
		be.Fill(coefG, 0.25)
		be.Fill(protoG, 0.25)
		New(be).LossMask(g, da, dp, owner, coef[0], proto, o2m*float64(B)*cfg.BoxGain, coefG, protoG, terms)
		if v := devFloat64(be, terms); v != 0 {
			t.Errorf("mask term %v without positives, want 0", v)
		}
		for _, b := range []backend.Buffer{coefG, protoG} {
			if i := slices.IndexFunc(devFloats(be, b), func(v float32) bool { return v != 0.25 }); i >= 0 {
				t.Fatalf("a mask term without positives wrote a gradient at %d", i)
			}
		}
	}

	logits := devUpload(be, out.Semseg)
	scale := o2m * float64(B) * cfg.BoxGain
	var bits [2][]float32
	for run := range 2 {
		semG := be.Alloc(len(out.Semseg))
		be.Fill(semG, 0)
		terms := be.Alloc(2)
		noCrossing(t, be, "LossSemseg", func() { New(be).LossSemseg(g, logits, sem, scale, semG, terms) })
		v := devFloat64(be, terms)
		// Forward skips the semantic term (and its gradient) in a
		// branch without positives: compare where it ran.
		if asg[0].NumFG > 0 {
			w.value(t, "semantic term", v, res.One2Many[loss.Semseg]/float64(B)/cfg.BoxGain)
			w.grad(t, "semantic gradient", devFloats(be, semG), want.Semseg)
		} else if asg[1].NumFG > 0 {
			w.value(t, "semantic term", v, res.One2One[loss.Semseg]/float64(B)/cfg.BoxGain)
		}
		got := [2][]float32{devFloats(be, semG), devFloats(be, terms)}
		if run == 0 {
			bits = got
		} else if firstDiff(got[0], bits[0]) >= 0 || firstDiff(got[1], bits[1]) >= 0 {
			t.Error("the semantic term changed on a second run")
		}
	}
	return gotOwner
}

// positives counts each image's positive anchors.
func positives(a *loss.Assignment) []int {
	n := make([]int, a.B)
	for i, f := range a.FG {
		if f {
			n[i/a.A]++
		}
	}
	return n
}

func i32sAsF32(s []int32) []float32 {
	out := make([]float32, len(s))
	for i, v := range s {
		out[i] = math.Float32frombits(uint32(v))
	}
	return out
}

// firstDiff returns the first index where a and b differ bitwise (or
// where one of them ends), −1 when they are the same.
func firstDiff(a, b []float32) int {
	for i := range max(len(a), len(b)) {
		if i >= len(a) || i >= len(b) || math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return i
		}
	}
	return -1
}

// TestLossMaskOnHarness runs the mask side of the loss on the CPU
// harness (the .cu kernels under g++; not a GPU) against Forward and the
// brute-force owner map.
func TestLossMaskOnHarness(t *testing.T) {
	compareLossMask(t, cudatest.Harness(t))
	// Again with a single block of 64 threads, so that every grid-stride
	// loop over images, slots and rows runs in one block and the tree
	// reductions take another depth (half a minute on the harness).
	if testing.Short() {
		return
	}
	be := cudatest.HarnessWith(t, cuda.HarnessOptions{MaxBlocks: 1, Threads: 64})
	t.Run("one block of 64", func(t *testing.T) { compareLossMask(t, be) })
}

// TestLossMaskOnGPU is the same comparison on GPU 0.
func TestLossMaskOnGPU(t *testing.T) {
	compareLossMask(t, cudatest.GPU(t))
}
