// calibrate_rows.cpp — the rows `trainscope calibrate` fits (calibrate_parts.h): JSON lines (predict
// --batch's keys plus "measured_step_s", optionally "measured_peak_bytes" and "group"; "workload" may
// be an inline workload object), trainscope run databases, studies (their ok trials' databases), and
// one --trace database's row.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
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
#include "trainscope/common/near_key.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/study.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;
using Rows = CalibrationRows;

namespace {

// calibrate's own keys of a JSON line, beside predict's.
const std::vector<std::string>& calibrateKeys() {
  static const std::vector<std::string> keys = {"measured_step_s", "measured_peak_bytes", "group"};
  return keys;
}

// A key that is neither predict's nor calibrate's: refused, naming the one it resembles. Checked before
// measured_step_s is looked for, so that "measured_step" is named as the misspelling it is.
void refuseUnknownKeys(const nlohmann::json& j, const std::string& where) {
  std::vector<std::string> known = calibrateKeys();
  const std::vector<std::string> predict = predictKeys();
  known.insert(known.end(), predict.begin(), predict.end());
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (std::find(known.begin(), known.end(), key) != known.end()) continue;
    // "measured_peak", "measured_step_ms", "measured_time": a measurement under another name or unit.
    const bool measurement = key.rfind("measured", 0) == 0 && !keys::closeTo(key, keys::nearestKey(key, known));
    throw UserError(where + ": " + key,
                    "is not a flag of predict nor a key of calibrate (measured_step_s, measured_peak_bytes, group)",
                    measurement ? "give the measurements as measured_step_s (seconds per step) and measured_peak_bytes "
                                  "(bytes per rank)"
                                : unknownKeyFix(key, known));
  }
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", double(bytes) / double(int64_t(1) << 30));
  return buf;
}

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

// One JSON line (`line` of its file; 0: --config): its flags priced on the base cluster (with the
// line's nodes), its measurements.
void addLine(Rows& out, const std::string& text, const std::string& where, const PredictFlags& defaults,
             const tn::Cluster& base, int64_t line = 0) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object())
    throw UserError(where, notJsonObjectProblem(text), "one object per line: predict's flags and measured_step_s");
  refuseUnknownKeys(j, where);
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
  } else if (f.gpus > c.devices()) {
    // A row of 64 GPUs without "nodes" is sized by them, as the docs say (predict asks for --nodes: one
    // configuration is priced on the cluster named; here every row is priced on --cluster at its size).
    if (f.gpus > tn::kMostClusterDevices)
      throw UserError(where + ": gpus", std::to_string(f.gpus) + " devices is more than the models price", "give fewer gpus");
    c.nodes = (f.gpus + c.devices_per_node - 1) / c.devices_per_node;
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
  r.source = where.rfind("--from ", 0) == 0 ? where.substr(7) : where;  // "FILE line N": the record names it
  out.rows.push_back(std::move(r));
  if (peak > 0) out.peaks.emplace_back(priced.peak_bytes, int64_t(peak));
  // It ran, so its configuration or the memory model is off: priced all the same, and said (overMemoryNotes).
  if (priced.judged_peak_bytes > c.memory_bytes)  // as predict judges "fits" (a framework's own peak where it has one)
    out.over_memory.push_back({line, priced.judged_peak_bytes, c.memory_bytes, peak > 0});
}

// The rows of `path` the memory model puts over the device's memory, one note per kind (the device's
// memory, and whether the rows gave measured_peak_bytes) with their count, their peaks' range and their
// first few line numbers: a file of 1,500 such rows says so in a line or two, not 1,500. One row reads
// as it always has ("--from F line 9: the memory model puts this configuration's peak at …").
void overMemoryNotes(Rows& out, const std::string& path) {
  constexpr size_t kLinesNamed = 5;
  std::map<std::pair<int64_t, bool>, std::vector<OverMemoryRow>> kinds;  // (device bytes, peak measured) → rows
  for (const OverMemoryRow& r : out.over_memory) kinds[{r.device_bytes, r.peak_measured}].push_back(r);
  out.over_memory.clear();
  for (const auto& [kind, rows] : kinds) {
    const std::string device = gib(kind.first), ask = kind.second ? "" : " (give measured_peak_bytes to measure by how much)";
    if (rows.size() == 1) {
      const std::string where = "--from " + path + (rows[0].line > 0 ? " line " + std::to_string(rows[0].line) : "");
      out.notes.push_back(where + ": the memory model puts this configuration's peak at " + gib(rows[0].predicted_bytes) +
                          " GiB per rank, over the device's " + device +
                          " GiB, yet it was measured: check the row's configuration (zero, tp, mbs, ckpt), or the "
                          "memory model is off for it" + ask);
      continue;
    }
    std::string lines;
    int64_t least = rows[0].predicted_bytes, most = least;
    for (size_t i = 0; i < rows.size(); ++i) {
      least = std::min(least, rows[i].predicted_bytes);
      most = std::max(most, rows[i].predicted_bytes);
      if (i < kLinesNamed) lines += (i == 0 ? "" : ", ") + std::to_string(rows[i].line);
    }
    if (rows.size() > kLinesNamed) lines += " and " + std::to_string(rows.size() - kLinesNamed) + " more";
    out.notes.push_back("--from " + path + " lines " + lines + " (" + std::to_string(rows.size()) +
                        " rows): the memory model puts these configurations' peaks at " + gib(least) + " to " +
                        gib(most) + " GiB per rank, over the device's " + device +
                        " GiB, yet they were measured: check the rows' configuration (zero, tp, mbs, ckpt), or the "
                        "memory model is off for them" + ask);
  }
}

int64_t readLines(Rows& out, const std::string& path, const PredictFlags& defaults, const tn::Cluster& base) {
  std::istringstream in(files::readTextFile(path, "--from", "pass JSON lines, a run database or a study"));
  std::string text;
  int64_t n = 0, rows = 0;
  std::map<std::string, int64_t> first_line;  // a line's keys and values, as parsed → where it came first
  std::string repeats;
  while (std::getline(in, text)) {
    ++n;
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    addLine(out, text, "--from " + path + " line " + std::to_string(n), defaults, base, n);
    ++rows;
    const auto [at, fresh] = first_line.emplace(nlohmann::json::parse(text).dump(), n);
    if (!fresh) repeats += (repeats.empty() ? "" : ", ") + std::to_string(n) + " (= line " + std::to_string(at->second) + ")";
  }
  overMemoryNotes(out, path);
  // A line pasted twice weighs twice in the fit; a configuration measured again is a row of its own.
  if (!repeats.empty())
    out.notes.push_back("--from " + path + " lines " + repeats + " repeat an earlier line exactly (configuration and "
                        "measured times): each counts again in the fit; drop those pasted twice");
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
  r.source = where.rfind("--from ", 0) == 0 ? where.substr(7) : path;  // "STUDY trial N" or the database
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

}  // namespace

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

}  // namespace trainscope::apps
