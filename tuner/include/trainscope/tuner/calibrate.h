// trainscope/tuner/calibrate.h — a cluster file for the machine it runs on, from measurements
// (`trainscope tune --cluster local`): the compute rates `trainscope-train calibrate` measured, and
// an α–β fit of the collectives a traced two-rank run recorded.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/rundb/rows.h"
#include "trainscope/tuner/models.h"

namespace trainscope::tuner {

// Least squares of the time model's collective term, t = 2(n−1)·α + bytes·factor / β (factor: the
// nccl-tests bus factor of the op over n ranks), over collectives of two or more ranks. Throws
// UserError when fewer than two distinct message sizes were recorded.
struct CollectiveFit {
  NetworkTier tier;    // latency = α, bandwidth = β, efficiency 1
  int64_t samples = 0;
  double r2 = 0;       // of the fit, over the samples
};
CollectiveFit fitCollectives(const std::vector<rundb::Collective>& rows);

// The cluster JSON for this machine: one node of `ranks` CPU ranks that share its measured rates
// (the time model divides a CPU node's peak among its ranks), `memory_bytes` per rank.
// `rates_json` is `trainscope-train calibrate`'s output.
std::string localClusterJson(const std::string& rates_json, const CollectiveFit& fit, int64_t ranks,
                             int64_t memory_bytes, const std::string& host);

}  // namespace trainscope::tuner
