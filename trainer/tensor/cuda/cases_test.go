package cuda

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/segpipe/segpipe/pipeline/raster"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// Tolerances: the kernels use float intrinsics (expf, logf…) where the
// CPU reference evaluates in float64, and sum in other orders; exact
// kernels are checked at rtolExact.
const (
	rtolMath  = 2e-5
	rtolSum   = 1e-4
	rtolExact = 1e-6
)

func rnd(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 7)) }

func uniform(r *rand.Rand, n int, lo, hi float32) []float32 {
	s := make([]float32, n)
	for i := range s {
		s[i] = lo + (hi-lo)*r.Float32()
	}
	return s
}

// kernelCases lists every kernel check; each uses odd sizes so that the
// grid-stride loops and the tails are exercised.
// unaryNames names backend.Unary's functions in its order: the one list a
// Unary added to the backend joins (with its cases in the CPU backend and
// kernels/elementwise.cu) for every unary check of this package to cover it.
var unaryNames = []string{"silu", "sigmoid", "relu", "exp", "log", "abs", "neg", "sqrt", "square", "atan", "tanh"}

func kernelCases() []kernelCase {
	var cs []kernelCase
	unaryRange := map[backend.Unary][2]float32{backend.Log: {0.05, 4}, backend.Sqrt: {0.05, 4}}
	for op, name := range unaryNames {
		op := backend.Unary(op)
		cs = append(cs, kernelCase{"unary/" + name, func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
			r := rnd(uint64(op) + 1)
			const n = 1037
			lim := [2]float32{-6, 6}
			if l, ok := unaryRange[op]; ok {
				lim = l
			}
			x := uniform(r, n, lim[0], lim[1])
			x[0], x[1] = 0, lim[1] // the zero-derivative corners
			if lim[0] > 0 {
				x[0] = lim[0]
			}
			dy, dx0 := uniform(r, n, -1, 1), uniform(r, n, -1, 1)
			wantY := refUnary(op, x)
			wantDx := refUnaryBackward(op, x, wantY, dy, dx0)
			k := d.kernels()
			px, py, pdy, pdx := d.upload(x), d.alloc(4*n), d.upload(dy), d.upload(dx0)
			must(k.Unary(op, px, py, n))
			// The backward reads the reference y so that it is checked alone.
			must(k.UnaryBackward(op, px, d.upload(wantY), pdy, pdx, n))
			return []devptr{py, pdx}, func(t *testing.T, got [][]byte) {
				closeTo(t, "y", got[0], wantY, rtolMath)
				closeTo(t, "dx", got[1], wantDx, rtolMath)
			}
		}})
	}
	type bc struct {
		name string
		a, b []int
	}
	for _, sh := range []bc{
		{"same", []int{3, 5, 7}, []int{3, 5, 7}},
		{"channel", []int{2, 6, 5, 7}, []int{1, 6, 1, 1}},
		{"row", []int{4, 33}, []int{33}},
		{"both", []int{5, 1, 9}, []int{1, 4, 1}},
		{"scalar", []int{3, 50}, []int{}},
	} {
		for op, name := range []string{"add", "sub", "mul", "div", "maximum", "minimum"} {
			op := backend.Binary(op)
			cs = append(cs, kernelCase{"binary/" + name + "/" + sh.name, func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
				r := rnd(uint64(op)*31 + uint64(len(sh.a)))
				s := broadcastOf(sh.a, sh.b)
				a := uniform(r, numel(sh.a), 0.5, 2)
				b := uniform(r, numel(sh.b), 0.5, 2)
				if len(b) > 1 && len(a) > 1 {
					a[1] = b[1%len(b)] // a tie for Maximum/Minimum (when they line up)
				}
				n := numel(s.Shape)
				dy := uniform(r, n, -1, 1)
				da0, db0 := uniform(r, len(a), -1, 1), uniform(r, len(b), -1, 1)
				wantY := refBinary(op, s, a, b)
				wantDa, wantDb := refBinaryBackward(op, s, a, b, dy, da0, db0)
				k := d.kernels()
				pa, pb, py := d.upload(a), d.upload(b), d.alloc(4*n)
				pda, pdb := d.upload(da0), d.upload(db0)
				must(k.Binary(op, s, pa, pb, py))
				must(k.BinaryBackward(op, s, pa, pb, d.upload(dy), pda, pdb))
				return []devptr{py, pda, pdb}, func(t *testing.T, got [][]byte) {
					closeTo(t, "y", got[0], wantY, rtolExact)
					closeTo(t, "da", got[1], wantDa, rtolSum)
					closeTo(t, "db", got[2], wantDb, rtolSum)
				}
			}})
		}
	}
	cs = append(cs, kernelCase{"scale", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(11)
		const n = 777
		x, dy, dx0 := uniform(r, n, -3, 3), uniform(r, n, -1, 1), uniform(r, n, -1, 1)
		wantY, g := refScale(x, dy, -0.37)
		wantDx := make([]float32, n)
		for i := range wantDx {
			wantDx[i] = dx0[i] + g[i]
		}
		k := d.kernels()
		py, pdx := d.alloc(4*n), d.upload(dx0)
		must(k.Scale(d.upload(x), py, -0.37, false, n))
		must(k.Scale(d.upload(dy), pdx, -0.37, true, n))
		return []devptr{py, pdx}, func(t *testing.T, got [][]byte) {
			closeTo(t, "y", got[0], wantY, rtolExact)
			closeTo(t, "dx", got[1], wantDx, rtolExact)
		}
	}})
	cs = append(cs, kernelCase{"add_scalar_and_fill", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(12)
		const n = 501
		x := uniform(r, n, -3, 3)
		want := refAddScalar(x, 1.5)
		fill := make([]float32, 300)
		for i := range fill {
			fill[i] = -2.25
		}
		k := d.kernels()
		py, pf := d.alloc(4*n), d.alloc(4*300)
		must(k.AddScalar(d.upload(x), py, 1.5, n))
		must(k.Fill(pf, -2.25, 300))
		return []devptr{py, pf}, func(t *testing.T, got [][]byte) {
			closeTo(t, "add", got[0], want, rtolExact)
			closeTo(t, "fill", got[1], fill, rtolExact)
		}
	}})
	cs = append(cs, kernelCase{"clamp", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(13)
		const n = 603
		x, dy, dx0 := uniform(r, n, -2, 2), uniform(r, n, -1, 1), uniform(r, n, -1, 1)
		x[0], x[1] = -1, 1 // boundaries pass the gradient
		wantY, g := refClamp(x, dy, -1, 1)
		wantDx := addTo(dx0, g)
		k := d.kernels()
		px, py, pdx := d.upload(x), d.alloc(4*n), d.upload(dx0)
		must(k.Clamp(px, py, -1, 1, n))
		must(k.ClampBackward(px, d.upload(dy), pdx, -1, 1, n))
		return []devptr{py, pdx}, func(t *testing.T, got [][]byte) {
			closeTo(t, "y", got[0], wantY, rtolExact)
			closeTo(t, "dx", got[1], wantDx, rtolExact)
		}
	}})
	cs = append(cs, kernelCase{"bce_with_logits", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(14)
		const n = 999
		x, tg, dy := uniform(r, n, -12, 12), uniform(r, n, 0, 1), uniform(r, n, -1, 1)
		dx0, dt0 := uniform(r, n, -1, 1), uniform(r, n, -1, 1)
		wantY, gx, gt := refBCE(x, tg, dy)
		wantDx, wantDt := addTo(dx0, gx), addTo(dt0, gt)
		k := d.kernels()
		px, pt, py, pdx, pdt := d.upload(x), d.upload(tg), d.alloc(4*n), d.upload(dx0), d.upload(dt0)
		must(k.BCEWithLogits(px, pt, py, n))
		must(k.BCEWithLogitsBackward(px, pt, d.upload(dy), pdx, pdt, n))
		return []devptr{py, pdx, pdt}, func(t *testing.T, got [][]byte) {
			closeTo(t, "y", got[0], wantY, rtolMath)
			closeTo(t, "dx", got[1], wantDx, rtolMath)
			closeTo(t, "dt", got[2], wantDt, rtolExact)
		}
	}})
	cs = append(cs, kernelCase{"image_to_float", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		px := make([]byte, 3*17*19)
		for i := range px {
			px[i] = byte(i * 37)
		}
		want := refImageToFloat(px)
		y := d.alloc(4 * len(px))
		must(d.kernels().ImageToFloat(d.upload(px), y, len(px)))
		return []devptr{y}, func(t *testing.T, got [][]byte) { closeTo(t, "y", got[0], want, 0) }
	}})
	cs = append(cs, kernelCase{"permute", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(15)
		shape, perm := []int{2, 3, 5, 7}, []int{0, 2, 3, 1}
		n := numel(shape)
		x, dy, dx0 := uniform(r, n, -1, 1), uniform(r, n, -1, 1), uniform(r, n, -1, 1)
		wantY, g := refPermute(x, dy, shape, perm)
		wantDx := addTo(dx0, g)
		outShape, stride := permuteStrides(shape, perm)
		k := d.kernels()
		py, pdx := d.alloc(4*n), d.upload(dx0)
		must(k.Gather(outShape, stride, d.upload(x), py))
		must(k.Scatter(outShape, stride, pdx, d.upload(dy)))
		return []devptr{py, pdx}, func(t *testing.T, got [][]byte) {
			closeTo(t, "y", got[0], wantY, 0)
			closeTo(t, "dx", got[1], wantDx, rtolExact)
		}
	}})
	cs = append(cs, kernelCase{"slice_as_gather", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		// x[:, 2:5, :] of a 3×7×4 tensor: shape 3×3×4 from offset 2·4.
		x := uniform(rnd(16), 3*7*4, -1, 1)
		var want []float32
		for a := 0; a < 3; a++ {
			want = append(want, x[a*28+8:a*28+20]...)
		}
		y := d.alloc(4 * len(want))
		must(d.kernels().Gather([]int{3, 3, 4}, []int{28, 4, 1}, d.upload(x).Add(4*8), y))
		return []devptr{y}, func(t *testing.T, got [][]byte) { closeTo(t, "y", got[0], want, 0) }
	}})
	cs = append(cs, kernelCase{"index_select", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(31)
		shape, idx := []int{3, 7, 5}, []int{6, 0, 2, 2, 6, 1}
		x, dy, dx0 := uniform(r, 3*7*5, -1, 1), uniform(r, 3*len(idx)*5, -1, 1), uniform(r, 3*7*5, -1, 1)
		wantY, g := refIndexSelect(x, dy, shape, 1, idx)
		wantDx := addTo(dx0, g)
		idx32 := make([]int32, len(idx))
		for i, v := range idx {
			idx32[i] = int32(v)
		}
		k := d.kernels()
		pi, py, pdx := d.upload(idx32), d.alloc(4*len(wantY)), d.upload(dx0)
		must(k.IndexSelect(d.upload(x), py, pi, 3, 7, len(idx), 5))
		must(k.IndexSelectBackward(d.upload(dy), pdx, pi, 3, 7, len(idx), 5))
		return []devptr{py, pdx}, func(t *testing.T, got [][]byte) {
			closeTo(t, "y", got[0], wantY, 0)
			closeTo(t, "dx", got[1], wantDx, rtolExact)
		}
	}})
	cs = append(cs, kernelCase{"upsample_nearest", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(17)
		shape, f := []int{2, 3, 5, 4}, 2
		n := numel(shape)
		x, dy, dx0 := uniform(r, n, -1, 1), uniform(r, n*f*f, -1, 1), uniform(r, n, -1, 1)
		wantY, g := refUpsample(x, dy, shape, f)
		wantDx := addTo(dx0, g)
		k := d.kernels()
		py, pdx := d.alloc(4*n*f*f), d.upload(dx0)
		must(k.UpsampleNearest(d.upload(x), py, 6, 5, 4, f))
		must(k.UpsampleNearestBackward(d.upload(dy), pdx, 6, 5, 4, f))
		return []devptr{py, pdx}, func(t *testing.T, got [][]byte) {
			closeTo(t, "y", got[0], wantY, 0)
			closeTo(t, "dx", got[1], wantDx, rtolExact)
		}
	}})
	cs = append(cs, kernelCase{"bias_add_and_grad", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(18)
		n, c, hw := 3, 5, 37
		y0, b, dy, db0 := uniform(r, n*c*hw, -1, 1), uniform(r, c, -1, 1), uniform(r, n*c*hw, -1, 1), uniform(r, c, -1, 1)
		s := broadcastOf([]int{n, c, hw}, []int{c, 1})
		wantY := refBinary(backend.Add, s, y0, b)
		_, wantDb := refBinaryBackward(backend.Add, s, y0, b, dy, make([]float32, len(y0)), db0)
		k := d.kernels()
		py, pdb := d.upload(y0), d.upload(db0)
		must(k.BiasAdd(py, d.upload(b), n, c, hw))
		must(k.BiasGrad(d.upload(dy), pdb, n, c, hw))
		return []devptr{py, pdb}, func(t *testing.T, got [][]byte) {
			closeTo(t, "y", got[0], wantY, rtolExact)
			closeTo(t, "db", got[1], wantDb, rtolSum)
		}
	}})
	cs = append(cs, kernelCase{"channel_affine", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(19)
		n, c, hw := 2, 7, 29
		x, sc, sh := uniform(r, n*c*hw, -2, 2), uniform(r, c, 0.5, 2), uniform(r, c, -1, 1)
		want := refChannelAffine(n, c, hw, x, sc, sh)
		y := d.alloc(4 * len(x))
		must(d.kernels().ChannelAffine(backend.BNIdentity, d.upload(x), d.upload(sc), d.upload(sh), y, n, c, hw))
		return []devptr{y}, func(t *testing.T, got [][]byte) { closeTo(t, "y", got[0], want, rtolExact) }
	}})
	for _, p := range []poolShape{
		{N: 2, C: 3, H: 9, W: 11, K: 5, Stride: 1, Pad: 2}, // SPPF's pool
		{N: 1, C: 2, H: 8, W: 7, K: 2, Stride: 2, Pad: 0},
		{N: 1, C: 1, H: 7, W: 7, K: 3, Stride: 2, Pad: 1},
	} {
		cs = append(cs, kernelCase{"maxpool", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
			r := rnd(uint64(20 + p.K))
			n := p.N * p.C * p.H * p.W
			x := uniform(r, n, -1, 1)
			for i := 0; i < n; i += 5 {
				x[i] = float32(int(x[i] * 4)) // ties
			}
			no := p.N * p.C * p.OutH() * p.OutW()
			dy, dx0 := uniform(r, no, -1, 1), uniform(r, n, -1, 1)
			wantY, wantArg, wantDx := refMaxPool(p, x, dy, dx0)
			k := d.kernels()
			py, parg, pdx := d.alloc(4*no), d.alloc(4*no), d.upload(dx0)
			must(k.MaxPool(p, d.upload(x), py, parg))
			must(k.MaxPoolBackward(p, d.upload(dy), d.upload(wantArg), pdx))
			return []devptr{py, parg, pdx}, func(t *testing.T, got [][]byte) {
				closeTo(t, "y", got[0], wantY, 0)
				if a := i32s(got[1]); !slices.Equal(a, wantArg) {
					t.Errorf("winners %v, want %v", a[:min(len(a), 12)], wantArg[:min(len(a), 12)])
				}
				closeTo(t, "dx", got[2], wantDx, rtolExact)
			}
		}})
	}
	cs = append(cs, kernelCase{"expand_windows", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		rows, cols := 13, 17
		wins := []raster.Window{{X0: 0, Y0: 0, W: 5, H: 4}, {X0: 10, Y0: 6, W: 7, H: 7}, {X0: 3, Y0: 12, W: 0, H: 0}, {X0: 0, Y0: 0, W: 17, H: 13}}
		var data []byte
		var table []byte
		for i, w := range wins {
			table = appendWindow(table, int(w.X0), int(w.Y0), int(w.W), int(w.H), int64(len(data)))
			for j := 0; j < w.Size(); j++ {
				data = append(data, byte((i+j)%3%2))
			}
		}
		want := refExpand(rows, cols, wins, data)
		dst := d.alloc(len(want))
		if len(data) == 0 {
			data = []byte{0}
		}
		must(d.kernels().ExpandWindows(d.upload(table), d.upload(data), dst, len(wins), rows, cols))
		return []devptr{dst}, func(t *testing.T, got [][]byte) {
			if !bytes.Equal(got[0], want) {
				t.Errorf("dense stack differs from raster.Expand")
			}
		}
	}})
	cs = append(cs, kernelCase{"sum_and_mean", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(21)
		const n = 5003
		x := uniform(r, n, -1, 2)
		want := []float32{refSum(x), refSum(x) / n}
		k := d.kernels()
		px, scratch, y := d.upload(x), d.alloc(8*k.ReduceScratch(n)), d.alloc(8)
		must(k.Sum(px, n, scratch, y, 1))
		must(k.Sum(px, n, scratch, y.Add(4), 1/float32(n)))
		return []devptr{y}, func(t *testing.T, got [][]byte) { closeTo(t, "sum, mean", got[0], want, rtolSum) }
	}})
	cs = append(cs, kernelCase{"sum_axis", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(22)
		shape := []int{3, 11, 13}
		n := numel(shape)
		x, dy, dx0 := uniform(r, n, -1, 1), uniform(r, 3*13, -1, 1), uniform(r, n, -1, 1)
		wantY, g := refSumAxis(x, dy, shape, 1)
		wantDx := addTo(dx0, g)
		k := d.kernels()
		py, pdx := d.alloc(4*3*13), d.upload(dx0)
		must(k.SumAxis(d.upload(x), py, 3, 11, 13))
		must(k.SumAxisBackward(d.upload(dy), pdx, 3, 11, 13))
		return []devptr{py, pdx}, func(t *testing.T, got [][]byte) {
			closeTo(t, "y", got[0], wantY, rtolExact)
			closeTo(t, "dx", got[1], wantDx, rtolExact)
		}
	}})
	for _, sh := range [][3]int{{4, 17, 1}, {2, 16, 9}, {1, 80, 33}} {
		cs = append(cs, kernelCase{"softmax", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
			r := rnd(uint64(23 + sh[1]))
			outer, n, inner := sh[0], sh[1], sh[2]
			x, dy, dx0 := uniform(r, outer*n*inner, -20, 20), uniform(r, outer*n*inner, -1, 1), uniform(r, outer*n*inner, -1, 1)
			wantY, wantDx := refSoftmax(outer, n, inner, x, dy, dx0)
			k := d.kernels()
			py, pdx := d.alloc(4*len(x)), d.upload(dx0)
			must(k.Softmax(d.upload(x), py, outer, n, inner))
			must(k.SoftmaxBackward(d.upload(wantY), d.upload(dy), pdx, outer, n, inner))
			return []devptr{py, pdx}, func(t *testing.T, got [][]byte) {
				closeTo(t, "y", got[0], wantY, rtolMath)
				closeTo(t, "dx", got[1], wantDx, rtolSum)
			}
		}})
	}
	for _, maxNorm := range []float64{10, 0.5} {
		cs = append(cs, kernelCase{"clip_grad_norm", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
			r := rnd(24)
			g1, g2, g3 := uniform(r, 1500, -0.2, 0.2), uniform(r, 7, -1, 1), uniform(r, 300, -0.1, 0.1)
			norm, clipped := refClip(maxNorm, g1, g2, g3)
			k := d.kernels()
			ps := []devptr{d.upload(g1), d.upload(g2), d.upload(g3)}
			ns := []int{1500, 7, 300}
			scratch := d.alloc(8 * (k.ReduceScratch(1500) + k.ReduceScratch(7) + k.ReduceScratch(300)))
			normOut, coef := d.alloc(4), d.alloc(4)
			must(k.GlobalNorm(ps, ns, scratch, normOut))
			must(k.GlobalNorm(ps, ns, scratch, coef))
			must(k.ClipCoef(coef, float32(maxNorm)))
			for i, p := range ps {
				must(k.ScaleBy(p, coef, ns[i]))
			}
			return []devptr{normOut, ps[0], ps[1], ps[2]}, func(t *testing.T, got [][]byte) {
				closeTo(t, "norm", got[0], []float32{float32(norm)}, rtolSum)
				for i := range clipped {
					closeTo(t, "clipped", got[1+i], clipped[i], rtolSum)
				}
			}
		}})
	}
	for _, wd := range []float64{0, 5e-4} {
		cs = append(cs, kernelCase{"sgd_nesterov", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
			r := rnd(25)
			const n = 1001
			p, g := uniform(r, n, -1, 1), uniform(r, n, -0.1, 0.1)
			wantP, wantBuf := refSGD(p, g, 0.01, 0.937, wd, 2)
			k := d.kernels()
			pp, pg, pb := d.upload(p), d.upload(g), d.alloc(4*n)
			must(k.SGDNesterov(pp, pg, pb, n, 0.01, 1, 0.937, wd, true))
			must(k.SGDNesterov(pp, pg, pb, n, 0.01, 1, 0.937, wd, false))
			return []devptr{pp, pb}, func(t *testing.T, got [][]byte) {
				closeTo(t, "p", got[0], wantP, rtolExact)
				closeTo(t, "buf", got[1], wantBuf, rtolExact)
			}
		}})
	}
	cs = append(cs, kernelCase{"adamw", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(26)
		const n = 999
		p, g := uniform(r, n, -1, 1), uniform(r, n, -0.1, 0.1)
		wantP, wantM, wantV := refAdamW(p, g, 1e-3, 0.05, 0.9, 3)
		k := d.kernels()
		pp, pg := d.upload(p), d.upload(g)
		pm, pv := d.upload(make([]float32, n)), d.upload(make([]float32, n))
		for step := 1; step <= 3; step++ {
			must(k.AdamW(pp, pg, pm, pv, n, 1e-3, 0.05, 0.9, 0.999, 1e-8, step))
		}
		return []devptr{pp, pm, pv}, func(t *testing.T, got [][]byte) {
			closeTo(t, "p", got[0], wantP, rtolExact)
			closeTo(t, "m", got[1], wantM, rtolExact)
			closeTo(t, "v", got[2], wantV, rtolExact)
		}
	}})
	cs = append(cs, kernelCase{"muon_momentum", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(27)
		rows, cols := 12, 35
		g := uniform(r, rows*cols, -0.1, 0.1)
		wantM := refMuonMomentum(g, rows, cols, 0.9)
		wantU := make([]float32, len(g))
		for i := range g {
			wantU[i] = g[i] + 0.9*(wantM[i]-g[i]) // muonPart's Nesterov blend
		}
		k := d.kernels()
		pm, pu := d.upload(make([]float32, len(g))), d.alloc(4*len(g))
		must(k.MuonMomentum(d.upload(g), pm, pu, len(g), 0.9))
		return []devptr{pm, pu}, func(t *testing.T, got [][]byte) {
			closeTo(t, "m", got[0], wantM, rtolExact)
			closeTo(t, "u", got[1], wantU, rtolExact)
		}
	}})
	cs = append(cs, kernelCase{"newton_schulz_elementwise", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		// X = g/(‖g‖ + 1e-7) then X = aX + T: the scalings around the NS5
		// products (trainer/optim orthogonalise).
		r := rnd(28)
		const n = 640
		g, tt := uniform(r, n, -1, 1), uniform(r, n, -1, 1)
		var ss float64
		for _, v := range g {
			ss += float64(v) * float64(v)
		}
		inv := float32(1 / (math.Sqrt(ss) + 1e-7))
		wantX := make([]float32, n)
		wantY := make([]float32, n)
		for i := range g {
			wantX[i] = g[i] * inv
			wantY[i] = 3.4445*wantX[i] + tt[i]
		}
		k := d.kernels()
		pg := d.upload(g)
		scratch, norm, px := d.alloc(8*k.ReduceScratch(n)), d.alloc(4), d.alloc(4*n)
		must(k.GlobalNorm([]devptr{pg}, []int{n}, scratch, norm))
		must(k.ScaleInvNorm(pg, px, norm, 1e-7, n))
		py := d.upload(wantX)
		must(k.Axpby(d.upload(tt), py, 3.4445, 1, n))
		return []devptr{px, py}, func(t *testing.T, got [][]byte) {
			closeTo(t, "x", got[0], wantX, rtolSum)
			closeTo(t, "ax+t", got[1], wantY, rtolExact)
		}
	}})
	// One matrix and batches of three (each matrix scaled differently, so
	// that a norm taken over the batch instead of per matrix shows).
	for _, sh := range [][3]int{{12, 40, 1}, {40, 12, 1}, {16, 16, 1}, {12, 40, 3}, {40, 12, 3}} {
		cs = append(cs, kernelCase{"newton_schulz", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
			r := rnd(uint64(30 + sh[0] + 100*sh[2]))
			rows, cols, count := sh[0], sh[1], sh[2]
			n := rows * cols
			var g, want []float32
			for b := range count {
				gb := uniform(r, n, -0.1*float32(b+1), 0.1*float32(b+1))
				g = append(g, gb...)
				want = append(want, refNewtonSchulz(gb, rows, cols)...)
			}
			k := d.kernels()
			out, ws := d.alloc(4*count*n), d.alloc(k.NewtonSchulzBytes(rows, cols, count))
			must(k.NewtonSchulz(d.matmul(), out, d.upload(g), rows, cols, count, ws))
			return []devptr{out}, func(t *testing.T, got [][]byte) { closeTo(t, "orthogonalised", got[0], want, 2e-3) }
		}})
	}
	cs = append(cs, kernelCase{"ema", func(d kdev) ([]devptr, func(*testing.T, [][]byte)) {
		r := rnd(29)
		const n = 555
		e0, x := uniform(r, n, -1, 1), uniform(r, n, -1, 1)
		want, dec := refEMA(e0, x, 1)
		pe := d.upload(e0)
		must(d.kernels().EMA(pe, d.upload(x), dec, n))
		return []devptr{pe}, func(t *testing.T, got [][]byte) { closeTo(t, "ema", got[0], want, rtolExact) }
	}})
	return cs
}

// broadcastOf is the broadcast of shapes a and b (numpy rules), as the
// tensor package computes it.
func broadcastOf(a, b []int) backend.Broadcast {
	n := max(len(a), len(b))
	out, sa, sb := make([]int, n), make([]int, n), make([]int, n)
	stA, stB := 1, 1
	for i := n - 1; i >= 0; i-- {
		da, db := 1, 1
		if j := i - (n - len(a)); j >= 0 {
			da = a[j]
		}
		if j := i - (n - len(b)); j >= 0 {
			db = b[j]
		}
		out[i] = max(da, db)
		if da != 1 || out[i] == 1 {
			sa[i] = stA
		}
		if db != 1 || out[i] == 1 {
			sb[i] = stB
		}
		stA *= da
		stB *= db
	}
	return backend.Broadcast{Shape: out, StrideA: sa, StrideB: sb}
}

func addTo(a, b []float32) []float32 {
	out := clone(a)
	for i := range out {
		out[i] += b[i]
	}
	return out
}

// must panics on a launch error: in a case it means a programming error
// of the case itself (the launchers only fail on bad geometry).
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// TestUnaryNamesCoverTheBackend holds unaryNames to the CPU reference: it
// computes every function the list names, and none past it, so a Unary
// added to the backend without joining the list fails here instead of
// going unchecked on the device.
func TestUnaryNamesCoverTheBackend(t *testing.T) {
	known := func(f backend.Unary) (ok bool) {
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		ref := cpu.New()
		x, y := ref.Alloc(4), ref.Alloc(4)
		ref.Fill(x, 0.5)
		ref.Unary(f, x, y)
		return true
	}
	for f := range backend.Unary(len(unaryNames)) {
		if !known(f) {
			t.Errorf("unary %d (%s): the CPU backend does not know it", f, unaryNames[f])
		}
	}
	if f := backend.Unary(len(unaryNames)); known(f) {
		t.Errorf("the CPU backend computes unary %d, which unaryNames does not list", f)
	}
}
