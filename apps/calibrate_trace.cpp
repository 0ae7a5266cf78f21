// calibrate_trace.cpp — `trainscope calibrate --trace`: a cluster file's constants from traces, per
// class of kernel (tuner/trace_fit.h; docs/time-model.md, "Calibration from a trace").
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "calibrate_parts.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/models/fit_params.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/tuner/trace_fit.h"

namespace trainscope::apps {

namespace tn = trainscope::tuner;

namespace {

// The traces and their rows; each trace checked against its configuration and the cluster.
void readTraces(const CalibrateFlags& f, const tn::Cluster& base, std::vector<tn::TraceMeasure>& traces,
                std::vector<tn::FitRow>& rows) {
  for (const std::string& path : f.trace) {
    const std::string where = "--trace " + path;
    files::requireRegularFile(path, "--trace", "pass run databases (`trainscope import` writes them from traces)");
    std::unique_ptr<rundb::RunReader> reader;
    try {
      reader = std::make_unique<rundb::RunReader>(path);
    } catch (const std::exception& e) {
      throw UserError(where, path + " is not a run database (" + std::string(e.what()) + ")",
                      "import the trace first (`trainscope import TRACE.json -o run.db`)");
    }
    tn::TraceMeasure t = tn::measureTrace(*reader, where);
    tn::FitRow r = traceRow(f, base, path, t.step_s);
    const int64_t world = r.p.world();
    if (t.max_rank >= world || t.ranks > world)
      throw UserError(f.config.empty() ? where : "--config",
                      "the configuration runs " + std::to_string(world) + " rank(s) (" + r.p.describe() + "), but " +
                          path + " holds " + std::to_string(t.ranks) + " rank(s), the largest rank " +
                          std::to_string(t.max_rank),
                      "give the configuration the trace ran with (gpus, dp, tp, pp) so that every rank is in it");
    if (t.gpu != (base.kind == tn::ClusterKind::Gpu))
      throw UserError("--cluster", path + (t.gpu ? " holds GPU kernels" : " holds no GPU kernels (CPU ops only)") +
                                       ", but " + base.name + " is a " + trainscope::models::toString(base.kind) + " cluster",
                      t.gpu ? "pass the GPU cluster the trace ran on"
                            : "pass a CPU cluster, or a trace recorded with the profiler's CUDA activity");
    r.source = path;
    r.group = path;
    traces.push_back(std::move(t));
    rows.push_back(std::move(r));
  }
}

// A constant --cluster's "calibration" record says an earlier calibrate fitted: its value and where from.
struct EarlierFit {
  double value = 0;
  std::string from;  // "calibrate --from study.db (24 rows), 2026-12-07T10:00:00Z"
};

// The constants --cluster's file records as fitted: by an earlier calibrate (its "calibration"."fitted",
// which wins) or before a preset shipped (its "fitted"); the calibration record itself in `previous`
// (null: a preset, or a file never calibrated).
std::map<std::string, EarlierFit> earlierFits(const tn::Cluster& base, nlohmann::json& previous) {
  std::map<std::string, EarlierFit> out;
  std::string text;
  try {
    text = files::readTextFile(base.source, "--cluster", "");
  } catch (const std::exception&) {
    return out;
  }
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return out;
  // A shipped preset's constants fitted before it shipped: its "fitted" maps each path to where from
  // (models/clusters/*.json), the value the file's own at that path.
  if (j.contains("fitted") && j["fitted"].is_object())
    for (const auto& [path, src] : j["fitted"].items()) {
      const nlohmann::json* v = &j;
      for (size_t at = 0; v && at <= path.size();) {
        const size_t dot = std::min(path.find('.', at), path.size());
        const std::string key = path.substr(at, dot - at);
        v = v->is_object() && v->contains(key) ? &(*v)[key] : nullptr;
        at = dot + 1;
      }
      if (v && v->is_number() && src.is_string())
        out[path] = {v->get<double>(), "the shipped fit of " + base.name + ": " + src.get<std::string>()};
    }
  if (!j.contains("calibration") || !j["calibration"].is_object()) return out;
  previous = j["calibration"];
  if (!previous.contains("fitted") || !previous["fitted"].is_object()) return out;
  const std::string from = earlierSource(previous);
  for (const auto& [path, e] : previous["fitted"].items())
    if (e.is_object() && e.contains("value") && e["value"].is_number())
      out[path] = {e["value"].get<double>(), e.contains("inherited") && e["inherited"].is_string()
                                                 ? e["inherited"].get<std::string>()
                                                 : from};
  return out;
}

// The trace's fit against the constants an earlier calibration fitted (calibrate --trace on a
// calibrated file): each clash printed as one line, old → new, where the old came from; refused
// without --keep-fitted or --replace-fitted, refitted around the kept ones with --keep-fitted.
// Returns the clashes (path → earlier) that the output records.
std::map<std::string, EarlierFit> settleEarlier(const CalibrateFlags& f, const tn::Cluster& base,
                                                const std::vector<tn::FitRow>& rows,
                                                const std::vector<tn::TraceMeasure>& traces,
                                                const std::map<std::string, EarlierFit>& earlier, tn::TraceFit& fit) {
  std::map<std::string, EarlierFit> clashes;
  for (const tn::TraceTarget& t : fit.targets)
    if (auto it = earlier.find(t.path); it != earlier.end()) clashes[t.path] = it->second;
  if (clashes.empty()) return clashes;
  std::FILE* out = f.json || !(f.keep_fitted || f.replace_fitted) ? stderr : stdout;  // --json: stdout is the record
  for (const auto& [path, e] : clashes) {
    const double now = fit.values.at(path);
    if (f.keep_fitted)
      std::fprintf(out, "kept %s at %.6g (fitted by %s); this trace alone gives %.6g\n", path.c_str(), e.value,
                   e.from.c_str(), now);
    else
      std::fprintf(out, "%s %s: %.6g -> %.6g (this trace); %.6g was fitted by %s\n",
                   f.replace_fitted ? "replaced" : "would replace", path.c_str(), e.value, now, e.value, e.from.c_str());
  }
  if (!f.keep_fitted && !f.replace_fitted)
    throw UserError("--trace", std::to_string(clashes.size()) + " constant(s) that " + base.source +
                                   " records as fitted (by an earlier calibrate, or a preset's shipped fit) would be "
                                   "replaced by this trace's fit (listed above)",
                    "pass --keep-fitted to keep them and fit only the rest, or --replace-fitted to replace them "
                    "(the output records both sources)");
  if (f.keep_fitted) {
    std::set<std::string> held;
    for (const auto& [path, e] : clashes) held.insert(path);
    fit = tn::fitFromTraces(base, rows, traces, tn::parseFramework(f.framework), held);
  }
  return clashes;
}

nlohmann::json record(const CalibrateFlags& f, const tn::Cluster& base, const tn::TraceFit& fit,
                      const std::vector<tn::TraceMeasure>& traces, const tn::ErrorSummary& before,
                      const tn::ErrorSummary& after) {
  nlohmann::json cal;
  cal["base_cluster"] = base.source;
  cal["framework"] = f.framework;
  cal["date"] = utcNow();
  cal["method"] = "from traces, per kernel class: each class's constant set so that the time model's time for the "
                  "class equals the traces' (docs/time-model.md, \"Calibration from a trace\")";
  for (const tn::TraceTarget& t : fit.targets) {
    const tn::FitParam& p = tn::fitParam(t.path, "--trace");
    const auto [lo, hi] = tn::boundsOf(p, base);
    nlohmann::json e = {{"value", t.value}, {"base", t.base}, {"bounds", {lo, hi}}, {"what", p.what}, {"class", t.cls},
                        {"at_bound", t.at_bound}};
    const bool per_launch = t.cls == "host per launch" || t.cls == "host per backward launch";
    if (t.cls != "collectives" && !per_launch)
      e["per_step_s"] = {{"measured", t.measured_s}, {"model_base", t.model_base_s}, {"model_fitted", t.model_fit_s}};
    if (per_launch) e["measured_s_per_launch"] = t.measured_s;
    cal["fitted"][t.path] = e;
  }
  if (fit.collectives_fitted)
    cal["collectives"] = {{"tier", fit.collective_tier}, {"samples", fit.collectives.samples}, {"r2", fit.collectives.r2},
                          {"latency_s", fit.collectives.tier.latency},
                          {"bandwidth_bytes_per_s", fit.collectives.tier.bandwidth}};
  for (const tn::TraceMeasure& t : traces) {
    nlohmann::json row = {{"source", t.source}, {"rows", 1}, {"steps", t.steps}, {"step_s", t.step_s},
                          {"ranks", t.ranks}, {"from", t.gpu ? "kernels" : "cpu ops"}, {"class_s", t.class_s}};
    if (t.gpu) row["launches_per_step"] = t.launches, row["host_busy_s"] = t.host_busy_s;
    if (t.backward_launches > 0)
      row["backward_launches_per_step"] = t.backward_launches, row["host_backward_busy_s"] = t.host_backward_busy_s;
    if (t.bubble_s > 0) row["pipeline_bubble_s"] = t.bubble_s;
    if (t.grad_comm_s > 0) row["gradient_reduction_s"] = t.grad_comm_s, row["gradient_reduction_hidden_s"] = t.grad_comm_hidden_s;
    cal["rows"].push_back(row);
  }
  if (fit.bubble.measured_s > 0 || fit.bubble.model_base_s > 0)
    cal["pipeline_bubble"] = {{"what", "the fill and drain: no constant; the model's from the fitted stages' times"},
                              {"per_step_s", {{"measured", fit.bubble.measured_s}, {"model_base", fit.bubble.model_base_s},
                                              {"model_fitted", fit.bubble.model_fit_s}}}};
  cal["notes"] = fit.notes;
  cal["base_residuals"] = summaryJson(before);
  cal["residuals"] = summaryJson(after);
  return cal;
}

void printFit(const tn::Cluster& base, const tn::TraceFit& fit, size_t traces) {
  std::printf("trainscope calibrate --trace: %zu trace(s) on %s\n", traces, base.name.c_str());
  for (const tn::TraceTarget& t : fit.targets) {
    std::printf("  %-36s %12.6g  (was %s) from %s", t.path.c_str(), t.value,
                tn::paramText(base, tn::fitParam(t.path, "--trace")).c_str(), t.cls.c_str());
    if (t.cls != "collectives" && t.cls != "host per launch" && t.cls != "host per backward launch")
      std::printf(": measured %.4g s/step, model %.4g -> %.4g", t.measured_s, t.model_base_s, t.model_fit_s);
    std::printf("%s\n", t.at_bound ? " [at its bound]" : "");
  }
  if (fit.bubble.measured_s > 0 || fit.bubble.model_base_s > 0)
    std::printf("  %-36s %12s  from the stages' times: measured %.4g s/step, model %.4g -> %.4g\n", "pipeline bubble", "",
                fit.bubble.measured_s, fit.bubble.model_base_s, fit.bubble.model_fit_s);
  for (const std::string& n : fit.notes) std::printf("  note: %s\n", n.c_str());
}

}  // namespace

int runCalibrateTrace(const CalibrateFlags& f, const tn::Cluster& base) {
  files::OutputRule rule;
  rule.field = "-o";
  rule.inputs = f.trace;
  rule.inputs.push_back(base.source);
  rule.overwrite = f.overwrite;
  if (!f.evaluate) {
    if (f.out.empty()) throw UserError("-o", "is needed: the calibrated cluster file to write", "pass -o NEW.json");
    files::checkOutput(f.out, rule);  // before any work
  }
  std::vector<tn::TraceMeasure> traces;
  std::vector<tn::FitRow> rows;
  readTraces(f, base, traces, rows);
  nlohmann::json previous;  // --cluster's own calibration record, kept in the output
  const std::map<std::string, EarlierFit> earlier = earlierFits(base, previous);
  const tn::ErrorSummary before = tn::summarize(rows, tn::priceRows(base, rows));
  if (f.evaluate) {
    if (f.json) std::cout << jsonText(summaryJson(before)) << "\n";
    else printSummary("errors:", before);
    return 0;
  }
  tn::TraceFit fit = tn::fitFromTraces(base, rows, traces, tn::parseFramework(f.framework));
  std::map<std::string, double> trace_values = fit.values;  // the trace's own, before any is kept
  const std::map<std::string, EarlierFit> clashes = settleEarlier(f, base, rows, traces, earlier, fit);
  const tn::ErrorSummary after = tn::summarize(rows, tn::priceRows(fit.fitted, rows));
  nlohmann::json cal = record(f, base, fit, traces, before, after);
  // Both sources: the earlier record whole, and per clashing constant what it was and what became of it.
  if (!previous.is_null()) cal["previous"] = previous;
  for (const auto& [path, e] : clashes) {
    if (f.keep_fitted)
      cal["kept"][path] = {{"value", e.value}, {"from", e.from}, {"trace_value", trace_values.at(path)}};
    else
      cal["fitted"][path]["replaced"] = {{"value", e.value}, {"from", e.from}};
  }

  cal = writeCalibrated(f, base, fit.values, cal, rule);
  if (f.json) {
    std::cout << jsonText(cal) << "\n";
    return 0;
  }
  printFit(base, fit, traces.size());
  printSummary("base cluster:", before);
  printSummary("fitted (in sample):", after);
  std::printf("wrote %s\n", f.out.c_str());
  return 0;
}

}  // namespace trainscope::apps
