// trainscope/rundb/report.h — what `trainscope report run.db` computes, on the reader.
//
// The run summary (summary.h: throughput, step times, MFU, memory, the per-rank breakdown and
// stragglers), then: top ops — kernels by total time when there are any, else host ops by self
// (exclusive) time, an op minus the ops nested inside it on its thread (ATen ops call ATen ops);
// collectives by op and group with nccl-tests bus bandwidth over the transfer (the wait for the last
// rank left out) and the ranks' arrival skew; dropped events; the expert load of each MoE layer
// (moe_load.h); and warnings about what is missing (ranks whose shards were not merged).
//
// Also the one rule that links a collective's copies across ranks (linkCollectives): the report's
// skew and bandwidth and the viewer's links both come from it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/rundb/rank_failures.h"
#include "trainscope/rundb/fp8_scales.h"
#include "trainscope/rundb/moe_load.h"
#include "trainscope/rundb/summary.h"

namespace trainscope::rundb {

struct OpStat {
  std::string name;
  int64_t count = 0;
  double total_s = 0, mean_s = 0;  // inclusive
  double self_s = 0;               // exclusive: minus the ops nested inside it on its thread
};

// --- Collectives linked across ranks ---

// A run's parallel layout, as runtime/parallel.h lays ranks out: rank = tp + TP·(cp + CP·(dp + DP·pp)).
struct RunLayout {
  int64_t world = 1, dp = 1, tp = 1, pp = 1, cp = 1;
  int64_t ep = 1;             // expert parallelism: ep consecutive DP ranks (groups `ep`, `expert_dp`)
  int64_t micro_batches = 1;  // `ga`: the pipeline's micro-batches per step
  bool gpipe = false;         // `pp_schedule`: gpipe, else 1f1b
  int64_t virtual_stages = 1; // `virtual_stages` (or `pp_schedule` interleaved: 2): > 1 is interleaved 1F1B
  struct Coords {
    int64_t dp = 0, tp = 0, pp = 0, cp = 0;
  };
  Coords coords(int64_t rank) const {
    return {(rank / (tp * cp)) % dp, rank % tp, rank / (tp * cp * dp), (rank / tp) % cp};
  }
  int64_t rankOf(const Coords& c) const { return c.tp + tp * (c.cp + cp * (c.dp + dp * c.pp)); }
};
// From meta.config (world, dp, tp, pp, cp, ep, ga, pp_schedule); nullopt when it is absent or does not add up
// (dp·cp·tp·pp ≠ world: an import, a hand-made file; or past 2^20 ranks or micro-batches: a damaged one).
std::optional<RunLayout> runLayout(const std::map<std::string, std::string>& meta);

// One call as all its members made it: a collective's copies on the ranks of one group instance, or a
// pipeline send and the receive that took its data.
struct LinkedCall {
  std::vector<size_t> rows;  // into the rows given to linkCollectives; by rank (p2p: send, then recv)
  int64_t first_start_ns = 0, last_start_ns = 0;  // the first and the last arrival
  int64_t end_ns = 0;        // p2p: the receive's end (a send's own end is only an upper bound)
  bool p2p = false;
  bool cut = false;          // a member the trace's end cut: p2p's end (the receive's) is not known
  int64_t skewNs() const { return spanNs(first_start_ns, last_start_ns); }  // saturated (any file's times)
};

struct CollectiveLinks {
  std::vector<LinkedCall> calls;
  std::vector<int64_t> call_of;  // per row: its call, -1 when not linked
  std::map<std::string, std::string> why;  // by group: why its rows could not be linked, where the linker knows
};

// Why `row` (call_of −1) is not linked, in words, for the report and the viewer: never a zero wait.
std::string notLinkedReason(const Collective& row, const CollectiveLinks& links, const std::optional<RunLayout>& layout);

// Links the rows of a `collectives` table (any order). A collective's copies are the rows of one
// group instance with the same call number: the rank's count of collectives on that group, which is
// `seq` on groups that carry no sends or receives (sends and receives take numbers from the same
// counter, so on `pp` the call number skips them). The instance of `tp`, `dp`, `pp`, `embedding`,
// `world`, `ep` and `expert_dp` comes from the layout (members share the other coordinates); without a layout, or for
// another group name (an import's process groups), rows link when exactly group_size rows of distinct
// ranks share (group, call number, op, bytes), the calls numbered within each of `steps` (a row's step:
// the one of its rank that holds its start; rows outside every step are numbered apart), so that
// nothing links across steps (ranks' files from two profiling cycles, a subgroup's calls the trace
// does not name shifting one rank's count). Sends and receives on `pp` pair through the pipeline
// schedule the layout names (runtime/src/parallel/pipeline.cpp): each rank's k-th send or receive is
// the k-th operation of its stage's schedule, and a send pairs with the receive of the same step,
// micro-batch and direction on the neighbouring stage. Rows that disagree with the schedule are left
// unlinked, never paired by guess.
CollectiveLinks linkCollectives(const std::vector<Collective>& rows, const std::optional<RunLayout>& layout,
                                const std::vector<Step>& steps = {});
// A run database's rows linked as report, the viewer and the exports link them: the layout its
// meta.config names, and the calls of an import numbered within `steps` — unless its collectives are
// timed on the device (meta collectives_clock "device": NCCL kernels, which run behind the CPU's
// ProfilerStep windows, so a peer's copy could fall in the next step; numbered over the whole trace).
CollectiveLinks linkRunCollectives(const std::vector<Collective>& rows, const std::map<std::string, std::string>& meta,
                                   const std::vector<Step>& steps);

// Where one row's time went: the wait for the last member to arrive, then the transfer. `call` is the
// row's linked call (nullptr: not linked, all of it is transfer).
struct CallTiming {
  int64_t wait_ns = 0;      // last arrival − this row's start
  int64_t transfer_ns = 0;  // end − last arrival (p2p: the receive's end); 0 if negative
  double busbw = 0;         // bytes/s, nccl-tests' rule over the transfer (0 for an empty transfer)
};
CallTiming callTiming(const Collective& row, const LinkedCall* call);

struct CollectiveStat {
  std::string op, group;
  int64_t count = 0, bytes = 0;
  // Rows the trace's end cut (Collective::cut): in count and bytes, not in total_s, wait_s, transfer_s
  // or the bandwidths (their means are over the count − cut rows whose end is known).
  int64_t cut = 0;
  double total_s = 0;
  double busbw_mean = 0, busbw_max = 0;  // bytes/s over the transfer, the wait left out
  double busbw_with_wait_mean = 0;       // bytes/s over the whole call, as the table's busbw column
  int64_t linked = 0;                    // distinct linked calls among these rows
  double skew_mean_s = 0, skew_max_s = 0;  // arrival skew (last start − first start) over those calls
  double wait_s = 0, transfer_s = 0;     // summed over the rows
  int64_t rows_not_linked = 0;           // rows no call took: their skew and wait are unknown, not 0
  std::string not_linked_reason;         // why (notLinkedReason of the first such row); "" when all linked
};

struct Report {
  std::string path;
  RunSummary summary;
  std::vector<OpStat> top_ops;
  std::string top_ops_source;  // "kernels", "host_ops" or "" (no op events)
  std::vector<CollectiveStat> collectives;
  std::vector<std::pair<std::string, int64_t>> drops;  // source → dropped events
  std::vector<std::string> warnings;
  std::vector<Checkpoint> checkpoints;  // `run --save` (docs/checkpoints.md)
  std::vector<ExpertLayerLoad> expert_load;  // per MoE layer (moe_load.h); empty for a dense run
  std::vector<Fp8RoleSummary> fp8;           // per FP8 role (fp8_scales.h); empty unless --precision fp8
  RunFailure failure;  // a failed run (rank_failures.h): first_rank -1 and no ranks otherwise
};

// Throws UserError with a clear message when `path` is not a run database, or is truncated or
// damaged. Steps with index < skip_steps are left out of the statistics (imports: none).
Report computeReport(const std::string& path, int top = 15, int skip_steps = 1);
std::string formatReport(const Report& r);
std::string reportJson(const Report& r);

}  // namespace trainscope::rundb
