package augment

import (
	"testing"

	"github.com/segpipe/segpipe/internal/cputime"

	"github.com/segpipe/segpipe/pipeline/order"
)

func benchTiles() []Tile {
	tiles := make([]Tile, 4)
	for i := range tiles {
		w, h := 640, 480
		if i%2 == 1 {
			w, h = 480, 640
		}
		img := &Image{W: w, H: h, Pix: make([]byte, 3*w*h)}
		for k := range img.Pix {
			img.Pix[k] = byte(k*7 + k/3*13 + i)
		}
		tiles[i] = Tile{Img: img}
	}
	return tiles
}

// BenchmarkRender renders 640×640 mosaics; the hsv=off case is the
// baseline that isolates the geometric resampling, and kernels=go the
// same renders with the Go reference kernels (the baseline of the vector
// ones, in the same run); kernels=avx2 skips the AVX-512 kernels on CPUs
// that have them.
func BenchmarkRender(b *testing.B) {
	tiles := benchTiles()
	for _, tc := range []struct {
		name             string
		hsv, goKs, avx2K bool
	}{{"hsv=off", false, false, false}, {"hsv=on", true, false, false},
		{"hsv=off/kernels=avx2", false, false, true}, {"hsv=on/kernels=avx2", true, false, true},
		{"hsv=off/kernels=go", false, true, false}, {"hsv=on/kernels=go", true, true, false}} {
		if tc.avx2K && !haveAVX512 {
			continue
		}
		b.Run(tc.name, func(b *testing.B) {
			forceGoKernels, forceAVX2 = tc.goKs, tc.avx2K
			defer func() { forceGoKernels, forceAVX2 = false, false }()
			cfg := DefaultConfig()
			if !tc.hsv {
				cfg.HSVH, cfg.HSVS, cfg.HSVV = 0, 0, 0
			}
			dst := make([]byte, 3*640*640)
			b.SetBytes(int64(len(dst)))
			c0 := cpuTime()
			defer func() { b.ReportMetric(float64(cpuTime()-c0)/float64(b.N), "cpu-ns/op") }()
			for i := 0; b.Loop(); i++ {
				rng := order.NewRand(1, 2, 3, uint64(i))
				p := NewPlan(&cfg, Train, rng, tiles)
				if err := Render(dst, &p, tiles, 114); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// cpuTime is the process's CPU time in ns: on a shared machine it tracks
// the work done far better than wall time.
func cpuTime() int64 {
	d, _ := cputime.Process()
	return int64(d)
}
