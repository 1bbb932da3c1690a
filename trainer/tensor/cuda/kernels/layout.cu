// Layout kernels: strided copies (permute, concat, split, slice as
// gathers), nearest upsampling, per-channel bias and affine, max pooling
// with PyTorch's winner rule, and the windowed-mask expansion.
#include "shim.h"

SP_INLINE long long strided_offset(const Strided& s, long long o) {
  long long off = 0;
  for (int k = s.nd - 1; k >= 0; k--) {
    off += (o % s.shape[k]) * s.stride[k];
    o /= s.shape[k];
  }
  return off;
}

// strided_copy gathers y[o] = x[offset(o)]; with scatter it adds
// x[offset(o)] += y[o] instead (the gather's backward: the offsets of a
// permutation or a slice never repeat, so each input has one writer).
SP_KERNEL void strided_copy(Strided s, float* x, float* y, int scatter, long long n) {
  SP_FOR(o, n) {
    long long i = strided_offset(s, o);
    if (scatter) x[i] += y[o]; else y[o] = x[i];
  }
}

// strided_walk is backend.Strided's walk: the first w.outer axes of
// w.shape run in parallel, one thread per index, and the remaining inner
// axes (those the destination does not move along, so a sum when
// accumulating) run serially in row-major order inside the thread, so
// every destination element has one writer and a fixed summation order.
// Without accumulate the last element of the inner walk is what stays, as
// in the reference's row-major walk.
SP_KERNEL void strided_walk(Walk w, const float* src, float* dst, int accumulate, long long n) {
  long long inner = 1;
  for (int k = w.outer; k < w.nd; k++) inner *= w.shape[k];
  SP_FOR(o, n) {
    long long so = 0, d = 0, r = o;
    for (int k = w.outer - 1; k >= 0; k--) {
      long long i = r % w.shape[k];
      r /= w.shape[k];
      so += i * w.src[k];
      d += i * w.dst[k];
    }
    if (inner == 1) {
      dst[d] = accumulate ? dst[d] + src[so] : src[so];
      continue;
    }
    float acc = accumulate ? dst[d] : 0.f;
    float last = 0.f;
    for (long long j = 0; j < inner; j++) {
      long long s2 = so, q = j;
      for (int k = w.nd - 1; k >= w.outer; k--) {
        s2 += (q % w.shape[k]) * w.src[k];
        q /= w.shape[k];
      }
      acc += src[s2];
      last = src[s2];
    }
    dst[d] = accumulate ? acc : last;
  }
}

// upsample_forward repeats every pixel of nc planes of h×w into f×f.
SP_KERNEL void upsample_forward(const float* __restrict__ x, float* __restrict__ y, int h, int w, int f,
                                            long long n) {
  long long H = (long long)h * f, W = (long long)w * f;
  SP_FOR(o, n) {
    long long pl = o / (H * W), r = o % (H * W);
    long long oy = r / W, ox = r % W;
    y[o] = x[pl * h * w + (oy / f) * w + ox / f];
  }
}

// upsample_backward adds to each input pixel the sum of its f×f block
// (a gather: one writer per input element).
SP_KERNEL void upsample_backward(const float* __restrict__ dy, float* __restrict__ dx, int h, int w, int f,
                                             long long n) {
  long long W = (long long)w * f;
  SP_FOR(i, n) {
    long long pl = i / ((long long)h * w), r = i % ((long long)h * w);
    long long iy = r / w, ix = r % w;
    const float* src = dy + pl * h * f * W + iy * f * W + ix * f;
    float s = 0.f;
    for (int a = 0; a < f; a++)
      for (int b = 0; b < f; b++) s += src[a * W + b];
    dx[i] += s;
  }
}

// bias_add adds b[c] to every element of channel c of an N×C×HW tensor.
SP_KERNEL void bias_add(float* __restrict__ y, const float* __restrict__ b, int c, long long hw, long long n) {
  SP_FOR(i, n) y[i] += b[(i / hw) % c];
}

// bias_grad adds Σ_{n,hw} dy to db[c]: one block per channel (grid.x = C),
// a fixed-order tree reduction in double, so the result does not depend
// on scheduling. blockDim.x must be a power of two ≤ SP_MAX_BLOCK.
SP_KERNEL void bias_grad(const float* __restrict__ dy, float* __restrict__ db, int nb, int c, long long hw) {
  __shared__ double part[SP_MAX_BLOCK];
  for (int ch = blockIdx.x; ch < c; ch += gridDim.x) {
    double s = 0;
    for (int b = 0; b < nb; b++) {
      const float* p = dy + ((long long)b * c + ch) * hw;
      for (long long j = threadIdx.x; j < hw; j += blockDim.x) s += p[j];
    }
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned k = blockDim.x / 2; k > 0; k /= 2) {
      if (threadIdx.x < k) part[threadIdx.x] += part[threadIdx.x + k];
      __syncthreads();
    }
    if (threadIdx.x == 0) db[ch] += (float)part[0];
    __syncthreads();
  }
}

// channel_affine writes y = act(x·scale[c] + shift[c]) (batch-norm in
// eval mode); a null scale is a bias add, and y may be x.
SP_KERNEL void channel_affine(const float* x, const float* __restrict__ scale,
                                          const float* __restrict__ shift, float* y, int c, long long hw,
                                          long long n, int act) {
  SP_FOR(i, n) {
    int ch = (int)((i / hw) % c);
    y[i] = sp_act(act, scale ? x[i] * scale[ch] + shift[ch] : x[i] + shift[ch]);
  }
}

// maxpool_forward takes the first maximum in row-major window order and
// records its index within the N×C plane; padding never wins and a NaN
// wins at once, as the CPU reference.
SP_KERNEL void maxpool_forward(Pool2d p, const float* __restrict__ x, float* __restrict__ y,
                                           int* __restrict__ arg, long long n) {
  SP_FOR(o, n) {
    long long nc = o / ((long long)p.oh * p.ow);
    int r = (int)(o % ((long long)p.oh * p.ow));
    int oy = r / p.ow, ox = r % p.ow;
    int y0 = oy * p.stride - p.pad, x0 = ox * p.stride - p.pad;
    int y1 = y0 + p.k < p.h ? y0 + p.k : p.h, x1 = x0 + p.k < p.w ? x0 + p.k : p.w;
    y0 = y0 > 0 ? y0 : 0;
    x0 = x0 > 0 ? x0 : 0;
    const float* xp = x + nc * p.h * p.w;
    float best = -INFINITY;
    int bi = -1;
    for (int iy = y0; iy < y1; iy++) {
      for (int ix = x0; ix < x1; ix++) {
        float v = xp[iy * p.w + ix];
        if (v > best || bi < 0 || v != v) {
          best = v;
          bi = iy * p.w + ix;
          if (v != v) break;  // ends the row only, as the reference's loop does
        }
      }
    }
    y[o] = best;
    arg[o] = bi;
  }
}

// maxpool_backward adds to each input the gradients of the outputs whose
// recorded winner it is: a gather over the windows that contain it, so
// there is one writer per input and no atomics.
SP_KERNEL void maxpool_backward(Pool2d p, const float* __restrict__ dy, const int* __restrict__ arg,
                                            float* __restrict__ dx, long long n) {
  SP_FOR(i, n) {
    long long nc = i / ((long long)p.h * p.w);
    int pos = (int)(i % ((long long)p.h * p.w));
    int iy = pos / p.w, ix = pos % p.w;
    // outputs oy with oy·stride − pad ≤ iy < oy·stride − pad + k
    int oy0 = iy + p.pad - p.k + 1, ox0 = ix + p.pad - p.k + 1;
    oy0 = oy0 > 0 ? (oy0 + p.stride - 1) / p.stride : 0;
    ox0 = ox0 > 0 ? (ox0 + p.stride - 1) / p.stride : 0;
    int oy1 = (iy + p.pad) / p.stride, ox1 = (ix + p.pad) / p.stride;
    oy1 = oy1 < p.oh - 1 ? oy1 : p.oh - 1;
    ox1 = ox1 < p.ow - 1 ? ox1 : p.ow - 1;
    const long long base = nc * p.oh * p.ow;
    // Added one by one in output order, and only where this input won, as
    // the reference scatters them: the same bits (−0 stays −0).
    float s = dx[i];
    bool hit = false;
    for (int oy = oy0; oy <= oy1; oy++)
      for (int ox = ox0; ox <= ox1; ox++) {
        long long o = base + oy * p.ow + ox;
        if (arg[o] == pos) {
          s += dy[o];
          hit = true;
        }
      }
    if (hit) dx[i] = s;
  }
}

// expand_windows writes the dense {0,1} stack of nwin masks of rows×cols
// from their windows (raster.Expand): inside a window the cell is the
// window's byte, outside 0. The windows were validated on the host.
SP_KERNEL void expand_windows(const Window* __restrict__ wins, const unsigned char* __restrict__ data,
                                          unsigned char* __restrict__ dst, int rows, int cols, long long n) {
  long long plane = (long long)rows * cols;
  SP_FOR(o, n) {
    const Window wi = wins[o / plane];
    int r = (int)((o % plane) / cols), c = (int)(o % cols);
    int wy = r - wi.y0, wx = c - wi.x0;
    dst[o] = (wy >= 0 && wy < wi.h && wx >= 0 && wx < wi.w) ? data[wi.off + (long long)wy * wi.w + wx] : 0;
  }
}

// index_select gathers rows along an axis (torch.index_select): y viewed
// as outer×m×inner takes y[o,k,j] = x[o,idx[k],j] from x as outer×d×inner.
// With scatter it adds instead, x[o,idx[k],j] += y[o,k,j]; indices may
// repeat, so the scatter adds atomically.
SP_KERNEL void index_select(float* x, float* y, const int* __restrict__ idx, int d, int m, long long inner,
                                        int scatter, long long n) {
  SP_FOR(t, n) {
    long long o = t / ((long long)m * inner), k = (t / inner) % m, j = t % inner;
    long long src = (o * d + idx[k]) * inner + j;
    if (scatter) atomicAdd(&x[src], y[t]); else y[t] = x[src];
  }
}
