// trace_measure.cpp — what a trace says per counted step, by class of kernel (trace_fit.h).
#include <algorithm>
#include <cctype>
#include <climits>
#include <map>

#include "trainscope/common/error.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/tuner/trace_fit.h"

namespace trainscope::tuner {
namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool hasAny(const std::string& s, std::initializer_list<const char*> parts) {
  for (const char* p : parts)
    if (s.find(p) != std::string::npos) return true;
  return false;
}

bool attention(const std::string& n) {
  return hasAny(n, {"flash", "fmha", "scaled_dot_product", "scaleddotproduct", "efficient_attention",
                    "efficientattention", "attention_kernel", "sdpa", "causalattention"});
}
// Autograd nodes (a custom Function's backward is "CppNode<…>") are backward whatever their name.
bool backwardName(const std::string& n) {
  return hasAny(n, {"backward", "bwd", "cutlassb", "_grad", "cppnode<", "evaluate_function"});
}

// The counted steps of one rank (the summary's skip), by step.
std::vector<rundb::Step> counted(rundb::RunReader& r, int64_t rank, int64_t excluded) {
  std::vector<rundb::Step> s = r.steps(rank);
  std::sort(s.begin(), s.end(), [](const rundb::Step& a, const rundb::Step& b) { return a.step < b.step; });
  if (int64_t(s.size()) > excluded) s.erase(s.begin(), s.begin() + excluded);
  return s;
}

double unionSeconds(std::vector<rundb::Interval> v) {
  int64_t ns = 0;
  for (const rundb::Interval& i : rundb::unionOf(std::move(v))) ns += rundb::spanNs(i.begin, i.end);
  return double(ns) * 1e-9;
}

struct RankMeasure {
  std::map<std::string, std::vector<rundb::Interval>> cls;
  std::vector<rundb::Interval> grad_comm;  // NCCL all-reduce and reduce-scatter kernels
  double launches = 0, host_busy_s = 0;
  double backward_launches = 0, host_backward_busy_s = 0;  // 0: no backward thread of its own
  bool kernels = false, ops = false;
  // Per host thread: its busy time, whether it runs the backward (most of its outermost ops are
  // autograd nodes), and the kernels it launched (by correlation).
  struct Thread {
    double busy_s = 0, launches = 0;
    int64_t outer = 0, backward = 0;
  };
  std::map<int64_t, Thread> threads;
};

// A gradient reduction's NCCL kernel (ncclDevKernel_AllReduce_…, ncclKernel_ReduceScatter_…).
bool gradientReduction(const std::string& kernel_name) {
  const std::string n = lower(kernel_name);
  return hasAny(n, {"allreduce", "all_reduce", "reducescatter", "reduce_scatter"});
}

// Host ops of one rank in [b, e): each thread's outermost classified op counts for its class (a GEMM
// inside attention is attention's), the others by their own class; the busiest thread's ops' union
// is the host's busy time.
void measureOps(const std::vector<rundb::HostOp>& all, rundb::RunReader& r, int64_t b, int64_t e, bool classes,
                RankMeasure& m) {
  std::map<int64_t, std::vector<const rundb::HostOp*>> by_tid;
  for (const rundb::HostOp& o : all)
    if (o.start_ns >= b && o.start_ns < e && o.end_ns >= o.start_ns) by_tid[o.tid].push_back(&o);
  double busiest = 0;
  for (auto& [tid, ops] : by_tid) {
    std::sort(ops.begin(), ops.end(), [](const rundb::HostOp* x, const rundb::HostOp* y) {
      return x->start_ns != y->start_ns ? x->start_ns < y->start_ns : x->end_ns > y->end_ns;
    });
    std::vector<rundb::Interval> busy;
    int64_t open_end = INT64_MIN;  // the end of the outermost classified op in progress
    int64_t outer_end = INT64_MIN;  // the end of the outermost op in progress
    RankMeasure::Thread& th = m.threads[tid];
    for (const rundb::HostOp* o : ops) {
      busy.push_back({o->start_ns, o->end_ns});
      if (o->start_ns >= outer_end) {
        ++th.outer;
        th.backward += backwardName(lower(r.string(o->name)));
        outer_end = o->end_ns;
      }
      if (!classes || o->start_ns < open_end) continue;
      const std::string c = hostOpClass(r.string(o->name));
      if (c.empty()) continue;
      m.cls[c].push_back({o->start_ns, o->end_ns});
      if (c != "memory") open_end = o->end_ns;
    }
    th.busy_s = unionSeconds(std::move(busy));
    busiest = std::max(busiest, th.busy_s);
  }
  m.host_busy_s = busiest;
  m.ops = !by_tid.empty();
}

// Where the kernels' launches name their threads and one thread runs the backward: the forward's
// (the busiest other thread) and the backward's busy time and launches replace the busiest thread's
// over all launches.
void splitBackward(RankMeasure& m) {
  const RankMeasure::Thread* fwd = nullptr;
  const RankMeasure::Thread* bwd = nullptr;
  for (const auto& [tid, th] : m.threads) {
    if (th.launches <= 0) continue;
    const bool backward = th.outer > 0 && 2 * th.backward > th.outer;
    const RankMeasure::Thread*& slot = backward ? bwd : fwd;
    if (!slot || th.busy_s > slot->busy_s) slot = &th;
  }
  if (!fwd || !bwd) return;
  m.launches = fwd->launches, m.host_busy_s = fwd->busy_s;
  m.backward_launches = bwd->launches, m.host_backward_busy_s = bwd->busy_s;
}

RankMeasure measureRank(rundb::RunReader& r, int64_t rank, const std::vector<rundb::Step>& steps, int64_t next_start) {
  RankMeasure m;
  const int64_t b = steps.front().start_ns, e = steps.back().start_ns + steps.back().step_time_ns;
  std::map<int64_t, int64_t> launcher;  // correlation → the launching API call's thread
  for (const rundb::ApiCall& a : r.events<rundb::ApiCall>(rank))
    if (a.correlation >= 0) launcher[a.correlation] = a.tid;
  std::map<int64_t, double> launched;  // thread → kernels it launched
  for (const rundb::Kernel& k : r.events<rundb::Kernel>(rank)) {
    if (k.start_ns < b || k.start_ns >= next_start || k.end_ns < k.start_ns) continue;
    m.kernels = true;
    const std::string name = r.string(k.name), c = kernelClass(name);
    if (c.empty()) continue;
    if (c != "comm") {
      ++m.launches;
      if (auto it = launcher.find(k.correlation); k.correlation >= 0 && it != launcher.end()) ++launched[it->second];
    } else if (gradientReduction(name)) {
      m.grad_comm.push_back({k.start_ns, k.end_ns});
    }
    m.cls[c].push_back({k.start_ns, k.end_ns});
  }
  measureOps(r.events<rundb::HostOp>(rank), r, b, e, !m.kernels, m);
  for (const auto& [tid, n] : launched) m.threads[tid].launches = n;
  if (m.kernels) splitBackward(m);
  return m;
}

// Seconds of `a`'s union that lie inside `b`'s: |A| + |B| − |A ∪ B|.
double overlapSeconds(const std::vector<rundb::Interval>& a, const std::vector<rundb::Interval>& b) {
  std::vector<rundb::Interval> both = a;
  both.insert(both.end(), b.begin(), b.end());
  return std::max(0.0, unionSeconds(a) + unionSeconds(b) - unionSeconds(std::move(both)));
}

}  // namespace

std::string kernelClass(const std::string& kernel_name) {
  if (rundb::isCommKernel(kernel_name)) return "comm";
  const std::string n = lower(kernel_name);
  if (attention(n)) return backwardName(n) ? "attention_backward" : "attention_forward";
  if (hasAny(n, {"gemm", "cutlass", "xmma", "cublas", "nvjet", "s1688", "s884", "h884", "h1688", "s16816", "wgmma",
                 "matmul", "splitk"}))
    return "gemm";
  if (hasAny(n, {"profilerstep", "memcpy", "memset"})) return "";
  return "memory";
}

std::string hostOpClass(const std::string& op_name) {
  const std::string n = lower(op_name);
  if (attention(n)) return backwardName(n) ? "attention_backward" : "attention_forward";
  static const char* gemm_ops[] = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul",
                                   "aten::linear", "aten::_addmm_activation"};
  for (const char* g : gemm_ops)
    if (n == g) return "gemm";
  if (hasAny(n, {"mmbackward", "linearbackward", "matmulbackward", "baddbmmbackward"})) return "gemm";
  // oneDNN's fused linear (mkldnn::_linear_pointwise) and this runtime's Linear / LinearAdd nodes.
  if (hasAny(n, {"mkldnn::_linear", "mkldnn::_matmul", "::linear>", "::linearadd>"})) return "gemm";
  if (n.rfind("aten::", 0) == 0) return "memory";
  return "";
}

TraceMeasure measureTrace(rundb::RunReader& r, const std::string& field) {
  TraceMeasure t;
  t.source = r.path();
  const rundb::RunSummary s = rundb::summarize(r);
  if (!(s.step_s_median > 0) || s.steps < 1)
    throw UserError(field, r.path() + " has no counted step", "pass a trace of one or more whole steps (ProfilerStep#N)");
  t.steps = s.steps;
  t.step_s = s.step_s_median;
  int64_t kernel_ranks = 0, op_ranks = 0;
  std::map<std::string, double> sums;
  double launches = 0, busy = 0, bwd_launches = 0, bwd_busy = 0, grad = 0, hidden = 0;
  for (int64_t rank : r.stepRanks()) {
    const std::vector<rundb::Step> steps = counted(r, rank, s.excluded_steps);
    if (steps.empty()) continue;
    int64_t next = INT64_MAX;  // kernels run after their launch: up to the next (uncounted) step
    for (const rundb::Step& st : r.steps(rank))
      if (st.step > steps.back().step) next = std::min(next, st.start_ns);
    const RankMeasure m = measureRank(r, rank, steps, next);
    const double n = double(steps.size());
    for (const auto& [c, iv] : m.cls) sums[c] += unionSeconds(iv) / n;
    launches += m.launches / n;
    busy += m.host_busy_s / n;
    bwd_launches += m.backward_launches / n;
    bwd_busy += m.host_backward_busy_s / n;
    if (!m.grad_comm.empty()) {
      std::vector<rundb::Interval> compute;
      for (const auto& [c, iv] : m.cls)
        if (c != "comm") compute.insert(compute.end(), iv.begin(), iv.end());
      grad += unionSeconds(m.grad_comm) / n;
      hidden += overlapSeconds(m.grad_comm, compute) / n;
    }
    kernel_ranks += m.kernels;
    op_ranks += m.ops;
    ++t.ranks;
    t.max_rank = std::max(t.max_rank, rank);
  }
  if (kernel_ranks == 0 && op_ranks == 0)
    throw UserError(field, r.path() + " holds no kernels and no CPU ops inside its counted steps: nothing to fit a rate to",
                    "trace with the profiler's CUDA and CPU activities (Kineto), or record the run with --trace-level ops");
  t.gpu = kernel_ranks > 0;
  for (const auto& [c, v] : sums) t.class_s[c] = v / double(t.ranks);
  t.launches = launches / double(t.ranks);
  t.host_busy_s = busy / double(t.ranks);
  t.backward_launches = bwd_launches / double(t.ranks);
  t.host_backward_busy_s = bwd_busy / double(t.ranks);
  t.grad_comm_s = grad / double(t.ranks);
  t.grad_comm_hidden_s = hidden / double(t.ranks);
  // The stage waits: each counted rank's breakdown bubble (per counted step), their mean.
  double bubble = 0;
  int64_t with_breakdown = 0;
  for (const rundb::RankSummary& rs : s.ranks)
    if (rs.breakdown) bubble += rs.breakdown->bubble_s, ++with_breakdown;
  if (with_breakdown > 0) t.bubble_s = bubble / double(with_breakdown);
  t.collectives = r.collectives();
  return t;
}

}  // namespace trainscope::tuner
