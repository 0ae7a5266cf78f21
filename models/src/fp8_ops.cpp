// fp8_ops.cpp — see fp8_ops.h.
#include "fp8_ops.h"

#include <algorithm>
#include <string>

namespace trainscope::models {
namespace {

constexpr double kAmaxHistory = 16;  // runtime/src/model/fp8.h's kHistory

bool startsWith(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }

// A weight GEMM of the dense block (not the attention core, a MoE router or expert).
bool fp8Gemm(const Op& o) {
  return o.kind == Op::Kind::Gemm && !attentionCore(o) && !startsWith(o.name, "flash attention") &&
         !startsWith(o.name, "router") && !startsWith(o.name, "expert") && !startsWith(o.name, "shared");
}

Op memOp(const std::string& name, double bytes) {
  Op o;
  o.name = name;
  o.kind = Op::Kind::Memory;
  o.bytes = bytes;
  o.backward_bytes = 0;
  return o;
}

}  // namespace

void applyFp8(LayerOps& L, const Plan& p) {
  if (p.precision != runconfig::Precision::FP8) return;
  const double e = double(p.elementBytes()), M = double(std::max<int64_t>(1, p.ga()));
  std::vector<Op> forward;
  std::vector<std::string> marked;
  double gemms = 0;
  for (Op o : L.forward) {
    if (fp8Gemm(o)) {
      o.fp8 = true;
      marked.push_back(o.name);
      ++gemms;
      forward.push_back(memOp("fp8 cast " + o.name + " input", o.m * o.k * o.batch * (e + 2.0)));
      forward.push_back(memOp("fp8 cast " + o.name + " weight", o.k * o.n * o.batch * (e + 2.0) / M));
      if (p.ckpt != runconfig::Checkpointing::Full) L.saved -= o.saved * (1.0 - 1.0 / e);  // the input kept in FP8
      o.saved /= e;
    }
    forward.push_back(o);
  }
  if (gemms == 0) return;
  forward.push_back(memOp("fp8 amax history", 3.0 * gemms * kAmaxHistory * 4.0));
  L.forward = std::move(forward);
  auto isMarked = [&](const std::string& name) {
    for (const std::string& m : marked)
      if (name == m + " dgrad" || name == m + " wgrad" || name == m) return true;
    return false;
  };
  std::vector<Op> backward;
  for (Op o : L.backward) {
    if (o.kind == Op::Kind::Gemm && isMarked(o.name)) {
      o.fp8 = true;
      // dgrad (m × n_in) = dY (m × n) · W: its k is the forward's n; cast dY once, before dgrad.
      const std::string tail = " dgrad";
      if (o.name.size() > tail.size() && o.name.compare(o.name.size() - tail.size(), tail.size(), tail) == 0)
        backward.push_back(memOp("fp8 cast " + o.name.substr(0, o.name.size() - tail.size()) + " grad", o.m * o.k * o.batch * (e + 2.0)));
    }
    backward.push_back(o);
  }
  L.backward = std::move(backward);
  for (Op& o : L.recompute)
    if (isMarked(o.name)) o.fp8 = true;
}

double fp8WeightElements(const LayerOps& L) {
  double n = 0;
  for (const Op& o : L.forward)
    if (o.fp8) n += o.k * o.n * o.batch;
  return n;
}

double fp8CpuBackwardBytes(const LayerOps& L, const Plan& p, double residual) {
  if (p.precision != runconfig::Precision::FP8 || !p.cpu) return 0;
  const double e = double(p.elementBytes());
  double worst = 0;
  for (size_t i = 0; i < L.forward.size(); ++i) {
    const Op& g = L.forward[i];
    if (!g.fp8) continue;
    const double m = g.m * g.batch, n = g.n, k = g.k;
    double freed = 0;
    for (size_t j = i + 1; j < L.forward.size(); ++j) freed += L.forward[j].saved;
    const double first_operand = m * n * (e + 10.0) + m * k * (e + 1.0) + n * k * e;
    const double product = m * n * (e + 6.0) + m * k * (e + 9.0) + n * k * (e + 4.0);
    worst = std::max(worst, std::max(first_operand, product) + residual - freed);
  }
  return worst;
}

}  // namespace trainscope::models
