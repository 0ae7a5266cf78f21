// cpu_kernels.h — float loops the CPU path fuses by hand: exp, GELU, row softmax pieces.
//
// Each is one pass over contiguous memory, single-threaded (callers split work across threads),
// built several times for x86-64 feature levels (AVX-512, AVX2+FMA, baseline) and picked at load
// time. exp is Cephes' single-precision polynomial (about 1 ulp on [-87, 88]; inputs below -87
// give ~1e-38 instead of 0, which no softmax or sigmoid here can tell from 0).
#pragma once

#include <cstdint>

namespace trainscope::runtime::kernels {

float maxOf(const float* x, int64_t n);
// y = exp(x - shift); returns Σ y. y may alias x.
float expShiftSum(const float* x, float* y, int64_t n, float shift);
void scale(float* x, int64_t n, float a);
float dot(const float* a, const float* b, int64_t n);
// x = p · (x - d): the softmax backward of one row, dP in, dS out.
void softmaxBackwardRow(float* x, const float* p, int64_t n, float d);

// GELU, tanh approximation (as at::gelu(x, "tanh")): y = x · σ(2u), u = √(2/π)(x + 0.044715x³).
void geluTanh(const float* x, float* y, int64_t n);
// dx = dy · (σ + 2x·σ(1-σ)·u'), σ = σ(2u), u' = √(2/π)(1 + 3·0.044715x²). dx may alias dy.
void geluTanhBackward(const float* x, const float* dy, float* dx, int64_t n);

// out = a + b (b may be null: out = a); returns Σ out² in double (float partial sums over blocks of
// 1024). out may alias a (or b). The lanes' gradient sum and the clipping norm in one pass.
double addAndSumSquares(float* out, const float* a, const float* b, int64_t n);

// RMSNorm of one row: y = w · (x · r) with r = 1/√(Σx²/n + eps), which it returns.
float rmsNormRow(const float* x, const float* w, float* y, int64_t n, float eps);
// Its backward: dx = r·(w∘dy) − x·r³·Σ(w∘dy∘x)/n, and dw += dy∘x·r (the caller's partial sum).
void rmsNormBackwardRow(const float* x, const float* w, const float* dy, float r, float* dx, float* dw, int64_t n);

// RoPE of one head (HF rotate_half, D = 2·half): y1 = x1·c − x2·s, y2 = x2·c + x1·s; with `inverse`
// the rotation back (s negated), which is its backward. y must not alias x.
void ropeRow(const float* x, float* y, const float* c, const float* s, int64_t half, bool inverse);

// SwiGLU of one row gu = [gate (n); up (n)]: y = silu(gate)·up, silu(g) = g / (1 + exp(−g)).
void swiglu(const float* gu, float* y, int64_t n);
// Its backward: dgate = dy·up·σ(1 + g(1 − σ)), dup = dy·silu(g), into dgu = [dgate; dup].
void swigluBackward(const float* gu, const float* dy, float* dgu, int64_t n);

}  // namespace trainscope::runtime::kernels
