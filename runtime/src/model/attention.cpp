// attention.cpp — norms, rotary positions and grouped-query K/V (see attention.h).
#include "model/attention.h"

#include <ATen/ATen.h>

#include "cpu/cpu_ops.h"
#include "cpu/decoder_ops.h"

#include <cmath>
#include <limits>
#include <vector>

namespace trainscope::runtime {

at::Tensor normForward(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const BlockArch& a) {
  const int64_t C = x.size(-1);
  if (!a.rms_norm) return at::layer_norm(x, {C}, w, b, a.norm_eps);
  return cpu_ops::rmsNorm(x, w, a.norm_eps);
}

at::Tensor ropeInverseFrequencies(const BlockArch& a, int64_t D) {
  // As transformers computes it: in fp32, base ** (arange(0, D, 2) / D).
  const at::Tensor i = at::arange(0, D, 2, at::TensorOptions().dtype(at::kLong)).to(at::kFloat);
  at::Tensor inv = 1.0 / at::pow(a.rope_theta, i / double(D));  // (D/2)
  const workloads::RopeScaling& s = a.rope_scaling;
  if (s.factor <= 0) return inv;
  // Llama 3: wavelengths longer than old_context/low_freq_factor are divided by factor, shorter than
  // old_context/high_freq_factor kept, and those between interpolated smoothly.
  const double old_ctx = double(s.original_max_position_embeddings);
  const double low_wavelen = old_ctx / s.low_freq_factor, high_wavelen = old_ctx / s.high_freq_factor;
  const at::Tensor wavelen = 2 * M_PI / inv;
  at::Tensor scaled = at::where(wavelen > low_wavelen, inv / s.factor, inv);
  const at::Tensor smooth = (old_ctx / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
  return at::where(medium, smoothed, scaled);
}

RopeTable ropeHalfTable(const at::Tensor& positions, int64_t D, const BlockArch& a) {
  const int64_t T = positions.size(0);
  const at::Tensor inv = ropeInverseFrequencies(a, D).to(positions.device());              // (D/2)
  const at::Tensor freqs = positions.to(at::kFloat).view({T, 1}) * inv.view({1, D / 2});   // (T, D/2)
  return {freqs.cos(), freqs.sin()};
}

RopeTable ropeTable(const at::Tensor& positions, int64_t D, const BlockArch& a, at::ScalarType dtype) {
  const int64_t T = positions.size(0);
  const RopeTable half = ropeHalfTable(positions, D, a);                                   // (T, D/2) each
  const at::Tensor cos = at::cat({half.cos, half.cos}, 1), sin = at::cat({half.sin, half.sin}, 1);  // (T, D)
  return {cos.to(dtype).view({1, T, 1, D}), sin.to(dtype).view({1, T, 1, D})};
}

at::Tensor applyRope(const at::Tensor& x, const RopeTable& rope) {
  auto halves = x.chunk(2, 3);
  const at::Tensor rotated = at::cat({-halves[1], halves[0]}, 3);                          // rotate_half
  return x * rope.cos + rotated * rope.sin;                                                // (B, T, n, D)
}

at::Tensor mhaQkv(const at::Tensor& qkv, int64_t h, int64_t kv, int64_t D, const at::Tensor& positions,
                  const BlockArch& a) {
  const int64_t B = qkv.size(0), T = qkv.size(1);
  auto parts = qkv.split_with_sizes({h * D, kv * D, kv * D}, 2);
  at::Tensor q = parts[0].view({B, T, h, D}), k = parts[1].view({B, T, kv, D}), v = parts[2].view({B, T, kv, D});
  if (a.rope) {
    const RopeTable rope = ropeTable(positions, D, a, qkv.scalar_type());
    q = applyRope(q, rope);
    k = applyRope(k, rope);
  }
  if (kv != h) {  // q head i uses K/V head i / (h/kv)
    k = k.repeat_interleave(h / kv, 2);
    v = v.repeat_interleave(h / kv, 2);
  }
  return at::cat({q.reshape({B, T, h * D}), k.reshape({B, T, h * D}), v.reshape({B, T, h * D})}, 2);  // (B, T, 3hD)
}

at::Tensor ropeQkv(const at::Tensor& qkv, int64_t h, int64_t kv, int64_t D, const at::Tensor& positions,
                   const BlockArch& a) {
  if (cpu_ops::usable(qkv)) {
    const RopeTable half = ropeHalfTable(positions, D, a);
    return cpu_ops::ropeQkv(qkv, half.cos, half.sin, h, kv);
  }
  const int64_t B = qkv.size(0), T = qkv.size(1);
  auto parts = qkv.split_with_sizes({h * D, kv * D, kv * D}, 2);
  const RopeTable rope = ropeTable(positions, D, a, qkv.scalar_type());
  const at::Tensor q = applyRope(parts[0].view({B, T, h, D}), rope), k = applyRope(parts[1].view({B, T, kv, D}), rope);
  return at::cat({q.reshape({B, T, h * D}), k.reshape({B, T, kv * D}), parts[2]}, 2);  // (B, T, (h + 2kv)·D)
}

std::vector<double> alibiSlopes(int64_t n_head, int64_t first, int64_t count) {
  int64_t p = 1;
  while (p * 2 <= n_head) p *= 2;  // the largest power of two <= n_head
  std::vector<double> all;
  for (int64_t k = 1; k <= p; ++k) all.push_back(std::pow(2.0, -8.0 * double(k) / double(p)));
  for (int64_t i = 0; i < n_head - p; ++i) all.push_back(std::pow(2.0, -4.0 * double(2 * i + 1) / double(p)));
  return {all.begin() + first, all.begin() + first + count};
}

at::Tensor scoreBias(const at::Tensor& qpos, const at::Tensor& kpos, const cpu_ops::ScoreBias& bias,
                     at::ScalarType dtype) {
  const at::Tensor d = qpos.view({-1, 1}) - kpos.view({1, -1});                 // (Tq, Tk): t − j
  at::Tensor masked = d < 0;
  if (bias.window > 0) masked = masked.logical_or(d >= bias.window);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(qpos.device());
  at::Tensor out;
  if (bias.slopes.empty()) {
    out = at::zeros(d.sizes(), f32).unsqueeze(0);                                 // (1, Tq, Tk)
  } else {
    const int64_t n = int64_t(bias.slopes.size());
    const at::Tensor m = at::tensor(bias.slopes, at::TensorOptions().dtype(at::kDouble)).to(f32).view({n, 1, 1});
    out = -(m * d.to(at::kFloat).unsqueeze(0));                                   // (NH, Tq, Tk)
  }
  return out.masked_fill(masked.unsqueeze(0), -std::numeric_limits<float>::infinity()).to(dtype);
}

}  // namespace trainscope::runtime
