package cuda_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/segpipe/segpipe/trainer/internal/modelcase"
	"github.com/segpipe/segpipe/trainer/model"
	"github.com/segpipe/segpipe/trainer/tensor"
	"github.com/segpipe/segpipe/trainer/tensor/cuda"
	"github.com/segpipe/segpipe/trainer/tensor/cuda/cudastub"
)

// openStub opens a Backend on a stub built with defines.
func openStub(t *testing.T, defines ...string) (*cuda.Backend, error) {
	be, _, err := openStubWith(t, defines...)
	return be, err
}

func openStubWith(t *testing.T, defines ...string) (*cuda.Backend, *cudastub.Stub, error) {
	t.Helper()
	if !cuda.BindingBuilt {
		t.Skip("built with -tags nocuda: no run-time binding to load the stub with")
	}
	st := cudastub.Install(t, defines...)
	cuda.ReopenLibraries()
	t.Cleanup(cuda.ReopenLibraries)
	be, err := cuda.NewBackend(0, cuda.Options{})
	if err == nil {
		t.Cleanup(func() { be.Close() })
	}
	return be, st, err
}

// convSearches counts the stub's cuDNN algorithm searches so far: forward,
// backward data, backward filter.
func convSearches(t *testing.T, st *cudastub.Stub) [3]uint64 {
	t.Helper()
	by, err := st.CallsByName()
	if err != nil {
		t.Fatal(err)
	}
	return [3]uint64{by["cudnnFindConvolutionForwardAlgorithm"], by["cudnnFindConvolutionBackwardDataAlgorithm"],
		by["cudnnFindConvolutionBackwardFilterAlgorithm"]}
}

func sum3(v [3]uint64) uint64 { return v[0] + v[1] + v[2] }

// TestPlanCacheAcrossProcesses: the algorithm choices of one backend's
// plans are on disk, and a backend of a new process (the in-memory copy
// dropped) plans every shape without one search.
func TestPlanCacheAcrossProcesses(t *testing.T) {
	be, st, err := openStubWith(t)
	if err != nil {
		t.Fatal(err)
	}
	finds := func() uint64 { return sum3(convSearches(t, st)) }
	f0 := finds()
	hostIteration(t, be, 1, 64)()
	f1 := finds()
	if f1 == f0 {
		t.Fatal("the first backend planned without searching")
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	cuda.ForgetPlanCache()
	be2, err := cuda.NewBackend(0, cuda.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer be2.Close()
	hostIteration(t, be2, 1, 64)()
	if f2 := finds(); f2 != f1 {
		t.Errorf("a new process searched %d times with every shape on disk (the first: %d)", f2-f1, f1-f0)
	}
}

// TestMixedCUDAMajorsRefused: a cuDNN built for CUDA 12 beside cuBLAS 13
// is refused when the backend opens, naming both, rather than failing in
// the middle of a step.
func TestMixedCUDAMajorsRefused(t *testing.T) {
	t.Setenv("SEGPIPE_STUB_CUDNN_CUDART", "12080")
	_, err := openStub(t)
	if !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), "cuBLAS") || !strings.Contains(err.Error(), "CUDA 12.8") {
		t.Fatalf("mixed majors: %v; want ErrUnavailable naming cuBLAS 13 and cuDNN's CUDA 12.8", err)
	}
}

// TestOptionalCudnnSymbols: a cuDNN without pooling and batch-norm (which
// the Backend does not call) still opens a Backend that runs a training
// iteration; the Device methods that need them say what is missing.
func TestOptionalCudnnSymbols(t *testing.T) {
	be, err := openStub(t, "SEGPIPE_STUB_NO_OPTIONAL")
	if err != nil {
		t.Fatalf("cuDNN without pooling and batch-norm: %v", err)
	}
	step := hostIteration(t, be, 1, 64)
	step()
	d, err := cuda.Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	dn, err := d.NewDnn(false)
	if err != nil {
		t.Fatal(err)
	}
	defer dn.Close(d)
	err = d.PoolForward(dn, cuda.Pool{N: 1, C: 1, H: 4, W: 4, K: 2, Stride: 2}, 0, 0)
	if !errors.Is(err, cuda.ErrUnavailable) || !strings.Contains(err.Error(), "pooling") {
		t.Errorf("PoolForward without cuDNN's pooling: %v; want ErrUnavailable naming it", err)
	}
}

// TestHeuristicAlgorithms: SEGPIPE_CUDNN_ALGO=heuristic plans with cuDNN's
// heuristics (no search) and runs an iteration; an unknown value is
// refused when the backend opens.
func TestHeuristicAlgorithms(t *testing.T) {
	t.Setenv(cuda.AlgoEnv, "heuristic")
	be, err := openStub(t)
	if err != nil {
		t.Fatal(err)
	}
	hostIteration(t, be, 1, 64)()
	t.Setenv(cuda.AlgoEnv, "fastest")
	if _, err := cuda.NewBackend(0, cuda.Options{}); err == nil || !strings.Contains(err.Error(), cuda.AlgoEnv) {
		t.Errorf("%s=fastest: %v; want an error naming the variable", cuda.AlgoEnv, err)
	}
}

// TestFullPoolTakesBackTheCache: when the pool cannot serve an allocation,
// the engine's cache of freed buffers goes back to it and the allocation
// is tried again, so memory parked in the cache never fails a step.
func TestFullPoolTakesBackTheCache(t *testing.T) {
	be, st, err := openStubWith(t)
	if err != nil {
		t.Fatal(err)
	}
	step := hostIteration(t, be, 1, 64)
	step()
	step()
	by, err := st.CallsByName()
	if err != nil {
		t.Fatal(err)
	}
	allocs, frees := by["cuMemAllocAsync"], by["cuMemFreeAsync"]
	// Fail the next allocations, whichever of the two paths (a buffer, a
	// convolution's workspace) makes them.
	buf := be.Alloc(1 << 20) // larger than anything cached: a pool allocation
	t.Setenv("SEGPIPE_STUB_ALLOC_FAIL_AT", fmt.Sprint(allocs+2))
	be.Free(buf)
	buf = be.Alloc(1<<20 + 1)
	be.Free(buf)
	by, _ = st.CallsByName()
	if by["cuMemFreeAsync"] == frees {
		t.Errorf("an allocation failed and nothing cached went back to the pool (allocations %d → %d)", allocs, by["cuMemAllocAsync"])
	}
}

// plannedModel opens a Backend on the stub with the plan cache off (every
// shape searched) and the n model on it.
func plannedModel(t *testing.T) (*cuda.Backend, *cudastub.Stub, *model.Model) {
	t.Helper()
	t.Setenv(cuda.PlanCacheEnv, "off")
	cuda.ForgetPlanCache()
	t.Cleanup(cuda.ForgetPlanCache)
	be, st, err := openStubWith(t)
	if err != nil {
		t.Fatal(err)
	}
	return be, st, nModelOn(t, be)
}

// evalForward runs m's eval-mode forward (validation's) on a synthetic
// batch of b images at sz px and waits for it.
func evalForward(t *testing.T, be *cuda.Backend, m *model.Model, b, sz int) {
	t.Helper()
	img, _ := modelcase.SyntheticBatch(b, sz)
	x := tensor.UploadBytes(be, img, 1.0/255, b, 3, sz, sz)
	if _, err := m.Forward(tensor.NewTape(be), x, model.Eval); err != nil {
		t.Fatal(err)
	}
	be.Sync()
}

// TestBackwardPlannedOnFirstUse: a forward pass (validation's) searches
// no backward-filter algorithm (and backward-data ones only for the
// transposed convolutions its forward runs as backward data); a training
// step then searches the backward passes, and a second step nothing.
func TestBackwardPlannedOnFirstUse(t *testing.T) {
	be, st, m := plannedModel(t)
	since := func(a, b [3]uint64) [3]uint64 { return [3]uint64{b[0] - a[0], b[1] - a[1], b[2] - a[2]} }
	const b, sz = 3, 64
	f0 := convSearches(t, st)
	evalForward(t, be, m, b, sz)
	f1 := convSearches(t, st)
	fwd := since(f0, f1)
	step := hostIteration(t, be, b, sz)
	step()
	f2 := convSearches(t, st)
	train := since(f1, f2)
	step()
	again := since(f2, convSearches(t, st))
	t.Logf("searches (forward, backward data, backward filter): forward pass %v, first training step %v, second %v", fwd, train, again)
	if fwd[0] == 0 || fwd[2] != 0 {
		t.Errorf("a forward pass searched %v; want forward algorithms and no backward-filter ones", fwd)
	}
	if train[2] == 0 || train[1] == 0 {
		t.Errorf("the first training step searched %v; want its backward passes planned", train)
	}
	if again != [3]uint64{} {
		t.Errorf("a second step searched %v again", again)
	}
}

// TestPlansSharedAcrossBatchSizes: the algorithms chosen for one batch
// size are used at another (validation's, a short last batch) without a
// search; only the workspace sizes are asked again.
func TestPlansSharedAcrossBatchSizes(t *testing.T) {
	be, st, m := plannedModel(t)
	forward := func(b int) uint64 {
		s0 := sum3(convSearches(t, st))
		evalForward(t, be, m, b, 64)
		return sum3(convSearches(t, st)) - s0
	}
	if n := forward(4); n == 0 {
		t.Fatal("the first batch size planned without searching")
	}
	if n := forward(3); n != 0 {
		t.Errorf("batch 3 after batch 4 searched %d times; want the same algorithms", n)
	}
}
