// trainscope/tracer/chrome.h — Chrome trace JSON (the Trace Event Format) that Perfetto and
// chrome://tracing open: ranks as processes; host threads, CUDA streams and a "collectives" row as
// threads; ranges, ops, kernels, copies and collectives as complete ("X") events; counters as "C";
// CUDA launch → kernel as flow events ("s"/"f", id = correlation).
#pragma once

#include <cstdint>
#include <string>

namespace trainscope::tracer {

struct ChromeExportStats {
  int64_t complete_events = 0, counter_events = 0, flow_pairs = 0;
};

// Throws with a clear message when `run_db` is not a run database.
ChromeExportStats exportChrome(const std::string& run_db, const std::string& json_path);

}  // namespace trainscope::tracer
