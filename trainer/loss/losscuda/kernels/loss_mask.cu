// The segmentation loss's mask side (trainer/loss): the owner map and
// semantic target composed from the uploaded {0,1} mask stack, the mask
// term of one branch and the semantic term, with their gradients. The
// formulas, operation order and float64 arithmetic are the Go code's
// (targets.go, mask.go, semseg.go). Sums run in double with a fixed tree
// order (block_sum) and every gradient element has one writer, adding in
// the Go code's order: no floating-point atomics, so results do not
// depend on scheduling.
//
// Integer arrays are int32 elements of float buffers; byte arrays are the
// loader's bytes, four to an element. A float64 result is two words, low
// first.
#include "shim.h"

// LossOwnerGeom is the owner kernels' geometry: B images, M slots per
// image, the H×W prototype grid, NC classes, the HS×WS semantic grid and
// the number of instances in the uploaded mask stack.
struct LossOwnerGeom {
  int B, M, H, W, NC, HS, WS, n_inst;
};

// LossMaskGeom is the mask term's geometry: B images, A anchors, M slots,
// NM coefficients, the H×W prototype grid, the network input size and the
// gradient scale.
struct LossMaskGeom {
  int B, A, M, NM, H, W;
  float img_w, img_h;
  double scale;
};

// LossSemGeom is the semantic term's: nch = B·NC channels of hw logits.
struct LossSemGeom {
  long long nch, hw;
  double scale;
};

// lm_put_f64 stores v as two words, low first (the terms' layout), at a
// possibly 4-aligned address.
SP_INLINE void lm_put_f64(float* w, double v) {
  union {
    double d;
    unsigned int u[2];
  } x;
  x.d = v;
  ((unsigned int*)w)[0] = x.u[0];
  ((unsigned int*)w)[1] = x.u[1];
}

// lm_bce is bceSigmoid: BCE-with-logits of x against t and σ(x) from one
// exponential.
SP_INLINE double lm_bce(double x, double t, double* p) {
  double e = exp(-fabs(x));
  double loss = (x > 0 ? x : 0.0) - x * t + log(1 + e);
  *p = x >= 0 ? 1 / (1 + e) : e / (1 + e);
  return loss;
}

// lm_last is the slot painted last in image b (the smallest mask, the
// later slot among equal areas: a stable sort by decreasing area), -1 for
// an image without instances.
SP_INLINE int lm_last(const int* __restrict__ area, const int* __restrict__ count, int b, int M) {
  int n = count[b] < M ? count[b] : M, best = -1, ba = 0;
  for (int j = 0; j < n; j++) {
    int a = area[b * M + j];
    if (best < 0 || a <= ba) best = j, ba = a;
  }
  return best;
}

// loss_owner_area counts each slot's mask pixels (−1 on padding slots and
// slots whose source is outside the stack): one block per slot.
SP_KERNEL void loss_owner_area(const unsigned char* __restrict__ masks, const int* __restrict__ src,
                                           const int* __restrict__ count, int* __restrict__ area, LossOwnerGeom g) {
  __shared__ double part[SP_MAX_BLOCK];
  long long hw = (long long)g.H * g.W;
  for (int s = blockIdx.x; s < g.B * g.M; s += gridDim.x) {
    int b = s / g.M, j = s % g.M, k = src[s];
    if (j >= count[b] || k < 0 || k >= g.n_inst) {
      if (threadIdx.x == 0) area[s] = -1;
      continue;
    }
    const unsigned char* m = masks + (long long)k * hw;
    double n = 0;
    for (long long i = threadIdx.x; i < hw; i += blockDim.x) n += m[i] != 0;
    n = block_sum(n, part);
    if (threadIdx.x == 0) area[s] = (int)n;
  }
}

// loss_owner_map writes owner [B, H, W]: 1 + the slot owning the pixel, 0
// for background. Painting by decreasing area (stable) leaves the pixel
// to its smallest covering mask, the later slot among equal areas.
SP_KERNEL void loss_owner_map(const unsigned char* __restrict__ masks, const int* __restrict__ src,
                                          const int* __restrict__ count, const int* __restrict__ area,
                                          int* __restrict__ owner, LossOwnerGeom g) {
  long long hw = (long long)g.H * g.W;
  SP_FOR(i, g.B * hw) {
    int b = (int)(i / hw);
    long long px = i % hw;
    int n = count[b] < g.M ? count[b] : g.M, best = -1, ba = 0;
    for (int j = 0; j < n; j++) {
      int k = src[b * g.M + j];
      if (k < 0 || k >= g.n_inst || masks[(long long)k * hw + px] == 0) continue;
      int a = area[b * g.M + j];
      if (best < 0 || a <= ba) best = j, ba = a;
    }
    owner[i] = best + 1;
  }
}

// lm_nearest is PyTorch's mode="nearest" source index with the scale in
// float (nearestSrc).
SP_INLINE int lm_nearest(int dst, int out, int in) {
  float scale = (float)in / (float)out;
  int s = (int)floorf((float)dst * scale);
  return s < in - 1 ? s : in - 1;
}

// loss_semantic writes sem [B, NC, HS, WS] (buildSemantic): at each
// pixel, 1 on the channel of its owner's class, the background reading
// the class of the image's last-painted slot; nothing where that class
// is 0 or the image has no instance. One thread per pixel, every channel.
SP_KERNEL void loss_semantic(const int* __restrict__ labels, const int* __restrict__ count,
                                         const int* __restrict__ area, const int* __restrict__ owner,
                                         float* __restrict__ sem, LossOwnerGeom g) {
  long long shw = (long long)g.HS * g.WS;
  SP_FOR(i, g.B * shw) {
    int b = (int)(i / shw);
    long long px = i % shw;
    int y = (int)(px / g.WS), x = (int)(px % g.WS);
    int c = 0, last = lm_last(area, count, b, g.M);
    if (last >= 0) {
      int sy = lm_nearest(y, g.HS, g.H), sx = lm_nearest(x, g.WS, g.W);
      int o = owner[(long long)b * g.H * g.W + (long long)sy * g.W + sx];
      c = labels[b * g.M + (o > 0 ? o - 1 : last)];
    }
    float* out = sem + (long long)b * g.NC * shw + px;
    for (int k = 0; k < g.NC; k++) out[k * shw] = (c != 0 && k == c) ? 1.f : 0.f;
  }
}

// loss_mask_gather lays out each image's positives in anchor order (the
// Go code's gather; rows of image b start at b·A), their count, and per
// row the crop box in mask pixels (c0, c1, r0, r1; empty when the slot is
// outside the image's M) and the box's normalised area. With fewer than
// cropRoundBelow (50) positives in the image the box is rounded half to
// even, otherwise the first integer at or above each bound is taken; both
// are clamped to the grid. One block per image.
SP_KERNEL void loss_mask_gather(const int* __restrict__ fg, const int* __restrict__ gtidx,
                                            const float* __restrict__ boxes, int* __restrict__ anchor,
                                            int* __restrict__ gt, int* __restrict__ crop, double* __restrict__ area,
                                            int* __restrict__ count, LossMaskGeom g) {
  __shared__ int scan[SP_MAX_BLOCK];
  unsigned t = threadIdx.x;
  for (int b = blockIdx.x; b < g.B; b += gridDim.x) {
    long long row0 = (long long)b * g.A;
    int base = 0;
    for (int start = 0; start < g.A; start += blockDim.x) {
      int a = start + (int)t;
      int f = a < g.A && fg[row0 + a] != 0;
      scan[t] = f;
      __syncthreads();
      for (unsigned off = 1; off < blockDim.x; off *= 2) {
        int v = t >= off ? scan[t - off] : 0;
        __syncthreads();
        scan[t] += v;
        __syncthreads();
      }
      if (f) {
        int q = base + scan[t] - 1;
        anchor[row0 + q] = a;
        gt[row0 + q] = gtidx[row0 + a];
      }
      base += scan[blockDim.x - 1];
      __syncthreads();
    }
    if (t == 0) count[b] = base;
    for (int q = (int)t; q < base; q += blockDim.x) {
      long long r = row0 + q;
      int j = gt[r];
      int* cr = crop + 4 * r;
      if (j < 0 || j >= g.M) {
        cr[0] = cr[1] = cr[2] = cr[3] = 0;
        area[r] = 1;
        continue;
      }
      const float* bx = boxes + ((long long)b * g.M + j) * 4;
      float nx1 = bx[0] / g.img_w, ny1 = bx[1] / g.img_h, nx2 = bx[2] / g.img_w, ny2 = bx[3] / g.img_h;
      float dx = nx2 - nx1, dy = ny2 - ny1;
      area[r] = (double)(dx * dy);
      float mx[4] = {nx1 * (float)g.W, nx2 * (float)g.W, ny1 * (float)g.H, ny2 * (float)g.H};
      int lim[4] = {g.W, g.W, g.H, g.H};
      for (int k = 0; k < 4; k++) {
        double v = base < 50 ? rint((double)mx[k]) : ceil((double)mx[k]);
        v = v < 0 ? 0 : v;
        v = v > lim[k] ? lim[k] : v;
        cr[k] = (int)v;
      }
    }
  }
}

// loss_mask_rows forms each positive's loss, Σ over its crop of BCE(z, gt)
// with z = Σ_n coef·proto, divided by hw and its area, into loss[row],
// and (coef_g not null) adds scale·dL/dcoef into coef_g: one block per
// row, the gradient's coefficient sums kept per thread. Nothing runs when
// the branch has no positive.
#define LM_MAX_NM 64
SP_KERNEL void loss_mask_rows(const float* __restrict__ coef, const float* __restrict__ proto,
                                          const int* __restrict__ owner, const int* __restrict__ anchor,
                                          const int* __restrict__ gt, const int* __restrict__ crop,
                                          const double* __restrict__ area, const int* __restrict__ count,
                                          const int* __restrict__ num_fg, float* __restrict__ coef_g,
                                          double* __restrict__ loss, LossMaskGeom g) {
  __shared__ double part[SP_MAX_BLOCK];
  __shared__ double cn[LM_MAX_NM];
  int nfg = num_fg[0];
  if (nfg <= 0) return;
  long long hw = (long long)g.H * g.W;
  double k_grad = g.scale / ((double)hw * (double)nfg);
  for (int b = 0; b < g.B; b++) {
    for (int q = blockIdx.x; q < count[b]; q += gridDim.x) {
      long long r = (long long)b * g.A + q;
      int a = anchor[r], j = gt[r];
      const int* cr = crop + 4 * r;
      int c0 = cr[0], c1 = cr[1], r0 = cr[2], r1 = cr[3];
      if (c0 >= c1 || r0 >= r1) {
        if (threadIdx.x == 0) loss[r] = 0;
        continue;
      }
      for (int n = threadIdx.x; n < g.NM; n += blockDim.x) cn[n] = coef[((long long)b * g.NM + n) * g.A + a];
      __syncthreads();
      double ar = area[r], kp = k_grad / ar;
      double dc[LM_MAX_NM];
      for (int n = 0; n < g.NM; n++) dc[n] = 0;
      const float* pr = proto + (long long)b * g.NM * hw;
      const int* own = owner + (long long)b * hw;
      int cw = c1 - c0;
      long long cells = (long long)cw * (r1 - r0);
      double sum = 0;
      for (long long k = threadIdx.x; k < cells; k += blockDim.x) {
        long long px = (long long)(r0 + k / cw) * g.W + c0 + k % cw;
        double z = 0;
        for (int n = 0; n < g.NM; n++) z += cn[n] * (double)pr[n * hw + px];
        double gtv = own[px] == j + 1 ? 1 : 0, p;
        sum += lm_bce(z, gtv, &p);
        if (coef_g) {
          double dz = kp * (p - gtv);
          for (int n = 0; n < g.NM; n++) dc[n] += dz * (double)pr[n * hw + px];
        }
      }
      sum = block_sum(sum, part);
      if (threadIdx.x == 0) loss[r] = sum / (double)hw / ar;
      if (coef_g)
        for (int n = 0; n < g.NM; n++) {
          double v = block_sum(dc[n], part);
          if (threadIdx.x == 0) coef_g[((long long)b * g.NM + n) * g.A + a] += (float)v;
        }
      __syncthreads();  // cn is rewritten for the next row
    }
  }
}

// loss_mask_proto_grad adds scale·dL/dproto into proto_g: one thread per
// prototype pixel, adding each positive of its image whose crop holds the
// pixel in row order, in float, as the Go code accumulates (in a
// per-thread copy of the pixel's NM gradients, stored once at the end).
SP_KERNEL void loss_mask_proto_grad(const float* __restrict__ coef, const float* __restrict__ proto,
                                                const int* __restrict__ owner, const int* __restrict__ anchor,
                                                const int* __restrict__ gt, const int* __restrict__ crop,
                                                const double* __restrict__ area, const int* __restrict__ count,
                                                const int* __restrict__ num_fg, float* __restrict__ proto_g,
                                                LossMaskGeom g) {
  int nfg = num_fg[0];
  if (nfg <= 0) return;
  long long hw = (long long)g.H * g.W;
  double k_grad = g.scale / ((double)hw * (double)nfg);
  SP_FOR(i, g.B * hw) {
    int b = (int)(i / hw);
    long long px = i % hw;
    int y = (int)(px / g.W), x = (int)(px % g.W);
    const float* pr = proto + (long long)b * g.NM * hw + px;
    float* pg = proto_g + (long long)b * g.NM * hw + px;
    const float* cf = coef + (long long)b * g.NM * g.A;
    int own = owner[i];
    float acc[LM_MAX_NM];
    for (int n = 0; n < g.NM; n++) acc[n] = pg[n * hw];
    for (int q = 0; q < count[b]; q++) {
      long long r = (long long)b * g.A + q;
      const int* cr = crop + 4 * r;
      if (x < cr[0] || x >= cr[1] || y < cr[2] || y >= cr[3]) continue;
      int a = anchor[r];
      double z = 0;
      for (int n = 0; n < g.NM; n++) z += (double)cf[(long long)n * g.A + a] * (double)pr[n * hw];
      double gtv = own == gt[r] + 1 ? 1 : 0, p;
      lm_bce(z, gtv, &p);
      double dz = k_grad / area[r] * (p - gtv);
      for (int n = 0; n < g.NM; n++) acc[n] += (float)(dz * (double)cf[(long long)n * g.A + a]);
    }
    for (int n = 0; n < g.NM; n++) pg[n * hw] = acc[n];
  }
}

// loss_mask_finish writes the mask term, Σ over images of Σ over the
// image's rows, divided by the positive count (0 without positives), into
// terms[0:2]. One block.
SP_KERNEL void loss_mask_finish(const double* __restrict__ loss, const int* __restrict__ count,
                                            const int* __restrict__ num_fg, float* __restrict__ terms,
                                            LossMaskGeom g) {
  __shared__ double part[SP_MAX_BLOCK];
  int nfg = num_fg[0];
  double total = 0;
  if (nfg > 0)
    for (int b = 0; b < g.B; b++) {
      double s = 0;
      for (int q = threadIdx.x; q < count[b]; q += blockDim.x) s += loss[(long long)b * g.A + q];
      total += block_sum(s, part);
    }
  if (threadIdx.x == 0) lm_put_f64(terms, nfg > 0 ? total / (double)nfg : 0.0);
}

// loss_sem_channel forms each channel's BCE sum and Dice loss (stats[2ch],
// stats[2ch+1]) and, grad not null, adds scale·dL/dlogit: one block per
// channel.
SP_KERNEL void loss_sem_channel(const float* __restrict__ logits, const float* __restrict__ target,
                                            float* __restrict__ grad, double* __restrict__ stats, LossSemGeom g) {
  __shared__ double part[SP_MAX_BLOCK];
  double n = (double)(g.nch * g.hw), nch = (double)g.nch;
  for (long long ch = blockIdx.x; ch < g.nch; ch += gridDim.x) {
    const float* x = logits + ch * g.hw;
    const float* tg = target + ch * g.hw;
    double bce = 0, inter = 0, sp = 0, st = 0;
    for (long long i = threadIdx.x; i < g.hw; i += blockDim.x) {
      double tv = tg[i], p;
      bce += lm_bce(x[i], tv, &p);
      inter += p * tv;
      sp += p;
      st += tv;
    }
    bce = block_sum(bce, part);
    inter = block_sum(inter, part);
    sp = block_sum(sp, part);
    st = block_sum(st, part);
    double u = sp + st + 1, num = 2 * inter + 1;
    if (threadIdx.x == 0) {
      stats[2 * ch] = bce;
      stats[2 * ch + 1] = 1 - num / u;
    }
    if (!grad) continue;
    float* gr = grad + ch * g.hw;
    for (long long i = threadIdx.x; i < g.hw; i += blockDim.x) {
      double tv = tg[i], p;
      lm_bce(x[i], tv, &p);
      // d(1 − num/u)/dp = −(2t·u − num)/u².
      double d_dice = -(2 * tv * u - num) / (u * u);
      double d = 0.5 * (p - tv) / n + 0.5 * d_dice / nch * p * (1 - p);
      gr[i] += (float)(g.scale * d);
    }
  }
}

// loss_sem_finish writes 0.5·ΣBCE/n + 0.5·ΣDice/nch into terms[0:2]. One
// block.
SP_KERNEL void loss_sem_finish(const double* __restrict__ stats, float* __restrict__ terms, LossSemGeom g) {
  __shared__ double part[SP_MAX_BLOCK];
  double bce = 0, dice = 0;
  for (long long ch = threadIdx.x; ch < g.nch; ch += blockDim.x) {
    bce += stats[2 * ch];
    dice += stats[2 * ch + 1];
  }
  bce = block_sum(bce, part);
  dice = block_sum(dice, part);
  if (threadIdx.x == 0) lm_put_f64(terms, 0.5 * bce / (double)(g.nch * g.hw) + 0.5 * dice / (double)g.nch);
}
