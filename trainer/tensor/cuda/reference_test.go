package cuda

// The CPU reference of every kernel case, in one place: when the CPU
// kernel API changes, this is the file to adapt.

import (
	"math"

	"github.com/segpipe/segpipe/pipeline/raster"
	"github.com/segpipe/segpipe/trainer/optim"
	"github.com/segpipe/segpipe/trainer/predict"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

var refBE = cpu.New()

func clone(x []float32) []float32 { return append([]float32(nil), x...) }

// tapeRef runs f on a recording tape over inputs of the given shapes and
// back-propagates dy; it returns the output and each input's gradient.
func tapeRef(f func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor, dy []float32, shapes [][]int, inputs ...[]float32) ([]float32, [][]float32) {
	tp := tensor.NewTape(refBE)
	xs := make([]*tensor.Tensor, len(inputs))
	for i, in := range inputs {
		xs[i] = tensor.New(clone(in), shapes[i]...)
		xs[i].RequiresGrad = true
	}
	y := f(tp, xs)
	out := clone(y.Data)
	if err := tp.BackwardFrom([]*tensor.Tensor{y}, []*tensor.Tensor{tensor.New(clone(dy), y.Shape...)}); err != nil {
		panic(err)
	}
	grads := make([][]float32, len(xs))
	for i, x := range xs {
		grads[i] = clone(x.GradBuf())
	}
	return out, grads
}

func refUnary(op UnaryOp, x []float32) []float32 {
	y := make([]float32, len(x))
	refBE.Unary(backend.Unary(op), x, y)
	return y
}

func refUnaryBackward(op UnaryOp, x, y, dy, dx0 []float32) []float32 {
	dx := clone(dx0)
	refBE.UnaryBackward(backend.Unary(op), x, y, dy, dx)
	return dx
}

func refBroadcast(s Broadcast) backend.Broadcast {
	return backend.Broadcast{Shape: s.Shape, StrideA: s.StrideA, StrideB: s.StrideB}
}

func refBinary(op BinaryOp, s Broadcast, a, b []float32) []float32 {
	y := make([]float32, numel(s.Shape))
	refBE.Binary(backend.Binary(op), refBroadcast(s), a, b, y)
	return y
}

func refBinaryBackward(op BinaryOp, s Broadcast, a, b, dy, da0, db0 []float32) ([]float32, []float32) {
	da, db := clone(da0), clone(db0)
	refBE.BinaryBackward(backend.Binary(op), refBroadcast(s), a, b, dy, da, db)
	return da, db
}

func refScale(x, dy []float32, s float32) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.Scale(xs[0], s) }, dy, [][]int{{len(x)}}, x)
	return y, g[0]
}

func refAddScalar(x []float32, s float32) []float32 {
	return (*tensor.Tape)(nil).AddScalar(tensor.New(clone(x), len(x)), s).Data
}

func refClamp(x, dy []float32, lo, hi float32) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.Clamp(xs[0], lo, hi) }, dy, [][]int{{len(x)}}, x)
	return y, g[0]
}

func refBCE(x, t, dy []float32) (y, dx, dt []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.BCEWithLogits(xs[0], xs[1]) },
		dy, [][]int{{len(x)}, {len(t)}}, x, t)
	return y, g[0], g[1]
}

func refImageToFloat(px []byte) []float32 { return predict.ToFloat(nil, px) }

func refPermute(x, dy []float32, shape, perm []int) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.Permute(xs[0], perm...) }, dy, [][]int{shape}, x)
	return y, g[0]
}

func refIndexSelect(x, dy []float32, shape []int, axis int, idx []int) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.IndexSelect(xs[0], axis, idx) }, dy, [][]int{shape}, x)
	return y, g[0]
}

func refUpsample(x, dy []float32, shape []int, f int) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.UpsampleNearest(xs[0], f) }, dy, [][]int{shape}, x)
	return y, g[0]
}

func refChannelAffine(n, c, hw int, x, scale, shift []float32) []float32 {
	y := make([]float32, len(x))
	refBE.ChannelAffine(n, c, hw, x, scale, shift, y)
	return y
}

func refMaxPool(p Pool, x, dy, dx0 []float32) (y []float32, arg []int32, dx []float32) {
	bp := backend.Pool{N: p.N, C: p.C, H: p.H, W: p.W, K: p.K, Stride: p.Stride, Pad: p.Pad}
	y = make([]float32, p.N*p.C*p.OutH()*p.OutW())
	arg = make([]int32, len(y))
	refBE.MaxPool2d(bp, x, y, arg)
	dx = clone(dx0)
	refBE.MaxPool2dBackward(bp, dy, arg, dx)
	return y, arg, dx
}

func refExpand(rows, cols int, wins []raster.Window, data []byte) []byte {
	dst := make([]byte, len(wins)*rows*cols)
	if err := raster.Expand(dst, raster.Grid{Rows: rows, Cols: cols, Stride: 4}, wins, data); err != nil {
		panic(err)
	}
	return dst
}

func refSum(x []float32) float32 { return (*tensor.Tape)(nil).Sum(tensor.New(clone(x), len(x))).Item() }

func refSumAxis(x, dy []float32, shape []int, axis int) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.SumAxis(xs[0], axis, false) }, dy, [][]int{shape}, x)
	return y, g[0]
}

func refSoftmax(outer, n, inner int, x, dy, dx0 []float32) ([]float32, []float32) {
	y := make([]float32, len(x))
	refBE.Softmax(outer, n, inner, x, y)
	dx := clone(dx0)
	refBE.SoftmaxBackward(outer, n, inner, y, dy, dx)
	return y, dx
}

func refParams(grads ...[]float32) []*optim.Param {
	ps := make([]*optim.Param, len(grads))
	for i, g := range grads {
		ps[i] = &optim.Param{Name: "p", Shape: []int{len(g)}, Data: make([]float32, len(g)), Grad: clone(g)}
	}
	return ps
}

// refClip returns the global norm and the clipped gradients.
func refClip(maxNorm float64, grads ...[]float32) (float64, [][]float32) {
	ps := refParams(grads...)
	norm := optim.ClipGradNorm(ps, maxNorm)
	out := make([][]float32, len(ps))
	for i, p := range ps {
		out[i] = p.Grad
	}
	return norm, out
}

// refSGD runs steps SGD steps (same gradient) and returns the parameters
// and the momentum buffer.
func refSGD(p, g []float32, lr, mu, wd float64, steps int) ([]float32, []float32) {
	par := &optim.Param{Name: "w", Shape: []int{len(p)}, Data: clone(p), Grad: clone(g)}
	o := optim.NewSGD([]*optim.Group{{Params: []*optim.Param{par}, LR: lr, Momentum: mu, WeightDecay: wd}})
	for range steps {
		o.Step()
	}
	return par.Data, o.State()["w.momentum_buffer"]
}

func refAdamW(p, g []float32, lr, wd, beta1 float64, steps int) (data, m, v []float32) {
	par := &optim.Param{Name: "w", Shape: []int{len(p)}, Data: clone(p), Grad: clone(g)}
	o := optim.NewAdamW([]*optim.Group{{Params: []*optim.Param{par}, LR: lr, WeightDecay: wd}}, beta1)
	for range steps {
		o.Step()
	}
	st := o.State()
	return par.Data, st["w.exp_avg"], st["w.exp_avg_sq"]
}

// refMuonMomentum is MuSGD's Muon buffer after one step at lr 0 (only the
// buffers move).
func refMuonMomentum(g []float32, rows, cols int, mu float64) []float32 {
	par := &optim.Param{Name: "w", Shape: []int{rows, cols}, Data: make([]float32, len(g)), Grad: clone(g)}
	o := optim.NewMuSGD([]*optim.Group{{Params: []*optim.Param{par}, LR: 0, Momentum: mu, UseMuon: true}}, 0.5, 0.5)
	o.Step()
	return o.State()["w.momentum_buffer"]
}

func refEMA(ema0, x []float32, updates int) ([]float32, float32) {
	e := optim.NewEMA([][]float32{ema0})
	for range updates {
		if err := e.Update([][]float32{x}); err != nil {
			panic(err)
		}
	}
	return e.Values()[0], float32(e.D(updates))
}

func refGemm(g Gemm, a, b, c []float32) []float32 {
	out := clone(c)
	cpu.NaiveSgemm(backend.Gemm{TransA: g.TransA, TransB: g.TransB, M: g.M, N: g.N, K: g.K, Alpha: g.Alpha, Beta: g.Beta,
		Batch: g.Batch, StrideA: g.StrideA, StrideB: g.StrideB, StrideC: g.StrideC}, a, b, out)
	return out
}

func refConv(c Conv, x, w, dy, dx0, dw0 []float32) (y, dx, dw []float32) {
	p := backend.Conv{N: c.N, InC: c.InC, InH: c.InH, InW: c.InW, OutC: c.OutC, KH: c.KH, KW: c.KW, Stride: c.Stride, Pad: c.Pad, Groups: c.Groups}
	y = make([]float32, c.N*c.OutC*c.OutH()*c.OutW())
	refBE.Conv2d(p, x, w, y)
	dx, dw = clone(dx0), clone(dw0)
	refBE.Conv2dBackwardData(p, dy, w, dx)
	refBE.Conv2dBackwardFilter(p, x, dy, dw)
	return y, dx, dw
}

// refBatchNorm returns y, mean, invstd, unbiased var, dx, dgamma, dbeta.
func refBatchNorm(n, c, hw int, eps float32, x, gamma, beta, dy []float32) [][]float32 {
	y, mean, inv, v := make([]float32, len(x)), make([]float32, c), make([]float32, c), make([]float32, c)
	refBE.BatchNormTrain(n, c, hw, eps, x, gamma, beta, y, mean, inv, v)
	dx, dg, db := make([]float32, len(x)), make([]float32, c), make([]float32, c)
	refBE.BatchNormBackward(n, c, hw, x, dy, mean, inv, gamma, dx, dg, db)
	return [][]float32{y, mean, inv, v, dx, dg, db}
}

// refNewtonSchulz recovers MuSGD's orthogonalised update O from one step
// with the SGD part weighted 0 and no momentum (so u = g): the step is
// p ← p − lr·muonWeight·√max(1, rows/cols)·O from p = 0.
func refNewtonSchulz(g []float32, rows, cols int) []float32 {
	const lr, mw = 1.0, 1.0
	par := &optim.Param{Name: "w", Shape: []int{rows, cols}, Data: make([]float32, len(g)), Grad: clone(g)}
	o := optim.NewMuSGD([]*optim.Group{{Params: []*optim.Param{par}, LR: lr, Momentum: 0, UseMuon: true}}, mw, 0)
	o.Step()
	s := float32(lr * mw * math.Sqrt(max(1, float64(rows)/float64(cols))))
	out := make([]float32, len(g))
	for i, v := range par.Data {
		out[i] = -v / s
	}
	return out
}
