// shim.h: what the kernels need from CUDA, so that the same sources
// compile with nvcc (to PTX) and with g++ (C++20) for the CPU harness.
//
// Under g++ a block runs on one OS thread, its threads as fibers that
// share the block's __shared__ arrays; __syncthreads switches to the
// block's scheduler, which resumes the next thread (the threads between
// two barriers run one after another, in an order that alternates, so
// that a missing barrier shows). Atomics are std::atomic_ref. The harness
// (harness.cpp) compiles the kernels once per block slot, each copy in
// its own namespace with its __shared__ arrays (static storage) in its
// own section, SP_SHARED_SECTION, so that two blocks run at once on two
// OS threads, each with its own shared memory, which the harness poisons
// (NaN) at each block's start. It defines the indices and runs the
// launches.
#pragma once

#include <stdint.h>

#ifdef __CUDACC__

#define SP_INLINE __device__ __forceinline__

// SP_KERNEL declares a kernel: an unmangled entry point of the PTX module.
#define SP_KERNEL extern "C" __global__

// sp_device_ptr turns a device address stored in device memory (a
// multi-tensor table's entries) into a pointer: the identity on a GPU.
SP_INLINE void* sp_device_ptr(long long p) { return (void*)p; }

#else  // the CPU harness

#include <atomic>
#include <cmath>
#include <math.h>

struct uint3 { unsigned x, y, z; };
struct dim3 { unsigned x = 1, y = 1, z = 1; };

extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;
// sp_barrier is __syncthreads: the calling thread (a fiber) waits for the
// block's other threads (harness.cpp).
void sp_barrier();

#define __global__
#define __device__
#define __restrict__ __restrict
// __shared__ arrays go to the section named by SP_SHARED_SECTION where
// they are declared (the harness sets it per block slot), which the
// harness fills with NaN bytes before each block: a kernel must not read
// shared memory it did not write in the same block, as on a GPU.
#ifndef SP_SHARED_SECTION
#define SP_SHARED_SECTION "sp_shared0"
#endif
#define __shared__ static __attribute__((section(SP_SHARED_SECTION)))
#define SP_INLINE static inline
// A kernel is a plain C++ function in the harness, one per block slot's
// namespace (harness.cpp), so not extern "C".
#define SP_KERNEL

inline void __syncthreads() { sp_barrier(); }

// sp_device_ptr turns a device address stored in device memory (a
// multi-tensor table's entries: the harness's buffer id << 32 + offset)
// into a pointer to the harness's copy (harness.cpp).
void* sp_device_ptr(long long p);

inline float atomicAdd(float* p, float v) { return std::atomic_ref<float>(*p).fetch_add(v); }
inline double atomicAdd(double* p, double v) { return std::atomic_ref<double>(*p).fetch_add(v); }


#endif

// The largest block any kernel here is launched with; kernels with
// __shared__ reduction arrays size them with it.
#define SP_MAX_BLOCK 256

// Grid-stride loop over [0, n): correct for any launch geometry.
#define SP_FOR(i, n)                                                              \
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
       i += (long long)blockDim.x * gridDim.x)

// The most axes a broadcast or strided copy takes after merging.
#define SP_MAX_DIMS 8

// Bcast describes a broadcasting binary op: the output shape and each
// operand's element stride per output axis (0 where it is stretched).
struct Bcast {
  int nd;
  int shape[SP_MAX_DIMS];
  long long sa[SP_MAX_DIMS];
  long long sb[SP_MAX_DIMS];
};

// Strided describes a gather: output element o (row-major over shape)
// reads input element Σ idx_k·stride[k].
struct Strided {
  int nd;
  int shape[SP_MAX_DIMS];
  long long stride[SP_MAX_DIMS];
};

// Walk is backend.Strided after merging: nd axes of shape with source and
// destination strides, the first outer of them walked in parallel.
struct Walk {
  int nd, outer;
  int shape[SP_MAX_DIMS];
  long long src[SP_MAX_DIMS];
  long long dst[SP_MAX_DIMS];
};

// Window is a mask window on the prototype grid (raster.Window) with the
// offset of its bytes in the window data.
struct Window {
  int x0, y0, w, h;
  long long off;
};

// Pool2d is a max-pooling geometry (backend.Pool).
struct Pool2d {
  int n, c, h, w, k, stride, pad, oh, ow;
};

// block_sum reduces v over the block in a fixed tree order; blockDim.x
// must be a power of two ≤ SP_MAX_BLOCK. Every thread gets the total.
SP_INLINE double block_sum(double v, double* part) {
  part[threadIdx.x] = v;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
    __syncthreads();
  }
  double total = part[0];
  __syncthreads();
  return total;
}

// 1/(1+e^-v) without overflow for large |v|, as the CPU reference.
SP_INLINE float sp_sigmoid(float v) {
  if (v >= 0.f) return 1.f / (1.f + expf(-v));
  float e = expf(v);
  return e / (1.f + e);
}

// Activations fused into batch-norm's passes (backend.BNAct's order):
// sp_act applies one to the normalised value z, sp_act_grad turns the
// gradient of its output into the gradient of z, with unary_backward's
// SiLU formula, so that a fused pass and the two separate kernels agree.
enum { ACT_NONE, ACT_SILU };
SP_INLINE float sp_act(int act, float z) { return act == ACT_SILU ? z * sp_sigmoid(z) : z; }
SP_INLINE float sp_act_grad(int act, float g, float z) {
  if (act != ACT_SILU) return g;
  float s = sp_sigmoid(z);
  return g * s * (1.f + z * (1.f - s));
}
