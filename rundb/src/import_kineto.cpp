// import_kineto.cpp — PyTorch profiler (Kineto) Chrome-trace JSON into the run database.
//   cpu_op → host_ops, user_annotation/gpu_user_annotation → ranges, kernel → kernels,
//   cuda_runtime/cuda_driver → api_calls, gpu_memcpy → memcpy, gpu_memset → memset;
//   "ProfilerStep#N" annotations become steps.
#include <algorithm>
#include <cmath>
#include <climits>

#include <nlohmann/json.hpp>

#include "import_impl.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/store.h"

namespace trainscope::rundb::importers {
namespace {

int32_t memcpyKind(const std::string& name) {
  static const std::pair<const char*, MemcpyKind> kinds[] = {{"HtoD", MemcpyKind::HtoD}, {"DtoH", MemcpyKind::DtoH},
                                                             {"DtoD", MemcpyKind::DtoD}, {"HtoH", MemcpyKind::HtoH},
                                                             {"PtoP", MemcpyKind::PtoP}};
  for (const auto& [k, v] : kinds)
    if (name.find(k) != std::string::npos) return int32_t(v);
  return int32_t(MemcpyKind::Unknown);
}

int64_t intArg(const nlohmann::json& args, const char* key, int64_t fallback) {
  auto it = args.find(key);
  return it != args.end() && it->is_number_integer() ? it->get<int64_t>() : fallback;
}

}  // namespace

int64_t importKineto(RunStore& store, ImportStats& st, const std::string& text, const std::string& path,
                     int64_t default_rank) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError("import", path + " is not valid JSON: " + e.what(), "pass a PyTorch profiler trace (.json or .json.gz)");
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw UserError("import", path + " has no traceEvents array", "pass a PyTorch profiler (Kineto) trace");
  int64_t rank = default_rank;
  if (j.contains("distributedInfo") && j["distributedInfo"].is_object() && j["distributedInfo"].contains("rank"))
    rank = j["distributedInfo"]["rank"].get<int64_t>();
  const int64_t base = j.value("baseTimeNanoseconds", int64_t(0));
  auto ns = [&](const nlohmann::json& us) { return base + int64_t(std::llround(us.get<double>() * 1000.0)); };
  const StringId domain = store.intern("kineto");
  int64_t steps_seen = 0, t_min = INT64_MAX, t_max = INT64_MIN;
  for (const auto& e : j["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("ts") || !e.contains("dur")) continue;
    const std::string cat = e.value("cat", ""), name = e.value("name", "");
    const int64_t b = ns(e["ts"]), en = b + int64_t(std::llround(e["dur"].get<double>() * 1000.0));
    t_min = std::min(t_min, b);
    t_max = std::max(t_max, en);
    const nlohmann::json args = e.value("args", nlohmann::json::object());
    const int64_t tid = e.contains("tid") && e["tid"].is_number() ? e["tid"].get<int64_t>() : 0;
    const int64_t corr = intArg(args, "correlation", -1);
    if (cat == "cpu_op") {
      HostOp op{b, en, store.intern(name), tid, intArg(args, "Sequence number", -1), kNoString, rank};
      if (args.contains("Input Dims")) op.shapes = store.intern(args["Input Dims"].dump());
      store.put(op);
      ++st.host_ops;
    } else if (cat == "user_annotation" || cat == "gpu_user_annotation") {
      const int64_t k = stepNumber(name, path);
      if (k >= 0 && cat == "user_annotation") {
        store.appendStep(importedStep(rank, k, b, en));
        ++steps_seen;
      }
      store.put(Range{b, en, store.intern(name), domain, tid, 0, int32_t(RangeKind::StartEnd), rank});
      ++st.ranges;
    } else if (cat == "kernel") {
      auto dim = [&](const char* key, int i) {
        return args.contains(key) && args[key].is_array() && int(args[key].size()) > i ? args[key][i].get<int32_t>()
                                                                                        : int32_t(0);
      };
      Kernel k{b, en, intArg(args, "device", 0), intArg(args, "stream", tid), store.intern(name), corr};
      for (int i = 0; i < 3; ++i) k.grid[i] = dim("grid", i), k.block[i] = dim("block", i);
      k.registers = int32_t(intArg(args, "registers per thread", 0));
      k.shared_bytes = int32_t(intArg(args, "shared memory", 0));
      k.rank = rank;
      store.put(k);
      ++st.kernels;
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
      store.put(ApiCall{b, en, tid, store.intern(name), corr,
                        int32_t(cat == "cuda_driver" ? ApiKind::Driver : ApiKind::Runtime), rank});
      ++st.api_calls;
    } else if (cat == "gpu_memcpy") {
      store.put(Memcpy{b, en, intArg(args, "device", 0), intArg(args, "stream", tid), corr, memcpyKind(name),
                       intArg(args, "bytes", 0), rank});
      ++st.memcpy;
    } else if (cat == "gpu_memset") {
      store.put(Memset{b, en, intArg(args, "device", 0), intArg(args, "stream", tid), corr, intArg(args, "bytes", 0), 0,
                       rank});
      ++st.memset;
    }
  }
  if (steps_seen == 0 && t_min < t_max) {  // no ProfilerStep: the whole trace is one step
    store.appendStep(importedStep(rank, 0, t_min, t_max));
    steps_seen = 1;
  }
  st.steps += steps_seen;
  store.putRank(RankInfo{rank, "", "kineto", 0, 0, std::nullopt, std::nullopt});
  return rank;
}

}  // namespace trainscope::rundb::importers
