// profile.cpp — per-layer costs from a traced run, and step times composed from them (profile.h).
#include "trainscope/tuner/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <set>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"
#include "trainscope/rundb/range_names.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/tuner/models.h"
#include "stage_params.h"

namespace trainscope::tuner {
namespace {

namespace names = rundb::names;
using runconfig::Checkpointing;

double median(std::vector<double> v) { return rundb::percentile(std::move(v), 0.5); }

double ns(int64_t a, int64_t b) { return double(b - a) * 1e-9; }

// A GPU rank's device work by launch time: what a host range launched, and how long the device
// took over it (from the first of those events' start to the last one's end).
class DeviceWork {
 public:
  DeviceWork() = default;
  DeviceWork(rundb::RunReader& reader, int64_t rank) {
    std::unordered_map<int64_t, int64_t> launch;  // correlation → launch time
    for (const rundb::ApiCall& a : reader.events<rundb::ApiCall>(rank))
      if (a.correlation >= 0) launch.emplace(a.correlation, a.start_ns);
    auto add = [&](int64_t correlation, int64_t start, int64_t end) {
      auto it = correlation >= 0 ? launch.find(correlation) : launch.end();
      if (it != launch.end() && end > start) events_.push_back({it->second, start, end});
    };
    for (const rundb::Kernel& k : reader.events<rundb::Kernel>(rank)) add(k.correlation, k.start_ns, k.end_ns);
    for (const rundb::Memcpy& m : reader.events<rundb::Memcpy>(rank)) add(m.correlation, m.start_ns, m.end_ns);
    for (const rundb::Memset& m : reader.events<rundb::Memset>(rank)) add(m.correlation, m.start_ns, m.end_ns);
    std::sort(events_.begin(), events_.end(), [](const Event& a, const Event& b) { return a.launch < b.launch; });
  }
  // Seconds from the start of the first to the end of the last device event launched in [begin, end).
  double launchedWithin(int64_t begin, int64_t end) const {
    auto lo = std::lower_bound(events_.begin(), events_.end(), begin, [](const Event& e, int64_t t) { return e.launch < t; });
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (auto it = lo; it != events_.end() && it->launch < end; ++it) first = std::min(first, it->start), last = std::max(last, it->end);
    return last > first ? ns(first, last) : 0.0;
  }

 private:
  struct Event {
    int64_t launch, start, end;
  };
  std::vector<Event> events_;
};

// What one rank measured in one counted step.
struct StepSample {
  double layer_sum = 0, head = 0, forward = 0, backward = 0, recompute = 0, micro = 0, grad_sync = 0, optimizer = 0;
  int64_t layers = 0, recomputes = 0, heads = 0, forwards = 0;
  double step = 0;
};

// The string ids of the ranges the costs are measured from (kNoString where the run has none).
struct RangeIds {
  rundb::StringId layer, head, forward, backward, recompute, micro, sync, optimizer;
};

// The run's range names; a run without layer or backward ranges has nothing to measure.
RangeIds rangeIdsOf(rundb::RunReader& reader) {
  const auto id = [&](const char* n) { return reader.find(n).value_or(rundb::kNoString); };
  const RangeIds ids{id(names::kLayer),     id(names::kHead),       id(names::kForward),  id(names::kBackward),
                     id(names::kRecompute), id(names::kMicroBatch), id(names::kGradSync), id(names::kOptimizer)};
  if (ids.layer == rundb::kNoString || ids.backward == rundb::kNoString)
    throw UserError("trace", reader.path() + " has no layer ranges to measure costs from",
                    "trace the run at the ranges level (trainscope run --trace FILE)");
  return ids;
}

// Whether the ranges are timed on the device. On a GPU the host ranges only launch the work: each
// range is timed by the device work it launched (kernels, copies, sets joined to their launching
// API call by correlation id), so a GPU run traced without its kernels is refused.
bool timedOnDevice(rundb::RunReader& reader) {
  const std::string dev = reader.meta("device");
  const bool gpu = !dev.empty() && dev != "cpu";
  if (gpu && !reader.hasEvents("kernels"))
    throw UserError("trace", reader.path() + " ran on " + dev + " without its kernels: its ranges time the host's launches",
                    "trace the profile run with --trace-level all (CUPTI), or use the analytic model");
  return gpu;
}

// One rank's ranges summed per step, and the spans of its recompute and backward ranges.
struct RankRanges {
  std::vector<StepSample> per;  // by step; the steps not counted stay empty
  std::vector<rundb::Interval> recompute_spans, backward_spans;

  // Adds range `r`, `d` seconds long, to the sample of step `at`.
  void add(size_t at, const rundb::Range& r, double d, const RangeIds& ids) {
    StepSample& s = per[at];
    if (r.name == ids.recompute) {
      s.recompute += d;
      ++s.recomputes;
      recompute_spans.push_back({r.start_ns, r.end_ns});
    } else if (r.name == ids.layer) {
      // A layer range inside a recompute is the recomputation, not a forward.
      const bool inside = !recompute_spans.empty() && r.start_ns < recompute_spans.back().end &&
                          r.start_ns >= recompute_spans.back().begin;
      if (!inside) s.layer_sum += d, ++s.layers;
    } else if (r.name == ids.head) {
      s.head += d, ++s.heads;
    } else if (r.name == ids.forward) {
      s.forward += d, ++s.forwards;
    } else if (r.name == ids.backward) {
      s.backward += d;
      backward_spans.push_back({r.start_ns, r.end_ns});
    } else if (r.name == ids.micro) {
      s.micro += d;
    } else if (r.name == ids.sync) {
      s.grad_sync += d;
    } else if (r.name == ids.optimizer) {
      s.optimizer += d;
    }
  }
};

// A rank's ranges, each added to the counted step it starts in (the first `skip` steps are not).
RankRanges rankRanges(rundb::RunReader& reader, int64_t rank, const std::vector<rundb::Step>& steps,
                      const RangeIds& ids, bool gpu, int64_t skip) {
  RankRanges out;
  out.per.resize(steps.size());
  const auto ranges = reader.events<rundb::Range>(rank);
  const DeviceWork work = gpu ? DeviceWork(reader, rank) : DeviceWork();
  size_t at = 0;
  for (const rundb::Range& r : ranges) {
    while (at < steps.size() && r.start_ns >= steps[at].start_ns + steps[at].step_time_ns) ++at;
    if (at >= steps.size()) break;
    if (r.start_ns < steps[at].start_ns || int64_t(at) < skip) continue;
    out.add(at, r, gpu ? work.launchedWithin(r.start_ns, r.end_ns) : ns(r.start_ns, r.end_ns), ids);
  }
  return out;
}

// Every rank's samples of each cost, in seconds; the costs are their medians.
struct CostSamples {
  std::vector<double> fwd, bwd, rc, head, embed, opt_per_param, other, sync, hidden;

  // Adds a rank's counted steps: a rank of `stage` that updates `n_params` parameters.
  void addSteps(std::vector<StepSample>& per, const std::vector<rundb::Step>& steps, const Plan& p, int64_t stage,
                double n_params, int64_t skip) {
    for (size_t k = size_t(skip); k < steps.size(); ++k) {
      StepSample& s = per[k];
      s.step = double(steps[k].step_time_ns) * 1e-9;
      if (s.layers == 0) continue;
      // Per invocation: core lanes run a micro-batch's forward, head and backward on every lane at
      // once, so a range's mean length (not its sum per micro-batch) is the wall time it takes.
      const double f = s.layer_sum / double(s.layers);
      fwd.push_back(f);
      bwd.push_back(std::max(0.0, s.backward - s.recompute) / double(s.layers));
      if (s.recomputes > 0) rc.push_back(s.recompute / double(s.layers));
      const double head_each = s.heads > 0 ? s.head / double(s.heads) : 0;
      if (s.heads > 0) head.push_back(head_each);
      if (stage == 0 && s.forwards > 0) {
        const double layers_each = double(s.layers) / double(s.forwards);
        embed.push_back(std::max(0.0, s.forward / double(s.forwards) - layers_each * f - head_each));
      }
      if (s.optimizer > 0 && n_params > 0) opt_per_param.push_back(s.optimizer / n_params);
      if (p.pp == 1) {
        // Without DP the grad_sync range is the lanes' gradient sum, SP's and the embedding's
        // reductions: part of "other". With DP it is the DP sync, kept apart (scaled by bytes).
        other.push_back(std::max(0.0, s.step - s.micro - s.optimizer - (p.dp > 1 ? s.grad_sync : 0.0)));
        if (p.dp > 1) sync.push_back(s.grad_sync);
      }
    }
  }
};

// The share of a rank's DP collectives (from `counted_from` on) that its backward ranges covered;
// none when it ran no DP collective.
std::optional<double> dpHiddenShare(rundb::RunReader& reader, int64_t rank,
                                    const std::vector<rundb::Interval>& backward_spans, int64_t counted_from) {
  const auto merged = rundb::unionOf(backward_spans);
  double total = 0, covered = 0;
  for (const rundb::Collective& c : reader.collectives(rank)) {
    if (c.group != "dp" || c.start_ns < counted_from || c.end_ns <= c.start_ns || c.cut) continue;  // cut: end unknown
    total += ns(c.start_ns, c.end_ns);
    covered += double(rundb::coveredWithin(merged, c.start_ns, c.end_ns)) * 1e-9;
  }
  if (total > 0) return covered / total;
  return std::nullopt;
}

// The costs: each one's median over the samples (the recompute under the plan's checkpointing, the
// DP sync with the bytes it moved).
LayerCosts mediansOf(const CostSamples& x, const Plan& p, const std::vector<double>& params,
                     const std::vector<double>& experts) {
  LayerCosts c;
  c.layer_fwd_s = median(x.fwd);
  c.layer_bwd_s = median(x.bwd);
  if (!x.rc.empty()) (p.ckpt == Checkpointing::Full ? c.recompute_full_s : c.recompute_selective_s) = median(x.rc);
  c.head_s = median(x.head);
  c.embed_s = median(x.embed);
  c.optimizer_s_per_param = median(x.opt_per_param);
  c.other_s = x.other.empty() ? -1 : median(x.other);
  if (!x.sync.empty()) {
    c.dp_sync_s = median(x.sync);
    c.dp_sync_bytes = allReduceBytes(p, params, experts);
  }
  if (!x.hidden.empty()) c.dp_hidden_share = median(x.hidden);
  c.zero = runconfig::stageNumber(p.zero);
  return c;
}

}  // namespace

std::string shapeKey(const Plan& p, const Cluster& c) {
  char k[160];
  const int64_t sharing = c.kind == ClusterKind::Cpu ? std::min<int64_t>(p.world(), c.devices_per_node) : 1;
  std::snprintf(k, sizeof(k), "mbs%lld seq%lld tp%lld%s %s x%lld/node lanes%lld", static_cast<long long>(p.mbs),
                static_cast<long long>(p.seq), static_cast<long long>(p.tp), p.sequence_parallel ? " sp" : "",
                runconfig::toString(p.precision), static_cast<long long>(sharing),
                static_cast<long long>(std::max<int64_t>(1, p.cpu_lanes)));
  // A CP rank's layer runs s/cp tokens and the ring inside its attention: its own shape. So does an
  // expert-parallel one: its MoE layers' all-to-alls are inside their ranges.
  std::string key = k;
  if (p.cp > 1) key += " cp" + std::to_string(p.cp);
  if (p.ep > 1) key += " ep" + std::to_string(p.ep);
  return key;
}

LayerCosts costsFromRun(rundb::RunReader& reader, const workloads::Workload& w, const Plan& p, int64_t skip) {
  const RangeIds ids = rangeIdsOf(reader);
  const bool gpu = timedOnDevice(reader);
  const std::vector<double> params = stageParams(w, p), experts = unmanagedParams(w, p);
  CostSamples samples;
  for (int64_t rank : reader.stepRanks()) {
    const auto steps = reader.steps(rank);
    if (int64_t(steps.size()) <= skip) continue;
    const int64_t stage = rank / std::max<int64_t>(1, p.tp * p.cp * p.dp);
    RankRanges ranges = rankRanges(reader, rank, steps, ids, gpu, skip);
    const size_t st = size_t(std::clamp<int64_t>(stage, 0, int64_t(params.size()) - 1));
    const double n_params = paramsUpdated(p, params[st], experts[st]);
    samples.addSteps(ranges.per, steps, p, stage, n_params, skip);
    // How much of the data-parallel collectives' time backward covered.
    if (p.dp > 1 && p.pp == 1)
      if (const auto share = dpHiddenShare(reader, rank, ranges.backward_spans, steps[size_t(skip)].start_ns))
        samples.hidden.push_back(*share);
  }
  if (samples.fwd.empty())
    throw UserError("trace", reader.path() + " has no layer ranges in its counted steps",
                    "trace at least " + std::to_string(skip + 1) + " steps at the ranges level");
  return mediansOf(samples, p, params, experts);
}

std::string costsLabel(const std::string& key, const LayerCosts& k) {
  return k.zero > 0 ? key + " zero" + std::to_string(k.zero) : key;
}

void MeasuredCosts::add(const std::string& key, const LayerCosts& c) { runs_[key].push_back(c); }

namespace {
// The runs that measured a field (`has`): those of ZeRO stage `zero` where any did, else all of them.
template <class Has>
std::vector<LayerCosts> measuredBy(const std::vector<LayerCosts>& v, int64_t zero, Has has) {
  std::vector<LayerCosts> same, any;
  for (const auto& c : v)
    if (has(c)) (c.zero == zero ? same : any).push_back(c);
  if (!same.empty()) return same;
  return any;
}
bool hasOptimizer(const LayerCosts& c) { return c.optimizer_s_per_param > 0; }
bool hasOther(const LayerCosts& c) { return c.other_s >= 0; }
bool hasDpSync(const LayerCosts& c) { return c.dp_sync_bytes > 0; }
bool hasHidden(const LayerCosts& c) { return c.dp_hidden_share >= 0; }
}  // namespace

std::optional<LayerCosts> MeasuredCosts::find(const std::string& key, int64_t zero) const {
  auto it = runs_.find(key);
  if (it == runs_.end() || it->second.empty()) return std::nullopt;
  const std::vector<LayerCosts>& v = it->second;
  auto field = [](const std::vector<LayerCosts>& from, double LayerCosts::*f) {
    std::vector<double> x;
    for (const auto& c : from)
      if (c.*f > 0) x.push_back(c.*f);
    return median(x);
  };
  LayerCosts m;
  m.layer_fwd_s = field(v, &LayerCosts::layer_fwd_s);
  m.layer_bwd_s = field(v, &LayerCosts::layer_bwd_s);
  m.recompute_full_s = field(v, &LayerCosts::recompute_full_s);
  m.recompute_selective_s = field(v, &LayerCosts::recompute_selective_s);
  m.head_s = field(v, &LayerCosts::head_s);
  m.embed_s = field(v, &LayerCosts::embed_s);
  // Step-level costs: from the runs of this ZeRO stage that measured each, else any that did.
  m.optimizer_s_per_param = field(measuredBy(v, zero, hasOptimizer), &LayerCosts::optimizer_s_per_param);
  {
    std::vector<double> x;
    for (const auto& c : measuredBy(v, zero, hasOther)) x.push_back(c.other_s);
    m.other_s = x.empty() ? -1 : median(x);
  }
  // The DP sync of the run with the most bytes (one run's pair, not a median of mismatched halves).
  for (const auto& c : measuredBy(v, zero, hasDpSync))
    if (c.dp_sync_bytes > m.dp_sync_bytes) m.dp_sync_bytes = c.dp_sync_bytes, m.dp_sync_s = c.dp_sync_s;
  m.dp_hidden_share = -1;
  for (const auto& c : measuredBy(v, zero, hasHidden)) m.dp_hidden_share = std::max(m.dp_hidden_share, c.dp_hidden_share);
  // The row's runs: those of this stage (the layer figures above are over every run of the shape).
  m.zero = zero;
  m.runs = 0;
  for (const auto& c : v) m.runs += c.zero == zero;
  if (m.runs == 0) m.zero = v.front().zero, m.runs = int64_t(v.size());
  return m;
}

std::vector<int64_t> MeasuredCosts::zeroStages(const std::string& key) const {
  std::set<int64_t> z;
  if (auto it = runs_.find(key); it != runs_.end())
    for (const auto& c : it->second) z.insert(c.zero);
  return {z.begin(), z.end()};
}

std::vector<LayerCosts> MeasuredCosts::allRuns() const {
  std::vector<LayerCosts> all;
  for (const auto& [key, v] : runs_) all.insert(all.end(), v.begin(), v.end());
  return all;
}

double MeasuredCosts::anyOther(int64_t zero) const {
  std::vector<double> x;
  for (const auto& c : measuredBy(allRuns(), zero, hasOther)) x.push_back(c.other_s);
  return median(x);
}

int64_t lanesOfRun(rundb::RunReader& reader) {
  const auto fwd = reader.find(names::kForward);
  const auto ranks = reader.stepRanks();
  if (!fwd || ranks.empty()) return 1;
  std::set<int64_t> tids;
  for (const rundb::Range& r : reader.events<rundb::Range>(ranks.front()))
    if (r.name == *fwd) tids.insert(r.tid);
  return std::max<int64_t>(1, int64_t(tids.size()));
}

std::optional<std::pair<double, double>> MeasuredCosts::anyDpSync(int64_t zero) const {
  for (const auto& c : measuredBy(allRuns(), zero, hasDpSync)) return std::make_pair(c.dp_sync_bytes, c.dp_sync_s);
  return std::nullopt;
}

namespace {
// Field names of LayerCosts in JSON (seconds; dp_sync_bytes in bytes; dp_hidden_share −1 when none).
const std::pair<const char*, double LayerCosts::*> kCostFields[] = {
    {"layer_fwd_s", &LayerCosts::layer_fwd_s},
    {"layer_bwd_s", &LayerCosts::layer_bwd_s},
    {"recompute_full_s", &LayerCosts::recompute_full_s},
    {"recompute_selective_s", &LayerCosts::recompute_selective_s},
    {"head_s", &LayerCosts::head_s},
    {"embed_s", &LayerCosts::embed_s},
    {"optimizer_s_per_param", &LayerCosts::optimizer_s_per_param},
    {"dp_sync_s", &LayerCosts::dp_sync_s},
    {"dp_sync_bytes", &LayerCosts::dp_sync_bytes},
    {"dp_hidden_share", &LayerCosts::dp_hidden_share},
    {"other_s", &LayerCosts::other_s},
};
}  // namespace

std::string costsJson(const MeasuredCosts& m) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, runs] : m.runs())
    for (int64_t z : m.zeroStages(key)) {
      const LayerCosts k = *m.find(key, z);
      nlohmann::json j = {{"shape", key}, {"runs", k.runs}, {"zero", k.zero}};
      for (const auto& [name, field] : kCostFields) j[name] = k.*field;
      out.push_back(j);
    }
  return jsonText(out);
}

std::vector<std::pair<std::string, LayerCosts>> costsFromJson(const std::string& text) {
  std::vector<std::pair<std::string, LayerCosts>> out;
  for (const auto& j : nlohmann::json::parse(text)) {
    LayerCosts k;
    for (const auto& [name, field] : kCostFields)  // a null (NaN written by a writer) keeps the default
      if (j.contains(name) && j[name].is_number()) k.*field = j[name].get<double>();
    if (j.contains("runs") && j["runs"].is_number_integer()) k.runs = j["runs"].get<int64_t>();
    if (j.contains("zero") && j["zero"].is_number_integer()) k.zero = j["zero"].get<int64_t>();
    out.emplace_back(j.at("shape").get<std::string>(), k);
  }
  return out;
}

}  // namespace trainscope::tuner
