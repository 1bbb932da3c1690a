// Reductions: whole-tensor sums and sums of squares in two fixed-order
// passes (per-block partials in double, then one block), axis sums,
// softmax along an axis, and the global-norm gradient clip.
#include "shim.h"

// reduce_partial writes partial[blockIdx.x] = Σ x (or Σ x² with square)
// over the block's grid-stride share.
SP_KERNEL void reduce_partial(const float* __restrict__ x, double* __restrict__ partial, int square,
                                          long long n) {
  __shared__ double part[SP_MAX_BLOCK];
  double s = 0;
  SP_FOR(i, n) {
    double v = x[i];
    s += square ? v * v : v;
  }
  double t = block_sum(s, part);
  if (threadIdx.x == 0) partial[blockIdx.x] = t;
}

// reduce_finish writes y[0] = alpha·Σ partial[0:m], or its square root
// with root set (a norm); one block.
SP_KERNEL void reduce_finish(const double* __restrict__ partial, int m, float* __restrict__ y, float alpha,
                                         int root) {
  __shared__ double part[SP_MAX_BLOCK];
  double s = 0;
  for (int i = threadIdx.x; i < m; i += blockDim.x) s += partial[i];
  double t = block_sum(s, part);
  if (threadIdx.x == 0) y[0] = root ? (float)sqrt(t) : (float)(alpha * t);
}

// sum_axis writes y[o,j] = Σ_i x[o,i,j] over outer×n×inner, summing in
// float in index order as the CPU reference does.
SP_KERNEL void sum_axis(const float* __restrict__ x, float* __restrict__ y, int n, long long inner,
                                    long long total) {
  SP_FOR(t, total) {
    long long o = t / inner, j = t % inner;
    const float* p = x + o * n * inner + j;
    float s = 0.f;
    for (int i = 0; i < n; i++) s += p[i * inner];
    y[t] = s;
  }
}

// sum_axis_backward adds dy[o,j] to every dx[o,i,j] (also Sum's backward
// with outer = inner = 1 and a device-side scalar).
SP_KERNEL void sum_axis_backward(const float* __restrict__ dy, float* __restrict__ dx, int n, long long inner,
                                             long long total) {
  SP_FOR(k, total) {
    long long o = k / ((long long)n * inner), j = k % inner;
    dx[k] += dy[o * inner + j];
  }
}

// softmax_forward normalises along the middle axis of outer×n×inner: one
// thread per (o, j) column; the maximum is subtracted first and the sum
// kept in double, as the CPU reference.
SP_KERNEL void softmax_forward(const float* __restrict__ x, float* __restrict__ y, int n, long long inner,
                                           long long total) {
  SP_FOR(t, total) {
    long long o = t / inner, j = t % inner;
    const float* xp = x + o * n * inner + j;
    float* yp = y + o * n * inner + j;
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = xp[i * inner] > mx ? xp[i * inner] : mx;
    double s = 0;
    for (int i = 0; i < n; i++) {
      float e = expf(xp[i * inner] - mx);
      yp[i * inner] = e;
      s += e;
    }
    float r = (float)(1.0 / s);
    for (int i = 0; i < n; i++) yp[i * inner] *= r;
  }
}

// softmax_backward accumulates dx += y·(dy − Σ dy·y) along the same axis.
SP_KERNEL void softmax_backward(const float* __restrict__ y, const float* __restrict__ dy,
                                            float* __restrict__ dx, int n, long long inner, long long total) {
  SP_FOR(t, total) {
    long long o = t / inner, j = t % inner;
    long long base = o * n * inner + j;
    double s = 0;
    for (int i = 0; i < n; i++) s += (double)dy[base + i * inner] * (double)y[base + i * inner];
    float sf = (float)s;
    for (int i = 0; i < n; i++) {
      long long k = base + i * inner;
      dx[k] += y[k] * (dy[k] - sf);
    }
  }
}

// clip_coef turns a gradient norm into clip_grad_norm_'s coefficient,
// min(maxNorm/(norm + 1e-6), 1), in place on the device: the clip never
// brings the norm back to the host. One thread.
SP_KERNEL void clip_coef(float* norm_to_coef, float max_norm) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    double c = (double)max_norm / ((double)norm_to_coef[0] + 1e-6);
    norm_to_coef[0] = (float)(c < 1.0 ? c : 1.0);
  }
}

// scale_by multiplies x by the device scalar s[0] (the clip coefficient).
SP_KERNEL void scale_by(float* __restrict__ x, const float* __restrict__ s, long long n) {
  float c = s[0];
  if (c == 1.f) return;
  SP_FOR(i, n) x[i] *= c;
}
