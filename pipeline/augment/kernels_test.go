package augment

import (
	"image/jpeg"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/segpipe/segpipe/internal/testenv/shared"

	"github.com/segpipe/segpipe/pipeline/order"
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

// eachVectorPath runs f once with the dispatchers as they are (the widest
// kernels this CPU has) and, where AVX-512 kernels are in use, once more
// with them skipped: every vector path is compared with the Go one.
func eachVectorPath(t *testing.T, f func(t *testing.T)) {
	t.Run("widest", f)
	if haveAVX512 {
		t.Run("avx2", func(t *testing.T) {
			forceAVX2 = true
			defer func() { forceAVX2 = false }()
			f(t)
		})
	}
}

// TestHSVRowKernelsMatchGo: the dispatched applyRow (vector kernels plus Go
// tail) must give applyRowGo's bytes exactly, for every length mod 16.
func TestHSVRowKernelsMatchGo(t *testing.T) { eachVectorPath(t, testHSVRowKernelsMatchGo) }

func testHSVRowKernelsMatchGo(t *testing.T) {
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
	eachVectorPath(t, testHSVRowKernelsAllColours)
}

func testHSVRowKernelsAllColours(t *testing.T) {
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
	benchKernelAndGo(b, 3*n, func() { tab.applyRow(p[:n], p[n:2*n], p[2*n:]) })
}

// benchKernelAndGo runs op as sub-benchmarks "kernel" (the dispatched
// vector kernels), "kernel=avx2" (the AVX2 ones, on CPUs that also have
// AVX-512 kernels) and "go" (the Go references), bytes per op for the
// throughput column (0: none), and the process's CPU time per op.
func benchKernelAndGo(b *testing.B, bytes int64, op func()) {
	for _, k := range []struct {
		name       string
		goK, avx2K bool
	}{{"kernel", false, false}, {"kernel=avx2", false, true}, {"go", true, false}} {
		if k.avx2K && !haveAVX512 {
			continue
		}
		b.Run(k.name, func(b *testing.B) {
			forceGoKernels, forceAVX2 = k.goK, k.avx2K
			defer func() { forceGoKernels, forceAVX2 = false, false }()
			if bytes > 0 {
				b.SetBytes(bytes)
			}
			c0 := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op") }()
			for b.Loop() {
				op()
			}
		})
	}
}

// TestVBlendKernelMatchesGo: exact equality on random rows and weights.
func TestVBlendKernelMatchesGo(t *testing.T) { eachVectorPath(t, testVBlendKernelMatchesGo) }

func testVBlendKernelMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 300; trial++ {
		n := r.IntN(200)
		top, bot := make([]byte, n+3), make([]byte, n+3)
		for i := range top {
			top[i], bot[i] = uint8(r.IntN(256)), uint8(r.IntN(256))
		}
		wy := uint32(r.IntN(256))
		got, want := make([]uint32, n), make([]uint32, n)
		vblend(got, top, bot, 256-wy, wy)
		vblendGo(want, top, bot, 256-wy, wy)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("trial %d n %d wy %d: value %d: kernel %d, Go %d", trial, n, wy, i, got[i], want[i])
			}
		}
	}
}

// TestHSampleKernelMatchesGo: exact equality for random spans, both
// directions (a horizontal flip steps backwards), scales from 0.2 to 4,
// and spans that run off either edge of the image (replicated columns);
// every other row has the slack past it that the AVX-512 kernel needs
// (sampleSpanRow's), the others go to the AVX2 kernel.
func TestHSampleKernelMatchesGo(t *testing.T) { eachVectorPath(t, testHSampleKernelMatchesGo) }

func testHSampleKernelMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 2000; trial++ {
		w := 1 + r.IntN(700)
		maxX := w - 1
		n := r.IntN(300)
		dU := int64((0.2 + 3.8*r.Float64()) * 65536)
		if r.IntN(2) == 0 {
			dU = -dU
		}
		U := int64((r.Float64()*1.4 - 0.2) * float64(w) * 65536)
		if n == 0 {
			continue
		}
		// sc covers the columns the span touches and the leading edge pair,
		// as sampleSpanRow sizes it.
		Ue := U + int64(n-1)*dU
		xa := min(max(int(min(U, Ue)>>16), 0), maxX)
		xb := min(max(int(max(U, Ue)>>16)+1, 0), maxX)
		sc := make([]uint32, 3*(xb-xa+2), 3*(xb-xa+2)+hsampleSlack*(trial%2))
		for i := range sc[:cap(sc)] {
			sc[:cap(sc)][i] = uint32(r.IntN(255*256+1)) ^ 0x8000 | (uint32(r.IntN(255*256+1))^0x8000)<<16
		}
		got, want := make([]byte, 3*n), make([]byte, 3*n)
		hsample(got[:n], got[n:2*n], got[2*n:], sc, U, dU, xa, maxX)
		hsampleGo(want[:n], want[n:2*n], want[2*n:], sc, U, dU, xa, maxX)
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("trial %d w %d n %d U %d dU %d: byte %d: kernel %d, Go %d", trial, w, n, U, dU, i, got[i], want[i])
			}
		}
	}
}

// TestRenderKernelsMatchGo: whole renders (mosaic, letterbox, flips, HSV
// on and off) give the same bytes with the vector kernels as with the Go
// ones.
func TestRenderKernelsMatchGo(t *testing.T) { eachVectorPath(t, testRenderKernelsMatchGo) }

func testRenderKernelsMatchGo(t *testing.T) {
	tiles := benchTiles()
	cfg := DefaultConfig()
	cfg.ImgSz = 320
	s := cfg.ImgSz
	a, b := make([]byte, 3*s*s), make([]byte, 3*s*s)
	for seed := uint64(0); seed < 30; seed++ {
		for _, mode := range []Mode{Train, TrainNoMosaic, Val} {
			rng := order.NewRand(seed, 5, 0, 0)
			ts := tiles[:1]
			if WantMosaic(&cfg, mode, rng) {
				ts = tiles
			}
			p := NewPlan(&cfg, mode, rng, ts)
			if i := renderBoth(t, &p, ts, a, b, &forceGoKernels); i >= 0 {
				t.Fatalf("seed %d mode %d: byte %d: kernels %d, Go %d", seed, mode, i, a[i], b[i])
			}
		}
	}
}

// renderBoth renders p into a, then with *force set into b, and returns
// the first byte where they differ (−1: none).
func renderBoth(t *testing.T, p *Plan, ts []Tile, a, b []byte, force *bool) int {
	t.Helper()
	if err := Render(a, p, ts, 114); err != nil {
		t.Fatal(err)
	}
	*force = true
	err := Render(b, p, ts, 114)
	*force = false
	if err != nil {
		t.Fatal(err)
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// TestCoefRowKernelMatchesGo: tables built by the vector row kernel equal
// those of coefRowGo, for the loader's gains and for wide ones (gains
// from 0 to 3: saturation clipped at both ends, hue wrapping).
func TestCoefRowKernelMatchesGo(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	var a, b hsvTable
	for trial := 0; trial < 300; trial++ {
		g := randomGains(r)
		if trial%2 == 1 {
			g = new(hsv)
			g.set(2*r.Float64(), 3*r.Float64(), 3*r.Float64())
		}
		a.build(g)
		forceGoKernels = true
		b.build(g)
		forceGoKernels = false
		for i := range a.coef {
			if a.coef[i] != b.coef[i] {
				t.Fatalf("trial %d: hue %d saturation %d: kernel %#x, Go %#x", trial, i>>8, i&255, a.coef[i], b.coef[i])
			}
		}
	}
}

// BenchmarkHSVTableBuild times the per-image table build, vector kernel
// and Go reference in the same run.
func BenchmarkHSVTableBuild(b *testing.B) {
	g := randomGains(rand.New(rand.NewPCG(1, 1)))
	tab := new(hsvTable)
	benchKernelAndGo(b, 0, func() { tab.build(g) })
}

// BenchmarkHSVImage jitters whole real COCO images (planar, row by row,
// as Render does): unlike BenchmarkHSVRow's noise, natural colours are
// spatially coherent, which decides how the coefficient lookups hit the
// caches. Each op restores the image first (a copy, the same in every
// case). cpu-ns/op is the process's CPU time per op.
func BenchmarkHSVImage(b *testing.B) {
	dir := shared.Path(b, "data/coco-tiny/train2017")
	names, err := filepath.Glob(filepath.Join(dir, "*.jpg"))
	if err != nil || len(names) < 4 {
		b.Skipf("coco-tiny images: %v", err)
	}
	type planar struct {
		w, h int
		pix  []byte // R, G, B planes
	}
	var imgs []planar
	for _, name := range names[:4] {
		f, err := os.Open(name)
		if err != nil {
			b.Fatal(err)
		}
		im, err := jpeg.Decode(f)
		f.Close()
		if err != nil {
			b.Fatal(err)
		}
		r := im.Bounds()
		p := planar{w: r.Dx(), h: r.Dy(), pix: make([]byte, 3*r.Dx()*r.Dy())}
		n := p.w * p.h
		for y := 0; y < p.h; y++ {
			for x := 0; x < p.w; x++ {
				cr, cg, cb, _ := im.At(r.Min.X+x, r.Min.Y+y).RGBA()
				i := y*p.w + x
				p.pix[i], p.pix[n+i], p.pix[2*n+i] = uint8(cr>>8), uint8(cg>>8), uint8(cb>>8)
			}
		}
		imgs = append(imgs, p)
	}
	var tab hsvTable
	tab.build(randomGains(rand.New(rand.NewPCG(1, 1))))
	work := make([]byte, 3*640*640)
	var bytes int64
	for _, p := range imgs {
		bytes += int64(len(p.pix))
	}
	benchKernelAndGo(b, bytes, func() {
		for _, p := range imgs {
			n := p.w * p.h
			w := work[:len(p.pix)]
			copy(w, p.pix)
			for y := 0; y < p.h; y++ {
				o := y * p.w
				tab.applyRow(w[o:o+p.w], w[n+o:n+o+p.w], w[2*n+o:2*n+o+p.w])
			}
		}
	})
}

// BenchmarkVBlendRow blends one 640-column source row pair (1,920 values).
func BenchmarkVBlendRow(b *testing.B) {
	r := rand.New(rand.NewPCG(2, 2))
	const n = 3 * 640
	top, bot := make([]byte, n+3), make([]byte, n+3)
	for i := range top {
		top[i], bot[i] = uint8(r.IntN(256)), uint8(r.IntN(256))
	}
	sc := make([]uint32, n)
	benchKernelAndGo(b, n, func() { vblend(sc, top, bot, 100, 156) })
}
