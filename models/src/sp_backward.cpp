// sp_backward.cpp — see sp_backward.h.
#include "sp_backward.h"

#include <algorithm>
#include <string>

namespace trainscope::models {

double spColumnBackwardBytes(const LayerOps& L, const Plan& p, double h) {
  if (!p.sequence_parallel || p.tp <= 1) return 0;
  const double e = double(p.elementBytes()), t = double(p.tp);
  double worst = 0;
  for (size_t i = 0; i < L.forward.size(); ++i) {
    const Op& g = L.forward[i];
    if (g.kind != Op::Kind::Gemm || (g.name != "qkv" && g.name != "fc1" && g.name != "gate+up")) continue;
    const double r = g.m * g.batch, N = g.n;
    double freed = 0;
    for (size_t j = i + 1; j < L.forward.size(); ++j) freed += L.forward[j].saved;
    const double held = 2.0 * r * N * e + 2.0 * r * h * e + 3.0 * (r / t) * h * e + N * h * e + (r / t) * h * e;
    worst = std::max(worst, held - freed);
  }
  return worst;
}

}  // namespace trainscope::models
