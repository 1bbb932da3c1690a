// Package modelcase builds the model-driven inputs that the checks of
// the trainer's device code share: the golden-weights model, a
// deterministic synthetic batch, and a model's forward pass on a backend
// with the loss's view of its head outputs. It serves tests only (the
// loss's device kernels in trainer/loss/losscuda, the whole-system checks
// in trainer/gpucheck), which is why its functions fail the test they are
// given rather than return errors.
package modelcase

import (
	"math/rand/v2"
	"testing"

	"github.com/segpipe/segpipe/trainer/loss"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// GoldenWeights is model.GoldenReference, the n model the PyTorch goldens
// of trainer/model were made from, failing the test on error.
func GoldenWeights(t testing.TB) *model.Model {
	t.Helper()
	m, err := model.GoldenReference()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// SyntheticBatch is a deterministic batch of b images of sz×sz with two
// instances each: random pixels, boxes, and each box's rectangle as its
// mask on the prototype grid (stride 4).
func SyntheticBatch(b, sz int) ([]byte, *loss.Targets) {
	rng := rand.New(rand.NewPCG(13, 17))
	img := make([]byte, b*3*sz*sz)
	for i := range img {
		img[i] = byte(rng.IntN(256))
	}
	hp := sz / 4
	tg := &loss.Targets{}
	for i := 0; i < b; i++ {
		tg.BoxesPerImage = append(tg.BoxesPerImage, 2)
		for k := 0; k < 2; k++ {
			x0, y0 := float32(rng.IntN(sz/2)), float32(rng.IntN(sz/2))
			w, h := float32(16+rng.IntN(sz/2-16)), float32(16+rng.IntN(sz/2-16))
			tg.Boxes = append(tg.Boxes, x0, y0, x0+w, y0+h)
			tg.Classes = append(tg.Classes, int32(rng.IntN(80)))
			m := make([]uint8, hp*hp)
			for y := int(y0) / 4; y < int(y0+h)/4 && y < hp; y++ {
				for x := int(x0) / 4; x < int(x0+w)/4 && x < hp; x++ {
					m[y*hp+x] = 1
				}
			}
			tg.Masks = append(tg.Masks, m...)
		}
	}
	return img, tg
}

// ModelLoss runs m's forward pass in training mode on be over
// SyntheticBatch(b, sz): the tape, the eight head outputs the loss reads
// and, on the host, the loss's view of them and the batch's targets.
func ModelLoss(t testing.TB, be backend.Backend, m *model.Model, b, sz int) (*tensor.Tape, []*tensor.Tensor, *loss.Outputs, *loss.Targets) {
	t.Helper()
	m.To(be)
	img, tg := SyntheticBatch(b, sz)
	tp := tensor.NewTape(be)
	x := tensor.UploadBytes(be, img, 1.0/255, b, 3, sz, sz)
	mo, err := m.Forward(tp, x, model.Train)
	if err != nil {
		t.Fatal(err)
	}
	outs := []*tensor.Tensor{mo.One2Many.Boxes, mo.One2Many.Scores, mo.One2Many.MaskCoefficients,
		mo.One2One.Boxes, mo.One2One.Scores, mo.One2One.MaskCoefficients, mo.Proto, mo.Semseg}
	var h [8][]float32
	for i, o := range outs {
		h[i] = o.ToHost(nil)
	}
	geo := loss.Geometry{B: mo.Proto.Shape[0], NC: m.Config.Classes, NM: mo.Proto.Shape[1],
		ProtoH: mo.Proto.Shape[2], ProtoW: mo.Proto.Shape[3], SemH: mo.Semseg.Shape[2], SemW: mo.Semseg.Shape[3]}
	for i, f := range mo.Feats {
		geo.Levels = append(geo.Levels, loss.Level{H: f.Shape[2], W: f.Shape[3], Stride: float32(model.Strides[i])})
	}
	out := &loss.Outputs{Geometry: geo,
		One2Many: loss.Branch{Boxes: h[0], Scores: h[1], Coef: h[2]},
		One2One:  loss.Branch{Boxes: h[3], Scores: h[4], Coef: h[5]},
		Proto:    h[6], Semseg: h[7]}
	return tp, outs, out, tg
}
