// cpu_kernels.cpp — see cpu_kernels.h. Plain loops written so that GCC vectorises them; reductions
// keep 16 partial lanes so no reassociation flag is needed. Built with -O3 -fno-math-errno.
#include "cpu/cpu_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define TS_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TS_CLONES
#endif

namespace trainscope::runtime::kernels {
namespace {

constexpr int kLanes = 16;

// Cephes expf: exp(x) = 2^k · exp(r), |r| <= ln2/2, Cody–Waite split of ln 2.
inline float expApprox(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float k = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - k * 0.693359375f + k * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int32_t bits = (int32_t(k) + 127) << 23;
  float two_k;
  std::memcpy(&two_k, &bits, sizeof two_k);
  return e * two_k;
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCoef = 0.044715f;

inline float sigmoid2u(float x) {  // σ(2u) = 1 / (1 + exp(-2u))
  const float u = kSqrt2OverPi * (x + kCoef * x * x * x);
  return 1.0f / (1.0f + expApprox(-2.0f * u));
}

}  // namespace

TS_CLONES float maxOf(const float* x, int64_t n) {
  float acc[kLanes];
  for (int j = 0; j < kLanes; ++j) acc[j] = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] = acc[j] > x[i + j] ? acc[j] : x[i + j];
  float m = -INFINITY;
  for (int j = 0; j < kLanes; ++j) m = std::max(m, acc[j]);
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

TS_CLONES float expShiftSum(const float* x, float* y, int64_t n, float shift) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float e = expApprox(x[i + j] - shift);
      y[i + j] = e;
      acc[j] += e;
    }
  float s = 0;
  for (; i < n; ++i) {
    y[i] = expApprox(x[i] - shift);
    s += y[i];
  }
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

TS_CLONES void scale(float* x, int64_t n, float a) {
  for (int64_t i = 0; i < n; ++i) x[i] *= a;
}

TS_CLONES float dot(const float* a, const float* b, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += a[i + j] * b[i + j];
  float s = 0;
  for (; i < n; ++i) s += a[i] * b[i];
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  return s;
}

TS_CLONES void softmaxBackwardRow(float* x, const float* p, int64_t n, float d) {
  for (int64_t i = 0; i < n; ++i) x[i] = p[i] * (x[i] - d);
}

TS_CLONES void geluTanh(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * sigmoid2u(x[i]);
}

TS_CLONES void geluTanhBackward(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i], s = sigmoid2u(v);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCoef * v * v);
    dx[i] = dy[i] * (s + 2.0f * v * s * (1.0f - s) * du);
  }
}

TS_CLONES double addAndSumSquares(float* out, const float* a, const float* b, int64_t n) {
  constexpr int64_t kBlockElems = 1024;
  double total = 0;
  for (int64_t i0 = 0; i0 < n; i0 += kBlockElems) {
    const int64_t m = std::min(kBlockElems, n - i0);
    float acc[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= m; i += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const float v = b ? a[i0 + i + j] + b[i0 + i + j] : a[i0 + i + j];
        out[i0 + i + j] = v;
        acc[j] += v * v;
      }
    float s = 0;
    for (; i < m; ++i) {
      const float v = b ? a[i0 + i] + b[i0 + i] : a[i0 + i];
      out[i0 + i] = v;
      s += v * v;
    }
    for (int j = 0; j < kLanes; ++j) s += acc[j];
    total += double(s);
  }
  return total;
}

TS_CLONES float rmsNormRow(const float* x, const float* w, float* y, int64_t n, float eps) {
  const float r = 1.0f / std::sqrt(dot(x, x, n) / float(n) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * r);
  return r;
}

TS_CLONES void rmsNormBackwardRow(const float* x, const float* w, const float* dy, float r, float* dx, float* dw,
                                  int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) acc[j] += w[i + j] * dy[i + j] * x[i + j];
  float s = 0;
  for (; i < n; ++i) s += w[i] * dy[i] * x[i];
  for (int j = 0; j < kLanes; ++j) s += acc[j];
  const float c = r * r * r * s / float(n);
  for (i = 0; i < n; ++i) {
    dx[i] = r * (w[i] * dy[i]) - x[i] * c;
    dw[i] += dy[i] * (x[i] * r);
  }
}

TS_CLONES void ropeRow(const float* x, float* y, const float* c, const float* s, int64_t half, bool inverse) {
  const float sign = inverse ? -1.0f : 1.0f;
  for (int64_t i = 0; i < half; ++i) {
    const float x1 = x[i], x2 = x[i + half], si = sign * s[i];
    y[i] = x1 * c[i] - x2 * si;
    y[i + half] = x2 * c[i] + x1 * si;
  }
}

TS_CLONES void swiglu(const float* gu, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gu[i];
    y[i] = g / (1.0f + expApprox(-g)) * gu[n + i];
  }
}

TS_CLONES void swigluBackward(const float* gu, const float* dy, float* dgu, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gu[i], u = gu[n + i], s = 1.0f / (1.0f + expApprox(-g));
    dgu[i] = dy[i] * u * (s * (1.0f + g * (1.0f - s)));
    dgu[n + i] = dy[i] * (g * s);
  }
}

}  // namespace trainscope::runtime::kernels
