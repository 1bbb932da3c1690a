// Elementwise kernels: the backend's Unary and Binary functions with their
// gradients, scale/add-scalar/clamp, fill, the loss's BCE with logits and
// the uint8 → float image conversion. Backward kernels accumulate (dx +=).
#include "shim.h"

// Unary op codes: backend.Unary's order.
enum { U_SILU, U_SIGMOID, U_RELU, U_EXP, U_LOG, U_ABS, U_NEG, U_SQRT, U_SQUARE, U_ATAN, U_TANH };

SP_KERNEL void unary_forward(int op, const float* __restrict__ x, float* __restrict__ y, long long n) {
  SP_FOR(i, n) {
    float v = x[i], r;
    switch (op) {
      case U_SILU: r = sp_act(ACT_SILU, v); break;
      case U_SIGMOID: r = sp_sigmoid(v); break;
      case U_RELU: r = v > 0.f ? v : 0.f; break;
      case U_EXP: r = expf(v); break;
      case U_LOG: r = logf(v); break;
      case U_ABS: r = fabsf(v); break;
      case U_NEG: r = -v; break;
      case U_SQRT: r = sqrtf(v); break;
      case U_SQUARE: r = v * v; break;
      case U_ATAN: r = atanf(v); break;
      default: r = tanhf(v); break;
    }
    y[i] = r;
  }
}

SP_KERNEL void unary_backward(int op, const float* __restrict__ x, const float* __restrict__ y,
                                          const float* __restrict__ dy, float* __restrict__ dx, long long n) {
  SP_FOR(i, n) {
    float v = x[i], g = dy[i], d;
    switch (op) {
      case U_SILU: d = sp_act_grad(ACT_SILU, g, v); break;
      case U_SIGMOID: d = g * y[i] * (1.f - y[i]); break;
      case U_RELU: d = v > 0.f ? g : 0.f; break;
      case U_EXP: d = g * y[i]; break;
      case U_LOG: d = g / v; break;
      case U_ABS: d = v > 0.f ? g : (v < 0.f ? -g : 0.f); break;
      case U_NEG: d = -g; break;
      case U_SQRT: d = g * 0.5f / y[i]; break;
      case U_SQUARE: d = g * 2.f * v; break;
      case U_ATAN: d = g / (1.f + v * v); break;
      default: d = g * (1.f - y[i] * y[i]); break;
    }
    dx[i] += d;
  }
}

// Binary op codes: backend.Binary's order.
enum { B_ADD, B_SUB, B_MUL, B_DIV, B_MAX, B_MIN };

SP_INLINE void bcast_offsets(const Bcast& s, long long o, long long* ia, long long* ib) {
  long long a = 0, b = 0;
  for (int k = s.nd - 1; k >= 0; k--) {
    long long idx = o % s.shape[k];
    o /= s.shape[k];
    a += idx * s.sa[k];
    b += idx * s.sb[k];
  }
  *ia = a;
  *ib = b;
}

SP_KERNEL void binary_forward(int op, Bcast s, const float* __restrict__ a, const float* __restrict__ b,
                                          float* __restrict__ y, long long n) {
  SP_FOR(o, n) {
    long long ia, ib;
    bcast_offsets(s, o, &ia, &ib);
    float x = a[ia], z = b[ib], r;
    switch (op) {
      case B_ADD: r = x + z; break;
      case B_SUB: r = x - z; break;
      case B_MUL: r = x * z; break;
      case B_DIV: r = x / z; break;
      case B_MAX: r = x > z ? x : z; break;  // Go's max: NaN handling aside, the larger
      default: r = x < z ? x : z; break;
    }
    y[o] = r;
  }
}

// binary_backward accumulates into da and db (either may be null). An
// operand stretched over some axis (stretchA/stretchB) receives several
// contributions per element, so it adds atomically; otherwise each
// element has one writer.
SP_KERNEL void binary_backward(int op, Bcast s, const float* __restrict__ a, const float* __restrict__ b,
                                           const float* __restrict__ dy, float* da, float* db, int stretchA,
                                           int stretchB, long long n) {
  SP_FOR(o, n) {
    long long ia, ib;
    bcast_offsets(s, o, &ia, &ib);
    float g = dy[o], x = a[ia], z = b[ib], dA = 0.f, dB = 0.f;
    switch (op) {
      case B_ADD: dA = g; dB = g; break;
      case B_SUB: dA = g; dB = -g; break;
      case B_MUL: dA = g * z; dB = g * x; break;
      case B_DIV: dA = g / z; dB = -g * x / (z * z); break;
      default:
        if (x == z) {
          dA = g / 2.f;
          dB = g / 2.f;
        } else if ((x > z) == (op == B_MAX)) {
          dA = g;
        } else {
          dB = g;
        }
    }
    if (da) {
      if (stretchA) atomicAdd(&da[ia], dA); else da[ia] += dA;
    }
    if (db) {
      if (stretchB) atomicAdd(&db[ib], dB); else db[ib] += dB;
    }
  }
}

// scale writes y = s·x; with accumulate it adds instead (Scale's backward).
SP_KERNEL void scale(const float* __restrict__ x, float* __restrict__ y, float s, int accumulate, long long n) {
  SP_FOR(i, n) {
    float v = x[i] * s;
    y[i] = accumulate ? y[i] + v : v;
  }
}

SP_KERNEL void add_scalar(const float* __restrict__ x, float* __restrict__ y, float s, long long n) {
  SP_FOR(i, n) y[i] = x[i] + s;
}

SP_KERNEL void clamp_forward(const float* __restrict__ x, float* __restrict__ y, float lo, float hi, long long n) {
  SP_FOR(i, n) {
    float v = x[i];
    v = v > lo ? v : lo;
    y[i] = v < hi ? v : hi;
  }
}

// The gradient passes where lo ≤ x ≤ hi, boundaries included (PyTorch).
SP_KERNEL void clamp_backward(const float* __restrict__ x, const float* __restrict__ dy, float* __restrict__ dx,
                                          float lo, float hi, long long n) {
  SP_FOR(i, n) {
    float v = x[i];
    if (v >= lo && v <= hi) dx[i] += dy[i];
  }
}

SP_KERNEL void fill(float* __restrict__ y, float v, long long n) {
  SP_FOR(i, n) y[i] = v;
}

// bce_logits_forward: max(x,0) − x·t + log(1+e^−|x|), unreduced.
SP_KERNEL void bce_logits_forward(const float* __restrict__ x, const float* __restrict__ t, float* __restrict__ y,
                                              long long n) {
  SP_FOR(i, n) {
    float v = x[i];
    y[i] = (v > 0.f ? v : 0.f) - v * t[i] + log1pf(expf(-fabsf(v)));
  }
}

// bce_logits_backward accumulates dx += dy·(σ(x) − t) and dt −= dy·x
// (either output may be null).
SP_KERNEL void bce_logits_backward(const float* __restrict__ x, const float* __restrict__ t,
                                               const float* __restrict__ dy, float* dx, float* dt, long long n) {
  SP_FOR(i, n) {
    float g = dy[i];
    if (dx) dx[i] += g * (sp_sigmoid(x[i]) - t[i]);
    if (dt) dt[i] -= g * x[i];
  }
}

// image_to_float widens uint8 pixels (or mask bytes) to floats times
// scale: the model's input with scale 1/255.
SP_KERNEL void image_to_float(const unsigned char* __restrict__ px, float* __restrict__ y, float scale,
                                          long long n) {
  SP_FOR(i, n) y[i] = (float)px[i] * scale;
}
