// Package cuda binds the CUDA driver API, cuBLAS and cuDNN 9 at run time
// and implements segpipe's CUDA trainer backend on them: direct calls from
// the driving goroutine (its thread locked for each call), streams,
// events, stream-ordered allocation, pinned host memory, cuBLAS GEMMs, cuDNN convolutions (and cuDNN's batch-norm,
// bound and checked on a GPU, though Backend runs its own, see below), the
// project's own kernels (see Kernels below), and Backend, the backend.Backend
// over device memory that `--device cuda` selects.
//
// # The backend
//
// Backend's buffers are allocations from the device's memory pool; its
// host crossings go through pinned staging on the compute stream and are
// counted in Transfers as the CPU backend counts them; Host returns nil.
// Sgemm is cuBLAS's strided-batched SGEMM (row-major through the
// transpose identities); Conv2d and its two backward passes are cuDNN's,
// with one plan (algorithm search and workspace sizes) cached per shape
// and beta 1 for the accumulating passes — the algorithm choices also on
// disk across processes, keyed by GPU, cuDNN version, math and shape
// (PlanCacheEnv), and chosen by cuDNN's heuristics instead of its timed
// search under SEGPIPE_CUDNN_ALGO=heuristic; batch-norm (train, eval and
// both backwards) runs the project's kernels in kernels/norm.cu, one
// block per channel with double sums, so absent gamma/beta/gradients,
// eps below cuDNN's minimum and the NaN unbiased variance of a single
// element all behave as on the CPU; MaxPool2d records int32 winners
// within each plane with PyTorch's tie rule; Copy is one strided walk that
// sums the axes its destination stands still on in one thread, in order.
// Precision follows PyTorch's defaults when asked for by name
// (Precision("tf32"): TF32 convolutions as torch.backends.cudnn.allow_tf32,
// fp32 GEMMs with CUBLAS_DEFAULT_MATH as torch.backends.cuda.matmul's
// default, each convolution pass in the math type cuDNN's search reported
// for its algorithm, on a descriptor of its own); the zero Options, which
// the parity tests use, is strict fp32 (Precision("fp32"): cuDNN's
// FMA-only math); Options.TF32 (SEGPIPE_TF32=1 through package device)
// lets the GEMMs use TF32 too.
//
// Backend does not implement backend.HostKernels: Go-coded kernels that a
// host-kernel backend (cpu, emu) runs on its own memory fall back to the
// host here, downloading their inputs and uploading their results
// (counted crossings). The optimiser kernels have device twins instead:
// Backend implements trainer/optim's DeviceKernels (structurally; neither
// package imports the other), so the SGD, AdamW and MuSGD steps (Muon's
// momentum, Newton–Schulz with its products on cuBLAS, the scaled
// update), gradient norms and clipping (norm, coefficient and scaling all
// on the device), ZeroGrad and the EMA update cross nothing, and are
// checked against the Go code on the CPU harness and, by TestOptimOnGPU,
// on a GPU. Elementwise steps over many tensors are multi-tensor launches
// (mt.go: one launch per optimiser group, one for all gradients, one for
// the EMA, over a table of the tensors cached on the device), so an
// iteration's clip, SGD or AdamW step, zeroing and EMA take a dozen
// launches rather than five per parameter; only Newton–Schulz stays per
// matrix.
//
// The loss runs on the device too, without this package knowing it:
// trainer/loss/losscuda, beside the loss, implements the loss's
// DeviceKernels on a Backend through its launch API (DeclareModule: a
// module of its own, its CUDA C sources and PTX in its kernels/ folder,
// whose kernels it launches by name with plain arguments, Addr, Scratch,
// ElementBlocks; launch.go), and trainer/device hands them to the loss,
// so ForwardOn queues the padded targets, the task-aligned assigner, the
// class and box terms and their combination (loss_assign.cu, compiled
// without multiply-add contraction so that each operation rounds as
// Go's), and the owner map, the mask term and the semantic term
// (loss_mask.cu), all in double where the Go code is, with fixed-order
// reductions and one writer per gradient element (no floating-point
// atomics: results repeat bit for bit), and only the loss items come
// down. A device loads every declared module with its own, and the CPU
// harness compiles their sources with its own into one program. With the
// batch staged (stage_backend.go) a training iteration crosses the
// batch's own bytes up and 48 bytes of loss items down.
//
// Backend runs on an engine: a GPU here, or the CPU harness below
// (NewHarnessBackend, harness.go; package cudatest opens it for tests in
// other packages: losscuda's, and trainer/gpucheck's whole-system
// checks), which runs the same .cu kernels compiled with g++ and naive
// stand-ins for cuBLAS and cuDNN. That is how the Backend's Go
// code — the mapping of each method, argument packing, strides,
// accumulate flags, the plan cache — is checked against the CPU backend
// on hosts without a GPU. The harness is not a GPU: it says nothing about
// cuBLAS, cuDNN, the driver or speed, which only scripts/gpu-check.sh on
// a GPU host measures.
//
// # Why run-time binding with purego
//
// The libraries are opened with dlopen through github.com/ebitengine/purego,
// with no cgo: a CGO_ENABLED=0 build links this package, and on a host
// without a GPU every entry point returns an error wrapping ErrUnavailable
// that names the missing library and the paths tried, while the rest of
// segpipe works as before. gorgonia.org/cu, the older Go binding, is not
// usable: its last release (v0.9.6, 2024-06) calls the cuCtxCreate
// signature that CUDA 13 headers redefine, its init() exits the process on
// a host without a GPU (so it cannot be linked into the default binary),
// its cuBLAS package imports that init, and its cuDNN bindings target
// cuDNN 7/8 without workspace-size queries.
//
// This package uses the primary context (cuDevicePrimaryCtxRetain, what the
// CUDA runtime and PyTorch use), whose signature is the same from CUDA 11 to
// 13, and the _v2 entry points that cuda.h maps the plain names to; a
// driver keeps exporting every older entry point, so one binding serves
// drivers from CUDA 11.2 (stream-ordered allocation) on.
//
// # Builds
//
// purego needs the system's dynamic loader, so the default binary is
// dynamically linked (against the C library only, loaded at start) even
// with CGO_ENABLED=0; it does not start on musl or distroless-static
// images. The nocuda build tag replaces the binding with one that reports
// "built with -tags nocuda" and drops purego: `CGO_ENABLED=0 go build
// -tags nocuda` gives a fully static binary. The default includes CUDA
// because segpipe is a GPU trainer's tool and one binary should run on
// every glibc host with or without a GPU; CI builds and tests both.
//
// # Library discovery
//
// For each library (LibCUDA, LibCUBLAS, LibCUDNN, LibNVRTC) the paths
// tried are, in order: the override variable alone when set
// (SEGPIPE_LIBCUDA, SEGPIPE_LIBCUBLAS, SEGPIPE_LIBCUDNN, SEGPIPE_LIBNVRTC: a
// full path); otherwise the search directories — LD_LIBRARY_PATH, the
// site-packages/nvidia/*/lib folders of the active Python environment
// (VIRTUAL_ENV, CONDA_PREFIX: pip's CUDA wheels, as PyTorch installs
// them), the StandardDirs, then those of PythonEnvs — directory by
// directory for the toolkit's libraries (newest major first within one),
// soname by soname for the driver; last the bare sonames, for the dynamic
// loader's own cache. A directory holds one CUDA version, so cuBLAS and
// cuDNN come from the same place when they can, and a Backend refuses to
// open on libraries of two CUDA majors (cuDNN's cudnnGetCudartVersion
// against cuBLAS's major) or on a driver older than them, naming both
// paths. NVRTC of cuBLAS's major is preloaded (optional) for cuDNN's
// runtime-compiled engines, which open it by soname. Dependencies found
// beside a library (cuBLASLt, cuDNN's sub-libraries, NVRTC's builtins) are
// loaded first, with RTLD_GLOBAL, so a library found in a wheel folder
// that is not on LD_LIBRARY_PATH still resolves them. Only the entry
// points the Backend calls are required; cuDNN's pooling and batch-norm,
// which its own kernels replace, are bound when present and their Device
// methods report their absence.
//
// # Threads, memory and launches
//
// CUDA contexts are current per OS thread and goroutines migrate, so every
// call runs inside Device.Do, which locks the calling goroutine to its
// thread for the call, makes the context current there when it is not
// (cuCtxGetCurrent, and cuCtxSetCurrent on a thread that has another or
// none), and serialises the device's calls with a mutex. The goroutine that
// drives a step thus queues its work itself: no call waits for a hand-off
// to another thread (on the stub driver, a batch-32, 640 px iteration's
// host time went from 80–500 ms handed off to 4–10 ms direct, with the
// call reductions below; BENCHMARKS.md),
// and nothing but the loss read one step late waits for the GPU
// (TestHostCallBudget, on the stub driver of package cudastub, holds both
// the calls an iteration makes and that wait). Device memory comes from the
// device's default memory pool with cuMemAllocAsync/cuMemFreeAsync on the
// compute stream, with the pool's release threshold raised to the maximum
// so freed memory stays cached: the driver's caching allocator. In front
// of it the Backend's engine keeps freed allocations by exact size for the
// next request of that size (a step frees and allocates the same sizes,
// and a hit costs no call: two fewer driver calls for each of a thousand
// buffers a step), and gives them back to the pool when an allocation
// fails. Kernel arguments are packed into pinned host memory (C
// memory), because the kernelParams block is a table of raw addresses that
// Go memory must not hold.
//
// A step's one download, its loss result, does not wait for the device:
// Backend implements backend.Fetcher, whose Fetch queues the copy into
// pinned memory on the compute stream with an event after it, and the
// train loop reads it at the end of the next step, whose work is then
// queued, waiting on that event alone. The host thus stays
// a step ahead and the compute stream never idles while the host reads a
// result and then queues the rest of the step.
//
// Batches go up through a Stager: two pinned slots and a copy stream,
// so one batch's host-to-device copies overlap the step on the previous
// one, and the compute stream waits on an event rather than the host.
// Backend implements backend.Stager on it, which the train batch path
// uses: the six parts of a batch (uint8 images, boxes_per_image, classes,
// boxes, iscrowd, the {0,1} mask stack) go up as the loader's bytes in one
// slot, the images are widened on the device, and the loss's targets
// alias the slot. The copy of batch i+2 waits on the device for the event
// recorded once the step of batch i is queued (StageDone), so the host
// never waits for the compute stream to refill a slot; each part counts
// as one upload of its bytes, as UploadBytes counts it. Timing events at
// the start of each batch's work and the end of its step give the compute
// stream's idle time between steps (Stager.Idle, Backend.StageIdle). Backend also
// implements backend.WindowExpander: windowed mask stacks (the remote
// transport's windows and their bytes) expanded on the device by
// expand_windows, after WindowTable checked them as raster.Expand does.
// The train batch path uses it for windowed batches (`segpipe train
// --remote … --device cuda`, whose training streams deliver them windowed
// through remote's OpenWindowed): the window table and the window bytes
// are staged in place of the dense stack — seven parts — and expanded on
// the compute stream into a dense stack the loss reads, reused from batch
// to batch.
//
// # Kernels
//
// The kernels are CUDA C in kernels/*.cu (a declared module's, in its
// owner's kernels/ folder), compiled to PTX for compute_80 by `go
// generate` (kernels/build-ptx.sh, nvcc; the PTX is committed and
// embedded, and the driver JIT-compiles it for the GPU at hand). The same sources compile as
// C++ with g++ through kernels/shim.h and kernels/harness.cpp, which run a
// launch's blocks two at a time in a shuffled order, each on its own OS
// thread with its threads as fibers that switch at __syncthreads, its
// shared memory its own and NaN at the block's start (and, with
// SEGPIPE_HARNESS_SANITIZE=1, under AddressSanitizer and UndefinedBehaviorSanitizer):
// so that a kernel that depends on block order, reads shared memory it did
// not write, misses a barrier or indexes out of bounds fails on a host
// without a GPU, as it would on one. TestKernelsOnCPU runs every
// kernel method that way and compares it with the CPU reference, which is
// how the kernels are checked on hosts without a GPU (the harness also
// stands in for cuBLAS with a naive column-major GEMM, so MuSGD's
// Newton–Schulz runs end to end). On a GPU host the same cases run on the
// device (TestKernelsOnGPU) and skip elsewhere. Kernel op codes and the
// broadcast description are the backend's own (backend.Unary, Binary,
// Broadcast); Sgemm takes backend.Gemm itself, and the parameter structs
// convShape and poolShape mirror the CPU backend's, and the CPU cases fail if the
// two ever disagree.
package cuda
