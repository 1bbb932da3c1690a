package cuda

//go:generate bash kernels/build-ptx.sh

import (
	"embed"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"

	"github.com/segpipe/segpipe/trainer/tensor/backend"
)

// ptx holds this package's compiled kernels, one module per kernels/*.cu;
// a Module's PTX is its owner's.
//
//go:embed kernels/*.ptx
var ptx embed.FS

// kernel names one __global__ function of kernels/*.cu or of a declared
// Module.
type kernel int

const (
	kUnaryForward kernel = iota
	kUnaryBackward
	kBinaryForward
	kBinaryBackward
	kScale
	kAddScalar
	kClampForward
	kClampBackward
	kFill
	kBCELogitsForward
	kBCELogitsBackward
	kImageToFloat
	kStridedCopy
	kUpsampleForward
	kUpsampleBackward
	kBiasAdd
	kBiasGrad
	kChannelAffine
	kMaxPoolForward
	kMaxPoolBackward
	kExpandWindows
	kReducePartial
	kReduceFinish
	kSumAxis
	kSumAxisBackward
	kSoftmaxForward
	kSoftmaxBackward
	kClipCoef
	kScaleBy
	kSGDNesterov
	kAdamWStep
	kMuonMomentum
	kAxpby
	kScaleInvNorm
	kEMAUpdate
	kIndexSelect
	kStridedWalk
	kBNTrain
	kBNBackward
	kBNEvalScale
	kBNEvalBackward
	// Multi-tensor forms (kernels/optim.cu; see mt.go).
	kMtFill
	kMtScaleBy
	kMtEMA
	kMtSGDNesterov
	kMtAdamW
	kMtSumSquares
	// Tiled batch-norm (kernels/norm.cu).
	kBNTilesPartial
	kBNTilesFinish
	kBNTilesApply
	// Newton–Schulz of a batch of matrices (kernels/optim.cu).
	kBatchNormalize
	// Multi-tensor Muon steps (kernels/optim.cu).
	kMtMuonMomentum
	kMtAxpby
)

// numKernels counts this package's own kernels, the ones above. A kernel
// another package owns and launches by name (a Module's) is numbered after
// them, when its module is declared (see owned).
const numKernels = kernel(len(kernelNames))

// kernelNames names each of this package's kernels, in the constants'
// order.
var kernelNames = [...]string{
	"unary_forward", "unary_backward", "binary_forward", "binary_backward", "scale",
	"add_scalar", "clamp_forward", "clamp_backward", "fill", "bce_logits_forward",
	"bce_logits_backward", "image_to_float", "strided_copy", "upsample_forward", "upsample_backward",
	"bias_add", "bias_grad", "channel_affine", "maxpool_forward", "maxpool_backward",
	"expand_windows", "reduce_partial", "reduce_finish", "sum_axis", "sum_axis_backward",
	"softmax_forward", "softmax_backward", "clip_coef", "scale_by", "sgd_nesterov",
	"adamw_step", "muon_momentum", "axpby", "scale_inv_norm", "ema_update",
	"index_select", "strided_walk", "bn_train", "bn_backward", "bn_eval_scale",
	"bn_eval_backward",
	"mt_fill", "mt_scale_by", "mt_ema", "mt_sgd_nesterov", "mt_adamw", "mt_sum_squares",
	"bn_tiles_partial", "bn_tiles_finish", "bn_tiles_apply",
	"batch_normalize",
	"mt_muon_momentum", "mt_axpby",
}

// owned numbers the kernels other packages own, process-wide, from
// numKernels on, as their modules are declared (DeclareModule): every
// launcher (a device, the CPU harness, a test's recorder) then knows a
// kernel by one small number and its name, whoever owns it.
var owned struct {
	sync.RWMutex
	names   []string  // kernel numKernels+i is names[i]
	modules []*Module // ... of the module modules[i]
	index   map[string]kernel
	// declared lists every module in the order declared: a device loads
	// their PTX after its own, the harness compiles their sources.
	declared []*Module
}

// ownedKernel returns the number of module m's kernel name, numbering it
// on first use; a name already numbered under another module is an error.
func ownedKernel(m *Module, name string) (kernel, error) {
	owned.Lock()
	defer owned.Unlock()
	if k, ok := owned.index[name]; ok {
		if o := owned.modules[k-numKernels]; o != m {
			return 0, fmt.Errorf("cuda: kernel %s declared by module %s and %s", name, o.name, m.name)
		}
		return k, nil
	}
	for _, n := range kernelNames {
		if n == name {
			return 0, fmt.Errorf("cuda: kernel %s of module %s is one of this package's own", name, m.name)
		}
	}
	if owned.index == nil {
		owned.index = map[string]kernel{}
	}
	k := numKernels + kernel(len(owned.names))
	owned.names, owned.modules = append(owned.names, name), append(owned.modules, m)
	owned.index[name] = k
	return k, nil
}

// declaredModules returns the modules declared so far.
func declaredModules() []*Module {
	owned.RLock()
	defer owned.RUnlock()
	return slices.Clone(owned.declared)
}

// module is the declared module a kernel another package owns comes
// from (nil for this package's own, which its embedded modules hold).
func (k kernel) module() *Module {
	if k < numKernels {
		return nil
	}
	owned.RLock()
	defer owned.RUnlock()
	return owned.modules[k-numKernels]
}

func (k kernel) String() string {
	if k < numKernels {
		return kernelNames[k]
	}
	owned.RLock()
	defer owned.RUnlock()
	return owned.names[k-numKernels]
}

type dim3 struct{ x, y, z uint32 }

// launcher runs one kernel launch on a stream: a Device, or the CPU
// harness's script recorder in the tests.
type launcher interface {
	launch(k kernel, grid, block dim3, args []arg) error
}

// blockSize is every launch's block: a power of two (the tree reductions
// need one) and SP_MAX_BLOCK in shim.h.
const blockSize = 256

// maxDims is SP_MAX_DIMS in shim.h.
const maxDims = 8

// kernelSet launches the project's kernels on a device's compute stream.
// Every method takes device pointers and element counts, queues the
// launch and returns; errors are launch errors (a kernel's own faults
// surface at the next synchronising call). Backward methods accumulate
// into their gradient outputs, as the CPU backend's do.
type kernelSet struct {
	l launcher
	// maxBlocks caps a grid-stride launch's grid (a few waves of the SMs).
	maxBlocks int
	// threads is every launch's block size, blockSize when 0; the CPU
	// harness runs the Backend with small blocks by default, so that small
	// tensors span several blocks. A power of two ≤ blockSize.
	threads int
	// bnTile is the tiled batch-norm's tile length, bnTileLen when 0 (the
	// CPU harness makes it small so that its small tensors take the tiled
	// path too).
	bnTile int
}

// bnTileLen is the most elements of one channel one block sums in the
// tiled batch-norm kernels: 16 per thread of a full block.
const bnTileLen = 16 * blockSize

func (k *kernelSet) block() dim3 {
	if k.threads > 0 {
		return dim3{uint32(k.threads), 1, 1}
	}
	return dim3{blockSize, 1, 1}
}

// grid1 is the launch geometry of n elements, one per thread in
// grid-stride loops.
func (k *kernelSet) grid1(n int) dim3 {
	t := int(k.block().x)
	b := (n + t - 1) / t
	return dim3{uint32(max(min(b, k.maxBlocks), 1)), 1, 1}
}

func (k *kernelSet) run(kn kernel, n int, args ...arg) error {
	if n <= 0 {
		return nil
	}
	if err := k.l.launch(kn, k.grid1(n), k.block(), args); err != nil {
		return fmt.Errorf("%s: %w", kn, err)
	}
	return nil
}

// Unary writes y = f(x) over n elements.
func (k *kernelSet) Unary(f backend.Unary, x, y devptr, n int) error {
	return k.run(kUnaryForward, n, i32Arg(int(f)), ptrArg(x), ptrArg(y), i64Arg(n))
}

// UnaryBackward accumulates dx += f'(x)·dy; y = f(x) is read by the
// functions whose derivative uses it.
func (k *kernelSet) UnaryBackward(f backend.Unary, x, y, dy, dx devptr, n int) error {
	return k.run(kUnaryBackward, n, i32Arg(int(f)), ptrArg(x), ptrArg(y), ptrArg(dy), ptrArg(dx), i64Arg(n))
}

// merged drops unit axes and merges adjacent axes whose strides compose
// (as the CPU backend's run walk does), so that same-shape and
// per-channel cases use few axes; it fails beyond maxDims.
func merged(s backend.Broadcast) (shape, sa, sb []int, err error) {
	return mergeAxes(s.Shape, s.StrideA, s.StrideB)
}

// mergeAxes merges the axes of a walk over shape that reads two operands
// at strides sa and sb.
func mergeAxes(dims, stA, stB []int) (shape, sa, sb []int, err error) {
	for i, d := range dims {
		if d == 1 {
			continue
		}
		if k := len(shape) - 1; k >= 0 && sa[k] == stA[i]*d && sb[k] == stB[i]*d {
			shape[k] *= d
			sa[k], sb[k] = stA[i], stB[i]
			continue
		}
		shape = append(shape, d)
		sa = append(sa, stA[i])
		sb = append(sb, stB[i])
	}
	if len(shape) > maxDims {
		return nil, nil, nil, fmt.Errorf("cuda: a walk over %v needs %d axes after merging, at most %d", dims, len(shape), maxDims)
	}
	return shape, sa, sb, nil
}

func numel(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

// encodeBcast lays out struct Bcast (shim.h): int nd, int shape[8], pad,
// long long sa[8], long long sb[8].
func encodeBcast(shape, sa, sb []int) []byte {
	b := make([]byte, 40+2*8*maxDims)
	binary.LittleEndian.PutUint32(b, uint32(len(shape)))
	for i := range shape {
		binary.LittleEndian.PutUint32(b[4+4*i:], uint32(shape[i]))
		binary.LittleEndian.PutUint64(b[40+8*i:], uint64(sa[i]))
		binary.LittleEndian.PutUint64(b[40+8*maxDims+8*i:], uint64(sb[i]))
	}
	return b
}

// Binary writes y = f(a, b) over the broadcast shape.
func (k *kernelSet) Binary(f backend.Binary, s backend.Broadcast, a, b, y devptr) error {
	shape, sa, sb, err := merged(s)
	if err != nil {
		return err
	}
	n := numel(s.Shape)
	return k.run(kBinaryForward, n, i32Arg(int(f)), structArg(encodeBcast(shape, sa, sb)), ptrArg(a), ptrArg(b), ptrArg(y), i64Arg(n))
}

// BinaryBackward accumulates f's gradients into da and db (either may be
// 0), summed over the axes an operand is stretched on (atomically there).
func (k *kernelSet) BinaryBackward(f backend.Binary, s backend.Broadcast, a, b, dy, da, db devptr) error {
	shape, sa, sb, err := merged(s)
	if err != nil {
		return err
	}
	stretched := func(st []int) int {
		for i, d := range shape {
			if st[i] == 0 && d > 1 {
				return 1
			}
		}
		return 0
	}
	n := numel(s.Shape)
	return k.run(kBinaryBackward, n, i32Arg(int(f)), structArg(encodeBcast(shape, sa, sb)), ptrArg(a), ptrArg(b), ptrArg(dy),
		ptrArg(da), ptrArg(db), i32Arg(stretched(sa)), i32Arg(stretched(sb)), i64Arg(n))
}

// Scale writes y = s·x; with accumulate, y += s·x (Scale's backward).
func (k *kernelSet) Scale(x, y devptr, s float32, accumulate bool, n int) error {
	acc := 0
	if accumulate {
		acc = 1
	}
	return k.run(kScale, n, ptrArg(x), ptrArg(y), f32Arg(s), i32Arg(acc), i64Arg(n))
}

// AddScalar writes y = x + s.
func (k *kernelSet) AddScalar(x, y devptr, s float32, n int) error {
	return k.run(kAddScalar, n, ptrArg(x), ptrArg(y), f32Arg(s), i64Arg(n))
}

// Clamp writes y = min(max(x, lo), hi).
func (k *kernelSet) Clamp(x, y devptr, lo, hi float32, n int) error {
	return k.run(kClampForward, n, ptrArg(x), ptrArg(y), f32Arg(lo), f32Arg(hi), i64Arg(n))
}

// ClampBackward accumulates dx += dy where lo ≤ x ≤ hi.
func (k *kernelSet) ClampBackward(x, dy, dx devptr, lo, hi float32, n int) error {
	return k.run(kClampBackward, n, ptrArg(x), ptrArg(dy), ptrArg(dx), f32Arg(lo), f32Arg(hi), i64Arg(n))
}

// Fill writes v to n floats.
func (k *kernelSet) Fill(y devptr, v float32, n int) error {
	return k.run(kFill, n, ptrArg(y), f32Arg(v), i64Arg(n))
}

// BCEWithLogits writes the unreduced max(x,0) − x·t + log(1+e^−|x|).
func (k *kernelSet) BCEWithLogits(x, t, y devptr, n int) error {
	return k.run(kBCELogitsForward, n, ptrArg(x), ptrArg(t), ptrArg(y), i64Arg(n))
}

// BCEWithLogitsBackward accumulates dx += dy·(σ(x) − t) and dt −= dy·x;
// either output may be 0.
func (k *kernelSet) BCEWithLogitsBackward(x, t, dy, dx, dt devptr, n int) error {
	return k.run(kBCELogitsBackward, n, ptrArg(x), ptrArg(t), ptrArg(dy), ptrArg(dx), ptrArg(dt), i64Arg(n))
}

// ImageToFloat converts n uint8 pixels to floats in [0, 1].
func (k *kernelSet) ImageToFloat(px, y devptr, n int) error { return k.BytesToFloat(px, y, 1.0/255, n) }

// BytesToFloat writes y[i] = float32(byte i of px)·scale for n bytes.
func (k *kernelSet) BytesToFloat(px, y devptr, scale float32, n int) error {
	return k.run(kImageToFloat, n, ptrArg(px), ptrArg(y), f32Arg(scale), i64Arg(n))
}

// encodeStrided lays out struct Strided: int nd, int shape[8], pad, long
// long stride[8].
func encodeStrided(shape, stride []int) ([]byte, error) {
	if len(shape) > maxDims {
		return nil, fmt.Errorf("cuda: strided copy of %d axes, at most %d", len(shape), maxDims)
	}
	b := make([]byte, 40+8*maxDims)
	binary.LittleEndian.PutUint32(b, uint32(len(shape)))
	for i := range shape {
		binary.LittleEndian.PutUint32(b[4+4*i:], uint32(shape[i]))
		binary.LittleEndian.PutUint64(b[40+8*i:], uint64(stride[i]))
	}
	return b, nil
}

// Gather writes y (row-major over shape) with y[o] = x[Σ idx_k·stride[k]]:
// a permutation, slice or concatenation part as a strided copy (x may be
// offset with Ptr.Add).
func (k *kernelSet) Gather(shape, stride []int, x, y devptr) error {
	st, err := encodeStrided(shape, stride)
	if err != nil {
		return err
	}
	n := numel(shape)
	return k.run(kStridedCopy, n, structArg(st), ptrArg(x), ptrArg(y), i32Arg(0), i64Arg(n))
}

// Scatter is Gather's backward: x[Σ idx_k·stride[k]] += y[o]. The strides
// must not map two outputs to one input (true of permutations and slices).
func (k *kernelSet) Scatter(shape, stride []int, x, y devptr) error {
	st, err := encodeStrided(shape, stride)
	if err != nil {
		return err
	}
	n := numel(shape)
	return k.run(kStridedCopy, n, structArg(st), ptrArg(x), ptrArg(y), i32Arg(1), i64Arg(n))
}

// IndexSelect gathers entries idx (m int32 indices, on the device) along
// the middle axis of x viewed as outer×d×inner into y (outer×m×inner).
// The indices must lie in [0, d): check them on the host.
func (k *kernelSet) IndexSelect(x, y, idx devptr, outer, d, m, inner int) error {
	n := outer * m * inner
	return k.run(kIndexSelect, n, ptrArg(x), ptrArg(y), ptrArg(idx), i32Arg(d), i32Arg(m), i64Arg(inner), i32Arg(0), i64Arg(n))
}

// IndexSelectBackward adds dy back into dx at the selected entries;
// repeated indices add up.
func (k *kernelSet) IndexSelectBackward(dy, dx, idx devptr, outer, d, m, inner int) error {
	n := outer * m * inner
	return k.run(kIndexSelect, n, ptrArg(dx), ptrArg(dy), ptrArg(idx), i32Arg(d), i32Arg(m), i64Arg(inner), i32Arg(1), i64Arg(n))
}

// permuteStrides returns the output shape and the input stride of each
// output axis for permuting a contiguous tensor of shape by perm (output
// axis i is input axis perm[i]), the arguments of Gather.
func permuteStrides(shape, perm []int) (outShape, stride []int) {
	in := make([]int, len(shape))
	st := 1
	for i := len(shape) - 1; i >= 0; i-- {
		in[i] = st
		st *= shape[i]
	}
	outShape = make([]int, len(perm))
	stride = make([]int, len(perm))
	for i, p := range perm {
		outShape[i], stride[i] = shape[p], in[p]
	}
	return outShape, stride
}

// UpsampleNearest repeats each pixel of nc planes of h×w into f×f blocks.
func (k *kernelSet) UpsampleNearest(x, y devptr, nc, h, w, f int) error {
	n := nc * h * w * f * f
	return k.run(kUpsampleForward, n, ptrArg(x), ptrArg(y), i32Arg(h), i32Arg(w), i32Arg(f), i64Arg(n))
}

// UpsampleNearestBackward accumulates into dx the sum of each f×f block of dy.
func (k *kernelSet) UpsampleNearestBackward(dy, dx devptr, nc, h, w, f int) error {
	n := nc * h * w
	return k.run(kUpsampleBackward, n, ptrArg(dy), ptrArg(dx), i32Arg(h), i32Arg(w), i32Arg(f), i64Arg(n))
}

// BiasAdd adds b[c] to channel c of the n×c×hw tensor y in place.
func (k *kernelSet) BiasAdd(y, b devptr, n, c, hw int) error {
	total := n * c * hw
	return k.run(kBiasAdd, total, ptrArg(y), ptrArg(b), i32Arg(c), i64Arg(hw), i64Arg(total))
}

// BiasGrad accumulates db[c] += Σ_{n,hw} dy: one block per channel.
func (k *kernelSet) BiasGrad(dy, db devptr, n, c, hw int) error {
	if c <= 0 {
		return nil
	}
	g := dim3{uint32(min(c, 65535)), 1, 1}
	if err := k.l.launch(kBiasGrad, g, k.block(), []arg{ptrArg(dy), ptrArg(db), i32Arg(n), i32Arg(c), i64Arg(hw)}); err != nil {
		return fmt.Errorf("%s: %w", kBiasGrad, err)
	}
	return nil
}

// ChannelAffine writes y = act(x·scale[c] + shift[c]) over n×c×hw; a
// zero scale means 1 (a bias add), and y may be x.
func (k *kernelSet) ChannelAffine(act backend.BNAct, x, scale, shift, y devptr, n, c, hw int) error {
	total := n * c * hw
	return k.run(kChannelAffine, total, ptrArg(x), ptrArg(scale), ptrArg(shift), ptrArg(y), i32Arg(c), i64Arg(hw), i64Arg(total),
		i32Arg(int(act)))
}

func encodePool(p poolShape) []byte {
	b := make([]byte, 36)
	for i, v := range []int{p.N, p.C, p.H, p.W, p.K, p.Stride, p.Pad, p.OutH(), p.OutW()} {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(v))
	}
	return b
}

// MaxPool writes the window maxima and each winner's index within its
// plane (int32) to arg: the first maximum in row-major order wins.
func (k *kernelSet) MaxPool(p poolShape, x, y, arg devptr) error {
	n := p.N * p.C * p.OutH() * p.OutW()
	return k.run(kMaxPoolForward, n, structArg(encodePool(p)), ptrArg(x), ptrArg(y), ptrArg(arg), i64Arg(n))
}

// MaxPoolBackward accumulates dy into dx at the recorded winners.
func (k *kernelSet) MaxPoolBackward(p poolShape, dy, arg, dx devptr) error {
	n := p.N * p.C * p.H * p.W
	return k.run(kMaxPoolBackward, n, structArg(encodePool(p)), ptrArg(dy), ptrArg(arg), ptrArg(dx), i64Arg(n))
}

// WindowBytes is the size of one entry of ExpandWindows' window table.
const WindowBytes = 24

// appendWindow appends the table entry of a mask window (x0, y0, w, h on
// the grid) whose w·h bytes start at off in the window data.
func appendWindow(table []byte, x0, y0, w, h int, off int64) []byte {
	table = binary.LittleEndian.AppendUint32(table, uint32(x0))
	table = binary.LittleEndian.AppendUint32(table, uint32(y0))
	table = binary.LittleEndian.AppendUint32(table, uint32(w))
	table = binary.LittleEndian.AppendUint32(table, uint32(h))
	return binary.LittleEndian.AppendUint64(table, uint64(off))
}

// ExpandWindows writes the dense {0,1} stack of nwin rows×cols masks to
// dst from a window table (AppendWindow) and the windows' bytes. The
// windows must have been checked against the grid and the data on the
// host (Backend.WindowTable): the kernel reads where they say.
func (k *kernelSet) ExpandWindows(table, data, dst devptr, nwin, rows, cols int) error {
	n := nwin * rows * cols
	return k.run(kExpandWindows, n, ptrArg(table), ptrArg(data), ptrArg(dst), i32Arg(rows), i32Arg(cols), i64Arg(n))
}

// ReduceScratch is the number of float64 partial sums one Sum needs in
// its scratch buffer.
func (k *kernelSet) ReduceScratch(n int) int { return int(k.grid1(n).x) }

// Sum writes y[0] = alpha·Σ x over n elements (Sum, or Mean with alpha
// 1/n), in two fixed-order passes through scratch (ReduceScratch(n)
// float64s): the result does not depend on scheduling.
func (k *kernelSet) Sum(x devptr, n int, scratch, y devptr, alpha float32) error {
	if n <= 0 {
		return k.Fill(y, 0, 1)
	}
	if err := k.run(kReducePartial, n, ptrArg(x), ptrArg(scratch), i32Arg(0), i64Arg(n)); err != nil {
		return err
	}
	return k.finish(scratch, k.ReduceScratch(n), y, alpha, false)
}

func (k *kernelSet) finish(partial devptr, m int, y devptr, alpha float32, root bool) error {
	r := 0
	if root {
		r = 1
	}
	if err := k.l.launch(kReduceFinish, dim3{1, 1, 1}, k.block(),
		[]arg{ptrArg(partial), i32Arg(m), ptrArg(y), f32Arg(alpha), i32Arg(r)}); err != nil {
		return fmt.Errorf("%s: %w", kReduceFinish, err)
	}
	return nil
}

// GlobalNorm writes y[0] = √(Σ over every buffer of Σ x²), the L2 norm of
// all gradients together; scratch holds Σ ReduceScratch(ns[i]) float64s.
func (k *kernelSet) GlobalNorm(xs []devptr, ns []int, scratch, y devptr) error {
	m := 0
	for i, x := range xs {
		if ns[i] <= 0 {
			continue
		}
		if err := k.run(kReducePartial, ns[i], ptrArg(x), ptrArg(scratch.Add(8*m)), i32Arg(1), i64Arg(ns[i])); err != nil {
			return err
		}
		m += k.ReduceScratch(ns[i])
	}
	if m == 0 {
		return k.Fill(y, 0, 1)
	}
	return k.finish(scratch, m, y, 1, true)
}

// ClipCoef turns the norm at normToCoef into clip_grad_norm_'s
// coefficient min(maxNorm/(norm+1e-6), 1), in place.
func (k *kernelSet) ClipCoef(normToCoef devptr, maxNorm float32) error {
	if err := k.l.launch(kClipCoef, dim3{1, 1, 1}, dim3{1, 1, 1}, []arg{ptrArg(normToCoef), f32Arg(maxNorm)}); err != nil {
		return fmt.Errorf("%s: %w", kClipCoef, err)
	}
	return nil
}

// ScaleBy multiplies n floats at x by the device scalar s[0].
func (k *kernelSet) ScaleBy(x, s devptr, n int) error {
	return k.run(kScaleBy, n, ptrArg(x), ptrArg(s), i64Arg(n))
}

// SumAxis writes y[o,j] = Σ_i x[o,i,j] over outer×n×inner.
func (k *kernelSet) SumAxis(x, y devptr, outer, n, inner int) error {
	total := outer * inner
	return k.run(kSumAxis, total, ptrArg(x), ptrArg(y), i32Arg(n), i64Arg(inner), i64Arg(total))
}

// SumAxisBackward accumulates dx[o,i,j] += dy[o,j].
func (k *kernelSet) SumAxisBackward(dy, dx devptr, outer, n, inner int) error {
	total := outer * n * inner
	return k.run(kSumAxisBackward, total, ptrArg(dy), ptrArg(dx), i32Arg(n), i64Arg(inner), i64Arg(total))
}

// Softmax normalises along the middle axis of outer×n×inner.
func (k *kernelSet) Softmax(x, y devptr, outer, n, inner int) error {
	total := outer * inner
	return k.run(kSoftmaxForward, total, ptrArg(x), ptrArg(y), i32Arg(n), i64Arg(inner), i64Arg(total))
}

// SoftmaxBackward accumulates dx += y·(dy − Σ dy·y) along the same axis.
func (k *kernelSet) SoftmaxBackward(y, dy, dx devptr, outer, n, inner int) error {
	total := outer * inner
	return k.run(kSoftmaxBackward, total, ptrArg(y), ptrArg(dy), ptrArg(dx), i32Arg(n), i64Arg(inner), i64Arg(total))
}

// SGDNesterov applies trainer/optim's SGD step (L2 decay wd, Nesterov
// momentum mu, step = lr·weight) to n parameters; first starts the buffer.
func (k *kernelSet) SGDNesterov(p, grad, buf devptr, n int, lr, weight, mu, wd float64, first bool) error {
	f := 0
	if first {
		f = 1
	}
	return k.run(kSGDNesterov, n, ptrArg(p), ptrArg(grad), ptrArg(buf), f32Arg(float32(lr*weight)), f32Arg(float32(mu)),
		f32Arg(float32(wd)), i32Arg(f), i64Arg(n))
}

// AdamW applies trainer/optim's AdamW step t (1-based) to n parameters.
func (k *kernelSet) AdamW(p, grad, m, v devptr, n int, lr, wd, beta1, beta2, eps float64, t int) error {
	decay, stepSize, inv := adamWScalars(lr, wd, beta1, beta2, t)
	return k.run(kAdamWStep, n, ptrArg(p), ptrArg(grad), ptrArg(m), ptrArg(v), f32Arg(decay),
		f32Arg(float32(beta1)), f32Arg(float32(beta2)), f32Arg(stepSize), f32Arg(inv), f32Arg(float32(eps)), i64Arg(n))
}

// adamWScalars are AdamW's per-step scalars at step t, derived in double
// and rounded as the CPU code rounds them: the decoupled decay factor,
// lr over the first bias correction, and 1 over the second's root.
func adamWScalars(lr, wd, beta1, beta2 float64, t int) (decay, stepSize, inv float32) {
	bc1 := 1 - math.Pow(beta1, float64(t))
	bc2 := math.Sqrt(1 - math.Pow(beta2, float64(t)))
	return float32(1 - lr*wd), float32(lr / bc1), float32(1 / bc2)
}

// MuonMomentum updates Muon's buffer m ← lerp(m, g, 1−mu) and writes the
// Nesterov blend u = lerp(g, m, mu), the matrix Newton–Schulz takes.
func (k *kernelSet) MuonMomentum(grad, m, u devptr, n int, mu float64) error {
	return k.run(kMuonMomentum, n, ptrArg(grad), ptrArg(m), ptrArg(u), f32Arg(float32(1-mu)), f32Arg(float32(mu)), i64Arg(n))
}

// Axpby writes y = a·y + b·x.
func (k *kernelSet) Axpby(x, y devptr, a, b float32, n int) error {
	return k.run(kAxpby, n, ptrArg(x), ptrArg(y), f32Arg(a), f32Arg(b), i64Arg(n))
}

// ScaleInvNorm writes y = x/(norm[0] + eps) with norm a device scalar
// (Newton–Schulz's normalisation, after GlobalNorm of x).
func (k *kernelSet) ScaleInvNorm(x, y, norm devptr, eps float32, n int) error {
	return k.run(kScaleInvNorm, n, ptrArg(x), ptrArg(y), ptrArg(norm), f32Arg(eps), i64Arg(n))
}

// BatchNormalize writes into y each of count n-element matrices of x
// (back to back) divided by its Frobenius norm + eps: GlobalNorm and
// ScaleInvNorm of every matrix in one launch.
func (k *kernelSet) BatchNormalize(x, y devptr, eps float32, n, count int) error {
	if n <= 0 || count <= 0 {
		return nil
	}
	grid := dim3{uint32(min(count, 65535)), 1, 1}
	if err := k.l.launch(kBatchNormalize, grid, k.block(), []arg{ptrArg(x), ptrArg(y), f32Arg(eps), i64Arg(n), i32Arg(count)}); err != nil {
		return fmt.Errorf("%s: %w", kBatchNormalize, err)
	}
	return nil
}

// EMA folds x into the average: ema = ema·d + (1 − d)·x.
func (k *kernelSet) EMA(ema, x devptr, d float32, n int) error {
	return k.run(kEMAUpdate, n, ptrArg(ema), ptrArg(x), f32Arg(d), i64Arg(n))
}

// walkAxes merges a Strided walk as the CPU backend's copy would see it:
// unit axes dropped, adjacent axes whose strides compose merged. Then,
// when the destination stands still along an axis (a sum when
// accumulating), that axis moves to the serial inner part of the walk.
// It returns the axes, parallel ones first, and how many are parallel.
func walkAxes(s backend.Strided) (shape, src, dst []int, outer int, err error) {
	if len(s.Src) != len(s.Shape) || len(s.Dst) != len(s.Shape) {
		return nil, nil, nil, 0, fmt.Errorf("cuda: strided walk of %d axes with %d source and %d destination strides", len(s.Shape), len(s.Src), len(s.Dst))
	}
	if shape, src, dst, err = mergeAxes(s.Shape, s.Src, s.Dst); err != nil {
		return nil, nil, nil, 0, err
	}
	var ps, pS, pD, is, iS, iD []int
	for i := range shape {
		if dst[i] == 0 {
			is, iS, iD = append(is, shape[i]), append(iS, src[i]), append(iD, 0)
		} else {
			ps, pS, pD = append(ps, shape[i]), append(pS, src[i]), append(pD, dst[i])
		}
	}
	return append(ps, is...), append(pS, iS...), append(pD, iD...), len(ps), nil
}

// encodeWalk lays out struct Walk (shim.h): int nd, int outer, int
// shape[8], long long src[8], long long dst[8].
func encodeWalk(shape, src, dst []int, outer int) []byte {
	b := make([]byte, 40+2*8*maxDims)
	binary.LittleEndian.PutUint32(b, uint32(len(shape)))
	binary.LittleEndian.PutUint32(b[4:], uint32(outer))
	for i := range shape {
		binary.LittleEndian.PutUint32(b[8+4*i:], uint32(shape[i]))
		binary.LittleEndian.PutUint64(b[40+8*i:], uint64(src[i]))
		binary.LittleEndian.PutUint64(b[40+8*maxDims+8*i:], uint64(dst[i]))
	}
	return b
}

// Copy walks s as the CPU backend's Copy does: dst at the Dst strides
// takes (or, with Accumulate, adds) src at the Src strides. Axes the
// destination stands still on are summed serially by one thread in
// row-major order, so each destination element has one writer; the
// parallel axes must not map two indices to one destination (as
// backend.Strided requires of axis 0).
func (k *kernelSet) Copy(s backend.Strided, src, dst devptr) error {
	if numel(s.Shape) == 0 {
		return nil
	}
	shape, ss, ds, outer, err := walkAxes(s)
	if err != nil {
		return err
	}
	n := numel(shape[:outer])
	return k.run(kStridedWalk, n, structArg(encodeWalk(shape, ss, ds, outer)), ptrArg(src), ptrArg(dst), boolArg(s.Accumulate), i64Arg(n))
}

// perChannel launches a one-block-per-channel kernel over c channels.
func (k *kernelSet) perChannel(kn kernel, c int, args ...arg) error {
	if c <= 0 {
		return nil
	}
	if err := k.l.launch(kn, dim3{uint32(min(c, 65535, max(k.maxBlocks, 1))), 1, 1}, k.block(), args); err != nil {
		return fmt.Errorf("%s: %w", kn, err)
	}
	return nil
}

// BNTiles returns the tile length and count of the tiled batch-norm
// kernels for n×c×hw, or 0, 0 where a channel fits one tile and the
// one-block-per-channel kernels do the same work in one launch.
func (k *kernelSet) BNTiles(n, c, hw int) (tile, tiles int) {
	tile = k.bnTile
	if tile <= 0 {
		tile = bnTileLen
	}
	if n*hw <= tile {
		return 0, 0
	}
	return tile, c * n * ((hw + tile - 1) / tile)
}

// bnMode is the activation and the gradient mode of a batch-norm launch:
// the kernels apply Act in their passes (backend.BatchNormActivator), and
// the backward kernels write dx instead of adding to it when WriteDx.
type bnMode struct {
	Act     backend.BNAct
	WriteDx bool
}

// bnRunning is where a training batch-norm launch folds its batch
// statistics: running = (1 − Momentum)·running + Momentum·batch (the
// unbiased variance); a zero Mean leaves them alone.
type bnRunning struct {
	Mean, Var devptr
	Momentum  float32
}

// bnTiled runs the three tiled passes of one mode: partial sums of each
// tile into partial (2·tiles float64s), the per-channel finish (writing
// coef, 4·c floats, the statistics or parameter gradients and, in mode 0,
// affine when it is not 0), and the elementwise pass into out when it is
// not 0. zs and zh are the per-channel scale and shift that recompute the
// pre-activation in the backward modes.
func (k *kernelSet) bnTiled(mode, n, c, hw, tile, tiles int, a bnMode, eps float32, x, dy, gamma, beta, mean, invstd, varUnbiased,
	dgamma, dbeta, scale, zs, zh, out, partial, coef, affine devptr, run bnRunning) error {
	grid := dim3{uint32(max(min(tiles, k.maxBlocks), 1)), 1, 1}
	if err := k.l.launch(kBNTilesPartial, grid, k.block(), []arg{ptrArg(x), ptrArg(dy), ptrArg(mean), ptrArg(invstd),
		ptrArg(partial), i32Arg(mode), i32Arg(n), i32Arg(c), i64Arg(hw), i64Arg(tile), ptrArg(zs), ptrArg(zh),
		i32Arg(int(a.Act))}); err != nil {
		return fmt.Errorf("%s: %w", kBNTilesPartial, err)
	}
	if err := k.perChannel(kBNTilesFinish, c, ptrArg(partial), i32Arg(mode), i32Arg(n), i32Arg(c), i64Arg(hw), i64Arg(tile),
		ptrArg(x), f32Arg(eps), ptrArg(gamma), ptrArg(beta), ptrArg(mean), ptrArg(invstd), ptrArg(varUnbiased),
		ptrArg(dgamma), ptrArg(dbeta), ptrArg(coef), ptrArg(affine), ptrArg(run.Mean), ptrArg(run.Var),
		f32Arg(run.Momentum)); err != nil {
		return err
	}
	if out == 0 {
		return nil
	}
	total := n * c * hw
	return k.run(kBNTilesApply, total, ptrArg(x), ptrArg(dy), ptrArg(coef), ptrArg(scale), ptrArg(out), i32Arg(mode),
		i32Arg(c), i64Arg(hw), i64Arg(total), ptrArg(zs), ptrArg(zh), i32Arg(int(a.Act)), boolArg(a.WriteDx))
}

// BatchNormTrainTiled is BatchNormTrain by tiles (see BNTiles), with
// scratch partial (2·tiles float64s) and coef (4·c floats).
func (k *kernelSet) BatchNormTrainTiled(a bnMode, n, c, hw int, eps float32, x, gamma, beta, y, mean, invstd, varUnbiased, affine devptr,
	run bnRunning, partial, coef devptr) error {
	tile, tiles := k.BNTiles(n, c, hw)
	return k.bnTiled(0, n, c, hw, tile, tiles, a, eps, x, 0, gamma, beta, mean, invstd, varUnbiased, 0, 0, 0, 0, 0, y, partial, coef, affine, run)
}

// BatchNormBackwardTiled is BatchNormBackward by tiles.
func (k *kernelSet) BatchNormBackwardTiled(a bnMode, n, c, hw int, x, dy, mean, invstd, gamma, affine, dx, dgamma, dbeta, partial, coef devptr) error {
	if a.Act != backend.BNIdentity && affine == 0 {
		return fmt.Errorf("%s: an activation needs the forward's affine", kBNTilesApply)
	}
	tile, tiles := k.BNTiles(n, c, hw)
	zs, zh := affineHalves(a.Act, affine, c)
	return k.bnTiled(1, n, c, hw, tile, tiles, a, 0, x, dy, gamma, 0, mean, invstd, 0, dgamma, dbeta, 0, zs, zh, dx, partial, coef, 0, bnRunning{})
}

// BatchNormEvalBackwardTiled is BatchNormEvalBackward by tiles.
func (k *kernelSet) BatchNormEvalBackwardTiled(a bnMode, n, c, hw int, x, dy, mean, invstd, scale, shift, dx, dgamma, dbeta, partial, coef devptr) error {
	tile, tiles := k.BNTiles(n, c, hw)
	return k.bnTiled(2, n, c, hw, tile, tiles, a, 0, x, dy, 0, 0, mean, invstd, 0, dgamma, dbeta, scale, scale, shift, dx, partial, coef, 0, bnRunning{})
}

// affineHalves returns the scales and the shifts of a training forward's
// affine (2·c floats), or 0s where the activation needs neither.
func affineHalves(act backend.BNAct, affine devptr, c int) (scale, shift devptr) {
	if act == backend.BNIdentity {
		return 0, 0
	}
	return affine, affine.Add(4 * c)
}

// BatchNormTrain normalises x (n×c×hw) with its batch statistics, writing
// y = act(bn(x)), mean, invstd, (when varUnbiased is not 0) the unbiased
// variance, NaN for a single element, (when affine is not 0) each
// channel's scale and shift, and the running statistics of run; gamma and
// beta may be 0 (1 and 0).
func (k *kernelSet) BatchNormTrain(a bnMode, n, c, hw int, eps float32, x, gamma, beta, y, mean, invstd, varUnbiased, affine devptr, run bnRunning) error {
	if n*hw == 0 {
		return nil
	}
	return k.perChannel(kBNTrain, c, ptrArg(x), ptrArg(gamma), ptrArg(beta), ptrArg(y), ptrArg(mean), ptrArg(invstd),
		ptrArg(varUnbiased), i32Arg(n), i32Arg(c), i64Arg(hw), f32Arg(eps), ptrArg(affine), i32Arg(int(a.Act)),
		ptrArg(run.Mean), ptrArg(run.Var), f32Arg(run.Momentum))
}

// BatchNormBackward adds (or with WriteDx writes) the training-mode
// gradients into dx, dgamma and dbeta (each may be 0) from the saved
// mean, invstd and, with an activation, BatchNormTrain's affine.
func (k *kernelSet) BatchNormBackward(a bnMode, n, c, hw int, x, dy, mean, invstd, gamma, affine, dx, dgamma, dbeta devptr) error {
	if a.Act != backend.BNIdentity && affine == 0 {
		return fmt.Errorf("%s: an activation needs the forward's affine", kBNBackward)
	}
	return k.perChannel(kBNBackward, c, ptrArg(x), ptrArg(dy), ptrArg(mean), ptrArg(invstd), ptrArg(gamma),
		ptrArg(dx), ptrArg(dgamma), ptrArg(dbeta), i32Arg(n), i32Arg(c), i64Arg(hw), ptrArg(affine), i32Arg(int(a.Act)),
		boolArg(a.WriteDx))
}

// BatchNormEvalScale writes the per-channel invstd, scale and (when shift
// is not 0) shift of eval-mode batch-norm from the running statistics.
func (k *kernelSet) BatchNormEvalScale(c int, eps float32, gamma, beta, mean, variance, invstd, scale, shift devptr) error {
	return k.run(kBNEvalScale, c, ptrArg(gamma), ptrArg(beta), ptrArg(mean), ptrArg(variance), f32Arg(eps),
		ptrArg(invstd), ptrArg(scale), ptrArg(shift), i64Arg(c))
}

// BatchNormEvalBackward adds (or with WriteDx writes) the eval-mode
// gradients with BatchNormEvalScale's invstd, scale and, with an
// activation, shift; each output may be 0.
func (k *kernelSet) BatchNormEvalBackward(a bnMode, n, c, hw int, x, dy, mean, invstd, scale, shift, dx, dgamma, dbeta devptr) error {
	if a.Act != backend.BNIdentity && shift == 0 {
		return fmt.Errorf("%s: an activation needs the shift", kBNEvalBackward)
	}
	return k.perChannel(kBNEvalBackward, c, ptrArg(x), ptrArg(dy), ptrArg(mean), ptrArg(invstd), ptrArg(scale),
		ptrArg(dx), ptrArg(dgamma), ptrArg(dbeta), i32Arg(n), i32Arg(c), i64Arg(hw), ptrArg(shift), i32Arg(int(a.Act)),
		boolArg(a.WriteDx))
}
