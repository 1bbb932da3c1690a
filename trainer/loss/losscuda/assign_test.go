package losscuda

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/segpipe/segpipe/trainer/internal/modelcase"
	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
	"github.com/segpipe/segpipe/trainer/tensor/cuda/cudatest"
)

// laCase is one batch for the loss kernels: head outputs and targets.
type laCase struct {
	name string
	out  *loss.Outputs
	tg   *loss.Targets
}

// laGeometry is a small input (side px, three levels) with nc classes.
func laGeometry(B, side, nc int) loss.Geometry {
	return loss.Geometry{B: B, NC: nc, NM: 4,
		Levels: []loss.Level{{H: side / 8, W: side / 8, Stride: 8}, {H: side / 16, W: side / 16, Stride: 16}, {H: side / 32, W: side / 32, Stride: 32}},
		ProtoH: side / 4, ProtoW: side / 4, SemH: side / 8, SemW: side / 8}
}

// laRandomCase draws outputs whose boxes roughly fit the instances and
// counts[b] instances in image b: random boxes (rectangles as masks),
// classes, and the given crowd flags (nil for none).
func laRandomCase(rng *rand.Rand, name string, side, nc int, counts []int) laCase {
	g := laGeometry(len(counts), side, nc)
	A := g.Anchors()
	norm := func(s float64) float32 { return float32(rng.NormFloat64() * s) }
	out := &loss.Outputs{Geometry: g}
	for _, br := range []*loss.Branch{&out.One2Many, &out.One2One} {
		br.Boxes = make([]float32, g.B*4*A)
		for i := range br.Boxes {
			br.Boxes[i] = 0.5 + 2*rng.Float32()
		}
		br.Scores = make([]float32, g.B*g.NC*A)
		for i := range br.Scores {
			br.Scores[i] = norm(1.5)
		}
		br.Coef = make([]float32, g.B*g.NM*A)
		for i := range br.Coef {
			br.Coef[i] = norm(1)
		}
	}
	out.Proto = make([]float32, g.B*g.NM*g.ProtoH*g.ProtoW)
	for i := range out.Proto {
		out.Proto[i] = norm(1)
	}
	out.Semseg = make([]float32, g.B*g.NC*g.SemH*g.SemW)
	for i := range out.Semseg {
		out.Semseg[i] = norm(2)
	}
	tg := &loss.Targets{BoxesPerImage: counts}
	s := float32(side)
	for _, n := range counts {
		for range n {
			w, h := s*(0.1+0.6*rng.Float32()), s*(0.1+0.6*rng.Float32())
			x, y := rng.Float32()*(s-w), rng.Float32()*(s-h)
			tg.Boxes = append(tg.Boxes, x, y, x+w, y+h)
			tg.Classes = append(tg.Classes, int32(rng.IntN(nc)))
		}
	}
	return laCase{name, out, tg}
}

// withMasks gives every instance its box's rectangle as its mask.
func (c laCase) withMasks() laCase {
	g := c.out.Geometry
	c.tg.Masks = make([]uint8, len(c.tg.Classes)*g.ProtoH*g.ProtoW)
	for k := range c.tg.Classes {
		b := c.tg.Boxes[4*k:]
		m := c.tg.Masks[k*g.ProtoH*g.ProtoW:]
		for y := max(int(b[1]/4), 0); y < min(int(b[3]/4)+1, g.ProtoH); y++ {
			for x := max(int(b[0]/4), 0); x < min(int(b[2]/4)+1, g.ProtoW); x++ {
				m[y*g.ProtoW+x] = 1
			}
		}
	}
	return c
}

// laCases are the batches the loss kernels are checked on: random
// ones, images without instances, crowd instances, an invalid slot
// (coordinates summing below 0), duplicate GTs (ties in the multi-GT
// resolution), a class whose probabilities are all 0 (an all-zero metric
// row: top-k ties to the lower anchor index decide the positives), and
// a batch without any instance.
func laCases() []laCase {
	rng := rand.New(rand.NewPCG(41, 42))
	var cs []laCase
	cs = append(cs, laRandomCase(rng, "random", 64, 3, []int{3, 5}))
	cs = append(cs, laRandomCase(rng, "random-128", 128, 5, []int{6, 2, 4}))
	cs = append(cs, laRandomCase(rng, "dense-256-80-classes", 256, 80, []int{24, 11}))
	cs = append(cs, laRandomCase(rng, "empty-image", 64, 3, []int{0, 4, 0}))
	c := laRandomCase(rng, "crowd", 64, 3, []int{4, 3})
	c.tg.IsCrowd = []uint8{0, 1, 0, 1, 1, 0, 0}
	cs = append(cs, c)
	c = laRandomCase(rng, "invalid-slot", 64, 3, []int{2, 2})
	copy(c.tg.Boxes[4:], []float32{-30, -30, -10, -10})
	cs = append(cs, c)
	c = laRandomCase(rng, "duplicates", 64, 3, []int{3, 1})
	copy(c.tg.Boxes[4:8], c.tg.Boxes[0:4])
	c.tg.Classes[1] = (c.tg.Classes[0] + 1) % 3
	cs = append(cs, c)
	c = laRandomCase(rng, "zero-metric-ties", 64, 3, []int{2, 1})
	copy(c.tg.Boxes[0:4], []float32{0, 0, 30, 30})
	c.tg.Classes[0] = 2
	A := c.out.Anchors()
	for b := range 2 {
		for a := range A {
			c.out.One2Many.Scores[(b*3+2)*A+a] = -200
			c.out.One2One.Scores[(b*3+2)*A+a] = -200
		}
	}
	cs = append(cs, c)
	cs = append(cs, laRandomCase(rng, "no-instances", 64, 3, []int{0, 0}))
	for i := range cs {
		cs[i] = cs[i].withMasks()
	}
	return cs
}

// laModelCase is the golden-weights n model's train outputs at 128 px
// (80 classes, 336 anchors) on modelcase.SyntheticBatch(2, 128), run on the CPU
// backend: real head outputs.
func laModelCase(t *testing.T) laCase {
	_, _, out, tg := modelcase.ModelLoss(t, cpu.New(), modelcase.GoldenWeights(t), 2, 128)
	return laCase{"golden-model-128", out, tg}
}

// laOnDevice is a loss case's outputs in a Backend's memory.
type laOnDevice struct {
	be  *cuda.Backend
	out [loss.NumOutputs]backend.Buffer
	tg  loss.DeviceTargets
}

func laOutputs(o *loss.Outputs) [loss.NumOutputs][]float32 {
	return [loss.NumOutputs][]float32{o.One2Many.Boxes, o.One2Many.Scores, o.One2Many.Coef,
		o.One2One.Boxes, o.One2One.Scores, o.One2One.Coef, o.Proto, o.Semseg}
}

func laGrads(g *loss.Grads) [loss.NumOutputs][]float32 {
	return [loss.NumOutputs][]float32{g.One2Many.Boxes, g.One2Many.Scores, g.One2Many.Coef,
		g.One2One.Boxes, g.One2One.Scores, g.One2One.Coef, g.Proto, g.Semseg}
}

func laUpload(be *cuda.Backend, c laCase) *laOnDevice {
	d := &laOnDevice{be: be}
	for i, s := range laOutputs(c.out) {
		d.out[i] = be.Alloc(len(s))
		be.Upload(d.out[i], s)
	}
	d.tg.Upload(be, c.tg)
	return d
}

// laAlloc returns n elements (a view of at least one, so never absent).
func laAlloc(be *cuda.Backend, n int) backend.Buffer { return be.Alloc(max(n, 1)).Slice(0, n) }

func (d *laOnDevice) floats(b backend.Buffer) []float32 {
	v := make([]float32, b.Len)
	d.be.Download(v, b)
	return v
}

func (d *laOnDevice) ints(b backend.Buffer) []int32 {
	v := d.floats(b)
	out := make([]int32, len(v))
	for i, x := range v {
		out[i] = int32(math.Float32bits(x))
	}
	return out
}

func (d *laOnDevice) float64At(b backend.Buffer, w int) float64 {
	v := d.floats(b.Slice(w, w+2))
	return math.Float64frombits(uint64(math.Float32bits(v[0])) | uint64(math.Float32bits(v[1]))<<32)
}

func laPutWords(w []float32, v float64) {
	b := math.Float64bits(v)
	w[0], w[1] = math.Float32frombits(uint32(b)), math.Float32frombits(uint32(b>>32))
}

// laRelWorst is the largest |got − want| over max(|want|, floor), floor
// being 1e-6 of want's largest magnitude (elements that cancel to about
// zero are measured against the tensor's scale), and where.
func laRelWorst(got, want []float32) (float64, int) {
	scale := 0.0
	for _, v := range want {
		scale = max(scale, math.Abs(float64(v)))
	}
	w, at := 0.0, -1
	for i := range want {
		e := math.Abs(float64(got[i])-float64(want[i])) / max(math.Abs(float64(want[i])), 1e-6*scale, 1e-30)
		if math.IsNaN(e) {
			e = math.Inf(1)
		}
		if e > w || at < 0 {
			w, at = e, i
		}
	}
	return w, at
}

func laRel64(got, want float64) float64 {
	if got == want {
		return 0
	}
	return math.Abs(got-want) / max(math.Abs(want), 1e-300)
}

// laPadded allocates DevicePadded for the batch (M from Kept).
func laPadded(be *cuda.Backend, g loss.Geometry, tg *loss.DeviceTargets) *loss.DevicePadded {
	M := 0
	for _, k := range tg.Kept {
		M = max(M, k)
	}
	B := g.B
	return &loss.DevicePadded{M: M, Labels: laAlloc(be, B*M), Boxes: laAlloc(be, 4*B*M), Valid: laAlloc(be, B*M),
		Src: laAlloc(be, B*M), Count: laAlloc(be, B)}
}

func laAssignment(be *cuda.Backend, g loss.Geometry) *loss.DeviceAssignment {
	n := g.B * g.Anchors()
	return &loss.DeviceAssignment{FG: laAlloc(be, n), GTIdx: laAlloc(be, n), Labels: laAlloc(be, n), Boxes: laAlloc(be, 4*n),
		ScoreValue: laAlloc(be, n), NumFG: laAlloc(be, 1), ScoreSum: laAlloc(be, 2)}
}

// checkLossKernels runs LossTargets, LossAssign, LossClsBox and
// LossCombine of be on every case against Forward's assignment, terms,
// gradients and result, within lossTolerance relative.
func checkLossKernels(t *testing.T, be *cuda.Backend, lossTolerance float64) {
	worst := map[string]float64{}
	note := func(what string, e float64) { worst[what] = max(worst[what], e) }
	for _, c := range append(laCases(), laModelCase(t)) {
		t.Run(c.name, func(t *testing.T) {
			g := c.out.Geometry
			B, A := g.B, g.Anchors()
			cfg := loss.DefaultConfig(10)
			crit, err := loss.NewCriterion(cfg)
			if err != nil {
				t.Fatal(err)
			}
			crit.SetUpdates(3) // branch weights away from their start
			want := c.out.Grads()
			wres, err := crit.Forward(c.out, c.tg, want)
			if err != nil {
				t.Fatal(err)
			}
			d := laUpload(be, c)
			p := laPadded(be, g, &d.tg)
			New(be).LossTargets(g, &d.tg, p)
			laCheckPadded(t, d, p, c.tg)

			asgs := [2]*loss.Assignment{}
			asgs[0], asgs[1] = crit.Assignments()
			cfgs := [2]loss.AssignerConfig{cfg.One2Many, cfg.One2One}
			o2m, o2o := crit.Weights()
			wantBr := [2]loss.Branch{want.One2Many, want.One2One}
			var da [2]*loss.DeviceAssignment
			words := make([]float32, 18)
			laPutWords(words[16:], math.NaN()) // unread unless a branch has positives
			for i, w := range [2]float64{o2m, o2o} {
				name := [2]string{"one2many", "one2one"}[i]
				a := laAssignment(be, g)
				da[i] = a
				boxes, scores := d.out[3*i], d.out[3*i+1]
				New(be).LossAssign(g, cfgs[i], boxes, scores, p, a)
				ref := asgs[i]
				fg := d.ints(a.FG)
				gti, lab := d.ints(a.GTIdx), d.ints(a.Labels)
				bx, sv := d.floats(a.Boxes), d.floats(a.ScoreValue)
				for ba := range B * A {
					if (fg[ba] != 0) != ref.FG[ba] || gti[ba] != ref.GTIdx[ba] || lab[ba] != ref.Labels[ba] ||
						!slices.Equal(bx[4*ba:4*ba+4], ref.Boxes[4*ba:4*ba+4]) {
						t.Fatalf("%s anchor %d: fg %d slot %d label %d box %v, want %v %d %d %v", name, ba, fg[ba], gti[ba], lab[ba],
							bx[4*ba:4*ba+4], ref.FG[ba], ref.GTIdx[ba], ref.Labels[ba], ref.Boxes[4*ba:4*ba+4])
					}
				}
				if c.name == "zero-metric-ties" && i == 0 && !slices.ContainsFunc(fg, func(v int32) bool { return v != 0 }) {
					t.Error("the all-zero metric row gives no positive: the case no longer tests top-k ties")
				}
				e, at := laRelWorst(sv, ref.ScoreValue)
				note("score value", e)
				if e > lossTolerance {
					t.Errorf("%s score value %d = %v, want %v", name, at, sv[at], ref.ScoreValue[at])
				}
				if n := d.ints(a.NumFG)[0]; int(n) != ref.NumFG || int(n) != wres.NumFG[i] {
					t.Errorf("%s NumFG %d, want %d", name, n, ref.NumFG)
				}
				ss := d.float64At(a.ScoreSum, 0)
				note("score sum", laRel64(ss, wres.ScoreSum[i]))
				if laRel64(ss, wres.ScoreSum[i]) > lossTolerance {
					t.Errorf("%s score sum %v, want %v", name, ss, wres.ScoreSum[i])
				}

				bg, sg, terms := laAlloc(be, B*4*A), laAlloc(be, B*g.NC*A), laAlloc(be, 6)
				be.Fill(bg, 0)
				be.Fill(sg, 0)
				New(be).LossClsBox(g, cfg, boxes, scores, a, w*float64(B), bg, sg, terms)
				for _, gr := range []struct {
					what      string
					got, want []float32
				}{{"box gradient", d.floats(bg), wantBr[i].Boxes}, {"score gradient", d.floats(sg), wantBr[i].Scores}} {
					e, at := laRelWorst(gr.got, gr.want)
					note(gr.what, e)
					if e > lossTolerance {
						t.Errorf("%s %s %d = %v, want %v", name, gr.what, at, gr.got[at], gr.want[at])
					}
				}
				// Forward's branch vector is gain·sum/S·B: its sums back.
				vec := [2][loss.NumComponents]float64{wres.One2Many, wres.One2One}[i]
				S, b := max(wres.ScoreSum[i], 1), float64(B)
				for j, ref := range []float64{vec[loss.Cls] / b * S / cfg.ClsGain, vec[loss.Box] / b * S / cfg.BoxGain, vec[loss.DFL] / b * S / cfg.DFLGain} {
					got := d.float64At(terms, 2*j)
					what := [3]string{"cls term", "box term", "dfl term"}[j]
					note(what, laRel64(got, ref))
					if laRel64(got, ref) > lossTolerance {
						t.Errorf("%s %s = %v, want %v", name, what, got, ref)
					}
				}
				copy(words[8*i:], d.floats(terms))
				laPutWords(words[8*i+6:], vec[loss.Seg]/b/cfg.BoxGain)
				if wres.NumFG[i] > 0 {
					laPutWords(words[16:], vec[loss.Semseg]/b/cfg.BoxGain)
				} else {
					// A branch without positives must not read its mask
					// word (a mask kernel's 0/0).
					laPutWords(words[8*i+6:], math.NaN())
				}
			}
			// The combination, from these terms; and the semantic
			// gradient zeroed exactly when one2many has no positive.
			tb, res, sem := laAlloc(be, 18), laAlloc(be, loss.ResultLen), laAlloc(be, 7)
			be.Upload(tb, words)
			be.Fill(sem, 1)
			New(be).LossCombine(g, cfg, o2m, o2o, tb, da, sem, res)
			items, total := loss.ReadResult(be, res)
			for k := range items {
				note("items", laRel64(items[k], wres.Items[k]))
				if laRel64(items[k], wres.Items[k]) > lossTolerance {
					t.Errorf("item %s = %v, want %v", loss.ComponentNames[k], items[k], wres.Items[k])
				}
			}
			note("total", laRel64(total, wres.Total))
			if laRel64(total, wres.Total) > lossTolerance {
				t.Errorf("total %v, want %v", total, wres.Total)
			}
			wantSem := float32(1)
			if wres.NumFG[0] == 0 {
				wantSem = 0
			}
			if s := d.floats(sem); slices.ContainsFunc(s, func(v float32) bool { return v != wantSem }) {
				t.Errorf("semantic gradient after LossCombine %v, want all %v (one2many positives %d)", s, wantSem, wres.NumFG[0])
			}
		})
	}
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range worst {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Logf("%s: worst relative error %.3g", k, worst[k])
	}
}

// laCheckPadded compares LossTargets' output with the batch padded by hand.
func laCheckPadded(t *testing.T, d *laOnDevice, p *loss.DevicePadded, tg *loss.Targets) {
	t.Helper()
	B, M := len(tg.BoxesPerImage), p.M
	labels, valid, src, count := d.ints(p.Labels), d.ints(p.Valid), d.ints(p.Src), d.ints(p.Count)
	boxes := d.floats(p.Boxes)
	k := 0
	for b := range B {
		j := 0
		for range tg.BoxesPerImage[b] {
			if tg.IsCrowd == nil || tg.IsCrowd[k] == 0 {
				s := b*M + j
				x := tg.Boxes[4*k : 4*k+4]
				v := int32(0)
				if x[0]+x[1]+x[2]+x[3] > 0 {
					v = 1
				}
				if labels[s] != tg.Classes[k] || src[s] != int32(k) || valid[s] != v || !slices.Equal(boxes[4*s:4*s+4], x) {
					t.Fatalf("slot %d: label %d src %d valid %d box %v, want instance %d", s, labels[s], src[s], valid[s], boxes[4*s:4*s+4], k)
				}
				j++
			}
			k++
		}
		if count[b] != int32(j) {
			t.Errorf("image %d: count %d, want %d", b, count[b], j)
		}
		for s := b*M + j; s < (b+1)*M; s++ {
			if labels[s] != 0 || src[s] != -1 || valid[s] != 0 || slices.ContainsFunc(boxes[4*s:4*s+4], func(v float32) bool { return v != 0 }) {
				t.Errorf("padding slot %d: label %d src %d valid %d box %v", s, labels[s], src[s], valid[s], boxes[4*s:4*s+4])
			}
		}
	}
}

// TestLossKernelsOnHarness checks LossTargets, LossAssign (FG, slots,
// labels, boxes, scores, NumFG, ScoreSum), LossClsBox (terms and
// gradients) and LossCombine of the kernels on the CPU harness against
// the Go loss on every laCases batch. The bar is 1e-6 relative: float64
// arithmetic in the Go order differs only in the last bits of exp, log,
// atan and pow and in the order of the sums, float32 results by an ulp
// (here, with glibc's functions, the assignment and the gradients come
// out bit for bit, the sums within 5e-16).
func TestLossKernelsOnHarness(t *testing.T) {
	be := cudatest.Harness(t)
	checkLossKernels(t, be, 1e-6)
}

// TestLossKernelsOnGPU is the same check on GPU 0 (CUDA's exp, log, atan
// and pow are within two ulps: 1e-5 relative).
func TestLossKernelsOnGPU(t *testing.T) {
	checkLossKernels(t, cudatest.GPU(t), 1e-5)
}

// checkForwardOn runs loss.ForwardOn on be (its device twins) against
// Forward on the host: items, total and every gradient, on every case,
// with nothing crossing but the result, and with buffers reused across
// the batches.
func checkForwardOn(t *testing.T, be *cuda.Backend, tol float64) {
	cfg := loss.DefaultConfig(10)
	crit, _ := loss.NewCriterion(cfg)
	ref, _ := loss.NewCriterion(cfg)
	worst := 0.0
	for _, c := range append(laCases(), laModelCase(t)) {
		t.Run(c.name, func(t *testing.T) {
			want := c.out.Grads()
			wres, err := ref.Forward(c.out, c.tg, want)
			if err != nil {
				t.Fatal(err)
			}
			d := laUpload(be, c)
			var grads [loss.NumOutputs]backend.Buffer
			for i, b := range d.out {
				grads[i] = be.Alloc(b.Len)
			}
			res := be.Alloc(loss.ResultLen)
			before := be.Transfers()
			if err := crit.ForwardOn(loss.OnDevice(be, New(be)), c.out.Geometry, d.out, grads, &d.tg, res); err != nil {
				t.Fatal(err)
			}
			if tr := before.Since(be.Transfers()); tr.Uploads != 0 || tr.Downloads != 0 || crit.HostRoundTrips() != 0 {
				t.Errorf("ForwardOn crossed: %+v, %d round trips", tr, crit.HostRoundTrips())
			}
			items, total := loss.ReadResult(be, res)
			for k := range items {
				e := laRel64(items[k], wres.Items[k])
				worst = max(worst, e)
				if e > tol {
					t.Errorf("item %s = %v, want %v", loss.ComponentNames[k], items[k], wres.Items[k])
				}
			}
			if e := laRel64(total, wres.Total); e > tol {
				t.Errorf("total %v, want %v", total, wres.Total)
			}
			for i, w := range laGrads(want) {
				e, at := laRelWorst(d.floats(grads[i]), w)
				worst = max(worst, e)
				if e > tol {
					t.Errorf("gradient %d: element %d off by %.3g relative", i, at, e)
				}
			}
		})
	}
	t.Logf("worst relative error of items and gradients: %.3g", worst)
}

// TestForwardOnHarness is loss.ForwardOn through the Backend's device
// twins on the CPU harness, against Forward.
func TestForwardOnHarness(t *testing.T) {
	be := cudatest.Harness(t)
	checkForwardOn(t, be, 1e-5)
}

// TestForwardOnGPU is the same on GPU 0, at the 1e-3.
func TestForwardOnGPU(t *testing.T) {
	checkForwardOn(t, cudatest.GPU(t), 1e-3)
}
