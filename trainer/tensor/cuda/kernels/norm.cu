// Batch normalisation: training-mode statistics and normalisation, its
// backward, and the eval-mode affine and its backward. The channel
// reductions run one block per channel in double with a fixed tree order
// (block_sum), as the CPU reference sums each channel in float64, so the
// results do not depend on scheduling.
#include "shim.h"

// bn_train normalises x (nb×c×hw) with its batch statistics: mean, invstd
// = 1/√(biased var + eps) and, when var_unbiased is not null, the unbiased
// variance (NaN for a single element). Statistics are shifted by the
// channel's first element, as the reference, so that |mean| ≫ std keeps
// its precision. gamma and beta may be null (1 and 0).
extern "C" __global__ void bn_train(const float* __restrict__ x, const float* __restrict__ gamma,
                                    const float* __restrict__ beta, float* __restrict__ y, float* __restrict__ mean,
                                    float* __restrict__ invstd, float* __restrict__ var_unbiased, int nb, int c,
                                    long long hw, float eps) {
  __shared__ double part[SP_MAX_BLOCK];
  long long cnt = (long long)nb * hw;
  if (cnt == 0) return;
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double k = x[(long long)ch * hw];
    double s = 0, ss = 0;
    for (int b = 0; b < nb; b++) {
      const float* p = x + ((long long)b * c + ch) * hw;
      for (long long j = threadIdx.x; j < hw; j += blockDim.x) {
        double d = (double)p[j] - k;
        s += d;
        ss += d * d;
      }
    }
    s = block_sum(s, part);
    ss = block_sum(ss, part);
    double d = s / (double)cnt;
    double m = k + d;
    double sq = ss - d * s;
    sq = sq > 0 ? sq : 0;
    double is = 1.0 / sqrt(sq / (double)cnt + (double)eps);
    if (threadIdx.x == 0) {
      mean[ch] = (float)m;
      invstd[ch] = (float)is;
      if (var_unbiased) var_unbiased[ch] = cnt > 1 ? (float)(sq / (double)(cnt - 1)) : NAN;
    }
    double g = gamma ? (double)gamma[ch] : 1.0, bt = beta ? (double)beta[ch] : 0.0;
    float sc = (float)(g * is), sh = (float)(bt - m * g * is);
    for (int b = 0; b < nb; b++) {
      long long o = ((long long)b * c + ch) * hw;
      for (long long j = threadIdx.x; j < hw; j += blockDim.x) y[o + j] = x[o + j] * sc + sh;
    }
  }
}

// bn_backward accumulates the training-mode gradients from the saved mean
// and invstd: dgamma += Σ dy·xhat, dbeta += Σ dy and
// dx += k·(dy − mean(dy)) − k·invstd·mean(dy·xhat)·(x − mean), k = gamma·invstd.
// Any of dx, dgamma, dbeta may be null; gamma null means 1.
extern "C" __global__ void bn_backward(const float* __restrict__ x, const float* __restrict__ dy,
                                       const float* __restrict__ mean, const float* __restrict__ invstd,
                                       const float* __restrict__ gamma, float* __restrict__ dx,
                                       float* __restrict__ dgamma, float* __restrict__ dbeta, int nb, int c,
                                       long long hw) {
  __shared__ double part[SP_MAX_BLOCK];
  long long cnt = (long long)nb * hw;
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double m = mean[ch], is = invstd[ch];
    double sdy = 0, sdyx = 0;
    for (int b = 0; b < nb; b++) {
      long long o = ((long long)b * c + ch) * hw;
      for (long long j = threadIdx.x; j < hw; j += blockDim.x) {
        double g = dy[o + j];
        sdy += g;
        sdyx += g * ((double)x[o + j] - m);
      }
    }
    sdy = block_sum(sdy, part);
    sdyx = block_sum(sdyx, part) * is;
    if (threadIdx.x == 0) {
      if (dgamma) dgamma[ch] += (float)sdyx;
      if (dbeta) dbeta[ch] += (float)sdy;
    }
    if (dx && cnt > 0) {
      double k = (gamma ? (double)gamma[ch] : 1.0) * is;
      float kd = (float)k, mdy = (float)(sdy / (double)cnt), kx = (float)(k * is * sdyx / (double)cnt);
      float mf = (float)m;
      for (int b = 0; b < nb; b++) {
        long long o = ((long long)b * c + ch) * hw;
        for (long long j = threadIdx.x; j < hw; j += blockDim.x)
          dx[o + j] += kd * (dy[o + j] - mdy) - kx * (x[o + j] - mf);
      }
    }
  }
}

// bn_eval_scale folds running statistics into one affine per channel:
// invstd = 1/√(var + eps) (in double), scale = gamma·invstd and shift =
// beta − mean·scale; gamma and beta may be null, shift too.
extern "C" __global__ void bn_eval_scale(const float* __restrict__ gamma, const float* __restrict__ beta,
                                         const float* __restrict__ mean, const float* __restrict__ var, float eps,
                                         float* __restrict__ invstd, float* __restrict__ scale,
                                         float* __restrict__ shift, long long c) {
  SP_FOR(i, c) {
    float is = (float)(1.0 / sqrt((double)var[i] + (double)eps));
    float g = gamma ? gamma[i] : 1.f, b = beta ? beta[i] : 0.f;
    invstd[i] = is;
    scale[i] = g * is;
    if (shift) shift[i] = b - mean[i] * scale[i];
  }
}

// bn_eval_backward accumulates the eval-mode gradients with the per-channel
// invstd and scale of bn_eval_scale: dgamma += Σ dy·(x − mean)·invstd,
// dbeta += Σ dy, dx += dy·scale. Any output may be null.
extern "C" __global__ void bn_eval_backward(const float* __restrict__ x, const float* __restrict__ dy,
                                            const float* __restrict__ mean, const float* __restrict__ invstd,
                                            const float* __restrict__ scale, float* __restrict__ dx,
                                            float* __restrict__ dgamma, float* __restrict__ dbeta, int nb, int c,
                                            long long hw) {
  __shared__ double part[SP_MAX_BLOCK];
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    float m = mean[ch], is = invstd[ch], k = scale[ch];
    double sdy = 0, sdyx = 0;
    for (int b = 0; b < nb; b++) {
      long long o = ((long long)b * c + ch) * hw;
      for (long long j = threadIdx.x; j < hw; j += blockDim.x) {
        float g = dy[o + j];
        sdy += g;
        sdyx += g * (x[o + j] - m) * is;
        if (dx) dx[o + j] += g * k;
      }
    }
    sdy = block_sum(sdy, part);
    sdyx = block_sum(sdyx, part);
    if (threadIdx.x == 0) {
      if (dgamma) dgamma[ch] += (float)sdyx;
      if (dbeta) dbeta[ch] += (float)sdy;
    }
  }
}
