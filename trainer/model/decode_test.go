package model

import (
	"math"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// TestDecodeAgainstBruteForce checks Decode against the reference rule
// written the slow way: rank anchors by best score, keep k, rank all their
// (anchor, class) pairs, keep k.
func TestDecodeAgainstBruteForce(t *testing.T) {
	m, _ := New(Config{Variant: "n", Classes: 6, Seed: 8})
	out, err := m.Forward(nil, randomInput(5, 2, 3, 64, 64), Eval)
	if err != nil {
		t.Fatal(err)
	}
	na := out.One2One.Scores.Shape[2] // 64 + 16 + 4
	for _, maxDet := range []int{1, 7, 300} {
		got, err := Decode(out, maxDet)
		if err != nil {
			t.Fatal(err)
		}
		k := min(maxDet, na)
		for n := range 2 {
			score := func(a, c int) float32 { return out.One2One.Scores.Host()[n*6*na+c*na+a] }
			bestOf := func(a int) float32 {
				m := float32(math.Inf(-1))
				for c := range 6 {
					m = max(m, score(a, c))
				}
				return m
			}
			// Brute force: anchor a is kept iff fewer than k anchors beat it.
			kept := map[int]bool{}
			for a := range na {
				beat := 0
				for b := range na {
					if bestOf(b) > bestOf(a) || (bestOf(b) == bestOf(a) && b < a) {
						beat++
					}
				}
				if beat < k {
					kept[a] = true
				}
			}
			if len(got[n]) != k {
				t.Fatalf("maxDet %d: %d detections, want %d", maxDet, len(got[n]), k)
			}
			for i, d := range got[n] {
				if !kept[d.Anchor] {
					t.Errorf("detection %d from anchor %d, which is not among the top %d", i, d.Anchor, k)
				}
				// Exactly i pairs of kept anchors rank above it.
				above := 0
				s := score(d.Anchor, d.Class)
				for a := range kept {
					for c := range 6 {
						v := score(a, c)
						if v > s || (v == s && (a < d.Anchor || (a == d.Anchor && c < d.Class))) {
							above++
						}
					}
				}
				if above != i {
					t.Errorf("detection %d (anchor %d class %d) has %d pairs above it", i, d.Anchor, d.Class, above)
				}
				if want := sigmoid32(s); d.Score != want {
					t.Errorf("score %v, want %v", d.Score, want)
				}
			}
		}
	}
}

func TestDecodeBoxGeometry(t *testing.T) {
	// One image, 64×64 input: grids 8², 4², 2²; put distances on anchor 9
	// (P3 cell x=1, y=1, stride 8) and on the first P5 anchor (stride 32).
	na := 64 + 16 + 4
	out := &Output{Feats: [3]*tensor.Tensor{shaped(1, 1, 8, 8), shaped(1, 1, 4, 4), shaped(1, 1, 2, 2)}}
	out.One2One.Boxes = tensor.ZerosOn(cpu.Default(), 1, 4, na)
	out.One2One.Scores = tensor.FullOn(cpu.Default(), -10, 1, 2, na)
	out.One2One.MaskCoefficients = tensor.ZerosOn(cpu.Default(), 1, NumMasks, na)
	set := func(a int, l, tp, r, b float32) {
		for i, v := range []float32{l, tp, r, b} {
			out.One2One.Boxes.Host()[i*na+a] = v
		}
	}
	set(9, 0.5, 1, 1.5, 2)
	out.One2One.Scores.Host()[1*na+9] = 3 // class 1
	set(80, 0.5, 0.5, 0.5, 0.5)
	out.One2One.Scores.Host()[0*na+80] = 1 // class 0
	out.One2One.MaskCoefficients.Host()[5*na+80] = 0.25
	dets, err := Decode(out, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []Detection{
		{Box: [4]float32{(1.5 - 0.5) * 8, (1.5 - 1) * 8, (1.5 + 1.5) * 8, (1.5 + 2) * 8}, Class: 1, Anchor: 9},
		{Box: [4]float32{0, 0, 32, 32}, Class: 0, Anchor: 80},
	}
	for i, w := range want {
		d := dets[0][i]
		if d.Box != w.Box || d.Class != w.Class || d.Anchor != w.Anchor {
			t.Errorf("detection %d: %+v, want %+v", i, d, w)
		}
	}
	if dets[0][1].Coeffs[5] != 0.25 {
		t.Errorf("coefficients %v", dets[0][1].Coeffs)
	}
	if _, err := Decode(out, 0); err == nil {
		t.Error("maxDet 0 accepted")
	}
}
