package cuda

// The CPU reference of every kernel case, in one place: when the CPU
// kernel API changes, this is the file to adapt.

import (
	"math"

	"github.com/segpipe/segpipe/pipeline/raster"
	"github.com/segpipe/segpipe/trainer/optim"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/backend"
	"github.com/segpipe/segpipe/trainer/tensor/cpu"
)

// refBE is the CPU backend: its kernels take backend.Buffers, and a host
// slice becomes one without a copy through Wrap (the CPU backend's memory
// is host memory, so Host reads results back in place).
var refBE = cpu.New()

func clone(x []float32) []float32 { return append([]float32(nil), x...) }

// buf wraps x as a CPU buffer; a nil slice is the absent Buffer (no scale,
// an unwanted gradient).
func buf(x []float32) backend.Buffer {
	if x == nil {
		return backend.Buffer{}
	}
	return refBE.Wrap(x)
}

// tapeRef runs f on a recording tape over inputs of the given shapes and
// back-propagates dy; it returns the output and each input's gradient.
func tapeRef(f func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor, dy []float32, shapes [][]int, inputs ...[]float32) ([]float32, [][]float32) {
	tp := tensor.NewTape(refBE)
	xs := make([]*tensor.Tensor, len(inputs))
	for i, in := range inputs {
		xs[i] = tensor.New(refBE, clone(in), shapes[i]...)
		xs[i].RequiresGrad = true
	}
	y := f(tp, xs)
	out := y.ToHost(nil)
	if err := tp.BackwardFrom([]*tensor.Tensor{y}, []*tensor.Tensor{tensor.New(refBE, clone(dy), y.Shape...)}); err != nil {
		panic(err)
	}
	grads := make([][]float32, len(xs))
	for i, x := range xs {
		grads[i] = x.GradToHost(nil)
	}
	return out, grads
}

func refUnary(op backend.Unary, x []float32) []float32 {
	y := make([]float32, len(x))
	refBE.Unary(op, buf(x), buf(y))
	return y
}

func refUnaryBackward(op backend.Unary, x, y, dy, dx0 []float32) []float32 {
	dx := clone(dx0)
	refBE.UnaryBackward(op, buf(x), buf(y), buf(dy), buf(dx))
	return dx
}

func refBinary(op backend.Binary, s backend.Broadcast, a, b []float32) []float32 {
	y := make([]float32, numel(s.Shape))
	refBE.Binary(op, s, buf(a), buf(b), buf(y))
	return y
}

func refBinaryBackward(op backend.Binary, s backend.Broadcast, a, b, dy, da0, db0 []float32) ([]float32, []float32) {
	da, db := clone(da0), clone(db0)
	refBE.BinaryBackward(op, s, buf(a), buf(b), buf(dy), buf(da), buf(db))
	return da, db
}

func refScale(x, dy []float32, s float32) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.Scale(xs[0], s) }, dy, [][]int{{len(x)}}, x)
	return y, g[0]
}

// refAddScalar is x + s through the CPU Binary Add kernel with s
// broadcast (stride 0), the kernel a scalar add runs on now that the tape
// has no AddScalar.
func refAddScalar(x []float32, s float32) []float32 {
	return refBinary(backend.Add, backend.Broadcast{Shape: []int{len(x)}, StrideA: []int{1}, StrideB: []int{0}}, x, []float32{s})
}

// refClamp is clamp(x, lo, hi) as the tape composition
// x − ReLU(x − hi) + ReLU(lo − x), the tape having no Clamp. Not
// Minimum(Maximum(x, lo), hi): that splits the gradient in half at the
// boundaries, while ReLU passes none at 0, so this composition passes all
// of it on lo ≤ x ≤ hi, boundaries included, as PyTorch's clamp does.
func refClamp(x, dy []float32, lo, hi float32) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor {
		above := tp.ReLU(tp.Sub(xs[0], tensor.FullOn(refBE, hi)))
		below := tp.ReLU(tp.Sub(tensor.FullOn(refBE, lo), xs[0]))
		return tp.Add(tp.Sub(xs[0], above), below)
	}, dy, [][]int{{len(x)}}, x)
	return y, g[0]
}

// refBCE is BCE with logits in its stable form as the tape composition
// (ReLU(x) − x·t) + Log(1 + Exp(−|x|)), the tape having no BCEWithLogits;
// its backward gives dy·(σ(x) − t) and −dy·x.
func refBCE(x, t, dy []float32) (y, dx, dt []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor {
		lin := tp.Sub(tp.ReLU(xs[0]), tp.Mul(xs[0], xs[1]))
		return tp.Add(lin, tp.Log(tp.Add(tensor.FullOn(refBE, 1), tp.Exp(tp.Neg(tp.Abs(xs[0]))))))
	}, dy, [][]int{{len(x)}, {len(t)}}, x, t)
	return y, g[0], g[1]
}

// refImageToFloat widens pixels to the model's input as predict does:
// tensor.UploadBytes with scale 1/255, the CPU BytesToFloat kernel.
func refImageToFloat(px []byte) []float32 {
	return tensor.UploadBytes(refBE, px, 1.0/255, len(px)).ToHost(nil)
}

func refPermute(x, dy []float32, shape, perm []int) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.Permute(xs[0], perm...) }, dy, [][]int{shape}, x)
	return y, g[0]
}

// refIndexSelect gathers idx along axis as the tape composition
// Concat(Slice(x, i, i+1) for i in idx), the tape having no IndexSelect:
// the backward adds the contributions of repeated indices.
func refIndexSelect(x, dy []float32, shape []int, axis int, idx []int) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor {
		parts := make([]*tensor.Tensor, len(idx))
		for k, i := range idx {
			parts[k] = tp.Slice(xs[0], axis, i, i+1)
		}
		return tp.Concat(axis, parts...)
	}, dy, [][]int{shape}, x)
	return y, g[0]
}

func refUpsample(x, dy []float32, shape []int, f int) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.UpsampleNearest(xs[0], f) }, dy, [][]int{shape}, x)
	return y, g[0]
}

func refChannelAffine(n, c, hw int, x, scale, shift []float32) []float32 {
	y := make([]float32, len(x))
	refBE.ChannelAffine(n, c, hw, buf(x), buf(scale), buf(shift), buf(y))
	return y
}

func refMaxPool(p poolShape, x, dy, dx0 []float32) (y []float32, arg []int32, dx []float32) {
	bp := backend.Pool{N: p.N, C: p.C, H: p.H, W: p.W, K: p.K, Stride: p.Stride, Pad: p.Pad}
	y = make([]float32, p.N*p.C*p.OutH()*p.OutW())
	// The winners are int32 elements of a 4-byte buffer.
	argBuf := refBE.Alloc(len(y))
	refBE.MaxPool2d(bp, buf(x), buf(y), argBuf)
	arg = make([]int32, len(y))
	for i, v := range refBE.Host(argBuf) {
		arg[i] = int32(math.Float32bits(v))
	}
	dx = clone(dx0)
	refBE.MaxPool2dBackward(bp, buf(dy), argBuf, buf(dx))
	return y, arg, dx
}

func refExpand(rows, cols int, wins []raster.Window, data []byte) []byte {
	dst := make([]byte, len(wins)*rows*cols)
	if err := raster.Expand(dst, raster.Grid{Rows: rows, Cols: cols, Stride: 4}, wins, data); err != nil {
		panic(err)
	}
	return dst
}

func refSum(x []float32) float32 {
	return (*tensor.Tape)(nil).Sum(tensor.New(refBE, clone(x), len(x))).Item()
}

func refSumAxis(x, dy []float32, shape []int, axis int) ([]float32, []float32) {
	y, g := tapeRef(func(tp *tensor.Tape, xs []*tensor.Tensor) *tensor.Tensor { return tp.SumAxis(xs[0], axis, false) }, dy, [][]int{shape}, x)
	return y, g[0]
}

func refSoftmax(outer, n, inner int, x, dy, dx0 []float32) ([]float32, []float32) {
	y := make([]float32, len(x))
	refBE.Softmax(outer, n, inner, buf(x), buf(y))
	dx := clone(dx0)
	refBE.SoftmaxBackward(outer, n, inner, buf(y), buf(dy), buf(dx))
	return y, dx
}

func refParams(grads ...[]float32) []*optim.Param {
	ps := make([]*optim.Param, len(grads))
	for i, g := range grads {
		ps[i] = &optim.Param{Host: refBE, Name: "p", Shape: []int{len(g)}, Data: make([]float32, len(g)), Grad: clone(g)}
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
	par := &optim.Param{Host: refBE, Name: "w", Shape: []int{len(p)}, Data: clone(p), Grad: clone(g)}
	o := optim.NewSGD([]*optim.Group{{Params: []*optim.Param{par}, LR: lr, Momentum: mu, WeightDecay: wd}})
	for range steps {
		o.Step()
	}
	return par.Data, o.State()["w.momentum_buffer"]
}

func refAdamW(p, g []float32, lr, wd, beta1 float64, steps int) (data, m, v []float32) {
	par := &optim.Param{Host: refBE, Name: "w", Shape: []int{len(p)}, Data: clone(p), Grad: clone(g)}
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
	par := &optim.Param{Host: refBE, Name: "w", Shape: []int{rows, cols}, Data: make([]float32, len(g)), Grad: clone(g)}
	o := optim.NewMuSGD([]*optim.Group{{Params: []*optim.Param{par}, LR: 0, Momentum: mu, UseMuon: true}}, 0.5, 0.5)
	o.Step()
	return o.State()["w.momentum_buffer"]
}

func refEMA(ema0, x []float32, updates int) ([]float32, float32) {
	e := optim.NewEMA(refBE, [][]float32{ema0})
	for range updates {
		if err := e.Update([][]float32{x}); err != nil {
			panic(err)
		}
	}
	return e.Values()[0], float32(e.D(updates))
}

func refGemm(g backend.Gemm, a, b, c []float32) []float32 {
	out := clone(c)
	cpu.NaiveSgemm(backend.Gemm{TransA: g.TransA, TransB: g.TransB, M: g.M, N: g.N, K: g.K, Alpha: g.Alpha, Beta: g.Beta,
		Batch: g.Batch, StrideA: g.StrideA, StrideB: g.StrideB, StrideC: g.StrideC}, a, b, out)
	return out
}

func refConv(c convShape, x, w, dy, dx0, dw0 []float32) (y, dx, dw []float32) {
	p := backend.Conv{N: c.N, InC: c.InC, InH: c.InH, InW: c.InW, OutC: c.OutC, KH: c.KH, KW: c.KW, Stride: c.Stride, Pad: c.Pad, Groups: c.Groups}
	y = make([]float32, c.N*c.OutC*c.OutH()*c.OutW())
	refBE.Conv2d(p, buf(x), buf(w), buf(y))
	dx, dw = clone(dx0), clone(dw0)
	refBE.Conv2dBackwardData(p, buf(dy), buf(w), buf(dx))
	refBE.Conv2dBackwardFilter(p, buf(x), buf(dy), buf(dw))
	return y, dx, dw
}

// refBatchNorm returns y, mean, invstd, unbiased var, dx, dgamma, dbeta.
func refBatchNorm(n, c, hw int, eps float32, x, gamma, beta, dy []float32) [][]float32 {
	y, mean, inv, v := make([]float32, len(x)), make([]float32, c), make([]float32, c), make([]float32, c)
	refBE.BatchNormTrain(n, c, hw, eps, buf(x), buf(gamma), buf(beta), buf(y), buf(mean), buf(inv), buf(v))
	dx, dg, db := make([]float32, len(x)), make([]float32, c), make([]float32, c)
	refBE.BatchNormBackward(n, c, hw, buf(x), buf(dy), buf(mean), buf(inv), buf(gamma), buf(dx), buf(dg), buf(db))
	return [][]float32{y, mean, inv, v, dx, dg, db}
}

// refNewtonSchulz recovers MuSGD's orthogonalised update O from one step
// with the SGD part weighted 0 and no momentum (so u = g): the step is
// p ← p − lr·muonWeight·√max(1, rows/cols)·O from p = 0.
func refNewtonSchulz(g []float32, rows, cols int) []float32 {
	const lr, mw = 1.0, 1.0
	par := &optim.Param{Host: refBE, Name: "w", Shape: []int{rows, cols}, Data: make([]float32, len(g)), Grad: clone(g)}
	o := optim.NewMuSGD([]*optim.Group{{Params: []*optim.Param{par}, LR: lr, Momentum: 0, UseMuon: true}}, mw, 0)
	o.Step()
	s := float32(lr * mw * math.Sqrt(max(1, float64(rows)/float64(cols))))
	out := make([]float32, len(g))
	for i, v := range par.Data {
		out[i] = -v / s
	}
	return out
}
