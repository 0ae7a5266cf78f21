// calibrate.cpp — see calibrate.h. Each figure is the best of several timed repetitions after a
// warm-up (the machine's capability, not its average under other load).
#include "trainscope/runtime/calibrate.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>

#include <nlohmann/json.hpp>

#include "trainscope/common/json_text.h"

namespace trainscope::runtime {

namespace {

template <class F>
double bestSeconds(int reps, F&& f) {
  f();  // warm-up: first-touch pages, pack buffers
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

std::string measureMachine(int threads) {
  at::set_num_threads(std::max(1, threads));
  nlohmann::json out;
  out["threads"] = at::get_num_threads();
  // Square GEMMs from 128 to 1536: the efficiency curve's points (Calculon's matrix-size table).
  for (auto [name, dtype] : {std::pair<const char*, at::ScalarType>{"fp32", at::kFloat}, {"bf16", at::kBFloat16}}) {
    nlohmann::json points = nlohmann::json::array();
    for (int64_t n : {128, 256, 512, 1024, 1536}) {
      const at::Tensor a = at::randn({n, n}, at::TensorOptions().dtype(dtype));
      const at::Tensor b = at::randn({n, n}, at::TensorOptions().dtype(dtype));
      at::Tensor c = at::empty({n, n}, at::TensorOptions().dtype(dtype));
      const double flops = 2.0 * double(n) * double(n) * double(n);
      const int reps = n <= 512 ? 20 : 4;
      const double s = bestSeconds(reps, [&] { at::mm_out(c, a, b); });
      points.push_back({flops, flops / s});
    }
    out["matmul"][name] = points;
  }
  // Memory: a 256 MiB copy reads and writes every byte.
  {
    const int64_t n = int64_t(64) << 20;
    const at::Tensor src = at::rand({n});
    at::Tensor dst = at::empty({n});
    const double s = bestSeconds(4, [&] { dst.copy_(src); });
    out["memory_bandwidth"] = 2.0 * double(n) * 4.0 / s;
    const at::Tensor other = at::rand({n});
    const double v = bestSeconds(4, [&] { at::add_out(dst, src, other); });
    out["vector_flops"] = double(n) / v;
  }
  return jsonText(out);
}

}  // namespace trainscope::runtime
