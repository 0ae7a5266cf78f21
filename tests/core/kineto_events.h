// kineto_events.h — small hand-made Kineto (PyTorch profiler) events for the breakdown and import
// tests (trust_test.cpp, import_corners_test.cpp): a step, a launch, a kernel, a copy, an op, an
// annotation (ts and dur in µs from kEventsBase), and one file of them imported.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/rundb/import.h"

namespace trainscope::testing::kineto_events {

using nlohmann::json;

inline constexpr int64_t kEventsBase = 1700000000000000000LL;  // epoch ns: doubles of it step by 256 ns

inline json step(int k, double ts, double dur) {
  return {{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#" + std::to_string(k)},
          {"pid", 1}, {"tid", 1}, {"ts", ts}, {"dur", dur}};
}
inline json launch(int corr, double ts) {
  return {{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"pid", 1}, {"tid", 1},
          {"ts", ts}, {"dur", 2.0}, {"args", {{"correlation", corr}}}};
}
inline json kernel(const std::string& name, int corr, int stream, double ts, double dur) {
  json args = {{"device", 0}, {"stream", stream}};
  if (corr >= 0) args["correlation"] = corr;
  return {{"ph", "X"}, {"cat", "kernel"}, {"name", name}, {"pid", 0}, {"tid", stream},
          {"ts", ts}, {"dur", dur}, {"args", args}};
}
// A device-to-host copy; corr < 0: without a correlation id (no launch record).
inline json copy(int corr, int stream, double ts, double dur) {
  json args = {{"device", 0}, {"stream", stream}, {"bytes", 1 << 20}};
  if (corr >= 0) args["correlation"] = corr;
  return {{"ph", "X"}, {"cat", "gpu_memcpy"}, {"name", "Memcpy DtoH (Device -> Pageable)"}, {"pid", 0},
          {"tid", stream}, {"ts", ts}, {"dur", dur}, {"args", args}};
}
inline json annotation(const std::string& name, double ts, double dur) {
  return {{"ph", "X"}, {"cat", "user_annotation"}, {"name", name}, {"pid", 1}, {"tid", 1}, {"ts", ts}, {"dur", dur}};
}
inline json op(const std::string& name, double ts, double dur) {
  return {{"ph", "X"}, {"cat", "cpu_op"}, {"name", name}, {"pid", 1}, {"tid", 1}, {"ts", ts}, {"dur", dur}};
}

// The events as one Kineto file `name`.json, imported into `name`.db (returned).
inline std::string importOne(const json& events, const std::string& name) {
  const std::string in = tempPath(name + ".json"), out = tempPath(name + ".db");
  std::ofstream(in) << json{{"baseTimeNanoseconds", kEventsBase}, {"traceEvents", events}}.dump();
  trainscope::rundb::importTraces({in}, out, true);
  return out;
}

}  // namespace trainscope::testing::kineto_events
