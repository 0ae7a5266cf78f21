// calibrate.cpp — see calibrate.h.
#include "trainscope/tuner/calibrate.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <set>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"

namespace trainscope::tuner {

namespace {
double busFactor(const std::string& op, double n) {
  if (op == "all_reduce") return 2.0 * (n - 1) / n;
  if (op == "all_gather" || op == "reduce_scatter") return (n - 1) / n;
  return 1.0;
}
// A row the fit can time: two ranks or more, a duration, not a barrier, and an end the trace recorded
// (a call the trace's end cut has none: rows.h Collective::cut).
bool timed(const rundb::Collective& c) {
  return c.group_size >= 2 && c.end_ns > c.start_ns && c.op != "barrier" && !c.cut;
}
}  // namespace

CollectiveFit fitCollectives(const std::vector<rundb::Collective>& rows) {
  // y = a·u + b·x with u = 2(n−1), x = bytes·factor: a = α, b = 1/β. Ordinary least squares.
  double suu = 0, sux = 0, sxx = 0, suy = 0, sxy = 0, syy = 0;
  std::set<int64_t> sizes;
  CollectiveFit fit;
  for (const auto& c : rows) {
    if (!timed(c)) continue;
    const double n = double(c.group_size);
    const double u = 2.0 * (n - 1), x = double(c.bytes) * busFactor(c.op, n), y = c.seconds();
    suu += u * u, sux += u * x, sxx += x * x, suy += u * y, sxy += x * y, syy += y * y;
    sizes.insert(c.bytes);
    ++fit.samples;
  }
  if (sizes.size() < 2)
    throw UserError("--cluster local", "the calibration run recorded " + std::to_string(sizes.size()) +
                                           " distinct collective size(s); an α–β fit needs two or more",
                    "check that two-rank runs work here (`trainscope run --nproc 2 --trace X.db`)");
  const double det = suu * sxx - sux * sux;
  double a = (suy * sxx - sux * sxy) / det, b = (suu * sxy - sux * suy) / det;
  if (!(b > 0)) {  // latency-bound only: keep the slope positive, fit α alone
    b = 1e-12;
    a = (suy - b * sux) / suu;
  }
  a = std::max(a, 0.0);
  fit.tier.latency = a;
  fit.tier.bandwidth = 1.0 / b;
  fit.tier.efficiency = 1.0;
  // R² over the samples (uncentred residual sum against the centred total).
  double ss_res = syy - 2 * (a * suy + b * sxy) + a * a * suu + 2 * a * b * sux + b * b * sxx;
  double mean = 0;
  int64_t k = 0;
  for (const auto& c : rows)
    if (timed(c)) mean += c.seconds(), ++k;
  mean /= double(std::max<int64_t>(1, k));
  const double ss_tot = syy - double(k) * mean * mean;
  fit.r2 = ss_tot > 0 ? 1.0 - std::max(0.0, ss_res) / ss_tot : 1.0;
  return fit;
}

std::string localClusterJson(const std::string& rates_json, const CollectiveFit& fit, int64_t ranks,
                             int64_t memory_bytes, const std::string& host) {
  const auto r = nlohmann::json::parse(rates_json);
  nlohmann::json c;
  c["name"] = "local";
  c["description"] = "measured on " + host + ": " + std::to_string(ranks) + " CPU ranks sharing " +
                     std::to_string(r.value("threads", 0)) + " threads";
  c["kind"] = "cpu";
  c["nodes"] = 1;
  c["devices_per_node"] = ranks;
  c["memory_bytes"] = memory_bytes;
  // Peak per dtype: the best rate measured; the efficiency curve: each size's share of the fp32 peak.
  nlohmann::json curve = nlohmann::json::array();
  for (const auto& [dtype, points] : r.at("matmul").items()) {
    double best = 0;
    for (const auto& p : points) best = std::max(best, p[1].get<double>());
    c["peak_flops"][dtype] = best;
    if (dtype == "fp32")
      for (const auto& p : points) curve.push_back({p[0].get<double>(), std::min(1.0, p[1].get<double>() / best)});
  }
  c["matmul_efficiency"] = curve;
  c["vector_flops"] = r.at("vector_flops");
  c["memory_bandwidth"] = r.at("memory_bandwidth");
  const nlohmann::json tier = {{"bandwidth", fit.tier.bandwidth}, {"efficiency", 1.0}, {"latency", fit.tier.latency}};
  c["intra_node"] = tier;
  c["inter_node"] = tier;  // one node: never used, but a cluster file has both
  const std::time_t now = std::time(nullptr);
  char day[32];
  std::strftime(day, sizeof day, "%Y-%m-%d", std::gmtime(&now));
  c["sources"] = {
      std::string("matmul (LibTorch at::mm, square 128-1536, best of several), copy bandwidth and add rate: "
                  "`trainscope-train calibrate` on ") + host + ", " + day,
      "collective alpha-beta: least squares over " + std::to_string(fit.samples) +
          " collectives of a traced two-rank run (R^2 " + std::to_string(fit.r2).substr(0, 5) + ")",
      "memory per rank: --mem-limit, else this machine's available memory shared by the ranks"};
  return jsonText(c, 2);
}

}  // namespace trainscope::tuner
