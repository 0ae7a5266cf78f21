// fp8_scales.cpp — the fp8_scales rows summarised (see fp8_scales.h).
#include "trainscope/rundb/fp8_scales.h"

#include <algorithm>
#include <limits>
#include <map>
#include <set>

namespace trainscope::rundb {

double fp8RoleMax(const std::string& role) { return role == "grad_output" ? 57344.0 : 448.0; }

std::vector<Fp8RoleSummary> summarizeFp8Scales(const std::vector<Fp8Scale>& rows) {
  std::vector<Fp8RoleSummary> out;
  for (const char* role : {"input", "weight", "grad_output"}) {
    Fp8RoleSummary s;
    s.role = role;
    std::set<std::string> tensors;
    std::set<int64_t> steps;
    s.scale_min = std::numeric_limits<double>::infinity();
    s.scale_max = 0;
    s.last_step = std::numeric_limits<int64_t>::min();
    for (const Fp8Scale& r : rows)
      if (r.role == role) s.last_step = std::max(s.last_step, r.step);
    const double top = fp8RoleMax(role);
    s.last_amax_min = std::numeric_limits<double>::infinity();
    for (const Fp8Scale& r : rows) {
      if (r.role != role) continue;
      ++s.rows;
      tensors.insert(r.tensor);
      steps.insert(r.step);
      s.scale_min = std::min(s.scale_min, r.scale);
      s.scale_max = std::max(s.scale_max, r.scale);
      if (r.amax * r.scale > top * (1 + 1e-6)) ++s.saturated;
      if (r.step == s.last_step) {
        s.last_amax_min = std::min(s.last_amax_min, r.amax);
        s.last_amax_max = std::max(s.last_amax_max, r.amax);
      }
    }
    if (s.rows == 0) continue;
    s.linears = int64_t(tensors.size());
    s.steps = int64_t(steps.size());
    out.push_back(s);
  }
  return out;
}

}  // namespace trainscope::rundb
