// rank_records.h — what each rank of a run recorded when the run database holds no step (summary.cpp).
#pragma once

#include <string>
#include <vector>

#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/rows.h"

namespace trainscope::rundb::detail {

// Rank 0 writes every rank's steps into the run database (gathered at each step's end), so a run
// whose rank 0 failed or was killed before its first step's end holds none, while the other ranks'
// trace shards (`DB.rank<N>`) hold what they recorded. For such a database (or a shard reported on
// its own), the steps of each rank's `step` ranges, by start (no loss, no tokens: step_time_ns and
// start_ns only); and in `notes`, one line per rank that recorded nothing, naming it, and one saying
// where the step times come from. Empty (no note) for an import, or when no file holds a step range
// and every rank recorded something.
std::vector<Step> stepsOfRankRecords(RunReader& reader, std::vector<std::string>& notes);

}  // namespace trainscope::rundb::detail
