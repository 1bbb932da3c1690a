package loss

import (
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// benchCase builds a variant-n-shaped batch: B images at imgsz² (80
// classes, 32 coefficients, strides 8/16/32, prototypes at stride 4,
// semantic logits at stride 8), nGT elliptical instances per image listed
// by decreasing area, and predictions that roughly fit them.
func benchCase(B, imgsz, nGT int) (*Outputs, *Targets) {
	rng := rand.New(rand.NewPCG(uint64(B), uint64(imgsz)))
	g := Geometry{B: B, NC: 80, NM: 32,
		Levels: []Level{{imgsz / 8, imgsz / 8, 8}, {imgsz / 16, imgsz / 16, 16}, {imgsz / 32, imgsz / 32, 32}},
		ProtoH: imgsz / 4, ProtoW: imgsz / 4, SemH: imgsz / 8, SemW: imgsz / 8}
	A := g.Anchors()
	out := &Outputs{Geometry: g}
	for _, br := range []*Branch{&out.One2Many, &out.One2One} {
		br.Boxes = make([]float32, B*4*A)
		for i := range br.Boxes {
			br.Boxes[i] = 0.5 + 3*rng.Float32()
		}
		br.Scores = make([]float32, B*g.NC*A)
		for i := range br.Scores {
			br.Scores[i] = float32(rng.NormFloat64()) - 4
		}
		br.Coef = make([]float32, B*g.NM*A)
		for i := range br.Coef {
			br.Coef[i] = float32(rng.NormFloat64())
		}
	}
	out.Proto = make([]float32, B*g.NM*g.ProtoH*g.ProtoW)
	for i := range out.Proto {
		out.Proto[i] = float32(rng.NormFloat64())
	}
	out.Semseg = make([]float32, B*g.NC*g.SemH*g.SemW)
	for i := range out.Semseg {
		out.Semseg[i] = float32(rng.NormFloat64())
	}
	tg := &Targets{}
	hw := g.ProtoH * g.ProtoW
	S := float32(imgsz)
	for b := 0; b < B; b++ {
		tg.BoxesPerImage = append(tg.BoxesPerImage, nGT)
		side := S / 2
		for j := 0; j < nGT; j++ {
			w, h := side*(0.5+0.5*rng.Float32()), side*(0.5+0.5*rng.Float32())
			x, y := rng.Float32()*(S-w), rng.Float32()*(S-h)
			side *= 0.85
			tg.Boxes = append(tg.Boxes, x, y, x+w, y+h)
			tg.Classes = append(tg.Classes, int32(rng.IntN(g.NC)))
			m := make([]uint8, hw)
			cx, cy, rx, ry := (x+w/2)/4, (y+h/2)/4, w/8, h/8
			for r := int(y / 4); r < min(int((y+h)/4)+1, g.ProtoH); r++ {
				for c := int(x / 4); c < min(int((x+w)/4)+1, g.ProtoW); c++ {
					dx, dy := (float32(c)+0.5-cx)/rx, (float32(r)+0.5-cy)/ry
					if dx*dx+dy*dy <= 1 {
						m[r*g.ProtoW+c] = 1
					}
				}
			}
			tg.Masks = append(tg.Masks, m...)
		}
	}
	return out, tg
}

func benchLoss(b *testing.B, B, imgsz, nGT int, withGrad bool) {
	out, tg := benchCase(B, imgsz, nGT)
	c, err := NewCriterion(DefaultConfig(100))
	if err != nil {
		b.Fatal(err)
	}
	var grads *Grads
	if withGrad {
		grads = out.Grads()
	}
	if _, err := c.Forward(out, tg, grads); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := c.Forward(out, tg, grads); err != nil {
			b.Fatal(err)
		}
	}
}

// benchLossOnBackend times what a step pays for the loss on the CPU
// backend: the targets' upload, ForwardOn (forward+backward) and the
// result's download.
func benchLossOnBackend(b *testing.B, B, imgsz, nGT int) {
	out, tg := benchCase(B, imgsz, nGT)
	c, err := NewCriterion(DefaultConfig(100))
	if err != nil {
		b.Fatal(err)
	}
	d := newOnBackend(cpu.New(), out)
	if _, _, _, err := d.run(c, out.Geometry, tg, true); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.tg.Upload(d.be, tg)
		if err := c.ForwardOn(onOf(d.be), out.Geometry, d.out, d.grads, &d.tg, d.res); err != nil {
			b.Fatal(err)
		}
		ReadResult(d.be, d.res)
	}
}

// BenchmarkLoss times the full E2E loss per batch, forward+backward, with
// the forward alone as the same-run baseline, and forward+backward as a
// step runs it on the CPU backend. Variant-n shapes, 8 GTs per image.
func BenchmarkLoss(b *testing.B) {
	b.Run("b8-640/forward+backward", func(b *testing.B) { benchLoss(b, 8, 640, 8, true) })
	b.Run("b8-640/on-cpu-backend", func(b *testing.B) { benchLossOnBackend(b, 8, 640, 8) })
	b.Run("b8-640/forward", func(b *testing.B) { benchLoss(b, 8, 640, 8, false) })
	b.Run("b2-128/forward+backward", func(b *testing.B) { benchLoss(b, 2, 128, 6, true) })
}

// BenchmarkAssigner times the batched assigner against the brute-force
// per-image reference (sort-based top-k) on the same one-to-many input.
func BenchmarkAssigner(b *testing.B) {
	out, tg := benchCase(8, 640, 8)
	c, _ := NewCriterion(DefaultConfig(100))
	if _, err := c.Forward(out, tg, nil); err != nil {
		b.Fatal(err)
	}
	in := &AssignInput{B: 8, A: out.Anchors(), NC: 80, M: c.tg.M,
		PdScores: append([]float32(nil), c.br.probs...), PdBoxes: append([]float32(nil), c.br.pdPx...),
		Anchors: append([]float32(nil), c.br.anchorsPx...), GTLabels: c.tg.labels, GTBoxes: c.tg.boxes, MaskGT: c.tg.valid}
	b.Run("batched", func(b *testing.B) {
		as, _ := NewAssigner(One2ManyAssigner())
		if _, err := as.Assign(in); err != nil { // size the buffers
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := as.Assign(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("brute-force", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			refAssign(One2ManyAssigner(), in)
		}
	})
}
