// chrome.cpp — see chrome.h. Streams the JSON out row by row; nothing is held in memory per event.
#include "trainscope/tracer/chrome.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "trainscope/tracer/schema.h"
#include "trainscope/tracer/sqlite.h"

namespace trainscope::tracer {
namespace {

constexpr int64_t kStreamTid = 1000000;     // stream s → tid kStreamTid + s
constexpr int64_t kCollectiveTid = 999999;  // one row per rank for collectives

std::string us(int64_t ns, int64_t t0) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.3f", double(ns - t0) / 1000.0);
  return b;
}

}  // namespace

ChromeExportStats exportChrome(const std::string& path, const std::string& out_path) {
  Database db(path, Database::Mode::ReadOnly);
  checkRunDatabase(db);
  std::ofstream out(out_path, std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + out_path + " (fix: check the directory exists and is writable)");
  std::map<int64_t, std::string> strings;
  {
    Statement s(db, "SELECT id, value FROM strings");
    while (s.step()) strings[s.columnInt(0)] = s.columnText(1);
  }
  // Time zero: the earliest event, so numbers stay small and precise.
  int64_t t0 = 0;
  {
    Statement s(db, "SELECT MIN(t) FROM (SELECT MIN(start_ns) t FROM steps UNION ALL SELECT MIN(start_ns) FROM ranges "
                    "UNION ALL SELECT MIN(start_ns) FROM host_ops UNION ALL SELECT MIN(start_ns) FROM kernels "
                    "UNION ALL SELECT MIN(start_ns) FROM collectives UNION ALL SELECT MIN(start_ns) FROM api_calls)");
    if (s.step() && !s.columnIsNull(0)) t0 = s.columnInt(0);
  }
  ChromeExportStats st;
  bool first = true;
  auto emit = [&](const nlohmann::json& e) {
    out << (first ? "\n" : ",\n") << e.dump();
    first = false;
  };
  auto complete = [&](const std::string& name, const char* cat, int64_t pid, int64_t tid, int64_t b, int64_t e,
                      nlohmann::json args = nullptr) {
    nlohmann::json j = {{"name", name}, {"cat", cat}, {"ph", "X"}, {"pid", pid}, {"tid", tid},
                        {"ts", std::stod(us(b, t0))}, {"dur", double(e - b) / 1000.0}};
    if (!args.is_null()) j["args"] = std::move(args);
    emit(j);
    ++st.complete_events;
  };
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[";
  std::set<std::pair<int64_t, int64_t>> threads;
  std::set<int64_t> ranks;
  {
    Statement s(db, "SELECT rank, step, start_ns, step_time_ns, loss FROM steps");
    while (s.step()) {
      ranks.insert(s.columnInt(0));
      complete("step " + std::to_string(s.columnInt(1)), "step", s.columnInt(0), 0, s.columnInt(2),
               s.columnInt(2) + s.columnInt(3), {{"loss", s.columnDouble(4)}});
    }
  }
  {
    Statement s(db, "SELECT rank, tid, start_ns, end_ns, name_id, depth FROM ranges");
    while (s.step()) {
      ranks.insert(s.columnInt(0));
      threads.insert({s.columnInt(0), s.columnInt(1) + 1});
      complete(strings[s.columnInt(4)], "range", s.columnInt(0), s.columnInt(1) + 1, s.columnInt(2), s.columnInt(3));
    }
  }
  {
    Statement s(db, "SELECT rank, tid, start_ns, end_ns, name_id FROM host_ops");
    while (s.step()) {
      threads.insert({s.columnInt(0), s.columnInt(1) + 1});
      complete(strings[s.columnInt(4)], "op", s.columnInt(0), s.columnInt(1) + 1, s.columnInt(2), s.columnInt(3));
    }
  }
  {
    Statement s(db, "SELECT rank, stream, start_ns, end_ns, name_id, correlation, grid_x, grid_y, grid_z, block_x, "
                    "block_y, block_z FROM kernels");
    while (s.step()) {
      const int64_t pid = s.columnInt(0), tid = kStreamTid + s.columnInt(1);
      threads.insert({pid, tid});
      complete(strings[s.columnInt(4)], "kernel", pid, tid, s.columnInt(2), s.columnInt(3),
               {{"correlation", s.columnInt(5)},
                {"grid", {s.columnInt(6), s.columnInt(7), s.columnInt(8)}},
                {"block", {s.columnInt(9), s.columnInt(10), s.columnInt(11)}}});
    }
  }
  {
    Statement s(db, "SELECT rank, stream, start_ns, end_ns, kind, bytes FROM memcpy");
    while (s.step()) {
      const int64_t pid = s.columnInt(0), tid = kStreamTid + s.columnInt(1);
      threads.insert({pid, tid});
      complete("memcpy", "memcpy", pid, tid, s.columnInt(2), s.columnInt(3),
               {{"kind", s.columnInt(4)}, {"bytes", s.columnInt(5)}});
    }
  }
  {
    // Launch → kernel flows: the runtime API call and the kernel share a correlation id.
    Statement s(db, "SELECT a.rank, a.tid, a.start_ns, a.end_ns, a.name_id, a.correlation, k.stream, k.start_ns "
                    "FROM api_calls a LEFT JOIN kernels k ON k.rank = a.rank AND k.correlation = a.correlation");
    while (s.step()) {
      const int64_t pid = s.columnInt(0), tid = s.columnInt(1) + 1;
      threads.insert({pid, tid});
      complete(strings[s.columnInt(4)], "cuda_api", pid, tid, s.columnInt(2), s.columnInt(3),
               {{"correlation", s.columnInt(5)}});
      if (s.columnIsNull(6)) continue;
      const int64_t id = (pid << 40) ^ s.columnInt(5);
      emit({{"name", "launch"}, {"cat", "flow"}, {"ph", "s"}, {"id", id}, {"pid", pid}, {"tid", tid},
            {"ts", std::stod(us(s.columnInt(2), t0))}});
      emit({{"name", "launch"}, {"cat", "flow"}, {"ph", "f"}, {"bp", "e"}, {"id", id}, {"pid", pid},
            {"tid", kStreamTid + s.columnInt(6)}, {"ts", std::stod(us(s.columnInt(7), t0))}});
      ++st.flow_pairs;
    }
  }
  {
    Statement s(db, "SELECT rank, op, grp, bytes, start_ns, end_ns, busbw FROM collectives");
    while (s.step()) {
      threads.insert({s.columnInt(0), kCollectiveTid});
      complete(s.columnText(1) + " (" + s.columnText(2) + ")", "collective", s.columnInt(0), kCollectiveTid,
               s.columnInt(4), s.columnInt(5), {{"bytes", s.columnInt(3)}, {"busbw_GBps", s.columnDouble(6) * 1e-9}});
    }
  }
  {
    Statement s(db, "SELECT rank, ts_ns, name_id, value FROM counters");
    while (s.step()) {
      emit({{"name", strings[s.columnInt(2)]}, {"ph", "C"}, {"pid", s.columnInt(0)},
            {"ts", std::stod(us(s.columnInt(1), t0))}, {"args", {{"value", s.columnDouble(3)}}}});
      ++st.counter_events;
    }
  }
  for (int64_t r : ranks)
    emit({{"name", "process_name"}, {"ph", "M"}, {"pid", r}, {"args", {{"name", "rank " + std::to_string(r)}}}});
  for (const auto& [pid, tid] : threads) {
    std::string name = tid == kCollectiveTid ? "collectives"
                       : tid >= kStreamTid   ? "stream " + std::to_string(tid - kStreamTid)
                                             : "thread " + std::to_string(tid - 1);
    emit({{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}});
  }
  out << "\n]}\n";
  if (!out) throw std::runtime_error("writing " + out_path + " failed (disk full?)");
  return st;
}

}  // namespace trainscope::tracer
