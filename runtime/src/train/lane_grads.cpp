// lane_grads.cpp — see lane_grads.h.
#include "train/lane_grads.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <utility>

#include "cpu/cpu_kernels.h"
#include "cpu/lanes.h"
#include "optim/partitioned.h"

namespace trainscope::runtime {

std::optional<double> sumLaneGradients(CoreLanes& lanes, std::vector<std::vector<at::Tensor>>& lane_leaves,
                                       std::vector<at::Tensor>& main) {
  c10::NoGradGuard no_grad;
  std::vector<std::vector<at::Tensor>> parts(main.size());
  bool fused = true;
  for (size_t i = 0; i < main.size(); ++i) {
    for (auto& leaves : lane_leaves)
      if (leaves[i].grad().defined()) parts[i].push_back(std::exchange(leaves[i].mutable_grad(), at::Tensor()));
    fused = fused && main[i].is_contiguous();
    for (const auto& g : parts[i]) fused = fused && g.is_contiguous() && g.scalar_type() == at::kFloat;
  }
  if (!fused) {
    for (size_t i = 0; i < main.size(); ++i) {
      const auto& g = parts[i];
      if (g.empty()) main[i].zero_();  // no lane's rows reached the parameter
      else if (g.size() == 1) main[i].copy_(g[0]);
      else at::add_out(main[i], g[0], g[1]);                 // one pass: read two, write one
      for (size_t k = 2; k < g.size(); ++k) main[i].add_(g[k]);
    }
    return std::nullopt;
  }
  const int W = lanes.size();
  std::vector<double> sq(size_t(W), 0.0);
  lanes.run([&](int k) {
    forEachSliceOfPart(main, k, W, [&](size_t i, int64_t start, int64_t count) {
      float* out = main[i].data_ptr<float>() + start;
      const auto& g = parts[i];
      if (g.empty()) {
        std::fill(out, out + count, 0.0f);
        return;
      }
      auto part = [&](size_t j) { return g[j].data_ptr<float>() + start; };
      // Each pass returns Σ out² of what it wrote; the last pass's is the sum's.
      double s2 = kernels::addAndSumSquares(out, part(0), g.size() > 1 ? part(1) : nullptr, count);
      for (size_t j = 2; j < g.size(); ++j) s2 = kernels::addAndSumSquares(out, out, part(j), count);
      sq[size_t(k)] += s2;
    });
  });
  double total = 0.0;
  for (double v : sq) total += v;
  return total;
}

}  // namespace trainscope::runtime
