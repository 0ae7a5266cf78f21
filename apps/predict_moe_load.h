// predict_moe_load.h — `predict --moe-load RUN.db`: a MoE run's recorded routing as the load the
// models price (Plan::moe_load; docs/memory-model.md, "Routing load"), and the line saying which
// routing a prediction priced.
#pragma once

#include <string>

#include "trainscope/models/plan.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

struct MoeLoadRead {
  double load = 0;           // the hottest EP rank's load over balanced routing's, the largest the run saw
  double mean = 0;           // its mean over the run's (step, layer, EP group) samples
  int64_t samples = 0;
  double dropped_share = 0;  // of the run's assignments, dropped at its capacity
};

// Reads `path`'s expert_load rows for plan `p` of workload `w` (the experts split over p.ep ranks, the
// run's routing ranks grouped as its EP groups). UserError naming --moe-load for a file that is not a
// run database, a run of another model or expert count, a run without expert_load rows, a dense
// workload, or an ep that does not divide the experts.
MoeLoadRead readMoeLoad(const std::string& path, const workloads::Workload& w, const models::Plan& p);

// What routing a prediction of `p` priced, one line ("" for a dense workload): e.g. "routing: random
// top-2 of 4 experts, hottest of 2 EP ranks expected at 1.020x balanced (2.0% more rows)".
std::string routingLine(const workloads::Workload& w, const models::Plan& p, const std::string& source);

}  // namespace trainscope::apps
