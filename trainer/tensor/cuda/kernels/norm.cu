// Batch normalisation: training-mode statistics and normalisation, its
// backward, and the eval-mode affine and its backward. The channel
// reductions run in double with a fixed tree order (block_sum), as the
// CPU reference sums each channel in float64, so the results do not
// depend on scheduling: one block per channel where a channel fits one
// tile, the tiled kernels at the end of this file where it does not.
//
// Each takes an activation (act, shim.h's ACT_*) applied in the same pass:
// the forward writes act(z), z = x·scale + shift, without storing z, and
// the backward recomputes z from x and the forward's per-channel scale and
// shift to turn dy into dz. Backward kernels add to dx, or write it when
// write is set (the gradient's first writer: dx is not read).
#include "shim.h"

// bn_running stores a channel's unbiased variance vu when var_unbiased is
// not null and, when running_mean is not null, folds the batch statistics
// into the running ones as the backend's Axpby would: running =
// (1 − momentum)·running + momentum·batch.
SP_INLINE void bn_running(int ch, float m, float vu, float* var_unbiased, float* running_mean, float* running_var,
                          float momentum) {
  if (var_unbiased) var_unbiased[ch] = vu;
  if (running_mean) {
    float keep = 1.f - momentum;
    running_mean[ch] = keep * running_mean[ch] + momentum * m;
    running_var[ch] = keep * running_var[ch] + momentum * vu;
  }
}

// bn_train normalises x (nb×c×hw) with its batch statistics: mean, invstd
// = 1/√(biased var + eps) and, when var_unbiased is not null, the unbiased
// variance (NaN for a single element). Statistics are shifted by the
// channel's first element, as the reference, so that |mean| ≫ std keeps
// its precision. gamma and beta may be null (1 and 0). y = act(z); when
// affine is not null it receives each channel's scale (affine[ch]) and
// shift (affine[c + ch]), and when running_mean is not null the running
// statistics are updated (bn_running).
SP_KERNEL void bn_train(const float* __restrict__ x, const float* __restrict__ gamma,
                                    const float* __restrict__ beta, float* __restrict__ y, float* __restrict__ mean,
                                    float* __restrict__ invstd, float* __restrict__ var_unbiased, int nb, int c,
                                    long long hw, float eps, float* __restrict__ affine, int act,
                                    float* __restrict__ running_mean, float* __restrict__ running_var,
                                    float momentum) {
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
      bn_running(ch, (float)m, cnt > 1 ? (float)(sq / (double)(cnt - 1)) : NAN, var_unbiased, running_mean, running_var,
                 momentum);
    }
    double g = gamma ? (double)gamma[ch] : 1.0, bt = beta ? (double)beta[ch] : 0.0;
    float sc = (float)(g * is), sh = (float)(bt - m * g * is);
    if (affine && threadIdx.x == 0) {
      affine[ch] = sc;
      affine[c + ch] = sh;
    }
    for (int b = 0; b < nb; b++) {
      long long o = ((long long)b * c + ch) * hw;
      for (long long j = threadIdx.x; j < hw; j += blockDim.x) y[o + j] = sp_act(act, x[o + j] * sc + sh);
    }
  }
}

// bn_backward accumulates the training-mode gradients from the saved mean
// and invstd: dgamma += Σ dy·xhat, dbeta += Σ dy and
// dx += k·(dy − mean(dy)) − k·invstd·mean(dy·xhat)·(x − mean), k = gamma·invstd.
// Any of dx, dgamma, dbeta may be null; gamma null means 1. With an
// activation, dy is act(z)'s gradient and affine bn_train's (2·c).
SP_KERNEL void bn_backward(const float* __restrict__ x, const float* __restrict__ dy,
                                       const float* __restrict__ mean, const float* __restrict__ invstd,
                                       const float* __restrict__ gamma, float* __restrict__ dx,
                                       float* __restrict__ dgamma, float* __restrict__ dbeta, int nb, int c,
                                       long long hw, const float* __restrict__ affine, int act, int write) {
  __shared__ double part[SP_MAX_BLOCK];
  long long cnt = (long long)nb * hw;
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double m = mean[ch], is = invstd[ch];
    float zs = act ? affine[ch] : 0.f, zh = act ? affine[c + ch] : 0.f;
    double sdy = 0, sdyx = 0;
    for (int b = 0; b < nb; b++) {
      long long o = ((long long)b * c + ch) * hw;
      for (long long j = threadIdx.x; j < hw; j += blockDim.x) {
        double g = sp_act_grad(act, dy[o + j], x[o + j] * zs + zh);
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
        for (long long j = threadIdx.x; j < hw; j += blockDim.x) {
          float v = kd * (sp_act_grad(act, dy[o + j], x[o + j] * zs + zh) - mdy) - kx * (x[o + j] - mf);
          dx[o + j] = write ? v : dx[o + j] + v;
        }
      }
    }
  }
}

// bn_eval_scale folds running statistics into one affine per channel:
// invstd = 1/√(var + eps) (in double), scale = gamma·invstd and shift =
// beta − mean·scale; gamma and beta may be null, shift too.
SP_KERNEL void bn_eval_scale(const float* __restrict__ gamma, const float* __restrict__ beta,
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
// dbeta += Σ dy, dx += dy·scale. Any output may be null. With an
// activation, dy is act(z)'s gradient, z = x·scale + shift.
SP_KERNEL void bn_eval_backward(const float* __restrict__ x, const float* __restrict__ dy,
                                            const float* __restrict__ mean, const float* __restrict__ invstd,
                                            const float* __restrict__ scale, float* __restrict__ dx,
                                            float* __restrict__ dgamma, float* __restrict__ dbeta, int nb, int c,
                                            long long hw, const float* __restrict__ shift, int act, int write) {
  __shared__ double part[SP_MAX_BLOCK];
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    float m = mean[ch], is = invstd[ch], k = scale[ch], zh = act ? shift[ch] : 0.f;
    double sdy = 0, sdyx = 0;
    for (int b = 0; b < nb; b++) {
      long long o = ((long long)b * c + ch) * hw;
      for (long long j = threadIdx.x; j < hw; j += blockDim.x) {
        float g = sp_act_grad(act, dy[o + j], x[o + j] * k + zh);
        sdy += g;
        sdyx += g * (x[o + j] - m) * is;
        if (dx) dx[o + j] = write ? g * k : dx[o + j] + g * k;
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

// Tiled forms for large channels. One block per channel leaves most of a
// GPU idle where the channels are few and long (the first layers at 640
// px: 16 channels of 32×320×320 elements at batch 32), so there each
// channel's nb·hw elements are cut into tiles of at most tile elements
// within one image plane (nb·⌈hw/tile⌉ tiles per channel), every block
// sums tiles into double partials (block_sum), one block per channel adds
// its tiles in order (bn_tiles_finish), and an elementwise pass applies
// the per-channel coefficients. Deterministic, with the single-block
// kernels' formulas; only the summation order differs.

// bn_tiles_partial writes, for each tile (channel-major), two sums:
// mode 0 (training statistics) Σ d and Σ d², d = x − x[channel's first];
// mode 1 (training backward) Σ dy and Σ dy·(x − mean);
// mode 2 (eval backward) Σ dy and Σ dy·(x − mean)·invstd in float per
// element, as bn_eval_backward. Modes 1 and 2 take dy through act's
// gradient at z = x·zs[ch] + zh[ch].
SP_KERNEL void bn_tiles_partial(const float* __restrict__ x, const float* __restrict__ dy,
                                            const float* __restrict__ mean, const float* __restrict__ invstd,
                                            double* __restrict__ partial, int mode, int nb, int c, long long hw,
                                            long long tile, const float* __restrict__ zs,
                                            const float* __restrict__ zh, int act) {
  __shared__ double part[SP_MAX_BLOCK];
  long long per_image = (hw + tile - 1) / tile, per_channel = per_image * nb;
  for (long long t = blockIdx.x; t < per_channel * c; t += gridDim.x) {
    int ch = (int)(t / per_channel);
    long long r = t % per_channel;
    int b = (int)(r / per_image);
    long long j0 = (r % per_image) * tile, j1 = j0 + tile < hw ? j0 + tile : hw;
    long long o = ((long long)b * c + ch) * hw;
    double s = 0, ss = 0;
    bool recompute = act && mode != 0;  // mode 0 reads x alone
    float as = recompute ? zs[ch] : 0.f, ah = recompute ? zh[ch] : 0.f;
    if (mode == 0) {
      double k = x[(long long)ch * hw];
      for (long long j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        double d = (double)x[o + j] - k;
        s += d;
        ss += d * d;
      }
    } else if (mode == 1) {
      double m = mean[ch];
      for (long long j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        double g = sp_act_grad(act, dy[o + j], x[o + j] * as + ah);
        s += g;
        ss += g * ((double)x[o + j] - m);
      }
    } else {
      float m = mean[ch], is = invstd[ch];
      for (long long j = j0 + threadIdx.x; j < j1; j += blockDim.x) {
        float g = sp_act_grad(act, dy[o + j], x[o + j] * as + ah);
        s += g;
        ss += g * (x[o + j] - m) * is;
      }
    }
    s = block_sum(s, part);
    ss = block_sum(ss, part);
    if (threadIdx.x == 0) {
      partial[2 * t] = s;
      partial[2 * t + 1] = ss;
    }
  }
}

// bn_tiles_finish adds each channel's tile partials in tile order and
// writes what the single-block kernels compute from their two sums:
// mode 0: mean, invstd, var_unbiased (when not null) and the affine
// coef[2ch] = scale, coef[2ch+1] = shift; mode 1: dgamma, dbeta (when not
// null) and coef[4ch..4ch+3] = k, mean(dy), k·invstd·mean(dy·xhat), mean;
// mode 2: dgamma, dbeta. In mode 0 affine, when not null, receives the
// scale and shift as bn_train's, and the running statistics are updated
// as bn_train's. One block per channel (grid-stride).
SP_KERNEL void bn_tiles_finish(const double* __restrict__ partial, int mode, int nb, int c, long long hw,
                                           long long tile, const float* __restrict__ x, float eps,
                                           const float* __restrict__ gamma, const float* __restrict__ beta,
                                           float* __restrict__ mean, float* __restrict__ invstd,
                                           float* __restrict__ var_unbiased, float* __restrict__ dgamma,
                                           float* __restrict__ dbeta, float* __restrict__ coef,
                                           float* __restrict__ affine, float* __restrict__ running_mean,
                                           float* __restrict__ running_var, float momentum) {
  __shared__ double part[SP_MAX_BLOCK];
  long long per_channel = (hw + tile - 1) / tile * nb, cnt = (long long)nb * hw;
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    const double* p = partial + 2 * (long long)ch * per_channel;
    double s = 0, ss = 0;
    for (long long t = threadIdx.x; t < per_channel; t += blockDim.x) {
      s += p[2 * t];
      ss += p[2 * t + 1];
    }
    s = block_sum(s, part);
    ss = block_sum(ss, part);
    if (threadIdx.x != 0) continue;
    if (mode == 0) {
      double k = x[(long long)ch * hw];
      double d = s / (double)cnt;
      double m = k + d;
      double sq = ss - d * s;
      sq = sq > 0 ? sq : 0;
      double is = 1.0 / sqrt(sq / (double)cnt + (double)eps);
      mean[ch] = (float)m;
      invstd[ch] = (float)is;
      bn_running(ch, (float)m, cnt > 1 ? (float)(sq / (double)(cnt - 1)) : NAN, var_unbiased, running_mean, running_var,
                 momentum);
      double g = gamma ? (double)gamma[ch] : 1.0, bt = beta ? (double)beta[ch] : 0.0;
      coef[2 * ch] = (float)(g * is);
      coef[2 * ch + 1] = (float)(bt - m * g * is);
      if (affine) {
        affine[ch] = coef[2 * ch];
        affine[c + ch] = coef[2 * ch + 1];
      }
    } else if (mode == 1) {
      double m = mean[ch], is = invstd[ch];
      double sdyx = ss * is;
      if (dgamma) dgamma[ch] += (float)sdyx;
      if (dbeta) dbeta[ch] += (float)s;
      double k = (gamma ? (double)gamma[ch] : 1.0) * is;
      coef[4 * ch] = (float)k;
      coef[4 * ch + 1] = (float)(s / (double)cnt);
      coef[4 * ch + 2] = (float)(k * is * sdyx / (double)cnt);
      coef[4 * ch + 3] = (float)m;
    } else {
      if (dgamma) dgamma[ch] += (float)ss;
      if (dbeta) dbeta[ch] += (float)s;
    }
  }
}

// bn_tiles_apply is the elementwise pass over nb×c×hw: mode 0 y =
// act(x·scale + shift); mode 1 dx += k·(dz − mean(dz)) − kx·(x − mean);
// mode 2 dx += dz·scale (scale given per channel, bn_eval_scale's), dz
// being dy through act's gradient at x·zs[ch] + zh[ch]; with write, dx is
// written, not added to.
SP_KERNEL void bn_tiles_apply(const float* __restrict__ x, const float* __restrict__ dy,
                                          const float* __restrict__ coef, const float* __restrict__ scale,
                                          float* __restrict__ out, int mode, int c, long long hw, long long n,
                                          const float* __restrict__ zs, const float* __restrict__ zh, int act,
                                          int write) {
  SP_FOR(i, n) {
    int ch = (int)((i / hw) % c);
    if (mode == 0) {
      out[i] = sp_act(act, x[i] * coef[2 * ch] + coef[2 * ch + 1]);
      continue;
    }
    float g = act ? sp_act_grad(act, dy[i], x[i] * zs[ch] + zh[ch]) : dy[i], v;
    if (mode == 1) {
      const float* k = coef + 4 * ch;
      v = k[0] * (g - k[1]) - k[2] * (x[i] - k[3]);
    } else {
      v = g * scale[ch];
    }
    out[i] = write ? v : out[i] + v;
  }
}
