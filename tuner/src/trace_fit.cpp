// trace_fit.cpp — a cluster's constants from what traces measured per class of kernel (trace_fit.h).
#include "trainscope/tuner/trace_fit.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "trainscope/common/error.h"
#include "trainscope/models/fit_params.h"

namespace trainscope::tuner {
namespace {

constexpr double kStep = 0.25;  // a rate-like constant moved by 25% to read its class's time off the model
constexpr int kRounds = 6;      // fixed-point rounds: classes interact only through max() and floors
constexpr const char* kCpuHostNote = "host cost per op: not fitted (CPU traces: the CPU ops are the work itself)";

// The rows' step times less their pipeline bubbles. A class's measured time is one rank's (the mean
// over ranks): its own stage's work, none of the other stages'. The bubble — the fill and the drain,
// the other stages' micro-batch times — is priced by the time model from the stages' times
// (time_model.cpp, gpu_time.cpp addPipeline), so it moves with the rates but is no class's own time:
// left in, a PP run's class times would be read as (1 + (pp − 1)/M) × theirs and every rate fitted
// that much too fast, the stage waits attributed to nothing (issue 33).
double totalStep(const Cluster& c, const std::vector<FitRow>& rows) {
  double sum = 0;
  for (const PricedRow& t : priceRowsInFull(c, rows)) sum += t.step_s - t.bubble_s;
  return sum;
}

// The pipeline bubble the time model prices for the rows, summed (0 without pipeline parallelism).
double totalBubble(const Cluster& c, const std::vector<FitRow>& rows) {
  double sum = 0;
  for (const PricedRow& t : priceRowsInFull(c, rows)) sum += t.bubble_s;
  return sum;
}

// The model's time in `p`'s class, summed over the rows: a class's time t scales as 1/rate, so moving
// the rate from r to r(1+ε) takes t·ε/(1+ε) off the step.
double modelClassSeconds(const Cluster& c, const std::vector<FitRow>& rows, const FitParam& p, double at) {
  Cluster moved = c;
  setParam(moved, p, getParam(c, p) * (1 + kStep));
  return std::max(0.0, (at - totalStep(moved, rows)) * (1 + kStep) / kStep);
}

// A constant the caller holds (fitFromTraces' `held`): it keeps its value, with a note. True when held.
bool isHeld(TraceFit& out, const std::set<std::string>& held, const std::string& path, const std::string& what) {
  if (!held.count(path)) return false;
  out.notes.push_back(path + ": kept (--keep-fitted: an earlier calibration fitted it), not refitted from " + what);
  return true;
}

struct ClassParam {
  std::string cls;   // a TraceMeasure class, or "gemm+attention" (CPU: attention is GEMMs and softmax)
  std::string path;  // the constant it sets
};

std::vector<ClassParam> classParams(const Cluster& base, Framework f) {
  const std::string fw = std::string("frameworks.") + frameworkKey(f) + ".";
  if (base.kind == ClusterKind::Cpu) return {{"gemm+attention", "peak_flops.fp32"}, {"memory", "memory_bandwidth"}};
  return {{"gemm", "sustained_clock"},
          {"attention_forward", fw + "flash_forward_scale"},
          {"attention_backward", fw + "flash_backward_scale"},
          {"memory", "memory_efficiency"}};
}

double measuredClass(const std::vector<TraceMeasure>& traces, const std::string& cls) {
  double sum = 0;
  for (const TraceMeasure& t : traces) {
    if (cls == "gemm+attention") {
      for (const char* c : {"gemm", "attention_forward", "attention_backward"})
        if (auto it = t.class_s.find(c); it != t.class_s.end()) sum += it->second;
    } else if (auto it = t.class_s.find(cls); it != t.class_s.end()) {
      sum += it->second;
    }
  }
  return sum;
}

// The backward thread's host time per launch → the profile's per-backward-op host cost, where the
// traces join launches to threads and the backward ran on a thread of its own (CUDA's autograd
// engine thread); otherwise it keeps its value, with a note.
void fitBackwardHost(TraceFit& out, const std::vector<TraceMeasure>& traces, Framework f, const std::set<std::string>& held) {
  double busy = 0, launches = 0;
  for (const TraceMeasure& t : traces)
    if (t.gpu) busy += t.host_backward_busy_s, launches += t.backward_launches;
  if (!(launches > 0) || !(busy > 0)) {
    out.notes.push_back("host cost per backward op: not fitted (no trace joins its kernels to a backward thread of its "
                        "own: launches with correlation ids, autograd nodes on the thread that launched them)");
    return;
  }
  const FitParam& p = fitParam(std::string("frameworks.") + frameworkKey(f) + ".host_backward_op_s", "--trace");
  if (isHeld(out, held, p.path, "the backward thread's host time")) return;
  const auto [lo, hi] = boundsOf(p, out.fitted);
  const double want = busy / launches;
  TraceTarget t{p.path, "host per backward launch", getParam(out.fitted, p), std::clamp(want, lo, hi), want, 0, 0, false};
  t.at_bound = t.value != want;
  setParam(out.fitted, p, t.value);
  out.values[p.path] = t.value;
  out.targets.push_back(t);
}

// Gradient reductions seen beside compute kernels → the profile's overlap_reduce: the share of what
// the model could hide behind the backward (the step with overlap_reduce 0 less the step with 1, read
// off the model) that the traces show hidden. GPU clusters; the rows' own --dp-overlap, a ZeRO-3
// layer's collectives (zeroLayerSeconds) or one bucket leave the model nothing to hide: a note.
void fitOverlap(TraceFit& out, const std::vector<FitRow>& rows, const std::vector<TraceMeasure>& traces, Framework f,
                const std::set<std::string>& held) {
  double grad = 0, hidden = 0;
  for (const TraceMeasure& t : traces)
    if (t.gpu) grad += t.grad_comm_s, hidden += t.grad_comm_hidden_s;
  if (!(grad > 0)) {
    out.notes.push_back("gradient reduction overlap: not fitted (no all-reduce or reduce-scatter kernel in the traces)");
    return;
  }
  const FitParam& p = fitParam(std::string("frameworks.") + frameworkKey(f) + ".overlap_reduce", "--trace");
  if (isHeld(out, held, p.path, "the gradient reductions beside compute")) return;
  Cluster none = out.fitted, all = out.fitted;
  setParam(none, p, 0.0);
  setParam(all, p, 1.0);
  const double hideable = totalStep(none, rows) - totalStep(all, rows);
  if (!(hideable > 1e-12)) {
    out.notes.push_back("gradient reduction overlap: not fitted (the time model hides no gradient reduction of this "
                        "configuration behind its backward)");
    return;
  }
  TraceTarget t{p.path, "gradient reduction hidden", getParam(out.fitted, p), std::clamp(hidden / hideable, 0.0, 1.0),
                hidden, hideable * getParam(out.fitted, p), 0, false};
  t.at_bound = t.value != hidden / hideable;
  setParam(out.fitted, p, t.value);
  t.model_fit_s = hideable * t.value;
  out.values[p.path] = t.value;
  out.targets.push_back(t);
}

// Host time per launch → the profile's per-op host cost (or the cluster's dispatch_s, where the
// profile defers to it). Measured directly: the host's busy time per step over its launches.
void fitHost(TraceFit& out, const std::vector<TraceMeasure>& traces, Framework f, const std::set<std::string>& held) {
  double busy = 0, launches = 0;
  for (const TraceMeasure& t : traces)
    if (t.gpu) busy += t.host_busy_s, launches += t.launches;
  if (!(launches > 0) || !(busy > 0)) {
    bool gpu = false;
    for (const TraceMeasure& t : traces) gpu |= t.gpu;
    out.notes.push_back(gpu ? "host cost per op: not fitted (the traces hold no CPU ops beside their kernels)"
                            : kCpuHostNote);
    return;
  }
  const bool own = out.fitted.profile(f).host_op_s >= 0;
  const FitParam& p = fitParam(own ? std::string("frameworks.") + frameworkKey(f) + ".host_op_s" : "dispatch_s", "--trace");
  if (!isHeld(out, held, p.path, "the host time per launch")) {
    const auto [lo, hi] = boundsOf(p, out.fitted);
    TraceTarget t{p.path, "host per launch", getParam(out.fitted, p), 0, busy / launches, 0, 0, false};
    t.value = std::clamp(busy / launches, lo, hi);
    t.at_bound = t.value != busy / launches;
    setParam(out.fitted, p, t.value);
    out.values[p.path] = t.value;
    out.targets.push_back(t);
  }
  fitBackwardHost(out, traces, f, held);
}

// Another framework's job on a CPU cluster (an external runner's trial, or --config's "framework"): its
// step is its kernels' CPU ops plus its Python host work, which the time model prices from the
// profile's host constants (time_model.cpp cpuHostSeconds), not from the cluster's rates. The framework
// of the rows, when they all name the same one other than this runtime; else Trainscope.
Framework externalFramework(const Cluster& base, const std::vector<FitRow>& rows) {
  if (base.kind != ClusterKind::Cpu || rows.empty()) return Framework::Trainscope;
  const Framework f = rows.front().options.framework;
  for (const FitRow& r : rows)
    if (r.options.framework != f) return Framework::Trainscope;
  return f;
}

// The external job's host work → the profile's host constants: after the classes' rates, the part of
// each trace's step that no classified op ran (step − Σ classes: module calls, hooks, the Trainer's
// loop, the optimizer's per-tensor work) is host work, and the model's step is linear in each host
// constant (time_model.cpp cpuHostSeconds). Per micro-batch: frameworks.<f>.host_op_s (per op of each
// layer); per step: frameworks.<f>.zero0_step_tensor_s (per parameter tensor, ZeRO 0), fitted beside
// it only where the traces' shapes separate the two (two or more micro-batch counts). Least squares
// over the traces, each constant within its bounds. host_micro_batch_s keeps its value: per
// micro-batch as host_op_s is, traces of one model cannot separate the two.
struct HostTerm {
  const FitParam* p;
  std::vector<double> slope;  // per row: model seconds per step per unit of the constant
  double value = 0;
};

// Least squares of the rows' gaps over the terms' slopes, each value clamped to its bounds; a term that
// lands outside its bounds is fixed at the bound and the other refitted (two terms at most).
void solveHost(std::vector<HostTerm>& terms, const std::vector<double>& gap, const Cluster& c) {
  const auto dot = [&](const std::vector<double>& x, const std::vector<double>& y) {
    double sum = 0;
    for (size_t i = 0; i < gap.size(); ++i) sum += x[i] * y[i];
    return sum;
  };
  const auto one = [&](HostTerm& t, const std::vector<double>& g) {
    const auto [lo, hi] = boundsOf(*t.p, c);
    t.value = std::clamp(dot(t.slope, g) / dot(t.slope, t.slope), lo, hi);
  };
  if (terms.size() == 1) return one(terms[0], gap);
  HostTerm &a = terms[0], &b = terms[1];
  const double aa = dot(a.slope, a.slope), bb = dot(b.slope, b.slope), ab = dot(a.slope, b.slope);
  const double ag = dot(a.slope, gap), bg = dot(b.slope, gap), det = aa * bb - ab * ab;
  if (!(det > 1e-12 * aa * bb)) {  // slopes (nearly) in proportion: the rows cannot tell the two apart
    terms.pop_back();
    return one(terms[0], gap);
  }
  a.value = (ag * bb - bg * ab) / det, b.value = (bg * aa - ag * ab) / det;
  for (HostTerm* fixed : {&a, &b}) {
    const auto [lo, hi] = boundsOf(*fixed->p, c);
    if (fixed->value >= lo && fixed->value <= hi) continue;
    fixed->value = std::clamp(fixed->value, lo, hi);
    HostTerm& other = fixed == &a ? b : a;
    std::vector<double> rest = gap;
    for (size_t i = 0; i < gap.size(); ++i) rest[i] -= fixed->slope[i] * fixed->value;
    one(other, rest);
    return;
  }
}

// The terms' slopes, read off the model: each constant from 0 to its upper bound, the others at 0.
std::vector<HostTerm> hostTerms(const Cluster& c, const std::vector<FitRow>& rows, const std::string& fw,
                                std::vector<PricedRow>& at0) {
  std::vector<HostTerm> terms;
  for (const char* key : {"host_op_s", "zero0_step_tensor_s"}) terms.push_back({&fitParam(fw + key, "--trace"), {}});
  Cluster zero = c;
  for (const HostTerm& t : terms) setParam(zero, *t.p, 0.0);
  at0 = priceRowsInFull(zero, rows);
  for (HostTerm& t : terms) {
    Cluster moved = zero;
    const double hi = boundsOf(*t.p, c).second;
    setParam(moved, *t.p, hi);
    const std::vector<PricedRow> at = priceRowsInFull(moved, rows);
    for (size_t i = 0; i < rows.size(); ++i) t.slope.push_back((at[i].step_s - at0[i].step_s) / hi);
  }
  return terms;
}

void fitExternalHost(TraceFit& out, const std::vector<FitRow>& rows, const std::vector<TraceMeasure>& traces, Framework f,
                     const std::set<std::string>& held) {
  const std::string fw = std::string("frameworks.") + frameworkKey(f) + ".";
  std::vector<PricedRow> at0;
  std::vector<HostTerm> terms = hostTerms(out.fitted, rows, fw, at0);
  std::set<int64_t> micro_batches;
  for (const FitRow& r : rows) micro_batches.insert(r.p.ga());
  const auto live = [](const HostTerm& t) { return std::any_of(t.slope.begin(), t.slope.end(), [](double x) { return x > 0; }); };
  if (micro_batches.size() < 2 || !live(terms[1])) terms.pop_back();  // the per-step term: only where separable
  if (!live(terms[0])) {
    out.notes.push_back("host cost per op: not fitted (the time model prices no " + std::string(frameworkKey(f)) +
                        " host work for these configurations)");
    return;
  }
  std::vector<double> gap;
  double outside = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    gap.push_back(rows[i].measured_s - at0[i].step_s);
    double classes = 0;
    for (const auto& [c, v] : traces[i].class_s) classes += v;
    outside += std::max(0.0, traces[i].step_s - classes);
  }
  // A held term keeps its value: the step is linear in it, so its share leaves the gap.
  for (size_t k = terms.size(); k-- > 0;) {
    if (!isHeld(out, held, terms[k].p->path, "the step less its ops")) continue;
    const double v = getParam(out.fitted, *terms[k].p);
    for (size_t i = 0; i < gap.size(); ++i) gap[i] -= terms[k].slope[i] * v;
    terms.erase(terms.begin() + std::ptrdiff_t(k));
  }
  if (terms.empty()) return;
  solveHost(terms, gap, out.fitted);
  Cluster fitted = out.fitted;
  for (const HostTerm& t : terms) setParam(fitted, *t.p, t.value);
  const std::vector<PricedRow> before = priceRowsInFull(out.fitted, rows), after = priceRowsInFull(fitted, rows);
  for (const HostTerm& t : terms) {
    const auto [lo, hi] = boundsOf(*t.p, out.fitted);
    TraceTarget tt{t.p->path, "step less its ops (host work)", getParam(out.fitted, *t.p), t.value, 0, 0, 0, false};
    tt.at_bound = t.value <= lo || t.value >= hi;
    for (size_t i = 0; i < rows.size(); ++i)  // per step, summed: the measured step, the model's before and after
      tt.measured_s += rows[i].measured_s, tt.model_base_s += before[i].step_s, tt.model_fit_s += after[i].step_s;
    out.values[t.p->path] = t.value;
    out.targets.push_back(tt);
  }
  out.fitted = fitted;
  char line[200];
  std::snprintf(line, sizeof(line), "a %s job on a CPU cluster, %.4g s/step outside the ops' classes", frameworkKey(f),
                outside);
  out.notes.push_back(std::string("host work: ") + line + ": " + fw + "host_op_s" +
                      (terms.size() == 2 ? " (per micro-batch) and " + fw + "zero0_step_tensor_s (per step)"
                                         : " alone (the traces run one micro-batch count: pass traces of two or more "
                                           "to separate the per-step host work, or fit --from the study)") +
                      " close the steps after the ops' rates; host_micro_batch_s keeps its value");
}

// Collectives of known size → the tier their groups span: α–β least squares (calibrate.h).
void fitComm(TraceFit& out, const std::vector<TraceMeasure>& traces, const std::vector<FitRow>& rows,
             const std::set<std::string>& held) {
  std::vector<rundb::Collective> all;
  std::set<int64_t> sizes;
  int64_t widest = 0, cut = 0;
  for (const TraceMeasure& t : traces)
    for (const rundb::Collective& c : t.collectives) {
      cut += c.cut && c.bytes > 0;
      if (c.bytes > 0 && c.group_size >= 2 && c.end_ns > c.start_ns && c.op != "barrier" && !c.cut)
        all.push_back(c), sizes.insert(c.bytes);
    }
  if (cut > 0)  // the trace's end cut them: their bytes are known, their time is not (rows.h Collective::cut)
    out.notes.push_back("collectives: " + std::to_string(cut) + " call(s) the trace's end cut left out of the fit "
                        "(their end was not recorded)");
  for (const FitRow& r : rows) widest = std::max(widest, r.p.world());
  if (sizes.size() < 2) {
    out.notes.push_back("collectives: not fitted (" + std::to_string(sizes.size()) +
                        " distinct message size(s) with a known size; an alpha-beta fit needs two or more)");
    return;
  }
  Cluster& c = out.fitted;
  const bool cpu = c.kind == ClusterKind::Cpu;
  if (cpu && widest > c.devices_per_node) {
    out.notes.push_back("collectives: not fitted (a CPU cluster's between-node tier is not a fittable constant)");
    return;
  }
  out.collectives = fitCollectives(all);
  out.collectives_fitted = true;
  out.collective_tier = widest > c.devices_per_node ? "inter_node" : "intra_node";
  NetworkTier& tier = out.collective_tier == "inter_node" ? c.inter_node : c.intra_node;
  const std::string bw_path = out.collective_tier + (cpu ? ".bandwidth" : ".efficiency");
  const FitParam& bw = fitParam(bw_path, "--trace");
  const FitParam& lat = fitParam(out.collective_tier + ".latency", "--trace");
  const double want_bw = cpu ? out.collectives.tier.bandwidth : out.collectives.tier.bandwidth / tier.bandwidth;
  for (const auto& [p, want] : {std::pair<const FitParam*, double>{&bw, want_bw}, {&lat, out.collectives.tier.latency}}) {
    if (isHeld(out, held, p->path, "the collectives")) continue;
    const auto [lo, hi] = boundsOf(*p, c);
    TraceTarget t{p->path, "collectives", getParam(c, *p), std::clamp(want, lo, hi), 0, 0, 0, false};
    t.at_bound = t.value != want;
    setParam(c, *p, t.value);
    out.values[p->path] = t.value;
    out.targets.push_back(t);
  }
}

}  // namespace

TraceFit fitFromTraces(const Cluster& base, const std::vector<FitRow>& rows, const std::vector<TraceMeasure>& traces,
                       Framework framework, const std::set<std::string>& held) {
  TraceFit out;
  out.fitted = base;
  fitHost(out, traces, framework, held);
  fitComm(out, traces, rows, held);
  std::vector<std::pair<ClassParam, double>> classes;  // with their measured seconds
  for (const ClassParam& cp : classParams(base, framework)) {
    const double m = measuredClass(traces, cp.cls);
    if (m > 0 && isHeld(out, held, cp.path, "the " + cp.cls + " ops' time")) continue;
    if (m > 0) classes.emplace_back(cp, m);
    else out.notes.push_back(cp.cls + ": not fitted (no kernel of this class in the traces)");
  }
  std::map<std::string, double> model_base;
  {
    const double at = totalStep(base, rows);
    for (const auto& [cp, m] : classes) model_base[cp.path] = modelClassSeconds(base, rows, fitParam(cp.path, "--trace"), at);
  }
  // Fixed point: each rate scaled by model/measured, clamped to its bounds, until the classes agree.
  for (int round = 0; round < kRounds; ++round) {
    const double at = totalStep(out.fitted, rows);
    std::vector<std::pair<const FitParam*, double>> next;
    for (const auto& [cp, m] : classes) {
      const FitParam& p = fitParam(cp.path, "--trace");
      const double model = modelClassSeconds(out.fitted, rows, p, at);
      if (!(model > 0)) continue;  // the model prices nothing of this class for these rows
      const auto [lo, hi] = boundsOf(p, base);
      next.emplace_back(&p, std::clamp(getParam(out.fitted, p) * model / m, lo, hi));
    }
    for (const auto& [p, v] : next) setParam(out.fitted, *p, v);
  }
  const double at = totalStep(out.fitted, rows);
  for (const auto& [cp, m] : classes) {
    const FitParam& p = fitParam(cp.path, "--trace");
    const auto [lo, hi] = boundsOf(p, base);
    TraceTarget t{p.path, cp.cls, getParam(base, p), getParam(out.fitted, p), m, model_base[p.path],
                  modelClassSeconds(out.fitted, rows, p, at), false};
    if (!(t.model_base_s > 0)) {
      out.notes.push_back(cp.cls + ": not fitted (the time model prices no such work for this configuration)");
      continue;
    }
    t.at_bound = t.value <= lo * (1 + 1e-9) || t.value >= hi * (1 - 1e-9);
    out.values[p.path] = t.value;
    out.targets.push_back(t);
  }
  if (base.kind == ClusterKind::Gpu) fitOverlap(out, rows, traces, framework, held);
  if (const Framework ext = externalFramework(base, rows); ext != Framework::Trainscope) {
    out.notes.erase(std::remove(out.notes.begin(), out.notes.end(), std::string(kCpuHostNote)), out.notes.end());
    fitExternalHost(out, rows, traces, ext, held);
  }
  // The pipeline bubble: no constant of its own; the model's from the fitted stages beside the traces'.
  for (const TraceMeasure& t : traces) out.bubble.measured_s += t.bubble_s;
  out.bubble.model_base_s = totalBubble(base, rows);
  out.bubble.model_fit_s = totalBubble(out.fitted, rows);
  return out;
}

}  // namespace trainscope::tuner
