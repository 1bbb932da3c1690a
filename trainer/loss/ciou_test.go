package loss

import (
	"math"
	"testing"
)

// ciouFixedAlpha is ciou with the aspect weight alpha frozen at the value
// the real evaluation computes, the function whose gradient grad returns.
func ciouFixedAlpha(a, b [4]float64, alpha float64) float64 {
	_, s := ciou(a, b)
	return s.iou - (s.rho2/s.c2 + s.v*alpha)
}

func TestCIoUGradMatchesFiniteDifferences(t *testing.T) {
	cases := []struct {
		name string
		a, b [4]float64
	}{
		{"overlapping", [4]float64{1, 2, 5, 7}, [4]float64{2, 1, 6, 5}},
		{"contained", [4]float64{0, 0, 10, 10}, [4]float64{2, 3, 5, 6}},
		{"containing", [4]float64{2, 3, 5, 6}, [4]float64{0, 0, 10, 10}},
		{"disjoint", [4]float64{0, 0, 2, 2}, [4]float64{5, 6, 8, 9}},
		{"thin", [4]float64{1, 1, 1.3, 8}, [4]float64{0.5, 2, 2, 6}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, s := ciou(tc.a, tc.b)
			g := s.grad(1)
			for j := 0; j < 4; j++ {
				const h = 1e-6
				ap, am := tc.a, tc.a
				ap[j] += h
				am[j] -= h
				fd := (ciouFixedAlpha(ap, tc.b, s.alpha) - ciouFixedAlpha(am, tc.b, s.alpha)) / (2 * h)
				if math.Abs(fd-g[j]) > 1e-6*max(1, math.Abs(fd)) {
					t.Errorf("d/da[%d] = %.9g, finite difference %.9g", j, g[j], fd)
				}
			}
		})
	}
}

func TestCIoU32AgreesWithFloat64(t *testing.T) {
	boxes := [][2][4]float64{
		{{1, 2, 5, 7}, {2, 1, 6, 5}},
		{{0, 0, 10, 10}, {2, 3, 5, 6}},
		{{100, 40, 180, 120}, {96, 44, 170, 130}},
	}
	for _, bb := range boxes {
		want, _ := ciou(bb[0], bb[1])
		var a, b [4]float32
		for j := range a {
			a[j], b[j] = float32(bb[0][j]), float32(bb[1][j])
		}
		if got := ciou32(a, b); math.Abs(float64(got)-want) > 1e-6 {
			t.Errorf("ciou32(%v,%v) = %v, float64 %v", a, b, got, want)
		}
	}
}
