// Optimiser steps (trainer/optim): SGD with Nesterov momentum and L2
// decay, AdamW, MuSGD's elementwise parts (momentum, Nesterov blend,
// Newton–Schulz's scalings; its products run on cuBLAS), and the EMA.
// Scalars derived from the step count are computed on the host in double
// and passed as float, exactly as the CPU code rounds them.
#include "shim.h"

// sgd_nesterov: g += wd·p; buf = first ? g : mu·buf + g; p −= step·(g + mu·buf).
extern "C" __global__ void sgd_nesterov(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ buf,
                                        float step, float mu, float wd, int first, long long n) {
  SP_FOR(i, n) {
    float g = grad[i];
    if (wd != 0.f) g += wd * p[i];
    float b = first ? g : mu * buf[i] + g;
    buf[i] = b;
    p[i] -= step * (g + mu * b);
  }
}

// adamw_step: p *= decay; m, v moments; p −= step_size·m/(√v·inv + eps).
extern "C" __global__ void adamw_step(float* __restrict__ p, const float* __restrict__ grad, float* __restrict__ m,
                                      float* __restrict__ v, float decay, float b1, float b2, float step_size, float inv,
                                      float eps, long long n) {
  SP_FOR(i, n) {
    float g = grad[i];
    float pi = p[i] * decay;
    float mi = b1 * m[i] + (1.f - b1) * g;
    float vi = b2 * v[i] + (1.f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float den = (float)sqrt((double)vi) * inv + eps;
    p[i] = pi - step_size * mi / den;
  }
}

// muon_momentum: m += (1−mu)·(g − m); u = g + mu·(m − g) (Nesterov).
extern "C" __global__ void muon_momentum(const float* __restrict__ grad, float* __restrict__ m, float* __restrict__ u,
                                         float w, float mu, long long n) {
  SP_FOR(i, n) {
    float g = grad[i];
    float mi = m[i] + w * (g - m[i]);
    m[i] = mi;
    u[i] = g + mu * (mi - g);
  }
}

// axpby writes y = a·y + b·x (Newton–Schulz's X = aX + T, B = bA + cA²,
// and the Muon update p −= step·O with a = 1, b = −step).
extern "C" __global__ void axpby(const float* __restrict__ x, float* __restrict__ y, float a, float b, long long n) {
  SP_FOR(i, n) y[i] = a * y[i] + b * x[i];
}

// scale_inv_norm writes y = x / (norm[0] + eps), norm a device scalar.
extern "C" __global__ void scale_inv_norm(const float* __restrict__ x, float* __restrict__ y,
                                          const float* __restrict__ norm, float eps, long long n) {
  float inv = (float)(1.0 / ((double)norm[0] + (double)eps));
  SP_FOR(i, n) y[i] = x[i] * inv;
}

// ema_update: ema = ema·d + (1 − d)·x.
extern "C" __global__ void ema_update(float* __restrict__ ema, const float* __restrict__ x, float d, long long n) {
  float w = 1.f - d;
  SP_FOR(i, n) ema[i] = ema[i] * d + w * x[i];
}
