// import_probe.cpp — a probe's step rows and traces into a run database (import_probe.h).
#include "trainscope/rundb/import_probe.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"

namespace trainscope::rundb {
namespace {

int64_t intField(const nlohmann::json& j, const char* key, const std::string& where, bool required = true) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) {
    if (!required) return 0;
    throw UserError("probe", where + " has no \"" + key + "\"", "the rows are trainscope_probe's: rerun the trial");
  }
  if (!it->is_number_integer()) throw UserError("probe", where + ": \"" + key + "\" is not an integer", "rerun the trial");
  return it->get<int64_t>();
}

struct Rows {
  std::vector<Step> steps;
  int64_t world = 1;
  std::set<int64_t> ranks;
};

Rows readRows(const std::vector<std::string>& files) {
  Rows rows;
  std::set<std::pair<int64_t, int64_t>> seen;
  for (const std::string& path : files) {
    files::requireRegularFile(path, "probe", "the probe's rows are plain files in the trial's folder");
    std::ifstream in(path);
    if (!in) throw UserError("probe", "cannot read " + path, "check the trial's folder");
    std::string line;
    for (int64_t n = 1; std::getline(in, line); ++n) {
      if (line.empty()) continue;
      const std::string where = path + ":" + std::to_string(n);
      nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        if (in.peek() == EOF) break;  // a last line cut short by a killed rank: what came before counts
        throw UserError("probe", where + " is not a JSON object", "the rows are trainscope_probe's: rerun the trial");
      }
      Step s;
      s.rank = intField(j, "rank", where);
      s.step = intField(j, "step", where);
      s.start_ns = intField(j, "start_ns", where);
      s.step_time_ns = intField(j, "step_time_ns", where);
      s.tokens = intField(j, "tokens", where, false);
      s.peak_bytes = intField(j, "peak_bytes", where, false);
      if (s.rank < 0 || s.step < 0 || s.step_time_ns < 0 || s.tokens < 0 || s.peak_bytes < 0)
        throw UserError("probe", where + " has a negative rank, step, time, tokens or peak", "rerun the trial");
      const auto l = j.find("loss");
      s.loss_recorded = l != j.end() && l->is_number();  // null: the job gave none (torchtitan; a non-last stage)
      if (s.loss_recorded) s.loss = l->get<double>();
      // The framework skipped the update (Megatron's train_step: a non-finite gradient); the step ran.
      if (const auto k = j.find("skipped"); k != j.end() && k->is_boolean()) s.skipped = k->get<bool>();
      s.tokens_per_s = s.step_time_ns > 0 ? double(s.tokens) / (double(s.step_time_ns) * 1e-9) : 0;
      rows.world = std::max(rows.world, intField(j, "world", where, false));
      if (!seen.insert({s.rank, s.step}).second)
        throw UserError("probe", where + " repeats rank " + std::to_string(s.rank) + " step " + std::to_string(s.step),
                        "each trial writes into a folder of its own: rerun the trial");
      rows.ranks.insert(s.rank);
      rows.steps.push_back(s);
    }
  }
  if (rows.steps.empty())
    throw UserError("probe", "the job recorded no step (" + std::to_string(files.size()) + " row file(s))",
                    "a Trainer script is measured as it is; a custom loop wraps its step in "
                    "`with trainscope_probe.step():` (docs/tuner.md)");
  return rows;
}

void writeMeta(Database& db, const std::string& key, const std::string& value) {
  Statement(db, "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)").exec(key, value);
}

}  // namespace

ProbeImport importProbe(const std::vector<std::string>& step_files, const std::vector<std::string>& traces,
                        const std::string& out_db, const std::string& workload, const std::string& field,
                        const std::map<std::string, std::string>& meta) {
  const Rows rows = readRows(step_files);
  ProbeImport out;
  out.steps = int64_t(rows.steps.size());
  out.ranks = int64_t(rows.ranks.size());
  out.traced = int64_t(traces.size());
  const std::string config = jsonText(nlohmann::json({{"workload", workload}}));
  if (traces.empty()) {
    RunStore store(out_db, RunStore::Options{false, field, false, step_files});
    store.setMeta("source", "probe");
    store.setMeta("world_size", std::to_string(rows.world));
    store.setMeta("config", config);
    for (const auto& [key, value] : meta) store.setMeta(key, value);
    for (int64_t r : rows.ranks) store.putRank(RankInfo{r, "", "cpu", 0, 0, {}, {}});
    for (const Step& s : rows.steps) store.appendStep(s);
    store.close();
    return out;
  }
  // The traces first, under a name of our own beside the output; the probe's rows replace the trace's
  // steps there; then linked into place.
  std::string partial;
  {
    files::TempFile t = files::makeTempBeside(out_db, field);
    ::close(t.fd);
    ::unlink(t.path.c_str());
    partial = t.path;
  }
  struct Cleanup {
    std::string path;
    ~Cleanup() {
      if (path.empty()) return;
      for (const char* suffix : {"", "-wal", "-shm", "-journal"}) std::remove((path + suffix).c_str());
    }
  } cleanup{partial};
  importTraces(traces, partial, /*overwrite=*/false);
  {
    Database db(partial, Database::Mode::ReadWrite);
    db.exec("BEGIN");
    db.exec("DELETE FROM steps");
    Statement ins(db, insertSql(table("steps")));
    for (const Step& s : rows.steps)
      ins.exec(s.rank, s.step, s.loss_recorded ? std::optional<double>(s.loss) : std::nullopt, s.lr, s.grad_norm, s.loss_scale, s.skipped, s.tokens, s.start_ns,
               s.step_time_ns, s.tokens_per_s, s.model_flops, s.hw_flops, s.mfu, s.hfu, s.peak_bytes, s.param_bytes,
               s.grad_bytes, s.optim_bytes, s.activation_bytes);
    writeMeta(db, "source", "probe");
    writeMeta(db, "world_size", std::to_string(rows.world));
    writeMeta(db, "config", config);
    for (const auto& [key, value] : meta) writeMeta(db, key, value);
    db.exec("COMMIT");
  }
  files::place(partial, out_db, files::Existing::Refuse, field);
  cleanup.path.clear();
  return out;
}

}  // namespace trainscope::rundb
