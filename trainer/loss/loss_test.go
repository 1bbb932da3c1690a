package loss

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// smallGeometry is a 64×64 input: 84 anchors, 16×16 prototypes.
func smallGeometry(B int) Geometry {
	return Geometry{B: B, NC: 3, NM: 4, Levels: []Level{{8, 8, 8}, {4, 4, 16}, {2, 2, 32}},
		ProtoH: 16, ProtoW: 16, SemH: 8, SemW: 8}
}

// randomCase builds outputs whose boxes roughly fit the GTs (so that many
// anchors are positive) and targets with counts[b] elliptical instances in
// image b, listed by decreasing area.
func randomCase(rng *rand.Rand, counts []int) (*Outputs, *Targets) {
	g := smallGeometry(len(counts))
	A := g.Anchors()
	norm := func(s float64) float32 { return float32(rng.NormFloat64() * s) }
	out := &Outputs{Geometry: g}
	for _, br := range []*Branch{&out.One2Many, &out.One2One} {
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
	tg := &Targets{BoxesPerImage: counts}
	hw := g.ProtoH * g.ProtoW
	for _, n := range counts {
		side := float32(56)
		for j := 0; j < n; j++ {
			w, h := side*(0.6+0.4*rng.Float32()), side*(0.6+0.4*rng.Float32())
			x, y := rng.Float32()*(64-w), rng.Float32()*(64-h)
			side *= 0.8
			tg.Boxes = append(tg.Boxes, x, y, x+w, y+h)
			tg.Classes = append(tg.Classes, int32(rng.IntN(g.NC)))
			cx, cy, rx, ry := (x+w/2)/4, (y+h/2)/4, w/8, h/8
			for p := 0; p < hw; p++ {
				px, py := float32(p%g.ProtoW)+0.5, float32(p/g.ProtoW)+0.5
				dx, dy := (px-cx)/rx, (py-cy)/ry
				var v uint8
				if dx*dx+dy*dy <= 1 {
					v = 1
				}
				tg.Masks = append(tg.Masks, v)
			}
		}
	}
	return out, tg
}

// TestGradientsMatchFiniteDifferences perturbs mask coefficients,
// prototypes and semantic logits (inputs the assignment does not depend on)
// and compares the central difference of Total with the analytic gradient.
// The one2one branch reads prototypes and semantic logits detached, which a
// finite difference cannot see, so those two are probed with o2o = 0.
func TestGradientsMatchFiniteDifferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	out, tg := randomCase(rng, []int{2, 0, 4})
	onlyO2M := DefaultConfig(10)
	onlyO2M.O2MStart, onlyO2M.O2MEnd = 1, 1
	for _, cfg := range []struct {
		name   string
		cfg    Config
		probes []string
	}{
		{"default", DefaultConfig(10), []string{"one2many.coef", "one2one.coef"}},
		{"o2m only", onlyO2M, []string{"one2many.coef", "proto", "semseg"}},
	} {
		c, err := NewCriterion(cfg.cfg)
		if err != nil {
			t.Fatal(err)
		}
		grads := out.Grads()
		if _, err := c.Forward(out, tg, grads); err != nil {
			t.Fatal(err)
		}
		total := func() float64 {
			r, err := c.Forward(out, tg, nil)
			if err != nil {
				t.Fatal(err)
			}
			return r.Total
		}
		fields := map[string][2][]float32{
			"one2many.coef": {out.One2Many.Coef, grads.One2Many.Coef},
			"one2one.coef":  {out.One2One.Coef, grads.One2One.Coef},
			"proto":         {out.Proto, grads.Proto},
			"semseg":        {out.Semseg, grads.Semseg},
		}
		for _, name := range cfg.probes {
			x, g := fields[name][0], fields[name][1]
			checked := 0
			for trial := 0; trial < 400 && checked < 20; trial++ {
				i := rng.IntN(len(x))
				if g[i] == 0 && trial%4 != 0 {
					continue // mostly probe elements that receive gradient
				}
				checked++
				x0 := x[i]
				x[i] = x0 + 1e-2
				xp, lp := x[i], total()
				x[i] = x0 - 1e-2
				xm, lm := x[i], total()
				x[i] = x0
				fd := (lp - lm) / float64(xp-xm)
				if math.Abs(fd-float64(g[i])) > 1e-4*max(1e-2, math.Abs(fd)) {
					t.Errorf("%s: %s[%d]: gradient %.7g, finite difference %.7g", cfg.name, name, i, g[i], fd)
				}
			}
		}
	}
}

// refMaskLoss is the mask term computed image by image over the unpadded
// positives, straight from the spec; the batched, padded implementation
// must equal it in value and gradient.
func refMaskLoss(g *Geometry, asg *Assignment, tg *Targets, coef, proto []float32) (float64, []float64, []float64) {
	A, NM, hw := asg.A, g.NM, g.ProtoH*g.ProtoW
	imgH, imgW := g.ImageSize()
	dCoef, dProto := make([]float64, len(coef)), make([]float64, len(proto))
	total := 0.0
	off := 0
	for b := 0; b < g.B; b++ {
		n := tg.BoxesPerImage[b]
		// Ownership: of the instances covering a pixel, the one with the
		// smallest mask area; of equal areas, the later one.
		area := make([]int, n)
		for j := range n {
			for p := 0; p < hw; p++ {
				area[j] += int(tg.Masks[(off+j)*hw+p])
			}
		}
		own := make([]int, hw)
		for p := 0; p < hw; p++ {
			for j := 0; j < n; j++ {
				if tg.Masks[(off+j)*hw+p] != 0 && (own[p] == 0 || area[j] <= area[own[p]-1]) {
					own[p] = j + 1
				}
			}
		}
		npos := 0
		for a := 0; a < A; a++ {
			if asg.FG[b*A+a] {
				npos++
			}
		}
		img := 0.0
		for a := 0; a < A; a++ {
			if !asg.FG[b*A+a] {
				continue
			}
			j := int(asg.GTIdx[b*A+a])
			bx := tg.Boxes[(off+j)*4 : (off+j)*4+4]
			area := float64((bx[2]/imgW - bx[0]/imgW) * (bx[3]/imgH - bx[1]/imgH))
			x1, y1 := bx[0]/imgW*float32(g.ProtoW), bx[1]/imgH*float32(g.ProtoH)
			x2, y2 := bx[2]/imgW*float32(g.ProtoW), bx[3]/imgH*float32(g.ProtoH)
			if npos < 50 {
				x1, y1 = float32(math.RoundToEven(float64(x1))), float32(math.RoundToEven(float64(y1)))
				x2, y2 = float32(math.RoundToEven(float64(x2))), float32(math.RoundToEven(float64(y2)))
			}
			for p := 0; p < hw; p++ {
				r, cc := float32(p/g.ProtoW), float32(p%g.ProtoW)
				if !(cc >= x1 && cc < x2 && r >= y1 && r < y2) {
					continue
				}
				z := 0.0
				for k := 0; k < NM; k++ {
					z += float64(coef[(b*NM+k)*A+a]) * float64(proto[(b*NM+k)*hw+p])
				}
				gt := 0.0
				if own[p] == j+1 {
					gt = 1
				}
				img += bceLogits(z, gt) / float64(hw) / area
				dz := (sigmoid(z) - gt) / float64(hw) / area
				for k := 0; k < NM; k++ {
					dCoef[(b*NM+k)*A+a] += dz * float64(proto[(b*NM+k)*hw+p])
					dProto[(b*NM+k)*hw+p] += dz * float64(coef[(b*NM+k)*A+a])
				}
			}
		}
		total += img
		off += n
	}
	for i := range dCoef {
		dCoef[i] /= float64(asg.NumFG)
	}
	for i := range dProto {
		dProto[i] /= float64(asg.NumFG)
	}
	return total / float64(asg.NumFG), dCoef, dProto
}

// TestMaskLossPaddingMatchesUnpaddedPerImage is the sentinel test: images
// have different positive counts, so the batched layout carries padding
// rows with gt_index = -1. Used as an index, -1 would read the previous
// image's last GT slot, a neighbouring anchor's coefficients, or (as GT
// slot 0 of the ownership map) the background, and the value or gradient
// would move away from the per-image reference below.
func TestMaskLossPaddingMatchesUnpaddedPerImage(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	out, tg := randomCase(rng, []int{1, 0, 5, 3})
	c, _ := NewCriterion(DefaultConfig(10))
	grads := out.Grads()
	res, err := c.Forward(out, tg, grads)
	if err != nil {
		t.Fatal(err)
	}
	asg, _ := c.Assignments()
	ms := &c.br.mask
	ms.gather(asg)
	padRows := 0
	for _, j := range ms.gt {
		if j < 0 {
			padRows++
		}
	}
	if padRows == 0 || ms.count[1] != 0 {
		t.Fatalf("test case has no padding rows (counts %v, pmax %d)", ms.count, ms.pmax)
	}
	want, dCoef, dProto := refMaskLoss(&out.Geometry, asg, tg, out.One2Many.Coef, out.Proto)
	if got := res.One2Many[Seg] / 7.5 / 4; math.Abs(got-want) > 1e-9*max(1, want) {
		t.Errorf("one2many seg %.12g, per-image reference %.12g", got, want)
	}
	// The coefficient gradient comes from the mask term alone; the
	// prototypes get it from the one2many mask term alone.
	scale := res.O2M * 4 * 7.5
	for i, v := range dCoef {
		if math.Abs(float64(grads.One2Many.Coef[i])-scale*v) > 1e-5*max(1e-3, math.Abs(scale*v)) {
			t.Fatalf("coef grad [%d] = %.9g, per-image reference %.9g", i, grads.One2Many.Coef[i], scale*v)
		}
	}
	for i, v := range dProto {
		if math.Abs(float64(grads.Proto[i])-scale*v) > 1e-5*max(1e-3, math.Abs(scale*v)) {
			t.Fatalf("proto grad [%d] = %.9g, per-image reference %.9g", i, grads.Proto[i], scale*v)
		}
	}
}

// TestNoInstances covers a batch without any GT: only the class term is
// non-zero (BCE against zeros, divided by 1) and only scores get gradient.
func TestNoInstances(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	out, tg := randomCase(rng, []int{0, 0})
	c, _ := NewCriterion(DefaultConfig(10))
	grads := out.Grads()
	res, err := c.Forward(out, tg, grads)
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	for _, x := range out.One2Many.Scores {
		want += bceLogits(float64(x), 0)
	}
	want *= 0.5 * 2
	if math.Abs(res.One2Many[Cls]-want) > 1e-9*want {
		t.Errorf("cls %.9g, want %.9g", res.One2Many[Cls], want)
	}
	for _, k := range []int{Box, Seg, DFL, Semseg} {
		if res.One2Many[k] != 0 || res.One2One[k] != 0 {
			t.Errorf("%s = %v/%v with no instances", ComponentNames[k], res.One2Many[k], res.One2One[k])
		}
	}
	for _, s := range [][]float32{grads.One2Many.Boxes, grads.One2Many.Coef, grads.Proto, grads.Semseg} {
		for _, v := range s {
			if v != 0 {
				t.Fatal("gradient on a non-score output with no instances")
			}
		}
	}
}

func TestTargetsRejected(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	base := func() (*Outputs, *Targets) { return randomCase(rng, []int{2, 1}) }
	cases := []struct {
		name, want string
		edit       func(*Targets)
	}{
		{"wrong image count", "boxes_per_image", func(t *Targets) { t.BoxesPerImage = []int{3} }},
		{"class out of range", "image 1 instance 0: class 7", func(t *Targets) { t.Classes[2] = 7 }},
		{"empty box", "image 0 instance 1", func(t *Targets) { t.Boxes[6] = t.Boxes[4] }},
		{"nan box", "not finite", func(t *Targets) { t.Boxes[0] = float32(math.NaN()) }},
		{"short masks", "mask stack", func(t *Targets) { t.Masks = t.Masks[:10] }},
		{"negative count", "negative", func(t *Targets) { t.BoxesPerImage = []int{4, -1} }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, tg := base()
			tc.edit(tg)
			c, _ := NewCriterion(DefaultConfig(10))
			_, err := c.Forward(out, tg, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want mention of %q", err, tc.want)
			}
			// The same error, not a panic, from the loss on a backend.
			for _, nb := range lossBackends() {
				_, _, _, berr := newOnBackend(nb.be, out).run(c, out.Geometry, tg, true)
				if berr == nil || berr.Error() != err.Error() {
					t.Errorf("%s: error %v, want %v", nb.name, berr, err)
				}
			}
		})
	}
}

// TestProgLossSchedule compares the o2m weight of every epoch with the
// reference's schedule in losses.json.
func TestProgLossSchedule(t *testing.T) {
	dir := goldenDir(t)
	raw, err := os.ReadFile(filepath.Join(dir, "losses.json"))
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Sched [][2]float64 `json:"schedule_o2m_by_epoch"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	c, _ := NewCriterion(DefaultConfig(100))
	for _, e := range v.Sched {
		o2m, o2o := c.Weights()
		if math.Abs(o2m-e[1]) > 1e-12 || math.Abs(o2o-max(1-e[1], 0)) > 1e-12 {
			t.Fatalf("epoch %v: o2m %v, want %v", e[0], o2m, e[1])
		}
		c.Update()
	}
	if len(v.Sched) != 100 {
		t.Fatalf("schedule has %d epochs", len(v.Sched))
	}
}

// The loader lists instances in annotation order, the reference by
// decreasing mask area: the loss composes overlapping masks by area, so
// reversing each image's instances leaves every loss item unchanged.
func TestLossIndependentOfInstanceOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	out, tg := randomCase(rng, []int{4, 6})
	hw := out.Geometry.ProtoH * out.Geometry.ProtoW
	rev := &Targets{BoxesPerImage: tg.BoxesPerImage}
	off := 0
	for _, n := range tg.BoxesPerImage {
		for j := off + n - 1; j >= off; j-- {
			rev.Classes = append(rev.Classes, tg.Classes[j])
			rev.Boxes = append(rev.Boxes, tg.Boxes[4*j:4*j+4]...)
			rev.Masks = append(rev.Masks, tg.Masks[j*hw:(j+1)*hw]...)
		}
		off += n
	}
	items := func(tg *Targets) Result {
		c, err := NewCriterion(DefaultConfig(10))
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.Forward(out, tg, out.Grads())
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := items(tg), items(rev)
	for i := range a.Items {
		if math.Abs(a.Items[i]-b.Items[i]) > 1e-6*max(1, math.Abs(a.Items[i])) {
			t.Errorf("item %d: %.9g with instances reversed, %.9g in order", i, b.Items[i], a.Items[i])
		}
	}
}

// Crowd instances are no targets: flagging some must give exactly the loss
// and gradients of the batch without them.
func TestCrowdInstancesLeftOut(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	out, tg := randomCase(rng, []int{4, 6})
	hw := out.Geometry.ProtoH * out.Geometry.ProtoW
	flagged := *tg
	flagged.IsCrowd = make([]uint8, len(tg.Classes))
	kept := &Targets{BoxesPerImage: append([]int(nil), tg.BoxesPerImage...)}
	off := 0
	for i, n := range tg.BoxesPerImage {
		for j := off; j < off+n; j++ {
			if j%3 == 1 {
				flagged.IsCrowd[j] = 1
				kept.BoxesPerImage[i]--
				continue
			}
			kept.Classes = append(kept.Classes, tg.Classes[j])
			kept.Boxes = append(kept.Boxes, tg.Boxes[4*j:4*j+4]...)
			kept.Masks = append(kept.Masks, tg.Masks[j*hw:(j+1)*hw]...)
		}
		off += n
	}
	run := func(tg *Targets) (Result, []float32) {
		c, err := NewCriterion(DefaultConfig(10))
		if err != nil {
			t.Fatal(err)
		}
		g := out.Grads()
		// Twice: the criterion's reused scratch must not leak between calls.
		for range 2 {
			if _, err := c.Forward(out, tg, g); err != nil {
				t.Fatal(err)
			}
		}
		res, err := c.Forward(out, tg, g)
		if err != nil {
			t.Fatal(err)
		}
		return res, append(append([]float32(nil), g.One2Many.Coef...), g.Proto...)
	}
	a, ga := run(&flagged)
	b, gb := run(kept)
	full, _ := run(tg)
	for i := range a.Items {
		if a.Items[i] != b.Items[i] {
			t.Errorf("item %d: %.9g with crowd flags, %.9g without those instances", i, a.Items[i], b.Items[i])
		}
	}
	if a.Items == full.Items {
		t.Error("flagging crowd instances changed nothing")
	}
	for i := range ga {
		if ga[i] != gb[i] {
			t.Fatalf("gradient %d: %g vs %g", i, ga[i], gb[i])
		}
	}
	if len(flagged.IsCrowd) != len(tg.Classes) || flagged.BoxesPerImage[1] != 6 {
		t.Fatal("Forward modified its targets")
	}
}

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}
