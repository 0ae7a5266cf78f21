// fsdp_time.cpp — PyTorch FSDP's gradient path in bytes (gpu_time.h, fsdpGradientBytes): the flat
// gradient's assembly on the compute stream, the cast to the reduce dtype and the pre-division on the
// post-backward stream. docs/framework-profiles.md, "FSDP's flat gradient".
#include <algorithm>
#include <cmath>

#include "gpu_time.h"

namespace trainscope::models::gpu {

double fsdpPredivideFactor(double n) {
  // torch.distributed.fsdp (FSDP1) _get_gradient_predivide_factor: the largest power of two f with
  // n % f == 0 and n / f > f taken one step further (8 ranks: 4); the gradient is divided by f before
  // the reduce-scatter and by n / f after it.
  double f = 1;
  while (std::fmod(n, f) == 0 && n / f > f) f *= 2;
  return f;
}

FsdpGradient fsdpGradientBytes(double params, double e, double reduce_bytes, double n) {
  FsdpGradient g;
  if (n <= 1 || params <= 0) return g;
  g.copy_bytes = 2.0 * params * e;
  if (reduce_bytes > e) g.side_bytes += params * (e + reduce_bytes);
  if (fsdpPredivideFactor(n) > 1) g.side_bytes += 2.0 * params * std::max(reduce_bytes, e);
  return g;
}

double ringCollectiveSeconds(const NetworkTier& tier, double bytes, double n, double factor) {
  if (n <= 1 || bytes <= 0) return 0;
  const double steps = std::max(n - 1.0, 1.0 + std::log2(n));
  return collectiveSeconds(tier, bytes, n, factor) + tier.latency * (steps - (1.0 + std::log2(n)));
}

}  // namespace trainscope::models::gpu
