// preflight.h — what a run must fit before anything starts (internal to the runtime): the tasks
// its threads need under the host's task limit, and the memory the model predicts (tensors, and on
// the CPU under a host limit the process's other memory, docs/memory-model.md) under the limit.
// Both refuse with a UserError naming the flag and the fix (exit 2).
#pragma once

#include <cstdint>

#include "trainscope/runconfig/config.h"

namespace trainscope::runtime {

struct MemoryFit {
  int64_t available = 0;  // 0: no limit known
  int64_t need = 0;       // tensors and the rest, per rank
};

// The tasks `ranks_on_host` ranks of `cfg` create must fit pids.max / threads-max / RLIMIT_NPROC.
void checkTasksFit(const TrainConfig& cfg, int ranks_on_host);

// Stage `pp_rank`'s predicted memory must fit the bytes available to one of `local_ranks` ranks.
MemoryFit checkMemoryFits(const TrainConfig& cfg, int pp_rank, int local_ranks, bool cpu);

}  // namespace trainscope::runtime
