// The YOLO26-seg loss's padded targets, task-aligned assigner, class and
// box terms and combination (trainer/loss's DeviceKernels: LossTargets,
// LossAssign, LossClsBox, LossCombine), each the twin of the Go code in
// trainer/loss with its arithmetic: float64 where Go uses float64, the
// assigner's CIoU in float32 in the reference's order, compiled without
// multiply-add contraction (build-ptx.sh) so that every operation rounds
// as Go's does. Go's Pow (for the metric's powers) and Atan are ported
// too; only exp and log are the device's (within an ulp of Go's, which
// are assembly on amd64). No floating-point atomics: sums run in fixed orders (per
// thread in index order, then a block's tree), so results do not depend
// on scheduling. Integer arrays are int32, booleans int32 0/1 in the
// outputs; float64 results cross as two 32-bit words, low first, through
// unsigned pointers (a word need not be 8-byte aligned).
#include "shim.h"

#ifdef __CUDACC__
SP_INLINE double la_get_f64(const unsigned* w) { return __hiloint2double((int)w[1], (int)w[0]); }
SP_INLINE void la_put_f64(unsigned* w, double v) {
  w[0] = (unsigned)__double2loint(v);
  w[1] = (unsigned)__double2hiint(v);
}
#else
#include <cstring>
SP_INLINE double la_get_f64(const unsigned* w) {
  uint64_t b = (uint64_t)w[1] << 32 | w[0];
  double v;
  std::memcpy(&v, &b, 8);
  return v;
}
SP_INLINE void la_put_f64(unsigned* w, double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  w[0] = (unsigned)b;
  w[1] = (unsigned)(b >> 32);
}
#endif

#define LA_MAX_LEVELS 8

// 4/π² and 8/π² as Go's constant expressions round them (to float64; to
// float32 for ciou32).
#define LA_K4 0.4052847345693511
#define LA_K8 0.8105694691387022
#define LA_K4F 0.405284733f

// LaGeom is loss.Geometry as the kernels need it: B images, NC classes,
// A anchors over the levels (row-major cells, P3 first), M padded slots,
// and the input size in pixels.
struct LaGeom {
  int B, NC, A, M, nlevels;
  int h[LA_MAX_LEVELS], w[LA_MAX_LEVELS];
  float stride[LA_MAX_LEVELS];
  float img_h, img_w;
};

// LaAssign is loss.AssignerConfig (k = min(TopK, A); k2 = 0 without a
// second stage).
struct LaAssign {
  int k, k2;
  double alpha, beta, small_side, small_side_to;
};

// LaGains are a branch's gradient scales times their gains (scale·gain;
// the kernels divide by S on the device, as Go's scale·gain/S).
struct LaGains {
  double cls, box, dist;
};

// LaCombine is what LossCombine needs of loss.Config and the step.
struct LaCombine {
  double box_gain, cls_gain, dfl_gain, o2m, o2o;
  int B;
};

// la_anchor is anchor a's centre in grid units and its stride
// (Geometry.anchorGrid).
SP_INLINE void la_anchor(const LaGeom& g, int a, float* ax, float* ay, float* st) {
  int l = 0;
  while (l < g.nlevels - 1 && a >= g.h[l] * g.w[l]) {
    a -= g.h[l] * g.w[l];
    l++;
  }
  *ax = (float)(a % g.w[l]) + 0.5f;
  *ay = (float)(a / g.w[l]) + 0.5f;
  *st = g.stride[l];
}

// la_bce0 is bceSigmoid(x, 0): the BCE at target 0 and the sigmoid, from
// one exponential.
SP_INLINE double la_bce0(double x, double* p) {
  double e = exp(-fabs(x));
  *p = x >= 0 ? 1 / (1 + e) : e / (1 + e);
  return (x > 0 ? x : 0.0) + log(1 + e);
}

// la_pow is Go's math.Pow where the assigner's powers fall: y = 0.5 is
// a square root and an integer y goes by repeated squaring of the
// mantissa (frexp, ldexp), exactly as Go computes them, so the metric's
// ·^0.5 and ·^6 are Go's bits on any device; other powers are pow's.
SP_INLINE double la_pow(double x, double y) {
  if (y == 0 || x == 1) return 1;
  if (y == 1) return x;
  if (x == 0 && y > 0) return 0;  // x is never −0 here
  if (y == 0.5 && x >= 0) return sqrt(x);
  double yi = floor(y);
  if (yi != y || y < 0 || y >= 4096 || !(x > 0) || isinf(x)) return pow(x, y);
  int xe;
  double x1 = frexp(x, &xe), a1 = 1;
  int ae = 0;
  for (long long i = (long long)yi; i != 0; i >>= 1) {
    if (xe < -(1 << 12) || (1 << 12) < xe) {
      ae += xe;
      break;
    }
    if (i & 1) {
      a1 *= x1;
      ae += xe;
    }
    x1 *= x1;
    xe <<= 1;
    if (x1 < .5) {
      x1 += x1;
      xe--;
    }
  }
  return ldexp(a1, ae);
}

// la_atan is Go's math.Atan (Cephes' rational approximation after a
// range reduction; pure Go on every platform but s390x), so the CIoU's
// aspect term is Go's bits on any device.
SP_INLINE double la_xatan(double x) {
  const double P0 = -8.750608600031904122785e-01, P1 = -1.615753718733365076637e+01,
               P2 = -7.500855792314704667340e+01, P3 = -1.228866684490136173410e+02,
               P4 = -6.485021904942025371773e+01, Q0 = +2.485846490142306297962e+01,
               Q1 = +1.650270098316988542046e+02, Q2 = +4.328810604912902668951e+02,
               Q3 = +4.853903996359136964868e+02, Q4 = +1.945506571482613964425e+02;
  double z = x * x;
  z = z * ((((P0 * z + P1) * z + P2) * z + P3) * z + P4) / (((((z + Q0) * z + Q1) * z + Q2) * z + Q3) * z + Q4);
  return x * z + x;
}

SP_INLINE double la_satan(double x) {
  const double morebits = 6.123233995736765886130e-17, tan3pio8 = 2.41421356237309504880;
  const double pio2 = 1.5707963267948966, pio4 = 0.7853981633974483, half_morebits = 3.061616997868382943065e-17;
  if (x <= 0.66) return la_xatan(x);
  if (x > tan3pio8) return pio2 - la_xatan(1 / x) + morebits;
  return pio4 + la_xatan((x - 1) / (x + 1)) + half_morebits;
}

SP_INLINE double la_atan(double x) {
  if (x == 0) return x;
  return x > 0 ? la_satan(x) : -la_satan(-x);
}

SP_INLINE float la_minf(float x, float y) { return y < x ? y : x; }
SP_INLINE float la_maxf(float x, float y) { return y > x ? y : x; }

// la_ciou32 is ciou32: CIoU in float32 in the reference's operation order.
SP_INLINE float la_ciou32(const float* a, const float* b) {
  const float eps = 1e-7f;
  float w1 = a[2] - a[0], h1 = a[3] - a[1] + eps;
  float w2 = b[2] - b[0], h2 = b[3] - b[1] + eps;
  float iw = la_maxf(la_minf(a[2], b[2]) - la_maxf(a[0], b[0]), 0.f);
  float ih = la_maxf(la_minf(a[3], b[3]) - la_maxf(a[1], b[1]), 0.f);
  float inter = iw * ih;
  float uni = w1 * h1 + w2 * h2 - inter + eps;
  float iou = inter / uni;
  float cw = la_maxf(a[2], b[2]) - la_minf(a[0], b[0]);
  float ch = la_maxf(a[3], b[3]) - la_minf(a[1], b[1]);
  float c2 = cw * cw + ch * ch + eps;
  float sx = b[0] + b[2] - a[0] - a[2];
  float sy = b[1] + b[3] - a[1] - a[3];
  float rho2 = (sx * sx + sy * sy) / 4;
  float dt = (float)la_atan((double)(w2 / h2)) - (float)la_atan((double)(w1 / h1));
  float v = LA_K4F * (dt * dt);
  float alpha = v / (v - iou + (float)(1 + 1e-7));
  return iou - (rho2 / c2 + v * alpha);
}

// loss_targets pads each image's non-crowd instances into slots of width
// M (LossTargets): one thread per image.
SP_KERNEL void loss_targets(const int* __restrict__ bpi, const int* __restrict__ cls,
                                        const float* __restrict__ boxes, const unsigned char* __restrict__ crowd,
                                        int ncrowd, int B, int M, int* __restrict__ labels, float* __restrict__ pboxes,
                                        int* __restrict__ valid, int* __restrict__ src, int* __restrict__ count) {
  SP_FOR(b, B) {
    long long k = 0;
    for (long long i = 0; i < b; i++) k += bpi[i];
    int j = 0;
    for (int i = 0; i < bpi[b]; i++, k++) {
      if (ncrowd > 0 && crowd[k] != 0) continue;
      if (j >= M) break;  // the host sized M as the largest count
      long long s = b * M + j;
      const float* x = boxes + 4 * k;
      labels[s] = cls[k];
      for (int c = 0; c < 4; c++) pboxes[4 * s + c] = x[c];
      valid[s] = x[0] + x[1] + x[2] + x[3] > 0;
      src[s] = (int)k;
      j++;
    }
    count[b] = j;
    for (int s = j; s < M; s++) {
      long long t = b * M + s;
      labels[t] = 0;
      for (int c = 0; c < 4; c++) pboxes[4 * t + c] = 0;
      valid[t] = 0;
      src[t] = -1;
    }
  }
}

// Assigner flags per (image, slot, anchor).
#define LA_IN_GT 1u   // candidate after STAL
#define LA_POS 2u     // positive
#define LA_PICKED 4u  // picked by the second top-k stage

// loss_assign_metric writes, per (image, slot, anchor), the candidate
// flag, the clamped float32 CIoU and the alignment metric (zero outside
// candidate ∧ valid), as Assign's first loop.
SP_KERNEL void loss_assign_metric(LaGeom g, LaAssign cfg, const float* __restrict__ boxes,
                                              const float* __restrict__ scores, const int* __restrict__ labels,
                                              const float* __restrict__ gtb, const int* __restrict__ valid,
                                              float* __restrict__ metric, float* __restrict__ overlaps,
                                              unsigned char* __restrict__ flags, long long n) {
  SP_FOR(i, n) {
    long long bm = i / g.A;
    int a = (int)(i % g.A), b = (int)(bm / g.M);
    metric[i] = 0;
    overlaps[i] = 0;
    flags[i] = 0;
    if (!valid[bm]) continue;
    const float* gt = gtb + 4 * bm;
    float cx = (gt[0] + gt[2]) / 2, cy = (gt[1] + gt[3]) / 2;
    float w = gt[2] - gt[0], h = gt[3] - gt[1];
    if ((double)w < cfg.small_side) w = (float)cfg.small_side_to;
    if ((double)h < cfg.small_side) h = (float)cfg.small_side_to;
    float x1 = cx - w / 2, y1 = cy - h / 2, x2 = cx + w / 2, y2 = cy + h / 2;
    float gx, gy, st;
    la_anchor(g, a, &gx, &gy, &st);
    float ax = gx * st, ay = gy * st;
    float d = la_minf(la_minf(ax - x1, ay - y1), la_minf(x2 - ax, y2 - ay));
    if (!(d > 1e-9f)) continue;
    flags[i] = LA_IN_GT;
    const float* r = boxes + (long long)b * 4 * g.A + a;
    float pd[4] = {(gx - r[0]) * st, (gy - r[g.A]) * st, (gx + r[2 * (long long)g.A]) * st,
                   (gy + r[3 * (long long)g.A]) * st};
    double p;
    la_bce0((double)scores[((long long)b * g.NC + labels[bm]) * g.A + a], &p);
    float score = (float)p;
    float ov = la_ciou32(gt, pd);
    ov = ov > 0.f ? ov : 0.f;
    overlaps[i] = ov;
    metric[i] = (float)la_pow((double)score, cfg.alpha) * (float)la_pow((double)ov, cfg.beta);
  }
}

// la_better says whether (v1, i1) ranks before (v2, i2): the larger value,
// the lower index among equals; index −1 is no entry.
SP_INLINE bool la_better(float v1, int i1, float v2, int i2) {
  if (i2 < 0) return i1 >= 0;
  if (i1 < 0) return false;
  return v1 > v2 || (v1 == v2 && i1 < i2);
}

// la_block_best reduces (v, i) over the block to its best entry, in a
// fixed tree order; every thread gets it.
SP_INLINE void la_block_best(float* v, int* i, float* sv, int* si) {
  sv[threadIdx.x] = *v;
  si[threadIdx.x] = *i;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k && la_better(sv[threadIdx.x + k], si[threadIdx.x + k], sv[threadIdx.x], si[threadIdx.x])) {
      sv[threadIdx.x] = sv[threadIdx.x + k];
      si[threadIdx.x] = si[threadIdx.x + k];
    }
    __syncthreads();
  }
  *v = sv[0];
  *i = si[0];
  __syncthreads();
}

// loss_assign_topk is Assign's top-k per GT row (one block per row, k
// rounds of a block argmax in the order value descending, index
// ascending: topK's ties to the lower index). Stage 0 ranks the metric
// of valid rows and marks the picks that are candidates positive; stage
// 1 (one-to-one's TopK2) ranks the metric masked to the row's positives,
// in rows that have one, and keeps only the picks positive.
SP_KERNEL void loss_assign_topk(const float* __restrict__ metric, unsigned char* __restrict__ flags,
                                            const int* __restrict__ valid, int A, int k, int stage, long long rows) {
  __shared__ float sv[SP_MAX_BLOCK];
  __shared__ int si[SP_MAX_BLOCK];
  __shared__ double part[SP_MAX_BLOCK];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    const float* m = metric + row * A;
    unsigned char* f = flags + row * A;
    if (stage == 0 && !valid[row]) continue;
    if (stage == 1) {
      double any = 0;
      for (int a = threadIdx.x; a < A; a += blockDim.x) any += (f[a] & LA_POS) ? 1 : 0;
      if (block_sum(any, part) == 0) continue;
    }
    float pv = 0;
    int pi = -1;
    for (int r = 0; r < k; r++) {
      float bv = 0;
      int bi = -1;
      for (int a = threadIdx.x; a < A; a += blockDim.x) {
        float x = stage == 0 || (f[a] & LA_POS) ? m[a] : 0.f;
        if (pi >= 0 && !(x < pv || (x == pv && a > pi))) continue;
        if (la_better(x, a, bv, bi)) bv = x, bi = a;
      }
      la_block_best(&bv, &bi, sv, si);
      pv = bv, pi = bi;
      if (threadIdx.x == 0 && pi >= 0) {
        if (stage == 0 && (f[pi] & LA_IN_GT)) f[pi] |= LA_POS;
        if (stage == 1) f[pi] |= LA_PICKED;
      }
      __syncthreads();
    }
    if (stage == 1)
      for (int a = threadIdx.x; a < A; a += blockDim.x)
        if (f[a] & LA_POS) f[a] = (f[a] & LA_PICKED) ? (unsigned char)(f[a] & ~LA_PICKED) : (unsigned char)(f[a] & ~LA_POS);
    __syncthreads();
  }
}

// loss_assign_resolve gives an anchor claimed by several GTs to the GT
// of the largest CIoU over all M slots (first on ties): one thread per
// (image, anchor).
SP_KERNEL void loss_assign_resolve(const float* __restrict__ overlaps, unsigned char* __restrict__ flags,
                                               int M, int A, long long n) {
  SP_FOR(i, n) {
    long long b = i / A, a = i % A;
    long long base = b * M * A + a;
    int cnt = 0;
    for (int m = 0; m < M; m++) cnt += (flags[base + (long long)m * A] & LA_POS) ? 1 : 0;
    if (cnt <= 1) continue;
    int best = 0;
    float bestv = overlaps[base];
    for (int m = 1; m < M; m++) {
      float v = overlaps[base + (long long)m * A];
      if (v > bestv) best = m, bestv = v;
    }
    for (int m = 0; m < M; m++) {
      unsigned char& f = flags[base + (long long)m * A];
      f = m == best ? (unsigned char)(f | LA_POS) : (unsigned char)(f & ~LA_POS);
    }
  }
}

SP_INLINE double la_block_max(double v, double* part) {
  part[threadIdx.x] = v;
  __syncthreads();
  for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k && part[threadIdx.x + k] > part[threadIdx.x]) part[threadIdx.x] = part[threadIdx.x + k];
    __syncthreads();
  }
  double m = part[0];
  __syncthreads();
  return m;
}

// loss_assign_max writes each GT row's largest metric and CIoU over its
// positives (0 without): one block per row.
SP_KERNEL void loss_assign_max(const float* __restrict__ metric, const float* __restrict__ overlaps,
                                           const unsigned char* __restrict__ flags, int A, double* __restrict__ maxmet,
                                           double* __restrict__ maxov, long long rows) {
  __shared__ double part[SP_MAX_BLOCK];
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    double mm = 0, mo = 0;
    for (int a = threadIdx.x; a < A; a += blockDim.x) {
      long long i = row * A + a;
      if (!(flags[i] & LA_POS)) continue;
      if ((double)metric[i] > mm) mm = metric[i];
      if ((double)overlaps[i] > mo) mo = overlaps[i];
    }
    mm = la_block_max(mm, part);
    mo = la_block_max(mo, part);
    if (threadIdx.x == 0) maxmet[row] = mm, maxov[row] = mo;
  }
}

// loss_assign_targets writes the assignment of each (image, anchor): FG,
// the first positive slot (0 on background), its label and box, and the
// target score rescaled so that each GT's best anchor scores its best
// CIoU. With M = 0 everything is 0.
SP_KERNEL void loss_assign_targets(const unsigned char* __restrict__ flags, const float* __restrict__ metric,
                                               const double* __restrict__ maxmet, const double* __restrict__ maxov,
                                               const int* __restrict__ labels, const float* __restrict__ gtb, int M,
                                               int A, int* __restrict__ fg, int* __restrict__ gtidx,
                                               int* __restrict__ alabels, float* __restrict__ aboxes,
                                               float* __restrict__ score, long long n) {
  SP_FOR(i, n) {
    long long b = i / A, a = i % A;
    if (M == 0) {
      fg[i] = gtidx[i] = alabels[i] = 0;
      for (int c = 0; c < 4; c++) aboxes[4 * i + c] = 0;
      score[i] = 0;
      continue;
    }
    int gi = 0, pos = 0;
    double norm = 0;
    for (int m = 0; m < M; m++) {
      long long bm = b * M + m;
      if (!(flags[bm * A + a] & LA_POS)) continue;
      if (!pos) gi = m;
      pos = 1;
      float num = (float)((double)metric[bm * A + a] * maxov[bm]);
      float den = (float)(maxmet[bm] + 1e-9);
      double v = (double)(num / den);
      if (v > norm) norm = v;
    }
    long long slot = b * M + gi;
    fg[i] = pos;
    gtidx[i] = gi;
    alabels[i] = labels[slot] > 0 ? labels[slot] : 0;
    for (int c = 0; c < 4; c++) aboxes[4 * i + c] = gtb[4 * slot + c];
    score[i] = pos ? (float)norm : 0.f;
  }
}

// loss_assign_count writes NumFG and ScoreSum (Σ target scores over the
// positives, in double): one block.
SP_KERNEL void loss_assign_count(const int* __restrict__ fg, const float* __restrict__ score,
                                             int* __restrict__ numfg, unsigned* __restrict__ scoresum, long long n) {
  __shared__ double part[SP_MAX_BLOCK];
  double c = 0, s = 0;
  for (long long i = threadIdx.x; i < n; i += blockDim.x)
    if (fg[i]) c += 1, s += (double)score[i];
  c = block_sum(c, part);
  s = block_sum(s, part);
  if (threadIdx.x == 0) {
    numfg[0] = (int)c;
    la_put_f64(scoresum, s);
  }
}

// la_s is S = max(ScoreSum, 1) from the device words.
SP_INLINE double la_s(const unsigned* scoresum) {
  double s = la_get_f64(scoresum);
  return s > 1 ? s : 1.0;
}

// loss_cls_rows is the class term of one (image, class) row per block:
// Σ BCE(x, t) with t the target score on a positive's label channel,
// written to rowpart as Σ BCE(x, 0) − Σ x·t (clsBox's order), and, when
// scoresG is not null, scoresG += (scale·ClsGain/S)·(σ(x) − t) with σ
// rounded to float32 as the Go code's probabilities are.
SP_KERNEL void loss_cls_rows(LaGeom g, LaGains gain, const float* __restrict__ scores,
                                         const int* __restrict__ fg, const int* __restrict__ alabels,
                                         const float* __restrict__ score, const unsigned* __restrict__ scoresum,
                                         float* __restrict__ scoresG, double* __restrict__ rowpart, long long rows) {
  __shared__ double part[SP_MAX_BLOCK];
  double gc = gain.cls / la_s(scoresum);
  for (long long row = blockIdx.x; row < rows; row += gridDim.x) {
    long long b = row / g.NC;
    int k = (int)(row % g.NC);
    double sl = 0, sp = 0;
    for (int a = threadIdx.x; a < g.A; a += blockDim.x) {
      long long ba = b * g.A + a;
      double x = scores[row * g.A + a], p;
      sl += la_bce0(x, &p);
      double tv = 0;
      if (fg[ba] && alabels[ba] == k) {
        tv = score[ba];
        sp += x * tv;
      }
      if (scoresG) scoresG[row * g.A + a] += (float)(gc * ((double)(float)p - tv));
    }
    sl = block_sum(sl, part);
    sp = block_sum(sp, part);
    if (threadIdx.x == 0) rowpart[row] = sl - sp;
  }
}

SP_INLINE double la_min_grad(double x, double y) { return x < y ? 1 : (x == y ? 0.5 : 0); }
SP_INLINE double la_max_grad(double x, double y) { return la_min_grad(y, x); }

// LaCiou is ciouState: one CIoU evaluation's intermediates.
struct LaCiou {
  double a[4], b[4];
  double w1, h1, w2, h2, iw_raw, ih_raw, iw, ih, inter, uni, iou, cw, ch, c2, rho2, sx, sy, dtheta, v, alpha;
};

// la_ciou is ciou: CIoU in double (alpha held constant for the gradient).
SP_INLINE double la_ciou(const double* a, const double* b, LaCiou* s) {
  const double eps = 1e-7;
  for (int j = 0; j < 4; j++) s->a[j] = a[j], s->b[j] = b[j];
  s->w1 = a[2] - a[0], s->h1 = a[3] - a[1] + eps;
  s->w2 = b[2] - b[0], s->h2 = b[3] - b[1] + eps;
  s->iw_raw = fmin(a[2], b[2]) - fmax(a[0], b[0]);
  s->ih_raw = fmin(a[3], b[3]) - fmax(a[1], b[1]);
  s->iw = fmax(s->iw_raw, 0.0), s->ih = fmax(s->ih_raw, 0.0);
  s->inter = s->iw * s->ih;
  s->uni = s->w1 * s->h1 + s->w2 * s->h2 - s->inter + eps;
  s->iou = s->inter / s->uni;
  s->cw = fmax(a[2], b[2]) - fmin(a[0], b[0]);
  s->ch = fmax(a[3], b[3]) - fmin(a[1], b[1]);
  s->c2 = s->cw * s->cw + s->ch * s->ch + eps;
  s->sx = b[0] + b[2] - a[0] - a[2];
  s->sy = b[1] + b[3] - a[1] - a[3];
  s->rho2 = (s->sx * s->sx + s->sy * s->sy) / 4;
  s->dtheta = la_atan(s->w2 / s->h2) - la_atan(s->w1 / s->h1);
  s->v = LA_K4 * s->dtheta * s->dtheta;
  s->alpha = s->v / (s->v - s->iou + (1 + eps));
  return s->iou - (s->rho2 / s->c2 + s->v * s->alpha);
}

// la_ciou_grad is ciouState.grad: d(ciou)/d(a) times dc.
SP_INLINE void la_ciou_grad(const LaCiou* s, double dc, double* g) {
  const double* a = s->a;
  const double* b = s->b;
  for (int j = 0; j < 4; j++) g[j] = 0;
  double dinter = dc * (1 / s->uni + s->inter / (s->uni * s->uni));
  double duni = -dc * s->inter / (s->uni * s->uni);
  double dw1 = duni * s->h1;
  double dh1 = duni * s->w1;
  if (s->iw_raw >= 0) {
    double diw = dinter * s->ih;
    g[2] += diw * la_min_grad(a[2], b[2]);
    g[0] -= diw * la_max_grad(a[0], b[0]);
  }
  if (s->ih_raw >= 0) {
    double dih = dinter * s->iw;
    g[3] += dih * la_min_grad(a[3], b[3]);
    g[1] -= dih * la_max_grad(a[1], b[1]);
  }
  double drho2 = -dc / s->c2;
  double dc2 = dc * s->rho2 / (s->c2 * s->c2);
  double dcw = dc2 * 2 * s->cw;
  double dch = dc2 * 2 * s->ch;
  g[2] += dcw * la_max_grad(a[2], b[2]);
  g[0] -= dcw * la_min_grad(a[0], b[0]);
  g[3] += dch * la_max_grad(a[3], b[3]);
  g[1] -= dch * la_min_grad(a[1], b[1]);
  double gx = -drho2 * s->sx / 2;
  double gy = -drho2 * s->sy / 2;
  g[0] += gx;
  g[2] += gx;
  g[1] += gy;
  g[3] += gy;
  double dv = -dc * s->alpha;
  double k = LA_K8 * s->dtheta;
  double den = s->w1 * s->w1 + s->h1 * s->h1;
  dw1 += dv * (-k * s->h1 / den);
  dh1 += dv * (k * s->w1 / den);
  g[2] += dw1;
  g[0] -= dw1;
  g[3] += dh1;
  g[1] -= dh1;
}

// loss_box is the CIoU box term and the reg_max=1 distance term over the
// positives (clsBox's second loop): each block writes its Σ (1−CIoU)·w
// and Σ L1/4·w to partial[2·block], [2·block+1]; with boxesG not null it
// adds their gradients, (scale·gain/S)-scaled, to the raw distances.
SP_KERNEL void loss_box(LaGeom g, LaGains gain, const float* __restrict__ boxes,
                                    const int* __restrict__ fg, const float* __restrict__ aboxes,
                                    const float* __restrict__ score, const unsigned* __restrict__ scoresum,
                                    float* __restrict__ boxesG, double* __restrict__ partial, long long n) {
  __shared__ double part[SP_MAX_BLOCK];
  double S = la_s(scoresum);
  double gbox = gain.box / S, gdist = gain.dist / S;
  double norms[4] = {(double)g.img_w, (double)g.img_h, (double)g.img_w, (double)g.img_h};
  double box = 0, dist = 0;
  SP_FOR(ba, n) {
    if (!fg[ba]) continue;
    long long b = ba / g.A;
    int a = (int)(ba % g.A);
    double w = score[ba];
    float gx, gy, st;
    la_anchor(g, a, &gx, &gy, &st);
    double ax = gx, ay = gy;
    double raw[4], tgt[4];
    for (int j = 0; j < 4; j++) {
      raw[j] = boxes[(b * 4 + j) * g.A + a];
      tgt[j] = (double)(aboxes[4 * ba + j] / st);
    }
    double pred[4] = {ax - raw[0], ay - raw[1], ax + raw[2], ay + raw[3]};
    LaCiou cs;
    double ci = la_ciou(pred, tgt, &cs);
    box += (1 - ci) * w;
    double tdist[4] = {ax - tgt[0], ay - tgt[1], tgt[2] - ax, tgt[3] - ay};
    double l1 = 0, sign[4];
    for (int j = 0; j < 4; j++) {
      double d = (raw[j] - tdist[j]) * (double)st / norms[j];
      l1 += fabs(d);
      sign[j] = d > 0 ? 1 : (d < 0 ? -1 : 0);
    }
    dist += l1 / 4 * w;
    if (boxesG) {
      double gp[4];
      la_ciou_grad(&cs, -gbox * w, gp);
      double draw[4] = {-gp[0], -gp[1], gp[2], gp[3]};
      for (int j = 0; j < 4; j++) {
        draw[j] += gdist * w / 4 * sign[j] * (double)st / norms[j];
        boxesG[(b * 4 + j) * g.A + a] += (float)draw[j];
      }
    }
  }
  box = block_sum(box, part);
  dist = block_sum(dist, part);
  if (threadIdx.x == 0) partial[2 * blockIdx.x] = box, partial[2 * blockIdx.x + 1] = dist;
}

// loss_clsbox_finish sums the class rows and the box blocks' partials in
// a fixed order and writes LossClsBox's terms: Σ BCE, Σ (1−CIoU)·w and
// Σ L1/4·w, as float64 words. One block.
SP_KERNEL void loss_clsbox_finish(const double* __restrict__ rowpart, int rows,
                                              const double* __restrict__ partial, int blocks,
                                              unsigned* __restrict__ terms) {
  __shared__ double part[SP_MAX_BLOCK];
  double c = 0, bx = 0, d = 0;
  for (int i = threadIdx.x; i < rows; i += blockDim.x) c += rowpart[i];
  for (int i = threadIdx.x; i < blocks; i += blockDim.x) bx += partial[2 * i], d += partial[2 * i + 1];
  c = block_sum(c, part);
  bx = block_sum(bx, part);
  d = block_sum(d, part);
  if (threadIdx.x == 0) {
    la_put_f64(terms, c);
    la_put_f64(terms + 2, bx);
    la_put_f64(terms + 4, d);
  }
}

// loss_combine forms the result words (the one-to-one items, then the
// total) from the 18 terms words and both branches' NumFG and ScoreSum,
// as Config.combine: one thread.
SP_KERNEL void loss_combine(LaCombine c, const unsigned* __restrict__ terms, const int* __restrict__ numfg0,
                                        const unsigned* __restrict__ scoresum0, const int* __restrict__ numfg1,
                                        const unsigned* __restrict__ scoresum1, unsigned* __restrict__ res) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  const int* nfg[2] = {numfg0, numfg1};
  const unsigned* ss[2] = {scoresum0, scoresum1};
  double sem = la_get_f64(terms + 16);
  double vec[2][5];
  for (int i = 0; i < 2; i++) {
    const unsigned* t = terms + 8 * i;
    double S = la_s(ss[i]);
    double* v = vec[i];
    for (int k = 0; k < 5; k++) v[k] = 0;
    v[2] = c.cls_gain * la_get_f64(t) / S;  // cls
    if (nfg[i][0] == 0) continue;
    v[0] = c.box_gain * la_get_f64(t + 2) / S;  // box
    v[3] = c.dfl_gain * la_get_f64(t + 4) / S;  // dfl
    v[1] = c.box_gain * la_get_f64(t + 6);      // seg
    v[4] = c.box_gain * sem;                    // semseg
  }
  double B = c.B, total = 0;
  for (int k = 0; k < 5; k++) {
    la_put_f64(res + 2 * k, vec[1][k]);
    total += c.o2m * (vec[0][k] * B) + c.o2o * (vec[1][k] * B);
  }
  la_put_f64(res + 10, total);
}

// loss_zero_without_fg zeroes x when the branch has no positive (the
// semantic gradient Forward does not send then).
SP_KERNEL void loss_zero_without_fg(const int* __restrict__ numfg, float* __restrict__ x, long long n) {
  if (numfg[0] != 0) return;
  SP_FOR(i, n) x[i] = 0;
}
