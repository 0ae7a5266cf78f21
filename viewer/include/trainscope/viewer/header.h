// trainscope/viewer/header.h — the line under the top bar that says what an imported trace is: where it
// came from (each file, its format and the rank it became), the ranks, the span, the processes the
// trace named, and what the import left out (events dropped, values refused, device events of
// categories it does not read). Nothing for a native run (its Summary says what it is).
#pragma once

#include <string>

#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

// "imported: PyTorch profiler trace rank0.json → rank 0, Nsight Systems export r1.sqlite → rank 1 ·
// ranks 0, 1 · span 12.5 ms · processes: rank 0 python3 (pid 42) · dropped 3 events · 2 values refused";
// "" unless meta source is "import". Files are named by their last path component.
std::string importHeader(const Trace& t);

// A traced run whose trace has not reached it (still running, or killed before it merged its ranks'
// shards): only its steps are here, which would read as a run that did nothing between them. Says so
// and names the shards beside `path` that hold the events (rundb::shardPath), e.g. "traced at level
// ranges, but its events are not merged into it (the run is still running, or stopped before its
// end); the events recorded are in run.db.rank0, run.db.rank1 (open each on its own)". "" for an
// import, a steps-level run, or one with events.
std::string unmergedTraceHeader(const std::string& path, const Trace& t);

}  // namespace trainscope::viewer
