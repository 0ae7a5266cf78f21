// trainscope/viewer/details.h — every field of one event, read back from its database row (the
// model keeps only what drawing needs), and a generated trace for tests, benchmarks and demos.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainscope/viewer/model.h"
#include "trainscope/viewer/query.h"

namespace trainscope::rundb {
class RunReader;
}

namespace trainscope::viewer {

using Fields = std::vector<std::pair<std::string, std::string>>;

// The event's row, field by field ("name", "start", "duration", then the table's own columns; for a
// collective its bytes, algorithm and bus bandwidth). Empty when the row cannot be found.
Fields eventDetails(rundb::RunReader& reader, const Trace& trace, const EventRef& ref);

// Launch latency, from the correlation ids (query.h): for a kernel, copy or set, "launched by" (the
// API call) and "launch latency" — the device work's start less the launch call's end (the queue
// it waited in: an earlier kernel or the GPU catching up); for an API call, the same to the first
// work it launched. Empty for events with no correlated partner.
Fields launchFields(const Trace& trace, const CorrelationIndex& correlation, const EventRef& ref);

// The run's `run --save` checkpoints for the summary panel: "checkpoints" (how many, their bytes and
// seconds in all), then one field per checkpoint, the last `most` of them ("checkpoint after step
// N": size, seconds, MB/s, folder). Empty for a run that saved none.
Fields checkpointFields(const std::vector<rundb::Checkpoint>& rows, size_t most = 8);

// A synthetic training trace: per rank, `steps` steps of a CPU thread (step > forward/backward >
// layer ranges > aten ops > cudaLaunchKernel), one device stream of kernels (one NCCL all-reduce per
// step), a copy and a set per step, a data-parallel all-reduce collective and the memory counter.
// About `events_per_rank` events per rank in all. Deterministic.
struct SyntheticOptions {
  int ranks = 2;
  int64_t events_per_rank = 20'000;
  int steps = 4;
  int64_t start_ns = 1'700'000'000'000'000'000;  // an epoch-scale clock, as real traces have
  bool kernels = true;  // false: a CPU-only trace
};
void writeSyntheticTrace(const std::string& path, const SyntheticOptions& o);

}  // namespace trainscope::viewer
