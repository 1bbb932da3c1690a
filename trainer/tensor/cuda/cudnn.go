package cuda

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"unsafe"
)

// cuDNN enum values used here (cudnn_graph.h / cudnn_ops.h, unchanged from
// cuDNN 8 for the legacy API).
const (
	dnnTensorNCHW      = 0 // cudnnTensorFormat_t
	dnnFloat           = 0 // cudnnDataType_t
	dnnCrossCorrelate  = 1 // cudnnConvolutionMode_t
	dnnBatchNormSpatal = 1 // cudnnBatchNormMode_t
	dnnPoolMax         = 0 // cudnnPoolingMode_t
	dnnPropagateNaN    = 1
	dnnDefaultMath     = 0 // tensor cores allowed (TF32 on Ampere and later)
	dnnFMAMath         = 3 // fp32 FMA only
	// dnnBNMinEpsilon is CUDNN_BN_MIN_EPSILON.
	dnnBNMinEpsilon = 1e-5
)

type cudnnAPI struct {
	lib *dylib

	getVersion, getErrorString, create, destroy, setStream uintptr
	getCudartVersion                                       uintptr // optional: 0 when absent

	createTensor, setTensor4d, destroyTensor             uintptr
	createFilter, setFilter4d, destroyFilter             uintptr
	createConv, setConv2d, setConvGroups, setConvMath    uintptr
	destroyConv                                          uintptr
	findFwd, findBwdData, findBwdFilter                  uintptr
	heurFwd, heurBwdData, heurBwdFilter                  uintptr // optional
	wsFwd, wsBwdData, wsBwdFilter                        uintptr
	convFwd, convBwdData, convBwdFilter                  uintptr
	deriveBN                                             uintptr
	createPool, setPool2d, destroyPool, poolFwd, poolBwd uintptr
	bnTrainSym, bnInferSym, bnBackSym                    uintptr

	bnTrain func(h uintptr, mode int32, alpha, beta, xd, x, yd, y, bnd, scale, bias uintptr, factor float64, rmean, rvar uintptr, eps float64, smean, sinv uintptr) int32
	bnInfer func(h uintptr, mode int32, alpha, beta, xd, x, yd, y, bnd, scale, bias, mean, variance uintptr, eps float64) int32
	bnBack  func(h uintptr, mode int32, aData, bData, aParam, bParam, xd, x, dyd, dy, dxd, dx, bnd, scale, dscale, dbias uintptr, eps float64, smean, sinv uintptr) int32
}

var (
	cudnnOnce sync.Once
	cudnnLib  *cudnnAPI
	cudnnErr  error
)

func loadCudnn() (*cudnnAPI, error) {
	cudnnOnce.Do(func() {
		preloadNVRTC()
		lib, err := openLibrary(libCUDNN)
		if err != nil {
			cudnnErr = err
			return
		}
		c := &cudnnAPI{lib: lib}
		// Only what the Backend runs is required. Pooling and batch-norm
		// (Device.PoolForward and the BatchNorm methods, which the
		// Backend's own kernels replace) and the CUDA version query are
		// optional: a build without them still trains.
		lib.bindOptional(map[string]*uintptr{
			"cudnnGetCudartVersion":                         &c.getCudartVersion,
			"cudnnGetConvolutionForwardAlgorithm_v7":        &c.heurFwd,
			"cudnnGetConvolutionBackwardDataAlgorithm_v7":   &c.heurBwdData,
			"cudnnGetConvolutionBackwardFilterAlgorithm_v7": &c.heurBwdFilter,
			"cudnnDeriveBNTensorDescriptor":                 &c.deriveBN,
			"cudnnCreatePoolingDescriptor":                  &c.createPool, "cudnnSetPooling2dDescriptor": &c.setPool2d,
			"cudnnDestroyPoolingDescriptor": &c.destroyPool, "cudnnPoolingForward": &c.poolFwd,
			"cudnnPoolingBackward":                    &c.poolBwd,
			"cudnnBatchNormalizationForwardTraining":  &c.bnTrainSym,
			"cudnnBatchNormalizationForwardInference": &c.bnInferSym,
			"cudnnBatchNormalizationBackward":         &c.bnBackSym,
		})
		cudnnErr = lib.bind(map[string]*uintptr{
			"cudnnGetVersion": &c.getVersion, "cudnnGetErrorString": &c.getErrorString,
			"cudnnCreate": &c.create, "cudnnDestroy": &c.destroy, "cudnnSetStream": &c.setStream,
			"cudnnCreateTensorDescriptor": &c.createTensor, "cudnnSetTensor4dDescriptor": &c.setTensor4d,
			"cudnnDestroyTensorDescriptor": &c.destroyTensor,
			"cudnnCreateFilterDescriptor":  &c.createFilter, "cudnnSetFilter4dDescriptor": &c.setFilter4d,
			"cudnnDestroyFilterDescriptor":     &c.destroyFilter,
			"cudnnCreateConvolutionDescriptor": &c.createConv, "cudnnSetConvolution2dDescriptor": &c.setConv2d,
			"cudnnSetConvolutionGroupCount": &c.setConvGroups, "cudnnSetConvolutionMathType": &c.setConvMath,
			"cudnnDestroyConvolutionDescriptor":              &c.destroyConv,
			"cudnnFindConvolutionForwardAlgorithm":           &c.findFwd,
			"cudnnFindConvolutionBackwardDataAlgorithm":      &c.findBwdData,
			"cudnnFindConvolutionBackwardFilterAlgorithm":    &c.findBwdFilter,
			"cudnnGetConvolutionForwardWorkspaceSize":        &c.wsFwd,
			"cudnnGetConvolutionBackwardDataWorkspaceSize":   &c.wsBwdData,
			"cudnnGetConvolutionBackwardFilterWorkspaceSize": &c.wsBwdFilter,
			"cudnnConvolutionForward":                        &c.convFwd, "cudnnConvolutionBackwardData": &c.convBwdData,
			"cudnnConvolutionBackwardFilter": &c.convBwdFilter,
		})
		if cudnnErr != nil {
			return
		}
		// The batch-norm calls take doubles by value, which only a typed
		// binding passes in the right registers.
		for _, b := range []struct {
			fptr any
			sym  uintptr
		}{{&c.bnTrain, c.bnTrainSym}, {&c.bnInfer, c.bnInferSym}, {&c.bnBack, c.bnBackSym}} {
			if b.sym != 0 {
				bindFunc(b.fptr, b.sym)
			}
		}
		cudnnLib = c
	})
	return cudnnLib, cudnnErr
}

// missing is the error of an optional entry point this cuDNN lacks.
func (c *cudnnAPI) missing(what string) error {
	return fmt.Errorf("%w: cuDNN at %s lacks %s", ErrUnavailable, c.lib.path, what)
}

func (c *cudnnAPI) check(call string, r uintptr) error {
	code := int(int32(r))
	if code == 0 {
		return nil
	}
	return &status{Lib: "cudnn", Call: call, Code: code, Name: cudnnStatusName(code), Detail: goString(ccall(c.getErrorString, r))}
}

// cudnnVersion returns the cuDNN version found ("9.10.2") and its path.
func cudnnVersion() (version, path string, err error) {
	c, err := loadCudnn()
	if err != nil {
		return "", "", err
	}
	v := int(ccall(c.getVersion))
	// cuDNN 9 encodes major·10000 + minor·100 + patch.
	return fmt.Sprintf("%d.%d.%d", v/10000, v%10000/100, v%100), c.lib.path, nil
}

// algoEnv names the variable that chooses how a convolution's algorithms
// are picked: "search" (the default: cuDNN times every candidate on the
// device, the fastest choice, seconds a shape) or "heuristic" (cuDNN's
// heuristics rank them without running any: planning in milliseconds, for
// short runs such as scripts/gpu-check.sh whose budget a full search of
// every shape would eat).
const algoEnv = "SEGPIPE_CUDNN_ALGO"

// dnn is a cuDNN handle on a device's compute stream.
type dnn struct {
	api       *cudnnAPI
	handle    uintptr
	math      uintptr
	heuristic bool
}

// NewDnn creates a cuDNN handle on d's compute stream; tf32 allows tensor
// cores to round convolution inputs to TF32 (off for parity).
func (d *device) NewDnn(tf32 bool) (*dnn, error) {
	api, err := loadCudnn()
	if err != nil {
		return nil, err
	}
	dn := &dnn{api: api, math: dnnFMAMath}
	if tf32 {
		dn.math = dnnDefaultMath
	}
	switch v := os.Getenv(algoEnv); v {
	case "", "search":
	case "heuristic":
		if api.heurFwd == 0 || api.heurBwdData == 0 || api.heurBwdFilter == 0 {
			return nil, api.missing("the heuristic algorithm queries (cudnnGetConvolution*Algorithm_v7) " + algoEnv + "=heuristic needs")
		}
		dn.heuristic = true
	default:
		return nil, fmt.Errorf("cudnn: %s=%q: want search or heuristic", algoEnv, v)
	}
	err = d.Do(func() error {
		if err := api.check("cudnnCreate", ccall(api.create, uintptr(unsafe.Pointer(&dn.handle)))); err != nil {
			return err
		}
		return api.check("cudnnSetStream", ccall(api.setStream, dn.handle, uintptr(d.stream)))
	})
	if err != nil {
		return nil, err
	}
	return dn, nil
}

// Close destroys the handle.
func (dn *dnn) Close(d *device) error {
	return d.Do(func() error { return dn.api.check("cudnnDestroy", ccall(dn.api.destroy, dn.handle)) })
}

// convShape describes a 2-D cross-correlation (dilation 1) of an N×InC×InH×InW
// input with an OutC×(InC/Groups)×KH×KW filter, as the CPU backend's.
type convShape struct {
	N, InC, InH, InW int
	OutC, KH, KW     int
	Stride, Pad      int
	Groups           int
}

// OutH is (InH + 2·Pad − KH)/Stride + 1.
func (c convShape) OutH() int { return (c.InH+2*c.Pad-c.KH)/max(c.Stride, 1) + 1 }

// OutW is (InW + 2·Pad − KW)/Stride + 1.
func (c convShape) OutW() int { return (c.InW+2*c.Pad-c.KW)/max(c.Stride, 1) + 1 }

// algoPerf is one entry of a cudnnFind*Algorithm result
// (cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t share a layout: algo,
// status, time float, memory size_t at offset 16, determinism, mathType,
// three reserved ints: 48 bytes).
type algoPerf struct {
	algo, status int32
	ms           float32
	memory       uint64
	determinism  int32
	math         int32
}

const algoPerfSize = 48

func parseAlgoPerf(b []byte, n int) []algoPerf {
	out := make([]algoPerf, 0, n)
	for i := 0; i < n && (i+1)*algoPerfSize <= len(b); i++ {
		r := b[i*algoPerfSize:]
		out = append(out, algoPerf{
			algo:        int32(binary.LittleEndian.Uint32(r[0:])),
			status:      int32(binary.LittleEndian.Uint32(r[4:])),
			ms:          math.Float32frombits(binary.LittleEndian.Uint32(r[8:])),
			memory:      binary.LittleEndian.Uint64(r[16:]),
			determinism: int32(binary.LittleEndian.Uint32(r[24:])),
			math:        int32(binary.LittleEndian.Uint32(r[28:])),
		})
	}
	return out
}

// pickAlgo returns the first successful entry (cuDNN sorts by time) whose
// math type is allowed: without TF32 only FMA or default-math entries that
// do not use tensor ops.
func pickAlgo(perf []algoPerf, allowTensorOps bool) (algoPerf, bool) {
	for _, p := range perf {
		if p.status != 0 {
			continue
		}
		if !allowTensorOps && p.math != dnnFMAMath && p.math != dnnDefaultMath {
			continue
		}
		return p, true
	}
	return algoPerf{}, false
}

// convPlan is a convolution's descriptors and the algorithms cuDNN's
// search chose for its three passes, with their workspace sizes. A pass is
// planned when it first runs: validation, which runs forward passes only,
// searches no backward algorithm for its own batch shapes.
type convPlan struct {
	convShape
	x, y, w uintptr
	// convs are the forward, backward-data and backward-filter passes'
	// convolution descriptors: each carries the math type of the algorithm
	// the search chose for its pass, as PyTorch sets it from the search
	// result, which one shared descriptor could not.
	convs                             [3]uintptr
	FwdAlgo, BwdDataAlgo, BwdFiltAlgo int32
	FwdWS, BwdDataWS, BwdFiltWS       uint64
	planned                           [3]bool
	key                               string // the plan cache's
}

// The passes, in ConvPlan.convs' order.
const (
	passForward = iota
	passBackwardData
	passBackwardFilter
)

// PlanConv creates c's descriptors and chooses the forward pass's
// algorithm by cuDNN's search (which times each candidate on the device),
// or heuristics, or the plan cache; each backward pass is planned the
// same way when it first runs.
func (d *device) PlanConv(dn *dnn, c convShape) (*convPlan, error) {
	c.Stride, c.Groups = max(c.Stride, 1), max(c.Groups, 1)
	p := &convPlan{convShape: c}
	a := dn.api
	err := d.Do(func() error {
		steps := []struct {
			name string
			r    func() uintptr
		}{
			{"cudnnCreateTensorDescriptor", func() uintptr { return ccall(a.createTensor, uintptr(unsafe.Pointer(&p.x))) }},
			{"cudnnCreateTensorDescriptor", func() uintptr { return ccall(a.createTensor, uintptr(unsafe.Pointer(&p.y))) }},
			{"cudnnCreateFilterDescriptor", func() uintptr { return ccall(a.createFilter, uintptr(unsafe.Pointer(&p.w))) }},
			{"cudnnSetTensor4dDescriptor", func() uintptr {
				return ccall(a.setTensor4d, p.x, dnnTensorNCHW, dnnFloat, uintptr(c.N), uintptr(c.InC), uintptr(c.InH), uintptr(c.InW))
			}},
			{"cudnnSetTensor4dDescriptor", func() uintptr {
				return ccall(a.setTensor4d, p.y, dnnTensorNCHW, dnnFloat, uintptr(c.N), uintptr(c.OutC), uintptr(c.OutH()), uintptr(c.OutW()))
			}},
			{"cudnnSetFilter4dDescriptor", func() uintptr {
				return ccall(a.setFilter4d, p.w, dnnFloat, dnnTensorNCHW, uintptr(c.OutC), uintptr(c.InC/c.Groups), uintptr(c.KH), uintptr(c.KW))
			}},
		}
		for i := range p.convs {
			cd := &p.convs[i]
			steps = append(steps, []struct {
				name string
				r    func() uintptr
			}{
				{"cudnnCreateConvolutionDescriptor", func() uintptr { return ccall(a.createConv, uintptr(unsafe.Pointer(cd))) }},
				{"cudnnSetConvolution2dDescriptor", func() uintptr {
					return ccall(a.setConv2d, *cd, uintptr(c.Pad), uintptr(c.Pad), uintptr(c.Stride), uintptr(c.Stride), 1, 1, dnnCrossCorrelate, dnnFloat)
				}},
				{"cudnnSetConvolutionGroupCount", func() uintptr { return ccall(a.setConvGroups, *cd, uintptr(c.Groups)) }},
				{"cudnnSetConvolutionMathType", func() uintptr { return ccall(a.setConvMath, *cd, dn.math) }},
			}...)
		}
		for _, s := range steps {
			if err := a.check(s.name, s.r()); err != nil {
				return err
			}
		}
		p.key = planKey(d, dn, c)
		return p.planLocked(dn, passForward)
	})
	if err != nil {
		p.destroy(d, dn)
		return nil, fmt.Errorf("conv %+v: %w", c, err)
	}
	return p, nil
}

// planLocked chooses pass's algorithm unless it is chosen (inside Do):
// from the plan cache, else by cuDNN's search or heuristics, recording
// the choice in the cache; then applies its math type to the pass's
// descriptor and sizes its workspace.
func (p *convPlan) planLocked(dn *dnn, pass int) error {
	if p.planned[pass] {
		return nil
	}
	a := dn.api
	const want = 8
	var buf [want * algoPerfSize]byte
	var got int32
	type search struct {
		name     string
		find, ws uintptr
		algo     *int32
		size     *uint64
	}
	s := [3]search{
		{"Forward", a.findFwd, a.wsFwd, &p.FwdAlgo, &p.FwdWS},
		{"BackwardData", a.findBwdData, a.wsBwdData, &p.BwdDataAlgo, &p.BwdDataWS},
		{"BackwardFilter", a.findBwdFilter, a.wsBwdFilter, &p.BwdFiltAlgo, &p.BwdFiltWS},
	}[pass]
	query := "cudnnFindConvolution%sAlgorithm"
	if dn.heuristic {
		// Same arguments and result layout as the searches.
		s.find = [3]uintptr{a.heurFwd, a.heurBwdData, a.heurBwdFilter}[pass]
		query = "cudnnGetConvolution%sAlgorithm_v7"
	}
	conv := p.convs[pass]
	// Descriptor order per pass: forward (x, w, conv, y), backward data
	// (w, dy, conv, dx), backward filter (x, dy, conv, dw).
	d1, d2, d3 := p.x, p.w, p.y
	switch pass {
	case passBackwardData:
		d1, d2, d3 = p.w, p.y, p.x
	case passBackwardFilter:
		d1, d2, d3 = p.x, p.y, p.w
	}
	// use runs best in the math type it was found in (tensor-op math may
	// be what made it fastest) and sizes its workspace. Strict fp32 keeps
	// FMA math, whatever the entry says.
	use := func(best algoPerf) error {
		*s.algo = best.algo
		m := dn.math
		if dn.math == dnnDefaultMath {
			m = uintptr(best.math)
		}
		if err := a.check("cudnnSetConvolutionMathType", ccall(a.setConvMath, conv, m)); err != nil {
			return err
		}
		return a.check("cudnnGetConvolution"+s.name+"WorkspaceSize", ccall(s.ws, dn.handle, d1, d2, conv, d3,
			uintptr(best.algo), uintptr(unsafe.Pointer(s.size))))
	}
	if cached, hit := plans.get(p.key); hit && cached[pass].Algo >= 0 {
		if use(algoPerf{algo: cached[pass].Algo, math: cached[pass].Math}) == nil {
			p.planned[pass] = true
			return nil
		}
		// A choice this cuDNN refuses: search again.
	}
	if err := a.check(fmt.Sprintf(query, s.name), ccall(s.find, dn.handle, d1, d2, conv, d3, want,
		uintptr(unsafe.Pointer(&got)), uintptr(unsafe.Pointer(&buf[0])))); err != nil {
		return err
	}
	best, ok := pickAlgo(parseAlgoPerf(buf[:], int(got)), dn.math == dnnDefaultMath)
	if !ok {
		return fmt.Errorf("cudnn: no %s algorithm for %+v", s.name, p.convShape)
	}
	if err := use(best); err != nil {
		return err
	}
	plans.putPass(p.key, pass, algoChoice{Algo: best.algo, Math: best.math})
	p.planned[pass] = true
	return nil
}

func (p *convPlan) destroy(d *device, dn *dnn) {
	a := dn.api
	_ = d.Do(func() error {
		for _, t := range []uintptr{p.x, p.y} {
			if t != 0 {
				ccall(a.destroyTensor, t)
			}
		}
		if p.w != 0 {
			ccall(a.destroyFilter, p.w)
		}
		for _, cd := range p.convs {
			if cd != 0 {
				ccall(a.destroyConv, cd)
			}
		}
		return nil
	})
}

// Close destroys the plan's descriptors.
func (p *convPlan) Close(d *device, dn *dnn) { p.destroy(d, dn) }

// withWorkspace runs f (inside Do) with n bytes of the device's
// workspace: one allocation kept and grown to the largest request, as
// PyTorch keeps cuDNN's, rather than an allocation and a free around every
// convolution (two calls each, hundreds a step). Every user queues on the
// compute stream, so stream order keeps one user's kernels from
// overtaking another's; a grown workspace frees the old one in that order.
func (d *device) withWorkspace(n uint64, f func(ws devptr) error) error {
	if n == 0 {
		return f(0)
	}
	if d.wsBytes < n {
		if d.ws != 0 {
			if err := d.drv.check("cuMemFreeAsync", ccall(d.drv.cuMemFreeAsync, uintptr(d.ws), uintptr(d.stream))); err != nil {
				return err
			}
			d.ws, d.wsBytes = 0, 0
		}
		var ws devptr
		err := d.drv.check("cuMemAllocAsync", ccall(d.drv.cuMemAllocAsync, uintptr(unsafe.Pointer(&ws)), uintptr(n), uintptr(d.stream)))
		if err != nil && d.reclaim != nil {
			if rerr := d.reclaim(); rerr != nil {
				return errors.Join(err, rerr)
			}
			err = d.drv.check("cuMemAllocAsync", ccall(d.drv.cuMemAllocAsync, uintptr(unsafe.Pointer(&ws)), uintptr(n), uintptr(d.stream)))
		}
		if err != nil {
			return err
		}
		d.ws, d.wsBytes = ws, n
	}
	return f(d.ws)
}

// ConvForward writes y = conv(x, w).
func (d *device) ConvForward(dn *dnn, p *convPlan, x, w, y devptr) error {
	alpha, beta := float32(1), float32(0)
	return d.Do(func() error {
		return d.withWorkspace(p.FwdWS, func(ws devptr) error {
			return dn.api.check("cudnnConvolutionForward", ccall(dn.api.convFwd, dn.handle, uintptr(unsafe.Pointer(&alpha)),
				p.x, uintptr(x), p.w, uintptr(w), p.convs[0], uintptr(p.FwdAlgo), uintptr(ws), uintptr(p.FwdWS),
				uintptr(unsafe.Pointer(&beta)), p.y, uintptr(y)))
		})
	})
}

// ConvBackwardData accumulates dx += the input gradient of dy, or with
// accumulate false writes it (beta 0: dx is not read).
func (d *device) ConvBackwardData(dn *dnn, p *convPlan, dy, w, dx devptr, accumulate bool) error {
	alpha, beta := float32(1), float32(1)
	if !accumulate {
		beta = 0
	}
	return d.Do(func() error {
		if err := p.planLocked(dn, passBackwardData); err != nil {
			return fmt.Errorf("conv %+v: %w", p.convShape, err)
		}
		return d.withWorkspace(p.BwdDataWS, func(ws devptr) error {
			return dn.api.check("cudnnConvolutionBackwardData", ccall(dn.api.convBwdData, dn.handle, uintptr(unsafe.Pointer(&alpha)),
				p.w, uintptr(w), p.y, uintptr(dy), p.convs[1], uintptr(p.BwdDataAlgo), uintptr(ws), uintptr(p.BwdDataWS),
				uintptr(unsafe.Pointer(&beta)), p.x, uintptr(dx)))
		})
	})
}

// ConvBackwardFilter accumulates dw += the filter gradient.
func (d *device) ConvBackwardFilter(dn *dnn, p *convPlan, x, dy, dw devptr) error {
	alpha, beta := float32(1), float32(1)
	return d.Do(func() error {
		if err := p.planLocked(dn, passBackwardFilter); err != nil {
			return fmt.Errorf("conv %+v: %w", p.convShape, err)
		}
		return d.withWorkspace(p.BwdFiltWS, func(ws devptr) error {
			return dn.api.check("cudnnConvolutionBackwardFilter", ccall(dn.api.convBwdFilter, dn.handle, uintptr(unsafe.Pointer(&alpha)),
				p.x, uintptr(x), p.y, uintptr(dy), p.convs[2], uintptr(p.BwdFiltAlgo), uintptr(ws), uintptr(p.BwdFiltWS),
				uintptr(unsafe.Pointer(&beta)), p.w, uintptr(dw)))
		})
	})
}

// tensorDescs creates an N×C×H×W descriptor and its derived per-channel
// batch-norm descriptor, calls f, and destroys both.
func (d *device) tensorDescs(dn *dnn, n, c, h, w int, f func(x, bn uintptr) error) error {
	a := dn.api
	if a.deriveBN == 0 {
		return a.missing("cudnnDeriveBNTensorDescriptor")
	}
	var x, bn uintptr
	if err := a.check("cudnnCreateTensorDescriptor", ccall(a.createTensor, uintptr(unsafe.Pointer(&x)))); err != nil {
		return err
	}
	defer ccall(a.destroyTensor, x)
	if err := a.check("cudnnCreateTensorDescriptor", ccall(a.createTensor, uintptr(unsafe.Pointer(&bn)))); err != nil {
		return err
	}
	defer ccall(a.destroyTensor, bn)
	if err := a.check("cudnnSetTensor4dDescriptor", ccall(a.setTensor4d, x, dnnTensorNCHW, dnnFloat, uintptr(n), uintptr(c), uintptr(h), uintptr(w))); err != nil {
		return err
	}
	if err := a.check("cudnnDeriveBNTensorDescriptor", ccall(a.deriveBN, bn, x, dnnBatchNormSpatal)); err != nil {
		return err
	}
	return f(x, bn)
}

func checkBNEps(eps float32) error {
	if float64(eps) < dnnBNMinEpsilon {
		return fmt.Errorf("cudnn: batch-norm eps %g below CUDNN_BN_MIN_EPSILON %g", eps, dnnBNMinEpsilon)
	}
	return nil
}

// BatchNormTrain normalises x (n×c×hw) with its batch statistics: y,
// the saved mean and inverse std, and in varUnbiased the batch's unbiased
// variance (cuDNN's running-variance update with factor 1 over a zeroed
// buffer), as the CPU backend's BatchNormTrain.
func (d *device) BatchNormTrain(dn *dnn, n, c, hw int, eps float32, x, gamma, beta, y, mean, invstd, varUnbiased devptr) error {
	if dn.api.bnTrainSym == 0 {
		return dn.api.missing("cuDNN's BatchNormTrain")
	}
	if err := checkBNEps(eps); err != nil {
		return err
	}
	one, zero := float32(1), float32(0)
	return d.Do(func() error {
		return d.tensorDescs(dn, n, c, hw, 1, func(xd, bnd uintptr) error {
			// Factor 1 makes the "running" outputs the batch's own statistics;
			// zeroing first keeps 0·(whatever was there) from being NaN.
			return d.withWorkspace(uint64(4*c), func(runMean devptr) error {
				for _, p := range []devptr{runMean, varUnbiased} {
					if err := d.drv.check("cuMemsetD32Async", ccall(d.drv.cuMemsetD32Async, uintptr(p), 0, uintptr(c), uintptr(d.stream))); err != nil {
						return err
					}
				}
				return dn.api.check("cudnnBatchNormalizationForwardTraining", uintptr(uint32(dn.api.bnTrain(dn.handle, dnnBatchNormSpatal,
					uintptr(unsafe.Pointer(&one)), uintptr(unsafe.Pointer(&zero)), xd, uintptr(x), xd, uintptr(y), bnd,
					uintptr(gamma), uintptr(beta), 1, uintptr(runMean), uintptr(varUnbiased), float64(eps), uintptr(mean), uintptr(invstd)))))
			})
		})
	})
}

// BatchNormInference writes y = gamma·(x − mean)/√(var + eps) + beta.
func (d *device) BatchNormInference(dn *dnn, n, c, hw int, eps float32, x, gamma, beta, mean, variance, y devptr) error {
	if dn.api.bnInferSym == 0 {
		return dn.api.missing("cuDNN's BatchNormInference")
	}
	if err := checkBNEps(eps); err != nil {
		return err
	}
	one, zero := float32(1), float32(0)
	return d.Do(func() error {
		return d.tensorDescs(dn, n, c, hw, 1, func(xd, bnd uintptr) error {
			return dn.api.check("cudnnBatchNormalizationForwardInference", uintptr(uint32(dn.api.bnInfer(dn.handle, dnnBatchNormSpatal,
				uintptr(unsafe.Pointer(&one)), uintptr(unsafe.Pointer(&zero)), xd, uintptr(x), xd, uintptr(y), bnd,
				uintptr(gamma), uintptr(beta), uintptr(mean), uintptr(variance), float64(eps)))))
		})
	})
}

// BatchNormBackward accumulates the training-mode gradients into dx,
// dgamma and dbeta (all three required) from the saved mean and invstd.
func (d *device) BatchNormBackward(dn *dnn, n, c, hw int, eps float32, x, dy, mean, invstd, gamma, dx, dgamma, dbeta devptr) error {
	if dn.api.bnBackSym == 0 {
		return dn.api.missing("cuDNN's BatchNormBackward")
	}
	if err := checkBNEps(eps); err != nil {
		return err
	}
	one := float32(1)
	return d.Do(func() error {
		return d.tensorDescs(dn, n, c, hw, 1, func(xd, bnd uintptr) error {
			o := uintptr(unsafe.Pointer(&one))
			return dn.api.check("cudnnBatchNormalizationBackward", uintptr(uint32(dn.api.bnBack(dn.handle, dnnBatchNormSpatal,
				o, o, o, o, xd, uintptr(x), xd, uintptr(dy), xd, uintptr(dx), bnd,
				uintptr(gamma), uintptr(dgamma), uintptr(dbeta), float64(eps), uintptr(mean), uintptr(invstd)))))
		})
	})
}

// poolShape describes max pooling of an N×C×H×W input with a K×K window.
type poolShape struct {
	N, C, H, W     int
	K, Stride, Pad int
}

// OutH is (H + 2·Pad − K)/Stride + 1.
func (p poolShape) OutH() int { return (p.H+2*p.Pad-p.K)/p.Stride + 1 }

// OutW is (W + 2·Pad − K)/Stride + 1.
func (p poolShape) OutW() int { return (p.W+2*p.Pad-p.K)/p.Stride + 1 }

// poolDescs creates the pooling and the two tensor descriptors.
func (d *device) poolDescs(dn *dnn, p poolShape, f func(pd, xd, yd uintptr) error) error {
	a := dn.api
	if a.createPool == 0 || a.setPool2d == 0 || a.destroyPool == 0 || a.poolFwd == 0 || a.poolBwd == 0 {
		return a.missing("cuDNN's pooling")
	}
	var pd uintptr
	if err := a.check("cudnnCreatePoolingDescriptor", ccall(a.createPool, uintptr(unsafe.Pointer(&pd)))); err != nil {
		return err
	}
	defer ccall(a.destroyPool, pd)
	if err := a.check("cudnnSetPooling2dDescriptor", ccall(a.setPool2d, pd, dnnPoolMax, dnnPropagateNaN,
		uintptr(p.K), uintptr(p.K), uintptr(p.Pad), uintptr(p.Pad), uintptr(p.Stride), uintptr(p.Stride))); err != nil {
		return err
	}
	return d.tensorDescs(dn, p.N, p.C, p.H, p.W, func(xd, _ uintptr) error {
		return d.tensorDescs(dn, p.N, p.C, p.OutH(), p.OutW(), func(yd, _ uintptr) error { return f(pd, xd, yd) })
	})
}

// PoolForward writes y = maxpool(x) with cuDNN. The trainer's own
// MaxPool kernel records winners for PyTorch's tie rule; this one is for
// inference, where no gradient is needed.
func (d *device) PoolForward(dn *dnn, p poolShape, x, y devptr) error {
	one, zero := float32(1), float32(0)
	return d.Do(func() error {
		return d.poolDescs(dn, p, func(pd, xd, yd uintptr) error {
			return dn.api.check("cudnnPoolingForward", ccall(dn.api.poolFwd, dn.handle, pd, uintptr(unsafe.Pointer(&one)), xd, uintptr(x),
				uintptr(unsafe.Pointer(&zero)), yd, uintptr(y)))
		})
	})
}

// PoolBackward accumulates dx += maxpool's input gradient.
func (d *device) PoolBackward(dn *dnn, p poolShape, x, y, dy, dx devptr) error {
	one := float32(1)
	return d.Do(func() error {
		return d.poolDescs(dn, p, func(pd, xd, yd uintptr) error {
			o := uintptr(unsafe.Pointer(&one))
			return dn.api.check("cudnnPoolingBackward", ccall(dn.api.poolBwd, dn.handle, pd, o, yd, uintptr(y), yd, uintptr(dy), xd, uintptr(x),
				o, xd, uintptr(dx)))
		})
	})
}
