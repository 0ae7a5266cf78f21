// calibrate_command.cpp — see calibrate_command.h. Rows come from JSON lines (predict --batch's keys
// plus "measured_step_s", optionally "measured_peak_bytes" and "group"; "workload" may be an inline
// workload object), from trainscope run databases, and from studies (their ok trials' databases).
#include "calibrate_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "calibrate_parts.h"
#include "predict_command.h"
#include "predict_flags.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/models/fit_params.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/fit.h"
#include "trainscope/tuner/study.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;

namespace {

struct Rows {
  std::vector<tn::FitRow> rows;
  std::vector<std::pair<int64_t, int64_t>> peaks;  // (predicted, measured) where a row gave one
  std::vector<std::pair<std::string, int64_t>> per_source;
  std::map<std::string, std::shared_ptr<const workloads::Workload>> workloads;  // by name or inline text
};

std::string devicesGroup(const std::string& model, int64_t devices) {
  return model + " @ " + std::to_string(devices) + " devices";
}

// A measured figure above 0, or a UserError naming its key.
double measured(const nlohmann::json& j, const char* key, const std::string& where, bool required) {
  if (!j.contains(key)) {
    if (required)
      throw UserError(where + ": " + key, "is missing", "give the measured step time in seconds on every line");
    return 0;
  }
  const double v = j[key].is_number() ? j[key].get<double>() : -1;
  if (!(v > 0) || !std::isfinite(v))
    throw UserError(where + ": " + key, "is " + jsonText(j[key]) + "; it must be a number above 0",
                    std::string(key) == "measured_step_s" ? "give seconds per step" : "give bytes per rank");
  return v;
}

// One JSON line: its flags priced on the base cluster (with the line's nodes), its measurements.
void addLine(Rows& out, const std::string& text, const std::string& where, const PredictFlags& defaults,
             const tn::Cluster& base) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) {
    // A line cut inside its object (the file's last, without its newline: an interrupted write).
    bool cut = false;
    try {
      (void)nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error& e) {
      cut = !jsonCutShort(e.byte, text.size(), e.what()).empty();
    }
    throw UserError(where, cut ? "ends inside its JSON object: the file is truncated (cut short) or unfinished"
                               : "is not a JSON object",
                    cut ? "restore the file, or drop its last, unfinished line"
                        : "one object per line: predict's flags and measured_step_s");
  }
  if (j.contains("cluster"))
    throw UserError(where + ": cluster", "calibrate prices every row on --cluster", "drop the key; give nodes or gpus");
  if (j.contains("storage_gbps"))  // predict --batch prices a checkpoint's write with it; no step holds one
    throw UserError(where + ": storage_gbps", "prices a checkpoint's write, which no measured step holds",
                    "drop the key");
  const double step = measured(j, "measured_step_s", where, true);
  const double peak = measured(j, "measured_peak_bytes", where, false);
  std::string group;
  if (j.contains("group")) {
    if (!j["group"].is_string()) throw UserError(where + ": group", "must be a string", "name the model and cluster size");
    group = j["group"].get<std::string>();
  }
  std::shared_ptr<const workloads::Workload> w;
  if (j.contains("workload") && j["workload"].is_object()) {
    const std::string spec = j["workload"].dump();
    auto it = out.workloads.find(spec);
    if (it == out.workloads.end())
      it = out.workloads.emplace(spec, std::make_shared<workloads::Workload>(workloads::parse(spec, where + ": workload"))).first;
    w = it->second;
    j["workload"] = w->name;
  }
  for (const char* key : {"measured_step_s", "measured_peak_bytes", "group"}) j.erase(key);
  PredictFlags f;
  try {
    f = flagsFromJson(j.dump(), defaults, 0);
  } catch (const UserError& e) {  // "--batch line 0: KEY: …" → "--from FILE line N: KEY: …"
    const std::string what = e.what(), prefix = "--batch line 0: ";
    throw UserError(where, what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what, "");
  }
  if (!w) {
    auto it = out.workloads.find(f.workload);
    if (it == out.workloads.end()) {
      std::shared_ptr<workloads::Workload> loaded;
      try {
        loaded = std::make_shared<workloads::Workload>(workloads::load(f.workload));
      } catch (const UserError& e) {  // "--workload: unknown workload …" → "--from FILE line N: workload: …"
        const std::string what = e.what(), prefix = "--workload: ";
        throw UserError(where + ": workload", what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what, "");
      }
      it = out.workloads.emplace(f.workload, std::move(loaded)).first;
    }
    w = it->second;
  }
  tn::Cluster c = base;
  if (f.nodes > 0) {
    if (f.nodes > tn::kMostClusterDevices / c.devices_per_node)
      throw UserError(where + ": nodes", std::to_string(f.nodes) + " nodes is more than the models price", "give fewer nodes");
    c.nodes = f.nodes;
  }
  PricedConfig priced;
  try {
    priced = priceConfig(f, *w, c);
  } catch (const UserError& e) {
    throw UserError(where, e.what(), "");
  }
  tn::FitRow r;
  r.w = w;
  r.p = priced.p;
  r.options = priced.options;
  r.nodes = c.nodes;
  r.measured_s = step;
  r.group = group.empty() ? devicesGroup(w->name, f.gpus > 0 ? f.gpus : c.devices()) : group;
  out.rows.push_back(std::move(r));
  if (peak > 0) out.peaks.emplace_back(priced.peak_bytes, int64_t(peak));
}

int64_t readLines(Rows& out, const std::string& path, const PredictFlags& defaults, const tn::Cluster& base) {
  std::istringstream in(files::readTextFile(path, "--from", "pass JSON lines, a run database or a study"));
  std::string text;
  int64_t n = 0, rows = 0;
  while (std::getline(in, text)) {
    ++n;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    addLine(out, text, "--from " + path + " line " + std::to_string(n), defaults, base);
    ++rows;
  }
  return rows;
}

// A trainscope run database: its config's plan, the summary's median step time and peak.
void addRun(Rows& out, const std::string& path, const tn::Cluster& base, const std::string& where) {
  std::unique_ptr<rundb::RunReader> reader;
  std::string cfg;
  try {
    reader = std::make_unique<rundb::RunReader>(path);
    cfg = reader->meta("config");
  } catch (const std::exception& e) {
    throw UserError(where, path + " is not a trainscope run database (" + std::string(e.what()) + ")",
                    "pass run databases written by `trainscope run`, a tune's study, or JSON lines");
  }
  if (cfg.empty())
    throw UserError(where, path + " records no training configuration (an imported trace's run has none)",
                    "fit an imported trace with --trace " + files::shellQuote(path) +
                        " --config '{\"workload\": …, \"gpus\": …}', or pass the run databases of `trainscope run` or a tune, "
                        "or JSON lines that give the configuration");
  const rt::TrainConfig tc = rt::fromJson(cfg, path);
  const nlohmann::json j = nlohmann::json::parse(cfg, nullptr, false);
  const auto dim = [&](const char* k) { return j.is_object() ? j.value(k, int64_t(-1)) : int64_t(-1); };
  const std::string spec = j.is_object() ? j.value("workload_spec", j.value("workload", std::string())) : "";
  auto it = out.workloads.find(spec);
  if (it == out.workloads.end())
    it = out.workloads.emplace(spec, std::make_shared<workloads::Workload>(workloads::load(spec))).first;
  tn::FitRow r;
  r.w = it->second;
  r.p = tn::planOf(tc);
  r.p.dp = std::max<int64_t>(1, dim("dp"));
  r.p.gbs = std::max<int64_t>(r.p.gbs, dim("gbs"));
  r.p.cpu = reader->meta("device") == "cpu";
  if (dim("cpu_lanes") == 0) r.p.cpu_lanes = tn::lanesOfRun(*reader);
  if (r.p.cpu != (base.kind == tn::ClusterKind::Cpu))
    throw UserError(where, path + " ran on " + (r.p.cpu ? "CPU ranks" : "GPUs") + ", but --cluster " + base.name +
                               " is a " + trainscope::models::toString(base.kind) + " cluster",
                    "pass the cluster file of the machine the runs ran on");
  const rundb::RunSummary s = rundb::summarize(*reader);
  if (!(s.step_s_median > 0))
    throw UserError(where, path + " has no counted step (a run of one step, or one that failed)", "pass runs of two or more steps");
  // An external runner's trial (import_probe.h) names the framework its job ran: priced under that profile.
  if (const std::string fw = reader->meta("framework"); !fw.empty()) {
    try {
      r.options.framework = tn::parseFramework(fw);
    } catch (const UserError&) {
      throw UserError(where, path + " names an unknown framework \"" + fw + "\"",
                      "pass the run databases of `trainscope tune --runner …` as they were written");
    }
  }
  r.nodes = (r.p.world() + base.devices_per_node - 1) / base.devices_per_node;
  r.measured_s = s.step_s_median;
  r.group = devicesGroup(r.w->name, r.p.world());
  if (s.peak_bytes > 0) out.peaks.emplace_back(tn::predictMemory(*r.w, r.p).peak(), s.peak_bytes);
  out.rows.push_back(std::move(r));
}

bool isSqlite(const std::string& path) {
  const int fd = files::openRegularFile(path, "--from", "pass JSON lines, a run database or a study");
  char head[16] = {};
  const ssize_t n = ::read(fd, head, sizeof(head));
  ::close(fd);
  return n == 16 && std::string(head, 16) == std::string("SQLite format 3\0", 16);
}

Rows readRows(const CalibrateFlags& f, const tn::Cluster& base) {
  PredictFlags defaults;
  defaults.framework = f.framework;
  defaults.cluster = f.cluster;
  Rows out;
  std::set<std::pair<dev_t, ino_t>> seen;  // one file's rows once: a file given twice would weigh double
  for (const std::string& path : f.from) {
    files::requireRegularFile(path, "--from", "pass JSON lines, a run database or a study");
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && !seen.insert({st.st_dev, st.st_ino}).second)
      throw UserError("--from " + path, "is given twice (its rows would count twice in the fit)", "name each file once");
    const size_t before = out.rows.size();
    if (!isSqlite(path)) {
      readLines(out, path, defaults, base);
    } else if (tn::isStudy(path)) {
      const tn::StudySnapshot study = tn::readStudy(path);
      for (const tn::TrialRecord& t : study.trials)
        if (t.status == tn::TrialStatus::Ok && !t.db_path.empty() && std::filesystem::exists(t.db_path))
          addRun(out, t.db_path, base, "--from " + path + " trial " + std::to_string(t.id));
    } else {
      addRun(out, path, base, "--from " + path);
    }
    if (out.rows.size() == before)
      throw UserError("--from " + path, "holds no measured row", "pass a file with measured step times");
    out.per_source.emplace_back(path, int64_t(out.rows.size() - before));
  }
  return out;
}

// The constants to fit: --fit's, or the defaults for the cluster's kind that the rows move.
std::vector<const tn::FitParam*> chosenParams(const CalibrateFlags& f, const tn::Cluster& base, const Rows& rows) {
  std::vector<const tn::FitParam*> out;
  for (const std::string& path : f.fit) {
    const tn::FitParam& p = tn::fitParam(path, "--fit");
    if (std::find(out.begin(), out.end(), &p) == out.end()) out.push_back(&p);
  }
  if (!out.empty()) {
    for (const tn::FitParam* p : out)
      if (tn::identifiable(base, rows.rows, {p}).empty())
        std::fprintf(stderr, "note: --fit %s: no row's prediction moves with it; it keeps the value that fits best by "
                             "chance\n", p->path.c_str());
    return out;
  }
  std::vector<const tn::FitParam*> defaults;
  for (const tn::FitParam& p : tn::fitParams())
    if ((p.kind.empty() || p.kind == trainscope::models::toString(base.kind)) && p.by_default) defaults.push_back(&p);
  out = tn::identifiable(base, rows.rows, defaults);
  if (out.empty())
    throw UserError("--fit", "no constant of " + base.name + " moves these rows' predictions", "name the constants with --fit");
  return out;
}

}  // namespace

// One trace's row (trace_fit.h): its recorded configuration, else --config's (predict's keys), priced
// on `base`, measured at `step_s`.
tn::FitRow traceRow(const CalibrateFlags& f, const tn::Cluster& base, const std::string& path, double step_s) {
  const std::string where = "--trace " + path;
  std::string cfg;
  try {
    cfg = rundb::RunReader(path).meta("config");
  } catch (const std::exception& e) {
    throw UserError(where, path + " is not a run database (" + std::string(e.what()) + ")",
                    "import the trace first (`trainscope import TRACE.json -o run.db`), or pass a run database");
  }
  Rows rows;
  if (!cfg.empty()) {
    if (!f.config.empty())
      throw UserError("--config", path + " records its own configuration (a trainscope run)",
                      "drop --config: it is only for imported traces, which record none");
    addRun(rows, path, base, where);
    return rows.rows.back();
  }
  if (f.config.empty())
    throw UserError("--config", path + " records no training configuration (an imported trace)",
                    "give the run's configuration as predict's keys, e.g. --config '{\"workload\": \"gpt2-124m\", "
                    "\"gpus\": 8, \"mbs\": 4, \"seq\": 1024, \"gbs\": 32}', or --config @FILE.json");
  std::string text = f.config;
  if (text[0] == '@') text = files::readTextFile(text.substr(1), "--config", "pass a JSON object of predict's keys");
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object())
    throw UserError("--config", "is not a JSON object", "pass predict's keys as one object: '{\"workload\": …, \"gpus\": …}'");
  for (const char* key : {"measured_step_s", "measured_peak_bytes", "group"})
    if (j.contains(key)) throw UserError("--config: " + std::string(key), "is measured from the trace", "drop the key");
  j["measured_step_s"] = step_s;
  PredictFlags defaults;
  defaults.framework = f.framework;
  defaults.cluster = f.cluster;
  addLine(rows, j.dump(), "--config", defaults, base);
  return rows.rows.back();
}

nlohmann::json summaryJson(const tn::ErrorSummary& s) {
  return {{"rows", s.rows}, {"mape", s.mape}, {"median_signed_error", s.median_signed}, {"abs_error_p90", s.abs_p90},
          {"max_abs_error", s.max_abs}, {"spearman_within_group_median", s.spearman_median},
          {"spearman_groups", s.spearman_groups}};
}

std::string utcNow() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void printSummary(const char* what, const tn::ErrorSummary& s) {
  std::printf("%-22s MAPE %5.1f%%  median signed %+6.1f%%  p90 |error| %5.1f%%  within-group Spearman %.2f (%lld groups)\n",
              what, s.mape * 100, s.median_signed * 100, s.abs_p90 * 100, s.spearman_median,
              static_cast<long long>(s.spearman_groups));
}

CLI::App* addCalibrateCommand(CLI::App& app, CalibrateFlags*& f) {
  f = new CalibrateFlags();  // lives as long as the process
  CLI::App* c = app.add_subcommand("calibrate", "fit a cluster file's constants to measured step times; write the "
                                                "calibrated cluster file with its cross-validated error");
  c->add_option("--cluster", f->cluster, "the base cluster: preset or JSON file")->required();
  c->add_option("--framework", f->framework, "the framework of rows that do not name one (predict's --framework)")
      ->capture_default_str();
  c->add_option("--from", f->from,
                "measurements: JSON lines (predict --batch keys + measured_step_s [, measured_peak_bytes, group]), "
                "trainscope run databases, or a tune's study")
      ->expected(1, -1);
  c->add_option("--trace", f->trace,
                "fit per kernel class rates, host cost per op and collective bandwidth from traces: imported "
                "Kineto/Nsight databases (with --config) or runs recorded at --trace-level ops")
      ->expected(1, -1);
  c->add_option("--config", f->config,
                "an imported trace's configuration: predict's keys as one JSON object, or @FILE.json");
  c->add_option("-o", f->out, "the calibrated cluster file to write");
  c->add_option("--folds", f->folds, "k-fold cross-validation by model and cluster size (0: none)")->capture_default_str();
  c->add_option("--fit", f->fit, "constants to fit, by cluster-file path (default: those the rows move)")->delimiter(',');
  c->add_option("--max-evaluations", f->max_evaluations, "the most loss evaluations per fit")->capture_default_str();
  c->add_flag("--overwrite", f->overwrite, "replace an existing -o");
  c->add_flag("--json", f->json, "print the calibration object as JSON");
  c->add_flag("--keep-fitted", f->keep_fitted,
              "with --trace: keep the constants --cluster's calibration record fitted earlier (from a study or other "
              "rows); fit only the rest");
  c->add_flag("--replace-fitted", f->replace_fitted,
              "with --trace: replace the constants --cluster's calibration record fitted earlier with the trace's "
              "(the output records both)");
  c->add_flag("--evaluate", f->evaluate,
              "fit nothing: price the rows on --cluster (a calibrated file, or a preset) and print its errors");
  return c;
}

nlohmann::json writeCalibrated(const CalibrateFlags& f, const tn::Cluster& base,
                               const std::map<std::string, double>& values, const nlohmann::json& cal,
                               const files::OutputRule& rule) {
  const std::string original = files::readTextFile(base.source, "--cluster", "pass a cluster file");
  nlohmann::json out = nlohmann::json::parse(tn::withParams(original, values, base.source));
  nlohmann::json record = cal;
  const auto inherit = [&](const std::string& path, const nlohmann::json& value, const nlohmann::json& from) {
    if (values.count(path) || (record.contains("fitted") && record["fitted"].contains(path))) return;
    record["fitted"][path] = {{"value", value}, {"inherited", from}};
  };
  const nlohmann::json in = nlohmann::json::parse(original, nullptr, false);
  if (in.is_object() && in.contains("calibration") && in["calibration"].is_object() &&
      in["calibration"].contains("fitted") && in["calibration"]["fitted"].is_object()) {
    const std::string from = earlierSource(in["calibration"]);
    for (const auto& [path, e] : in["calibration"]["fitted"].items())
      if (e.is_object() && e.contains("value") && e["value"].is_number())
        inherit(path, e["value"], e.contains("inherited") && e["inherited"].is_string() ? e["inherited"] : nlohmann::json(from));
  }
  if (record.contains("kept") && record["kept"].is_object())  // --keep-fitted: held at the earlier value
    for (const auto& [path, k] : record["kept"].items()) inherit(path, k["value"], k["from"]);
  if (out.contains("fitted") && out["fitted"].is_object()) {  // a preset's shipped fits this one replaced
    for (const auto& [path, v] : values) out["fitted"].erase(path);
    if (out["fitted"].empty()) out.erase("fitted");
  }
  out["name"] = std::filesystem::path(f.out).stem().string();
  out["calibration"] = record;
  files::writeAtomically(f.out, out.dump(2) + "\n", rule);
  return record;
}

std::string earlierSource(const nlohmann::json& cal) {
  std::string sources;
  if (cal.contains("rows") && cal["rows"].is_array())
    for (const auto& r : cal["rows"]) {
      if (!r.is_object() || !r.contains("source") || !r["source"].is_string()) continue;
      sources += (sources.empty() ? "" : ", ") + r["source"].get<std::string>();
      if (r.contains("rows") && r["rows"].is_number_integer())
        sources += " (" + std::to_string(r["rows"].get<int64_t>()) + " rows)";
    }
  const bool traces = cal.contains("method") && cal["method"].is_string() &&
                      cal["method"].get<std::string>().rfind("from traces", 0) == 0;
  std::string s = std::string("calibrate ") + (traces ? "--trace " : "--from ") +
                  (sources.empty() ? "(sources not recorded)" : sources);
  if (cal.contains("cross_validation") && cal["cross_validation"].is_object()) s += ", cross-validated";
  if (cal.contains("date") && cal["date"].is_string()) s += ", " + cal["date"].get<std::string>();
  return s;
}

namespace {

// calibrate --evaluate: the base cluster's errors on the rows, nothing written.
int runEvaluate(const CalibrateFlags& f, const tn::Cluster& base) {
  const Rows rows = readRows(f, base);
  const tn::ErrorSummary s = tn::summarize(rows.rows, tn::priceRows(base, rows.rows));
  if (f.json) {
    std::cout << jsonText(summaryJson(s)) << "\n";
  } else {
    std::printf("trainscope calibrate --evaluate: %zu rows on %s\n", rows.rows.size(), base.name.c_str());
    printSummary("errors:", s);
  }
  return 0;
}

// The calibrated file's "calibration" object: what was fitted from which rows, and the memory model's
// error on the rows that gave a peak (runCalibrate adds the residuals, notes and cross-validation).
nlohmann::json calibrationRecord(const CalibrateFlags& f, const tn::Cluster& base, const Rows& rows,
                                 const std::vector<const tn::FitParam*>& params, const tn::FitResult& fit) {
  nlohmann::json cal;
  cal["base_cluster"] = base.source;
  cal["framework"] = f.framework;  // of rows that name none
  std::set<std::string> frameworks;  // what the rows were priced under: predict states the interval for these
  for (const tn::FitRow& r : rows.rows) frameworks.insert(tn::frameworkKey(r.options.framework));
  cal["frameworks"] = frameworks;
  cal["date"] = utcNow();
  cal["loss"] = "mean Huber loss (delta 0.05) of log(predicted / measured step time)";
  for (const tn::FitParam* p : params) {
    const auto [lo, hi] = tn::boundsOf(*p, base);
    cal["fitted"][p->path] = {{"value", fit.values.at(p->path)}, {"base", tn::getParam(base, *p)},
                              {"bounds", {lo, hi}}, {"what", p->what}};
  }
  for (const auto& [path, n] : rows.per_source) cal["rows"].push_back({{"source", path}, {"rows", n}});
  cal["evaluations"] = fit.evaluations;
  if (!rows.peaks.empty()) {
    std::vector<double> err;
    for (const auto& [pred, meas] : rows.peaks) err.push_back(std::fabs(double(pred) / double(meas) - 1));
    double mean = 0;
    for (double e : err) mean += e / double(err.size());
    cal["peak_residuals"] = {{"rows", int64_t(err.size())}, {"mape", mean},
                             {"max_abs_error", *std::max_element(err.begin(), err.end())},
                             {"note", "the memory model has no fitted constants: its error, as measured"}};
  }
  return cal;
}

}  // namespace


// Rows a median 30 times or more off the base cluster's predictions are in another unit
// (milliseconds for seconds), or for another machine: the fit would pin every constant at a bound and
// write a file that prices Llama-3-8B at 7% MFU (an audit's rows of 3,100 "seconds").
void refuseRowsInAnotherUnit(const std::vector<tn::FitRow>& rows, const std::vector<double>& predicted,
                             const tn::Cluster& base) {
  std::vector<double> ratio;
  for (size_t i = 0; i < rows.size() && i < predicted.size(); ++i)
    if (predicted[i] > 0 && rows[i].measured_s > 0) ratio.push_back(rows[i].measured_s / predicted[i]);
  if (ratio.empty()) return;
  std::nth_element(ratio.begin(), ratio.begin() + long(ratio.size() / 2), ratio.end());
  const double median = ratio[ratio.size() / 2];
  if (median <= 30 && median >= 1.0 / 30) return;
  char text[160];
  std::snprintf(text, sizeof(text), "the rows' measured step times are a median %.3gx what %s predicts for them", median,
                base.name.c_str());
  throw UserError("--from", std::string(text) + ": a figure in another unit (milliseconds for seconds)?",
                  "write measured_step_s in seconds, or calibrate from a cluster file of the machine that ran them "
                  "(--cluster)");
}

// The fitted constants that sit at a bound: the rows ask for more than the model lets that constant
// give (a missing term, or rows of another machine), and the file says so.
std::string atTheirBounds(const std::vector<const tn::FitParam*>& params, const std::map<std::string, double>& values,
                          const tn::Cluster& base) {
  std::string out;
  for (const tn::FitParam* p : params) {
    const auto [lo, hi] = tn::boundsOf(*p, base);
    const double v = values.at(p->path), tol = 1e-6 * std::max(std::abs(lo), std::abs(hi));
    if (std::abs(v - lo) <= tol || std::abs(v - hi) <= tol)
      out += (out.empty() ? "" : ", ") + p->path + " at its " + (std::abs(v - lo) <= tol ? "lower" : "upper") + " bound";
  }
  return out.empty() ? "" : out + ": the rows ask for more than the model lets it give (a term it lacks, or rows of "
                                  "another machine); predictions from this file lean on that bound";
}
int runCalibrate(const CalibrateFlags& f) {
  if (f.folds < 0 || f.folds == 1)
    throw UserError("--folds", std::to_string(f.folds) + " folds", "pass 2 or more, or 0 to skip cross-validation");
  if (f.max_evaluations < 1) throw UserError("--max-evaluations", "must be 1 or more", "pass e.g. 300");
  tn::parseFramework(f.framework);
  if (f.from.empty() == f.trace.empty())
    throw UserError(f.from.empty() ? "--from" : "--trace",
                    f.from.empty() ? "is needed: the measurements to fit" : "cannot be given with --from",
                    "pass --from (measured step times) or --trace (traces, fitted per kernel class), not both");
  if (!f.config.empty() && f.trace.empty())
    throw UserError("--config", "describes an imported trace", "pass it with --trace; JSON lines give their own keys");
  if ((f.keep_fitted || f.replace_fitted) && f.trace.empty())
    throw UserError(f.keep_fitted ? "--keep-fitted" : "--replace-fitted", "applies to --trace",
                    "drop it: --from fits the constants --fit names (or the defaults) from all its rows");
  if (f.keep_fitted && f.replace_fitted)
    throw UserError("--keep-fitted", "cannot be given with --replace-fitted",
                    "choose one: keep the earlier fitted constants, or replace them with the trace's");
  const tn::Cluster base = tn::loadCluster(f.cluster);
  if (!f.trace.empty()) return runCalibrateTrace(f, base);
  if (f.evaluate) return runEvaluate(f, base);
  if (f.out.empty()) throw UserError("-o", "is needed: the calibrated cluster file to write", "pass -o NEW.json");
  files::OutputRule rule;
  rule.field = "-o";
  rule.inputs = f.from;
  rule.inputs.push_back(base.source);
  rule.overwrite = f.overwrite;
  files::checkOutput(f.out, rule);  // before any work

  const Rows rows = readRows(f, base);
  const std::vector<const tn::FitParam*> params = chosenParams(f, base, rows);
  std::set<std::string> groups;
  for (const tn::FitRow& r : rows.rows) groups.insert(r.group);
  if (f.folds > int64_t(groups.size()))
    throw UserError("--folds", std::to_string(f.folds) + " folds, but the rows hold " + std::to_string(groups.size()) +
                                   " group(s) of model and cluster size",
                    groups.size() >= 2 ? "pass --folds " + std::to_string(groups.size()) + " or fewer (0: none)"
                                       : "pass --folds 0, or add rows of other models or cluster sizes");

  const std::vector<double> base_s = tn::priceRows(base, rows.rows);
  refuseRowsInAnotherUnit(rows.rows, base_s, base);
  const tn::ErrorSummary before = tn::summarize(rows.rows, base_s);
  const tn::FitResult fit = tn::fitCluster(base, rows.rows, params, f.max_evaluations);
  const tn::ErrorSummary after = tn::summarize(rows.rows, fit.predicted_s);

  nlohmann::json cal = calibrationRecord(f, base, rows, params, fit);
  cal["groups"] = int64_t(groups.size());
  cal["base_residuals"] = summaryJson(before);
  cal["residuals"] = summaryJson(after);
  // As many constants as rows or more: the fit may meet every row (in-sample error near 0) whatever the
  // constants mean, and an interval from those residuals says nothing. Said, and recorded.
  std::string underdetermined;
  if (rows.rows.size() <= params.size())
    underdetermined = std::to_string(params.size()) + " constant(s) fitted to " + std::to_string(rows.rows.size()) +
                      " row(s): underdetermined, the fit may meet every row whatever the constants mean; "
                      "fit fewer (--fit) or add rows";
  if (!underdetermined.empty()) cal["notes"].push_back(underdetermined);
  const std::string pinned = atTheirBounds(params, fit.values, base);
  if (!pinned.empty()) cal["notes"].push_back(pinned);
  tn::ErrorSummary cv;
  if (f.folds >= 2) {
    const std::vector<double> held = tn::crossValidate(base, rows.rows, params, f.folds, f.max_evaluations);
    cv = tn::summarize(rows.rows, held);
    cal["cross_validation"] = summaryJson(cv);
    cal["cross_validation"]["folds"] = f.folds;
    cal["cross_validation"]["by"] = "model and cluster size (never by row)";
  }

  cal = writeCalibrated(f, base, fit.values, cal, rule);

  if (f.json) {
    std::cout << jsonText(cal) << "\n";
    return 0;
  }
  std::printf("trainscope calibrate: %zu rows in %zu groups from %zu source(s) on %s\n", rows.rows.size(), groups.size(),
              rows.per_source.size(), base.name.c_str());
  for (const tn::FitParam* p : params)
    std::printf("  %-24s %12.6g  (was %s; bounds %.3g to %.3g)\n", p->path.c_str(), fit.values.at(p->path),
                tn::paramText(base, *p).c_str(), tn::boundsOf(*p, base).first, tn::boundsOf(*p, base).second);
  printSummary("base cluster:", before);
  printSummary("fitted (in sample):", after);
  if (!underdetermined.empty()) std::printf("  note: %s\n", underdetermined.c_str());
  if (!pinned.empty()) std::printf("  note: %s\n", pinned.c_str());
  if (f.folds >= 2) printSummary(("cross-validated, k=" + std::to_string(f.folds) + ":").c_str(), cv);
  std::printf("wrote %s\n", f.out.c_str());
  return 0;
}

}  // namespace trainscope::apps
