// exchange.h — what ranks hand each other, by name (internal).
//
//   allGatherStep(comm, step, stop, device) → on every rank, every rank's step metrics (each step)
//   gatherOnLeader(comm, "collectives", mine) → on rank 0, every rank's rows in rank order (at the end)
//   syncClock(comm, "start")                  → this rank's clock offset against rank 0 (tracing)
//
// The step exchange is on the hot path: one all-gather of kStepSlots int64 per rank, on the device
// when the group is NCCL's, each value in a named slot (StepSlot).
//
// Each row type has a toJson/fromJson pair with named fields ("op", "group", …), so that a field
// added to a row is added by name, never by position. The rows travel through the rendezvous store
// (Comm::storeSet/storeGet), split into chunks of at most kExchangeChunkBytes per key: LibTorch's
// store refuses a value of several MiB by closing the connection ("Connection reset by peer" at
// the end of a long run whose collective records were tens of MB).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/rows.h"
#include "trainscope/runtime/comm.h"

namespace trainscope::runtime {

// The int64 slots each rank contributes to the step all-gather, in this order (one row of the
// gathered tensor per rank). The stop request is the one slot that is not a column of the step.
enum StepSlot : int {
  kPeakBytes,
  kParamBytes,
  kGradBytes,
  kOptimBytes,
  kActivationBytes,
  kStepTimeNs,
  kStartNs,
  kStopRequest,
  kStepSlots  // how many
};

// One rank's share of a step: its row (the slots' columns from that rank, the rest from this
// rank's own row) and its stop request (0: none).
struct StepShare {
  rundb::Step step;
  int64_t stop_request = 0;
};

// Every rank's share of this step, in rank order, on every rank; every rank calls it at each step.
std::vector<StepShare> allGatherStep(Comm& comm, const rundb::Step& mine, int64_t stop_request,
                                     const std::string& device);

// Clock offset of this rank against rank 0, NTP-style through the rendezvous store: rank 0 answers
// each ping with its clock. Rank 0's own offset is 0. Every rank calls it with the same tag.
rundb::ClockSample syncClock(Comm& comm, const std::string& tag, int rounds = 8);

// The most bytes one store key holds; a rank's rows take as many keys as they need.
constexpr size_t kExchangeChunkBytes = size_t(1) << 20;

nlohmann::json toJson(const rundb::Collective& c);
void fromJson(const nlohmann::json& j, rundb::Collective* c);
nlohmann::json toJson(const rundb::WeightDigest& d);
void fromJson(const nlohmann::json& j, rundb::WeightDigest* d);
nlohmann::json toJson(const rundb::ShardInfo& s);
void fromJson(const nlohmann::json& j, rundb::ShardInfo* s);
nlohmann::json toJson(const rundb::ExpertLoad& e);
void fromJson(const nlohmann::json& j, rundb::ExpertLoad* e);
nlohmann::json toJson(const rundb::Fp8Scale& e);
void fromJson(const nlohmann::json& j, rundb::Fp8Scale* e);

// Every rank calls it with the same key (once per key in a run), and passes a barrier of the world
// group inside. Returns, on rank 0, one JSON array per rank in rank order (this rank's own
// `rows` included); on the other ranks, nothing. A single process gets its own rows back.
std::vector<nlohmann::json> gatherJsonOnLeader(Comm& comm, const std::string& key, const nlohmann::json& rows);

// The same for rows of a type with a toJson/fromJson pair.
template <class Row>
std::vector<std::vector<Row>> gatherOnLeader(Comm& comm, const std::string& key, const std::vector<Row>& rows) {
  if (comm.layout().world == 1) return {rows};
  nlohmann::json mine = nlohmann::json::array();
  for (const Row& r : rows) mine.push_back(toJson(r));
  std::vector<std::vector<Row>> all;
  for (const nlohmann::json& part : gatherJsonOnLeader(comm, key, mine)) {
    std::vector<Row>& out = all.emplace_back();
    out.reserve(part.size());
    for (const nlohmann::json& j : part) fromJson(j, &out.emplace_back());
  }
  return all;
}

}  // namespace trainscope::runtime
