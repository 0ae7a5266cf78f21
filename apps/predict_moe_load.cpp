// predict_moe_load.cpp — see predict_moe_load.h.
#include "predict_moe_load.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/models/moe.h"
#include "trainscope/rundb/moe_load.h"
#include "trainscope/rundb/reader.h"

namespace trainscope::apps {

namespace {

const char* kFlag = "--moe-load";

std::string runOf(const workloads::Workload& w) {
  return "trainscope run --workload " + files::shellQuote(w.source.empty() || w.name.find('/') == std::string::npos ? w.name : w.source) +
         " --ep N --out RUN.db";
}

}  // namespace

MoeLoadRead readMoeLoad(const std::string& path, const workloads::Workload& w, const models::Plan& p) {
  if (!w.isMoe())
    throw UserError(kFlag, w.name + " has no experts: there is no routing to load", "drop --moe-load");
  files::requireRegularFile(path, kFlag, "pass the database of a MoE run (" + runOf(w) + ")");
  try {
    rundb::RunReader reader(path);
    const std::string cfg = reader.meta("config");
    const nlohmann::json j = nlohmann::json::parse(cfg.empty() ? "{}" : cfg, nullptr, false);
    const auto dim = [&](const char* k, int64_t fallback) {
      return j.is_object() && j.contains(k) && j[k].is_number_integer() ? j[k].get<int64_t>() : fallback;
    };
    if (dim("n_embd", -1) != w.n_embd || dim("n_layer", -1) != w.n_layer || dim("n_head", -1) != w.n_head ||
        dim("vocab_size", -1) != w.vocab_size)
      throw UserError(kFlag, path + " is not a trainscope run of " + w.name + " (its config names another model, or none)",
                      "pass the database of a run of this workload (" + runOf(w) + ")");
    const std::vector<rundb::ExpertLoad> rows = reader.expertLoad();
    if (rows.empty())
      throw UserError(kFlag, path + " records no expert load (no expert_load rows: a dense run, or one from before they were recorded)",
                      "pass the database of a MoE run of this workload (" + runOf(w) + ")");
    // The run's layout (parallel.h: rank = tp + TP·(cp + CP·(dp + DP·pp))) and this plan's EP groups
    // over its routing ranks: ep consecutive dp ranks with the same cp and pp.
    const int64_t tp = std::max<int64_t>(1, dim("tp", 1)), cp = std::max<int64_t>(1, dim("cp", 1));
    const int64_t dp = std::max<int64_t>(1, dim("dp", 1)), ep = std::max<int64_t>(1, p.ep);
    const auto group_of = [&](int64_t rank) {
      const int64_t c = (rank / tp) % cp, d = (rank / (tp * cp)) % dp, stage = rank / (tp * cp * dp);
      return (stage * cp + c) * dp + d / ep;
    };
    const rundb::EpRankLoad l = rundb::epRankLoad(rows, ep, group_of);
    if (l.experts != w.n_experts)
      throw UserError(kFlag, path + "'s routing has " + std::to_string(l.experts) + " experts, " + w.name + " " +
                                 std::to_string(w.n_experts),
                      "pass the database of a run with this workload's experts");
    if (l.samples == 0)
      throw UserError(kFlag, path + " routed no tokens in its expert_load rows", "pass the database of a run that trained steps");
    MoeLoadRead out;
    out.load = l.hot_max, out.mean = l.hot_mean, out.samples = l.samples;
    out.dropped_share = l.tokens > 0 ? double(l.dropped) / double(l.tokens) : 0;
    return out;
  } catch (const UserError& e) {
    if (e.field() == kFlag) throw;
    // The reader's ("database: … is not a trainscope run database …", its fix with it), under the flag.
    std::string what = e.what();
    if (what.rfind(e.field() + ": ", 0) == 0) what = what.substr(e.field().size() + 2);
    throw UserError(kFlag, what, "");
  }
}

std::string routingLine(const workloads::Workload& w, const models::Plan& p, const std::string& source) {
  if (!w.isMoe()) return "";
  const models::MoeRouting r = models::moeRouting(w, p);
  char line[512];
  const std::string choice = "top-" + std::to_string(w.top_k) + " of " + std::to_string(w.n_experts) + " experts";
  if (p.ep <= 1) {
    std::snprintf(line, sizeof(line), "routing: %s, ep 1: one rank computes every row (the routing load changes nothing)",
                  choice.c_str());
    return line;
  }
  const std::string how = r.random_load ? "random " + choice + " (the expected hottest of " + std::to_string(p.ep) + " EP ranks)"
                        : source.empty() ? choice + ", the given load"
                                         : choice + " as measured in " + source + " (its hottest EP rank)";
  int n = std::snprintf(line, sizeof(line), "routing: %s, hottest EP rank %.3fx balanced", how.c_str(), r.load);
  if (r.capacity > 0 && r.received < r.load * r.kept)
    std::snprintf(line + n, sizeof(line) - size_t(n), ", capped at capacity %.3gx (%.0f of %.0f rows kept)",
                  r.received / r.kept, r.received, r.load * r.kept);
  return line;
}

}  // namespace trainscope::apps
