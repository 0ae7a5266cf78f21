// bench/cpu_kernels.cpp — the runtime's fused CPU ops against the LibTorch ops they replace, same
// process, same inputs, alternating: causal attention (forward + backward) against
// at::scaled_dot_product_attention (LibTorch's CPU flash kernel), GELU-tanh forward + backward
// against at::gelu, and the hand-written weight-gradient GEMM (dW = dyᵀx and the bias sum, for
// the MLP's fc layer) against at::mm + sum. Prints the median time of each and the ratio. Under
// the core lanes every op runs on one core: run with OMP_NUM_THREADS=1 for the figures that matter
// there.
//
// Usage: trainscope_bench_kernels [B T C n_head] [reps]     (default: the small CPU model's layer)
#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "cpu/cpu_ops.h"
#include "cpu/gemm_avx512.h"
#include "model/linear.h"

namespace {

double medianMs(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs a and b alternately `reps` times after a warm-up; returns their median milliseconds.
std::pair<double, double> ab(const std::function<void()>& a, const std::function<void()>& b, int reps) {
  std::vector<double> ta, tb;
  auto time = [](const std::function<void()>& f) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  for (int i = 0; i < 3; ++i) a(), b();
  for (int i = 0; i < reps; ++i) {
    ta.push_back(time(a));
    tb.push_back(time(b));
  }
  return {medianMs(ta), medianMs(tb)};
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t B = argc > 4 ? std::atoll(argv[1]) : 8, T = argc > 4 ? std::atoll(argv[2]) : 128,
                C = argc > 4 ? std::atoll(argv[3]) : 256, H = argc > 4 ? std::atoll(argv[4]) : 4;
  const int reps = argc > 5 ? std::atoi(argv[5]) : argc == 2 ? std::atoi(argv[1]) : 30;
  using trainscope::runtime::cpu_ops::causalAttention;
  using trainscope::runtime::cpu_ops::geluTanh;
  at::manual_seed(0);
  at::Tensor qkv = at::randn({B, T, 3 * C}).requires_grad_(true);
  at::Tensor dy = at::randn({B, T, C});
  auto ours = [&] { torch::autograd::grad({causalAttention(qkv, H)}, {qkv}, {dy}); };
  auto sdpa = [&] {
    auto parts = qkv.split(C, 2);
    auto heads = [&](const at::Tensor& t) { return t.view({B, T, H, C / H}).transpose(1, 2); };
    at::Tensor y = at::scaled_dot_product_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), {}, 0.0, true);
    torch::autograd::grad({y.transpose(1, 2).reshape({B, T, C})}, {qkv}, {dy});
  };
  auto [a_ours, a_ref] = ab(ours, sdpa, reps);
  const double attn_flops = 4.0 * 2.0 * double(B) * double(T) * double(T) * double(C);  // fwd + bwd, causal half
  std::printf("attention B=%lld T=%lld C=%lld heads=%lld: trainscope %.3f ms, LibTorch SDPA %.3f ms, ratio %.2fx "
              "(%.1f GFLOP/s on the causal half)\n",
              (long long)B, (long long)T, (long long)C, (long long)H, a_ours, a_ref, a_ref / a_ours,
              attn_flops / (a_ours * 1e-3) / 1e9);

  at::Tensor x = at::randn({B * T, 4 * C}).requires_grad_(true);
  at::Tensor dg = at::randn({B * T, 4 * C});
  auto g_ours = [&] { torch::autograd::grad({geluTanh(x)}, {x}, {dg}); };
  auto g_ref = [&] { torch::autograd::grad({at::gelu(x, "tanh")}, {x}, {dg}); };
  auto [g1, g2] = ab(g_ours, g_ref, reps);
  std::printf("gelu-tanh %lld elements: trainscope %.3f ms, LibTorch %.3f ms, ratio %.2fx\n", (long long)(B * T * 4 * C),
              g1, g2, g2 / g1);

  // dW of the MLP's fc layer: dy (BT, 4C), x (BT, C) → dW (4C, C), db (4C).
  namespace k = trainscope::runtime::kernels;
  if (k::handGemmsAvailable() && C % 16 == 0) {
    at::Tensor gy = at::randn({B * T, 4 * C}), xin = at::randn({B * T, C});
    at::Tensor dw = at::empty({4 * C, C}), db = at::empty({4 * C});
    auto w_ours = [&] { trainscope::runtime::gemmTN(gy, xin, dw, /*accumulate=*/false, db); };
    auto w_ref = [&] {
      at::mm_out(dw, gy.t(), xin);
      at::sum_out(db, gy, 0);
    };
    auto [w1, w2] = ab(w_ours, w_ref, reps);
    const double w_flops = 2.0 * double(B * T) * double(4 * C) * double(C);
    std::printf("weight-gradient GEMM %lldx%lldx%lld (+ bias sum): trainscope %.3f ms, LibTorch mm+sum %.3f ms, ratio "
                "%.2fx (%.1f GFLOP/s)\n",
                (long long)(4 * C), (long long)C, (long long)(B * T), w1, w2, w2 / w1, w_flops / (w1 * 1e-3) / 1e9);
  }
  return 0;
}
