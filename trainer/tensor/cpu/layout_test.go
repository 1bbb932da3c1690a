package cpu

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// naiveCopy walks s one element at a time with a full index vector.
func naiveCopy(s backend.Strided, src, dst []float32) {
	total := 1
	for _, d := range s.Shape {
		total *= d
	}
	idx := make([]int, len(s.Shape))
	for e := 0; e < total; e++ {
		so, do := 0, 0
		for k, i := range idx {
			so += i * s.Src[k]
			do += i * s.Dst[k]
		}
		if s.Accumulate {
			dst[do] += src[so]
		} else {
			dst[do] = src[so]
		}
		for k := len(idx) - 1; k >= 0; k-- {
			idx[k]++
			if idx[k] < s.Shape[k] {
				break
			}
			idx[k] = 0
		}
	}
}

func randVec(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

func TestCopyMatchesElementWalk(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cases := []struct {
		name     string
		s        backend.Strided
		src, dst int
	}{
		{"scalar", backend.Strided{Shape: []int{}, Src: []int{}, Dst: []int{}}, 1, 1},
		{"contiguous", backend.Strided{Shape: []int{3, 5}, Src: []int{5, 1}, Dst: []int{5, 1}}, 15, 15},
		{"transpose", backend.Strided{Shape: []int{4, 3}, Src: []int{1, 4}, Dst: []int{3, 1}}, 12, 12},
		{"permute 4d", backend.Strided{Shape: []int{2, 3, 4, 5}, Src: []int{60, 1, 15, 3}, Dst: []int{60, 20, 5, 1}}, 120, 120},
		{"concat rows", backend.Strided{Shape: []int{3, 2}, Src: []int{2, 1}, Dst: []int{5, 1}}, 6, 15},
		{"broadcast", backend.Strided{Shape: []int{6}, Src: []int{0}, Dst: []int{1}}, 1, 6},
		{"sum axis", backend.Strided{Shape: []int{3, 4, 5}, Src: []int{20, 5, 1}, Dst: []int{5, 0, 1}, Accumulate: true}, 60, 15},
		{"scatter add", backend.Strided{Shape: []int{3, 4}, Src: []int{4, 1}, Dst: []int{1, 3}, Accumulate: true}, 12, 12},
		{"empty", backend.Strided{Shape: []int{3, 0, 2}, Src: []int{0, 2, 1}, Dst: []int{0, 2, 1}}, 1, 1},
	}
	for _, c := range cases {
		for _, be := range []*Kernels{{Workers: 1}, {Workers: 4, MinParallel: 1}} {
			src := randVec(r, c.src)
			want := randVec(r, c.dst)
			got := slices.Clone(want)
			naiveCopy(c.s, src, want)
			be.Copy(c.s, src, got)
			if !slices.Equal(got, want) {
				t.Errorf("%s (workers %d): got %v, want %v", c.name, be.Workers, got, want)
			}
		}
	}
}

func TestElementwiseKernelsMatchLoops(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for _, be := range []*Kernels{{Workers: 1}, {Workers: 3, MinParallel: 1}} {
		x, y0 := randVec(r, 37), randVec(r, 37)
		for _, ab := range [][2]float32{{0.5, 0}, {1, 1}, {-2, 1}, {0.1, 0.9}} {
			got := slices.Clone(y0)
			be.Axpby(ab[0], x, ab[1], got)
			for i := range got {
				want := ab[0]*x[i] + ab[1]*y0[i]
				if ab[1] == 0 {
					want = ab[0] * x[i]
				}
				if got[i] != want {
					t.Fatalf("Axpby(%v) [%d] = %v, want %v", ab, i, got[i], want)
				}
			}
		}
		px := []byte{0, 1, 128, 254, 255, 7, 9}
		wide := make([]float32, len(px))
		be.BytesToFloat(1.0/255, px, wide)
		for i, v := range px {
			if want := float32(v) * (1.0 / 255); wide[i] != want {
				t.Fatalf("BytesToFloat[%d] = %v, want %v", i, wide[i], want)
			}
		}
		f := slices.Clone(y0)
		be.Fill(f, 2.5)
		for _, v := range f {
			if v != 2.5 {
				t.Fatalf("Fill left %v", v)
			}
		}
		n, c, hw := 2, 3, 5
		in := randVec(r, n*c*hw)
		dst := []float32{1, 2, 3}
		be.ChannelSum(n, c, hw, in, dst)
		for ch := 0; ch < c; ch++ {
			var s float64
			for i := 0; i < n; i++ {
				for j := 0; j < hw; j++ {
					s += float64(in[(i*c+ch)*hw+j])
				}
			}
			if want := float32(ch+1) + float32(s); dst[ch] != want {
				t.Fatalf("ChannelSum[%d] = %v, want %v", ch, dst[ch], want)
			}
		}
	}
}

func TestUpsampleNearestIsAdjointOfItsBackward(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	p := backend.Upsample{Planes: 3, H: 2, W: 3, Factor: 2}
	be := &Kernels{Workers: 2, MinParallel: 1}
	x := randVec(r, 3*2*3)
	y := make([]float32, 3*4*6)
	be.UpsampleNearest(p, x, y)
	for pl := 0; pl < 3; pl++ {
		for oy := 0; oy < 4; oy++ {
			for ox := 0; ox < 6; ox++ {
				if got, want := y[(pl*4+oy)*6+ox], x[(pl*2+oy/2)*3+ox/2]; got != want {
					t.Fatalf("y[%d,%d,%d] = %v, want %v", pl, oy, ox, got, want)
				}
			}
		}
	}
	dy := randVec(r, len(y))
	dx := make([]float32, len(x))
	be.UpsampleNearestBackward(p, dy, dx)
	// <up(x), dy> == <x, up^T(dy)>.
	var a, b float64
	for i := range y {
		a += float64(y[i]) * float64(dy[i])
	}
	for i := range x {
		b += float64(x[i]) * float64(dx[i])
	}
	if d := a - b; d > 1e-5 || d < -1e-5 {
		t.Fatalf("adjoint mismatch: %v vs %v", a, b)
	}
}
