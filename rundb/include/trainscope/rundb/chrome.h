// trainscope/rundb/chrome.h — Chrome trace JSON (the Trace Event Format) that Perfetto and
// chrome://tracing open: ranks as processes; host threads, CUDA streams and a "collectives" row as
// threads (named by kind, never told apart by number range); ranges, ops, kernels, copies and
// collectives as complete ("X") events; counters as "C"; CUDA launch → kernel as flow events
// ("s"/"f"), joined only on real correlation ids, one API call to each kernel it launched.
//
// The file is written beside the target under a temporary name and renamed on success: a failed
// export leaves no partial file and keeps an earlier one. The output may not be the input, and an
// existing file is replaced only when it is an earlier Chrome export of ours, or with `overwrite`.
#pragma once

#include <cstdint>
#include <string>

namespace trainscope::rundb {

struct ChromeExportStats {
  int64_t complete_events = 0, counter_events = 0, flow_pairs = 0;
};

// Throws UserError with a clear message when `run_db` is not a run database or the output is refused.
ChromeExportStats exportChrome(const std::string& run_db, const std::string& json_path, bool overwrite = false);

}  // namespace trainscope::rundb
