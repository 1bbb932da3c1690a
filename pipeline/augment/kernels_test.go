package augment

import (
	"math/rand/v2"
	"testing"
)

// randomGains returns an hsv with gains drawn like the loader's, widened
// so that clipping and hue wrap-around occur.
func randomGains(r *rand.Rand) *hsv {
	var h hsv
	h.set(1+0.2*(2*r.Float64()-1), 1+1.5*(2*r.Float64()-1), 1+1.2*(2*r.Float64()-1))
	return &h
}

// randomRow fills a row with a mix of uniform noise, greys, saturated
// primaries and extremes: every branch of the forward conversion.
func randomRow(r *rand.Rand, p []byte, g, b []byte) {
	for i := range p {
		switch r.IntN(6) {
		case 0:
			v := uint8(r.IntN(256))
			p[i], g[i], b[i] = v, v, v
		case 1:
			p[i], g[i], b[i] = uint8(255*r.IntN(2)), uint8(255*r.IntN(2)), uint8(255*r.IntN(2))
		default:
			p[i], g[i], b[i] = uint8(r.IntN(256)), uint8(r.IntN(256)), uint8(r.IntN(256))
		}
	}
}

// TestHSVRowKernelsMatchGo: the dispatched applyRow (vector kernel plus Go
// tail) must give applyRowGo's bytes exactly, for every length mod 8.
func TestHSVRowKernelsMatchGo(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	var tab hsvTable
	for trial := 0; trial < 200; trial++ {
		tab.build(randomGains(r))
		n := r.IntN(300)
		in := make([]byte, 3*n)
		randomRow(r, in[:n], in[n:2*n], in[2*n:])
		got := append([]byte(nil), in...)
		want := append([]byte(nil), in...)
		tab.applyRow(got[:n], got[n:2*n], got[2*n:])
		tab.applyRowGo(want[:n], want[n:2*n], want[2*n:])
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("trial %d n %d: byte %d (plane %d pixel %d): kernel %d, Go %d", trial, n, i, i/max(n, 1), i%max(n, 1), got[i], want[i])
			}
		}
	}
}

// TestHSVRowKernelsAllColours runs every 24-bit colour through both paths
// under a few gains.
func TestHSVRowKernelsAllColours(t *testing.T) {
	if testing.Short() {
		t.Skip("16M colours × 3 gains")
	}
	r := rand.New(rand.NewPCG(9, 10))
	var tab hsvTable
	const n = 1 << 16
	rr, gg, bb := make([]byte, n), make([]byte, n), make([]byte, n)
	r2, g2, b2 := make([]byte, n), make([]byte, n), make([]byte, n)
	for trial := 0; trial < 3; trial++ {
		tab.build(randomGains(r))
		for hi := 0; hi < 256; hi++ {
			for i := range rr {
				rr[i], gg[i], bb[i] = uint8(hi), uint8(i>>8), uint8(i)
			}
			copy(r2, rr)
			copy(g2, gg)
			copy(b2, bb)
			tab.applyRow(rr, gg, bb)
			tab.applyRowGo(r2, g2, b2)
			for i := range rr {
				if rr[i] != r2[i] || gg[i] != g2[i] || bb[i] != b2[i] {
					t.Fatalf("gains %d colour (%d,%d,%d): kernel (%d,%d,%d), Go (%d,%d,%d)", trial, hi, i>>8, i&255, rr[i], gg[i], bb[i], r2[i], g2[i], b2[i])
				}
			}
		}
	}
}

// BenchmarkHSVRow times one 640-pixel row through the dispatched kernel
// and, as the same-run baseline, the Go reference.
func BenchmarkHSVRow(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 1))
	var tab hsvTable
	tab.build(randomGains(r))
	const n = 640
	p := make([]byte, 3*n)
	randomRow(r, p[:n], p[n:2*n], p[2*n:])
	for _, k := range []struct {
		name string
		goK  bool
	}{{"kernel", false}, {"go", true}} {
		b.Run(k.name, func(b *testing.B) {
			forceGoKernels = k.goK
			defer func() { forceGoKernels = false }()
			b.SetBytes(3 * n)
			for b.Loop() {
				tab.applyRow(p[:n], p[n:2*n], p[2*n:])
			}
		})
	}
}
