// trainscope/rundb/import_probe.h — a measured job's probe rows (python/trainscope_probe) and its
// torch.profiler traces into one run database, so the learner, study, report, export and the viewer
// read an external trial (`tune --runner hf|accelerate|deepspeed|…`) as they read a native one.
//
//   steps   one JSON object a line per rank and step (rank<R>.steps.jsonl): rank, step, start_ns,
//           step_time_ns, tokens (the global batch's), loss (or null), peak_bytes, world; optional
//           skipped (true: the framework skipped the update, the step's work done: steps.skipped)
//   traces  the profile trial's Kineto traces, one per rank (import.h's importer): their events,
//           ranks and collectives; the trace's own ProfilerStep rows are replaced by the probe's
//           (every step, not only the traced ones)
// meta: source "probe" (step 0 is the warm-up the summary leaves out, as in a native run),
// world_size (the rows' world), config {"workload": …}, then `meta`'s keys: a tune's trial gives its
// resolved configuration as "config" (the plan the job ran, so `calibrate` prices it), "framework"
// (the profile it is priced under: fsdp, deepspeed, …) and "device" (cpu or cuda). Built under a temporary name and linked into
// place: a failed import leaves nothing, and an existing path is refused (a trial's paths are fresh).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace trainscope::rundb {

struct ProbeImport {
  int64_t steps = 0;   // step rows written
  int64_t ranks = 0;   // ranks that wrote any
  int64_t traced = 0;  // trace files imported
};

// Throws UserError naming `field` and the file for a malformed row (the line number) or no rows at all.
ProbeImport importProbe(const std::vector<std::string>& step_files, const std::vector<std::string>& traces,
                        const std::string& out_db, const std::string& workload, const std::string& field,
                        const std::map<std::string, std::string>& meta = {});

}  // namespace trainscope::rundb
