// report.cpp — see report.h.
#include "trainscope/tracer/report.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "trainscope/tracer/range_names.h"
#include "trainscope/tracer/schema.h"
#include "trainscope/tracer/sqlite.h"

namespace trainscope::tracer {

std::vector<Interval> unionOf(std::vector<Interval> v) {
  std::sort(v.begin(), v.end(), [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  std::vector<Interval> out;
  for (const auto& i : v) {
    if (i.end <= i.begin) continue;
    if (!out.empty() && i.begin <= out.back().end) out.back().end = std::max(out.back().end, i.end);
    else out.push_back(i);
  }
  return out;
}

int64_t coveredWithin(const std::vector<Interval>& m, int64_t b, int64_t e) {
  int64_t total = 0;
  auto it = std::lower_bound(m.begin(), m.end(), b, [](const Interval& i, int64_t t) { return i.end <= t; });
  for (; it != m.end() && it->begin < e; ++it) total += std::min(e, it->end) - std::max(b, it->begin);
  return total;
}

std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const int64_t lo = std::max(a[i].begin, b[j].begin), hi = std::min(a[i].end, b[j].end);
    if (lo < hi) out.push_back({lo, hi});
    (a[i].end < b[j].end) ? ++i : ++j;
  }
  return out;
}

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * double(v.size() - 1);
  const size_t lo = size_t(std::floor(idx)), hi = size_t(std::ceil(idx));
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

bool isCommKernel(const std::string& name) {
  return name.rfind("nccl", 0) == 0 || name.find("ncclDevKernel") != std::string::npos ||
         name.find("ncclKernel") != std::string::npos;
}

}  // namespace

Report computeReport(const std::string& path, int top, int skip_steps) {
  Database db(path, Database::Mode::ReadOnly);
  checkRunDatabase(db);
  Report rep;
  rep.path = path;
  {
    Statement s(db, "SELECT key, value FROM meta");
    while (s.step()) {
      if (s.columnText(0) == "world_size") rep.world = std::stoi(s.columnText(1));
      // Imported traces have no warm-up step of ours to leave out.
      if (s.columnText(0) == "source" && s.columnText(1) == "import") skip_steps = 0;
      if (s.columnText(0) == "config") {
        try {
          rep.workload = nlohmann::json::parse(s.columnText(1)).value("workload", "");
        } catch (...) {
        }
      }
    }
  }
  std::map<int64_t, std::string> strings;
  {
    Statement s(db, "SELECT id, value FROM strings");
    while (s.step()) strings[s.columnInt(0)] = s.columnText(1);
  }
  std::vector<int> ranks;
  {
    Statement s(db, "SELECT DISTINCT rank FROM steps ORDER BY rank");
    while (s.step()) ranks.push_back(int(s.columnInt(0)));
  }
  // Overall throughput and utilisation from rank 0's steps.
  {
    Statement s(db, "SELECT AVG(tokens_per_s), AVG(mfu), AVG(hfu), MAX(peak_bytes) FROM steps WHERE step >= ? AND rank = 0");
    s.bind(1, int64_t(skip_steps));
    if (s.step()) {
      rep.tokens_per_s = s.columnDouble(0);
      if (!s.columnIsNull(1)) rep.mfu = s.columnDouble(1);
      if (!s.columnIsNull(2)) rep.hfu = s.columnDouble(2);
    }
  }
  std::vector<double> compute_per_rank;
  for (int r : ranks) {
    RankReport rr;
    rr.rank = r;
    std::vector<std::pair<int64_t, int64_t>> windows;
    std::vector<double> ms;
    {
      Statement s(db, "SELECT start_ns, step_time_ns, peak_bytes FROM steps WHERE rank = ? AND step >= ? ORDER BY step");
      s.bind(1, int64_t(r));
      s.bind(2, int64_t(skip_steps));
      while (s.step()) {
        windows.emplace_back(s.columnInt(0), s.columnInt(0) + s.columnInt(1));
        ms.push_back(double(s.columnInt(1)) * 1e-6);
        rr.peak_bytes = std::max(rr.peak_bytes, s.columnInt(2));
      }
    }
    rr.steps = int64_t(ms.size());
    if (!ms.empty()) {
      double sum = 0;
      for (double m : ms) sum += m;
      rr.step_ms_mean = sum / double(ms.size());
      rr.step_ms_median = percentile(ms, 0.5);
      rr.step_ms_p90 = percentile(ms, 0.9);
      rr.step_ms_min = *std::min_element(ms.begin(), ms.end());
      rr.step_ms_max = *std::max_element(ms.begin(), ms.end());
    }
    std::vector<Interval> compute, comm;
    {
      Statement s(db, "SELECT start_ns, end_ns, name_id FROM kernels WHERE rank = ?");
      s.bind(1, int64_t(r));
      while (s.step()) {
        Interval i{s.columnInt(0), s.columnInt(1)};
        (isCommKernel(strings[s.columnInt(2)]) ? comm : compute).push_back(i);
      }
    }
    if (compute.empty()) {
      std::string in;
      for (const char* n : names::kComputeRanges) in += std::string(in.empty() ? "" : ",") + "'" + n + "'";
      Statement s(db, "SELECT r.start_ns, r.end_ns FROM ranges r JOIN strings t ON t.id = r.name_id "
                      "WHERE r.rank = ? AND t.value IN (" + in + ")");
      s.bind(1, int64_t(r));
      while (s.step()) compute.push_back({s.columnInt(0), s.columnInt(1)});
    }
    {
      Statement s(db, "SELECT start_ns, end_ns FROM collectives WHERE rank = ?");
      s.bind(1, int64_t(r));
      while (s.step()) comm.push_back({s.columnInt(0), s.columnInt(1)});
    }
    const auto cu = unionOf(compute), co = unionOf(comm), ov = intersect(cu, co);
    std::vector<Interval> both = cu;
    both.insert(both.end(), co.begin(), co.end());
    const auto any = unionOf(both);
    double c = 0, m = 0, o = 0, idle = 0;
    for (const auto& [b, e] : windows) {
      c += double(coveredWithin(cu, b, e));
      m += double(coveredWithin(co, b, e));
      o += double(coveredWithin(ov, b, e));
      idle += double((e - b) - coveredWithin(any, b, e));
    }
    const double n = windows.empty() ? 1.0 : double(windows.size());
    rr.compute_ms = c * 1e-6 / n;
    rr.comm_ms = m * 1e-6 / n;
    rr.overlap_ms = o * 1e-6 / n;
    rr.idle_ms = idle * 1e-6 / n;
    compute_per_rank.push_back(rr.compute_ms);
    rep.peak_bytes = std::max(rep.peak_bytes, rr.peak_bytes);
    rep.ranks.push_back(rr);
  }
  if (rep.ranks.size() > 1) {
    const double med = percentile(compute_per_rank, 0.5);
    for (auto& rr : rep.ranks) rr.straggler = med > 0 && rr.compute_ms > 1.10 * med;
  }
  // Top ops: kernels (no nesting: self = total) if any, else host ops by self time.
  {
    Statement s(db, "SELECT name_id, COUNT(*), SUM(end_ns - start_ns) AS t FROM kernels GROUP BY name_id "
                    "ORDER BY t DESC LIMIT ?");
    s.bind(1, int64_t(top));
    while (s.step()) {
      OpStat o;
      o.name = strings[s.columnInt(0)];
      o.count = s.columnInt(1);
      o.total_ms = o.self_ms = double(s.columnInt(2)) * 1e-6;
      o.mean_us = o.count ? o.total_ms * 1e3 / double(o.count) : 0;
      rep.top_ops.push_back(o);
    }
    if (!rep.top_ops.empty()) rep.top_ops_source = "kernels";
  }
  if (rep.top_ops.empty()) {
    // Self time with a stack per (rank, thread): ops come ordered by start, outer before inner.
    struct Open {
      int64_t end;
      size_t slot;
    };
    std::map<int64_t, OpStat> by_name;
    std::vector<Open> stack;
    std::vector<std::pair<int64_t, double>> self_of;  // slot → (name id, self ns)
    int64_t cur_rank = -1, cur_tid = -1;
    Statement s(db, "SELECT rank, tid, start_ns, end_ns, name_id FROM host_ops ORDER BY rank, tid, start_ns, end_ns DESC");
    while (s.step()) {
      const int64_t rank = s.columnInt(0), tid = s.columnInt(1), b = s.columnInt(2), e = s.columnInt(3);
      if (rank != cur_rank || tid != cur_tid) stack.clear(), cur_rank = rank, cur_tid = tid;
      while (!stack.empty() && stack.back().end <= b) stack.pop_back();
      if (!stack.empty()) self_of[stack.back().slot].second -= double(std::min(e, stack.back().end) - b);
      self_of.emplace_back(s.columnInt(4), double(e - b));
      stack.push_back({e, self_of.size() - 1});
      OpStat& o = by_name[s.columnInt(4)];
      ++o.count;
      o.total_ms += double(e - b) * 1e-6;
    }
    for (const auto& [id, self_ns] : self_of) by_name[id].self_ms += self_ns * 1e-6;
    for (auto& [id, o] : by_name) {
      o.name = strings[id];
      o.mean_us = o.count ? o.total_ms * 1e3 / double(o.count) : 0;
      rep.top_ops.push_back(o);
    }
    std::sort(rep.top_ops.begin(), rep.top_ops.end(), [](const OpStat& a, const OpStat& b) { return a.self_ms > b.self_ms; });
    if (rep.top_ops.size() > size_t(top)) rep.top_ops.resize(size_t(top));
    if (!rep.top_ops.empty()) rep.top_ops_source = "host_ops";
  }
  {
    Statement s(db, "SELECT op, grp, COUNT(*), SUM(bytes), SUM(end_ns - start_ns), AVG(busbw), MAX(busbw) "
                    "FROM collectives GROUP BY op, grp ORDER BY SUM(end_ns - start_ns) DESC");
    while (s.step()) {
      CollectiveStat c;
      c.op = s.columnText(0);
      c.group = s.columnText(1);
      c.count = s.columnInt(2);
      c.bytes = s.columnInt(3);
      c.total_ms = double(s.columnInt(4)) * 1e-6;
      c.busbw_gbps_mean = s.columnDouble(5) * 1e-9;
      c.busbw_gbps_max = s.columnDouble(6) * 1e-9;
      rep.collectives.push_back(c);
    }
  }
  {
    Statement s(db, "SELECT source, SUM(dropped) FROM drops GROUP BY source HAVING SUM(dropped) > 0");
    while (s.step()) rep.drops.emplace_back(s.columnText(0), s.columnInt(1));
  }
  return rep;
}

std::string formatReport(const Report& r) {
  std::ostringstream o;
  o << std::fixed << std::setprecision(2);
  o << "trainscope report: " << r.path << (r.workload.empty() ? "" : " (" + r.workload + ")") << ", " << r.world
    << " rank(s)\n";
  o << "throughput " << std::setprecision(0) << r.tokens_per_s << " tokens/s" << std::setprecision(2);
  if (r.mfu >= 0) o << ", MFU " << r.mfu * 100 << "%, HFU " << r.hfu * 100 << "%";
  o << ", peak memory " << double(r.peak_bytes) / (1 << 20) << " MiB\n\n";
  o << "rank  steps   mean ms  median ms   p90 ms   compute ms   comm ms  overlap ms   idle ms  peak MiB\n";
  for (const auto& k : r.ranks) {
    char line[256];
    std::snprintf(line, sizeof(line), "%4d %6lld %9.2f %10.2f %8.2f %12.2f %9.2f %11.2f %9.2f %9.1f%s\n", k.rank,
                  static_cast<long long>(k.steps), k.step_ms_mean, k.step_ms_median, k.step_ms_p90, k.compute_ms,
                  k.comm_ms, k.overlap_ms, k.idle_ms, double(k.peak_bytes) / (1 << 20),
                  k.straggler ? "  <- straggler" : "");
    o << line;
  }
  if (!r.top_ops.empty()) {
    o << "\ntop " << r.top_ops.size() << " " << r.top_ops_source
      << (r.top_ops_source == "kernels" ? " by total time\n" : " by self time (total includes nested ops)\n");
    o << "     self ms    total ms    calls   mean us  name\n";
    for (const auto& op : r.top_ops) {
      char line[512];
      std::snprintf(line, sizeof(line), "  %10.2f  %10.2f %8lld %9.2f  %s\n", op.self_ms, op.total_ms,
                    static_cast<long long>(op.count), op.mean_us, op.name.c_str());
      o << line;
    }
  }
  if (!r.collectives.empty()) {
    o << "\ncollectives (nccl-tests busbw)\n";
    for (const auto& c : r.collectives) {
      char line[256];
      std::snprintf(line, sizeof(line), "  %-15s %-10s %7lld calls %10.1f MiB %10.2f ms  busbw mean %.3f max %.3f GB/s\n",
                    c.op.c_str(), c.group.c_str(), static_cast<long long>(c.count), double(c.bytes) / (1 << 20),
                    c.total_ms, c.busbw_gbps_mean, c.busbw_gbps_max);
      o << line;
    }
  }
  for (const auto& [src, n] : r.drops) o << "\nwarning: " << n << " " << src << " events were dropped while tracing\n";
  return o.str();
}

std::string reportJson(const Report& r) {
  nlohmann::json j = {{"path", r.path}, {"workload", r.workload}, {"world", r.world},
                      {"tokens_per_s", r.tokens_per_s}, {"peak_bytes", r.peak_bytes},
                      {"top_ops_source", r.top_ops_source}};
  if (r.mfu >= 0) j["mfu"] = r.mfu, j["hfu"] = r.hfu;
  for (const auto& k : r.ranks)
    j["ranks"].push_back({{"rank", k.rank}, {"steps", k.steps}, {"step_ms_mean", k.step_ms_mean},
                          {"step_ms_median", k.step_ms_median}, {"step_ms_p90", k.step_ms_p90},
                          {"step_ms_min", k.step_ms_min}, {"step_ms_max", k.step_ms_max},
                          {"compute_ms", k.compute_ms}, {"comm_ms", k.comm_ms}, {"overlap_ms", k.overlap_ms},
                          {"idle_ms", k.idle_ms}, {"peak_bytes", k.peak_bytes}, {"straggler", k.straggler}});
  for (const auto& o : r.top_ops)
    j["top_ops"].push_back({{"name", o.name}, {"count", o.count}, {"total_ms", o.total_ms}, {"self_ms", o.self_ms},
                            {"mean_us", o.mean_us}});
  for (const auto& c : r.collectives)
    j["collectives"].push_back({{"op", c.op}, {"group", c.group}, {"count", c.count}, {"bytes", c.bytes},
                                {"total_ms", c.total_ms}, {"busbw_gbps_mean", c.busbw_gbps_mean},
                                {"busbw_gbps_max", c.busbw_gbps_max}});
  for (const auto& [src, n] : r.drops) j["dropped"][src] = n;
  return j.dump();
}

}  // namespace trainscope::tracer
