// Optimiser steps (trainer/optim): SGD with Nesterov momentum and L2
// decay, AdamW, MuSGD's elementwise parts (momentum, Nesterov blend,
// Newton–Schulz's scalings; its products run on cuBLAS), and the EMA.
// Scalars derived from the step count are computed on the host in double
// and passed as float, exactly as the CPU code rounds them.
#include "shim.h"

// sgd_nesterov: g += wd·p; buf = first ? g : mu·buf + g; p −= step·(g + mu·buf).
SP_INLINE void sgd_elem(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ buf, float step,
                        float mu, float wd, int first, long long i) {
  float g = grad[i];
  if (wd != 0.f) g += wd * p[i];
  float b = first ? g : mu * buf[i] + g;
  buf[i] = b;
  p[i] -= step * (g + mu * b);
}

SP_KERNEL void sgd_nesterov(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ buf,
                                        float step, float mu, float wd, int first, long long n) {
  SP_FOR(i, n) sgd_elem(p, grad, buf, step, mu, wd, first, i);
}

// adamw_step: p *= decay; m, v moments; p −= step_size·m/(√v·inv + eps).
SP_INLINE void adamw_elem(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ m,
                          float* __restrict__ v, float decay, float b1, float b2, float step_size, float inv, float eps,
                          long long i) {
  float g = grad[i];
  float pi = p[i] * decay;
  float mi = b1 * m[i] + (1.f - b1) * g;
  float vi = b2 * v[i] + (1.f - b2) * g * g;
  m[i] = mi;
  v[i] = vi;
  float den = (float)sqrt((double)vi) * inv + eps;
  p[i] = pi - step_size * mi / den;
}

SP_KERNEL void adamw_step(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ m,
                                      float* __restrict__ v, float decay, float b1, float b2, float step_size, float inv,
                                      float eps, long long n) {
  SP_FOR(i, n) adamw_elem(p, grad, m, v, decay, b1, b2, step_size, inv, eps, i);
}

// muon_momentum: m += (1−mu)·(g − m); u = g + mu·(m − g) (Nesterov).
SP_INLINE void muon_elem(const float* grad, float* m, float* u, float w, float mu, long long i) {
  float g = grad[i];
  float mi = m[i] + w * (g - m[i]);
  m[i] = mi;
  u[i] = g + mu * (mi - g);
}

SP_KERNEL void muon_momentum(const float* __restrict__ grad, float* __restrict__ m, float* __restrict__ u,
                                         float w, float mu, long long n) {
  SP_FOR(i, n) muon_elem(grad, m, u, w, mu, i);
}

// axpby writes y = a·y + b·x (Newton–Schulz's X = aX + T, B = bA + cA²,
// and the Muon update p −= step·O with a = 1, b = −step).
SP_INLINE void axpby_elem(const float* x, float* y, float a, float b, long long i) { y[i] = a * y[i] + b * x[i]; }

SP_KERNEL void axpby(const float* __restrict__ x, float* __restrict__ y, float a, float b, long long n) {
  SP_FOR(i, n) axpby_elem(x, y, a, b, i);
}

// scale_inv_norm writes y = x / (norm[0] + eps), norm a device scalar.
SP_KERNEL void scale_inv_norm(const float* __restrict__ x, float* __restrict__ y,
                                          const float* __restrict__ norm, float eps, long long n) {
  float inv = (float)(1.0 / ((double)norm[0] + (double)eps));
  SP_FOR(i, n) y[i] = x[i] * inv;
}

// batch_normalize is scale_inv_norm after a norm for each of count
// matrices of n elements at once (Newton–Schulz's normalisation of a batch
// of same-shaped matrices): block b takes matrices b, b + gridDim.x, …;
// its norm is summed in double over the block in a fixed order and
// rounded to float as reduce_finish's, the scale computed as
// scale_inv_norm's.
SP_KERNEL void batch_normalize(const float* __restrict__ x, float* __restrict__ y, float eps, long long n,
                               int count) {
  __shared__ double part[SP_MAX_BLOCK];
  for (int b = blockIdx.x; b < count; b += gridDim.x) {
    const float* xb = x + (long long)b * n;
    float* yb = y + (long long)b * n;
    double s = 0;
    for (long long i = threadIdx.x; i < n; i += blockDim.x) s += (double)xb[i] * (double)xb[i];
    float norm = (float)sqrt(block_sum(s, part));
    float inv = (float)(1.0 / ((double)norm + (double)eps));
    for (long long i = threadIdx.x; i < n; i += blockDim.x) yb[i] = xb[i] * inv;
  }
}

// ema_update: ema = ema·d + (1 − d)·x.
SP_INLINE void ema_elem(float* __restrict__ ema, const float* __restrict__ x, float d, float w, long long i) {
  ema[i] = ema[i] * d + w * x[i];
}

SP_KERNEL void ema_update(float* __restrict__ ema, const float* __restrict__ x, float d, long long n) {
  float w = 1.f - d;
  SP_FOR(i, n) ema_elem(ema, x, d, w, i);
}

// Multi-tensor forms: one launch applies an elementwise step to a list of
// tensors (every parameter of an optimiser group, every gradient, every
// averaged state tensor) instead of one launch per tensor, whose fixed
// cost would dominate a small model's step. The list is a table in device
// memory (built once per distinct list on the host and cached there): a
// row per tensor with up to four pointers, its length and a flag, then
// chunks of at most chunk elements, each naming its row and first element;
// blocks walk the chunks grid-stride. Each element sees exactly the
// single-tensor kernel's arithmetic (the same inline functions).
struct MtRow {
  long long p[4];
  long long n;
  int flag;
  int pad;
};

struct MtChunk {
  int row;
  int pad;
  long long start;
};

// MtPtrs is one row's pointers, resolved once per chunk.
struct MtPtrs {
  float* p[4];
  int flag;
};

template <class F>
SP_INLINE void mt_apply(const MtRow* __restrict__ rows, const MtChunk* __restrict__ chunks, long long nchunks,
                        long long chunk, F f) {
  for (long long c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const MtRow& r = rows[chunks[c].row];
    MtPtrs q;
    for (int k = 0; k < 4; k++) q.p[k] = (float*)sp_device_ptr(r.p[k]);
    q.flag = r.flag;
    long long end = chunks[c].start + chunk < r.n ? chunks[c].start + chunk : r.n;
    for (long long i = chunks[c].start + threadIdx.x; i < end; i += blockDim.x) f(q, i);
  }
}

// mt_fill sets every tensor (p[0]) to v.
SP_KERNEL void mt_fill(const MtRow* __restrict__ rows, const MtChunk* __restrict__ chunks,
                                   long long nchunks, long long chunk, float v) {
  mt_apply(rows, chunks, nchunks, chunk, [=](const MtPtrs& r, long long i) { r.p[0][i] = v; });
}

// mt_scale_by multiplies every tensor (p[0]) by the device scalar s[0],
// as scale_by does (nothing when it is 1).
SP_KERNEL void mt_scale_by(const MtRow* __restrict__ rows, const MtChunk* __restrict__ chunks,
                                       long long nchunks, long long chunk, const float* __restrict__ s) {
  float c = s[0];
  if (c == 1.f) return;
  mt_apply(rows, chunks, nchunks, chunk, [=](const MtPtrs& r, long long i) { r.p[0][i] *= c; });
}

// mt_ema folds p[1] into p[0] of every row: ema_update.
SP_KERNEL void mt_ema(const MtRow* __restrict__ rows, const MtChunk* __restrict__ chunks,
                                  long long nchunks, long long chunk, float d) {
  float w = 1.f - d;
  mt_apply(rows, chunks, nchunks, chunk,
           [=](const MtPtrs& r, long long i) { ema_elem(r.p[0], r.p[1], d, w, i); });
}

// mt_sgd_nesterov is sgd_nesterov on rows (p, grad, buf), first = flag.
SP_KERNEL void mt_sgd_nesterov(const MtRow* __restrict__ rows, const MtChunk* __restrict__ chunks,
                                           long long nchunks, long long chunk, float step, float mu, float wd) {
  mt_apply(rows, chunks, nchunks, chunk, [=](const MtPtrs& r, long long i) {
    sgd_elem(r.p[0], r.p[1], r.p[2], step, mu, wd, r.flag, i);
  });
}

// mt_muon_momentum is muon_momentum on rows (grad, m, u): a Muon group's
// momentum and Nesterov blend into its slots of Newton–Schulz's batch.
SP_KERNEL void mt_muon_momentum(const MtRow* __restrict__ rows, const MtChunk* __restrict__ chunks,
                                            long long nchunks, long long chunk, float w, float mu) {
  mt_apply(rows, chunks, nchunks, chunk,
           [=](const MtPtrs& r, long long i) { muon_elem(r.p[0], r.p[1], r.p[2], w, mu, i); });
}

// mt_axpby is axpby on rows (y, x): y = a·y + b·x (the Muon update of a
// group's parameters from their slots of Newton–Schulz's output).
SP_KERNEL void mt_axpby(const MtRow* __restrict__ rows, const MtChunk* __restrict__ chunks, long long nchunks,
                                    long long chunk, float a, float b) {
  mt_apply(rows, chunks, nchunks, chunk, [=](const MtPtrs& r, long long i) { axpby_elem(r.p[1], r.p[0], a, b, i); });
}

// mt_adamw is adamw_step on rows (p, grad, m, v) sharing one step count.
SP_KERNEL void mt_adamw(const MtRow* __restrict__ rows, const MtChunk* __restrict__ chunks,
                                    long long nchunks, long long chunk, float decay, float b1, float b2,
                                    float step_size, float inv, float eps) {
  mt_apply(rows, chunks, nchunks, chunk, [=](const MtPtrs& r, long long i) {
    adamw_elem(r.p[0], r.p[1], r.p[2], r.p[3], decay, b1, b2, step_size, inv, eps, i);
  });
}

// mt_sum_squares writes partial[c] = Σ x² over chunk c (p[0] of its row),
// in double and a fixed order; reduce_finish then adds the partials in
// chunk order: the global norm of a list of tensors in two launches.
SP_KERNEL void mt_sum_squares(const MtRow* __restrict__ rows, const MtChunk* __restrict__ chunks,
                                          long long nchunks, long long chunk, double* __restrict__ partial) {
  __shared__ double part[SP_MAX_BLOCK];
  for (long long c = blockIdx.x; c < nchunks; c += gridDim.x) {
    const MtRow& r = rows[chunks[c].row];
    const float* x = (const float*)sp_device_ptr(r.p[0]);
    long long end = chunks[c].start + chunk < r.n ? chunks[c].start + chunk : r.n;
    double s = 0;
    for (long long i = chunks[c].start + threadIdx.x; i < end; i += blockDim.x) {
      double v = x[i];
      s += v * v;
    }
    double t = block_sum(s, part);
    if (threadIdx.x == 0) partial[c] = t;
  }
}
