// report.cpp — see report.h.
#include "trainscope/rundb/report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/rundb/reader.h"

namespace trainscope::rundb {
namespace {

// Long names (templated CUDA kernels run to hundreds of characters) keep their head and tail in the
// text table; --json keeps them whole.
std::string elide(const std::string& name, size_t width = 96) {
  if (name.size() <= width) return name;
  const size_t keep = (width - 3) / 2;
  return name.substr(0, keep) + "..." + name.substr(name.size() - (width - 3 - keep));
}

// Host ops by self time, with a stack per (rank, thread): ops come ordered by start, outer first.
std::vector<OpStat> hostOpsBySelfTime(RunReader& reader, const std::vector<int64_t>& ranks) {
  std::map<StringId, OpStat> by_name;
  for (int64_t rank : ranks) {
    std::vector<HostOp> ops = reader.events<HostOp>(rank);
    std::stable_sort(ops.begin(), ops.end(), [](const HostOp& a, const HostOp& b) {
      return a.tid != b.tid ? a.tid < b.tid : a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.end_ns > b.end_ns;
    });
    struct Open {
      int64_t end;
      StringId name;
    };
    std::vector<Open> stack;
    int64_t tid = -1;
    for (const HostOp& op : ops) {
      if (op.tid != tid) {
        stack.clear();
        tid = op.tid;
      }
      while (!stack.empty() && stack.back().end <= op.start_ns) stack.pop_back();
      // Differences in int64 (saturated: a damaged file's times may be any int64), then seconds: exact to
      // the nanosecond, where a difference of two doubles of epoch nanoseconds steps by 256 ns.
      const double dur = double(spanNs(op.start_ns, op.end_ns)) * 1e-9;
      if (!stack.empty())
        by_name[stack.back().name].self_s -= double(spanNs(op.start_ns, std::min(op.end_ns, stack.back().end))) * 1e-9;
      OpStat& o = by_name[op.name];
      ++o.count;
      o.total_s += dur;
      o.self_s += dur;
      stack.push_back({op.end_ns, op.name});
    }
  }
  std::vector<OpStat> out;
  for (auto& [id, o] : by_name) {
    o.name = reader.string(id);
    o.mean_s = o.count ? o.total_s / double(o.count) : 0;
    out.push_back(o);
  }
  std::sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) { return a.self_s > b.self_s; });
  return out;
}

std::vector<OpStat> kernelsByTotalTime(RunReader& reader) {
  std::map<StringId, OpStat> by_name;
  reader.forEach<Kernel>([&](const Kernel& k) {
    OpStat& o = by_name[k.name];
    ++o.count;
    o.total_s += double(spanNs(k.start_ns, k.end_ns)) * 1e-9;
  });
  std::vector<OpStat> out;
  for (auto& [id, o] : by_name) {
    o.name = reader.string(id);
    o.self_s = o.total_s;  // kernels do not nest
    o.mean_s = o.total_s / double(o.count);
    out.push_back(o);
  }
  std::sort(out.begin(), out.end(), [](const OpStat& a, const OpStat& b) { return a.total_s > b.total_s; });
  return out;
}

}  // namespace

Report computeReport(const std::string& path, int top, int skip_steps) {
  RunReader reader(path);
  Report rep;
  rep.path = path;
  rep.summary = summarize(reader, skip_steps);
  const std::vector<int64_t> ranks = reader.stepRanks();

  rep.top_ops = kernelsByTotalTime(reader);
  rep.top_ops_source = rep.top_ops.empty() ? "" : "kernels";
  if (rep.top_ops.empty()) {
    rep.top_ops = hostOpsBySelfTime(reader, ranks);
    if (!rep.top_ops.empty()) rep.top_ops_source = "host_ops";
  }
  if (rep.top_ops.size() > size_t(std::max(top, 0))) rep.top_ops.resize(size_t(std::max(top, 0)));

  std::map<std::pair<std::string, std::string>, CollectiveStat> coll;
  std::map<std::pair<std::string, std::string>, double> busbw_sum;
  for (const Collective& c : reader.collectives()) {
    CollectiveStat& s = coll[{c.op, c.group}];
    s.op = c.op;
    s.group = c.group;
    ++s.count;
    s.bytes += c.bytes;
    s.total_s += c.seconds();
    busbw_sum[{c.op, c.group}] += c.busbw();
    s.busbw_max = std::max(s.busbw_max, c.busbw());
  }
  for (auto& [key, s] : coll) {
    s.busbw_mean = busbw_sum[key] / double(s.count);
    rep.collectives.push_back(s);
  }
  std::sort(rep.collectives.begin(), rep.collectives.end(),
            [](const CollectiveStat& a, const CollectiveStat& b) { return a.total_s > b.total_s; });

  std::map<std::string, int64_t> dropped;
  for (const Drop& d : reader.drops()) dropped[d.source] += d.dropped;
  for (const auto& [src, n] : dropped)
    if (n > 0) rep.drops.emplace_back(src, n);

  // What the file cannot tell: ranks that took part but whose events never arrived.
  const std::string merged = reader.meta("merged_ranks");
  if (!merged.empty() || reader.meta("trace_level") != "") {
    std::vector<int64_t> have;
    std::stringstream ss(merged);
    for (std::string part; std::getline(ss, part, ',');) have.push_back(std::atoll(part.c_str()));
    std::string missing;
    for (int64_t r = 0; r < reader.worldSize(); ++r)
      if (std::find(have.begin(), have.end(), r) == have.end()) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    if (!merged.empty() && !missing.empty())
      rep.warnings.push_back("the events of rank(s) " + missing +
                             " are missing (their trace shards were not merged): their breakdown reads as idle");
  }
  return rep;
}

std::string formatReport(const Report& r) {
  const RunSummary& s = r.summary;
  std::ostringstream o;
  char line[512];
  o << "trainscope report: " << r.path << (s.workload.empty() ? "" : " (" + s.workload + ")") << ", " << s.world
    << " rank(s)\n";
  std::snprintf(line, sizeof(line), "throughput %.0f tokens/s over %lld step(s); step time median %.2f ms, p90 %.2f ms",
                s.tokens_per_s, static_cast<long long>(s.steps), s.step_s_median * 1e3, s.step_s_p90 * 1e3);
  o << line;
  if (s.mfu) {
    std::snprintf(line, sizeof(line), "; MFU %.2f%%, HFU %.2f%%", *s.mfu * 100, *s.hfu * 100);
    o << line;
  }
  std::snprintf(line, sizeof(line), "; peak memory %.2f MiB\n\n", double(s.peak_bytes) / (1 << 20));
  o << line;
  const bool gpu = s.breakdown_window == "gpu";
  o << "rank  steps   mean ms  median ms   p90 ms" << (gpu ? "    GPU ms" : "")
    << "   compute ms   comm ms  overlap ms  memory ms   idle ms  peak MiB\n";
  for (const auto& k : s.ranks) {
    const Breakdown b = k.breakdown.value_or(Breakdown{});
    auto cell = [&](double v) {
      char c[32];
      if (k.breakdown) std::snprintf(c, sizeof(c), "%.2f", v * 1e3);
      else std::snprintf(c, sizeof(c), "-");
      return std::string(c);
    };
    char gpu_cell[32] = "";
    if (gpu && k.gpu_step_s) std::snprintf(gpu_cell, sizeof(gpu_cell), " %9.2f", *k.gpu_step_s * 1e3);
    else if (gpu) std::snprintf(gpu_cell, sizeof(gpu_cell), " %9s", "-");
    std::snprintf(line, sizeof(line), "%4lld %6lld %9.2f %10.2f %8.2f%s %12s %9s %11s %10s %9s %9.1f%s\n",
                  static_cast<long long>(k.rank), static_cast<long long>(k.steps), k.step_s_mean * 1e3,
                  k.step_s_median * 1e3, k.step_s_p90 * 1e3, gpu_cell, cell(b.compute_s).c_str(), cell(b.comm_s).c_str(),
                  cell(b.overlap_s).c_str(), cell(b.memory_s).c_str(), cell(b.idle_s).c_str(),
                  double(k.peak_bytes) / (1 << 20), k.straggler ? "  <- straggler" : "");
    o << line;
  }
  o << "(per counted step, over each step's " << (gpu ? "GPU window: its launches' device work" : "CPU window")
    << (s.breakdown_source.empty() ? "" : "; compute from " + s.breakdown_source) << ")\n";
  for (const auto& n : s.notes) o << "note: " << n << "\n";
  if (!r.top_ops.empty()) {
    o << "\ntop " << r.top_ops.size() << " " << r.top_ops_source
      << (r.top_ops_source == "kernels" ? " by total time\n" : " by self time (total includes nested ops)\n");
    o << "     self ms    total ms    calls   mean us  name\n";
    for (const auto& op : r.top_ops) {
      std::snprintf(line, sizeof(line), "  %10.2f  %10.2f %8lld %9.2f  %s\n", op.self_s * 1e3, op.total_s * 1e3,
                    static_cast<long long>(op.count), op.mean_s * 1e6, elide(op.name).c_str());
      o << line;
    }
  }
  if (!r.collectives.empty()) {
    o << "\ncollectives (nccl-tests busbw)\n";
    for (const auto& c : r.collectives) {
      std::snprintf(line, sizeof(line), "  %-15s %-10s %7lld calls %10.1f MiB %10.2f ms  busbw mean %.3f max %.3f GB/s\n",
                    c.op.c_str(), c.group.c_str(), static_cast<long long>(c.count), double(c.bytes) / (1 << 20),
                    c.total_s * 1e3, c.busbw_mean * 1e-9, c.busbw_max * 1e-9);
      o << line;
    }
  }
  for (const auto& [src, n] : r.drops)
    o << "\nwarning: " << n << " " << src
      << (src == "import" ? " events were left out while importing (a time outside int64 nanoseconds, or a negative "
                            "duration)\n"
                          : " events were dropped while tracing\n");
  for (const auto& w : r.warnings) o << "\nwarning: " << w << "\n";
  return o.str();
}

std::string reportJson(const Report& r) {
  nlohmann::json j = {{"path", r.path}, {"summary", nlohmann::json::parse(summaryJson(r.summary))},
                      {"top_ops_source", r.top_ops_source}};
  j["top_ops"] = nlohmann::json::array();
  for (const auto& o : r.top_ops)
    j["top_ops"].push_back({{"name", o.name}, {"count", o.count}, {"total_s", o.total_s}, {"self_s", o.self_s},
                            {"mean_s", o.mean_s}});
  j["collectives"] = nlohmann::json::array();
  for (const auto& c : r.collectives)
    j["collectives"].push_back({{"op", c.op}, {"group", c.group}, {"count", c.count}, {"bytes", c.bytes},
                                {"total_s", c.total_s}, {"busbw_mean", c.busbw_mean}, {"busbw_max", c.busbw_max}});
  j["dropped"] = nlohmann::json::object();
  for (const auto& [src, n] : r.drops) j["dropped"][src] = n;
  j["warnings"] = r.warnings;
  return j.dump();
}

}  // namespace trainscope::rundb
