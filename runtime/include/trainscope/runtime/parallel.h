// trainscope/runtime/parallel.h — how ranks are laid out (no LibTorch).
//
// world = DP x CP x TP x PP. As in Megatron-LM (its default order "tp-cp-ep-dp-pp"), TP is innermost
// (neighbouring ranks share a tensor-parallel group, where traffic is heaviest), then CP (the ring
// of context-parallel ranks exchanging K/V every layer), then DP, then PP outermost:
//     rank = tp + TP * (cp + CP * (dp + DP * pp))
// Groups: tp (same cp, dp, pp), cp (same tp, dp, pp), dp (same tp, cp, pp), dp_cp (same tp, pp: the
// data-parallel and context-parallel ranks together, over which gradients are reduced, as Megatron
// does), pp (same tp, cp, dp), and `embedding` (the first and last pipeline stage with the same tp,
// cp, dp), which holds the two copies of the tied embedding. With cp = 1 this is the DP x TP x PP
// layout of before, rank for rank.
#pragma once

#include <string>
#include <vector>

namespace trainscope::runtime {

struct Layout {
  int world = 1, rank = 0;
  int dp = 1, tp = 1, pp = 1, cp = 1;
  int dp_rank = 0, tp_rank = 0, pp_rank = 0, cp_rank = 0;

  static Layout make(int world, int rank, int tp, int pp, int cp = 1);  // dp = world / (tp * pp * cp)
  int rankOf(int dp_rank, int tp_rank, int pp_rank, int cp_rank) const {
    return tp_rank + tp * (cp_rank + cp * (dp_rank + dp * pp_rank));
  }
  int rankOf(int dp_rank, int tp_rank, int pp_rank) const { return rankOf(dp_rank, tp_rank, pp_rank, cp_rank); }
  std::vector<int> tpGroup() const;
  std::vector<int> dpGroup() const;
  std::vector<int> cpGroup() const;
  std::vector<int> dpCpGroup() const;  // cp fastest: dp_cp rank = cp_rank + CP * dp_rank
  std::vector<int> ppGroup() const;
  std::vector<int> embeddingGroup() const;  // {first stage, last stage} (one rank when pp == 1)
  // ZeRO-3 hybrid sharding in groups of `shard` consecutive DP ranks: this rank's shard group, and
  // the ranks holding the same shard in the other groups (its replicas; dp / shard of them).
  std::vector<int> zeroShardGroup(int shard) const;
  std::vector<int> zeroReplicaGroup(int shard) const;
  // Expert parallelism over `ep` consecutive DP ranks (with the same tp, cp, pp): the ranks that split
  // a MoE layer's experts with this one (the all-to-all's group), and the ranks holding the same
  // experts, over which the experts' gradients are reduced (Megatron-LM's expert-data-parallel group).
  std::vector<int> epGroup(int ep) const { return zeroShardGroup(ep); }
  std::vector<int> expertDpGroup(int ep) const { return zeroReplicaGroup(ep); }
  bool firstStage() const { return pp_rank == 0; }
  bool lastStage() const { return pp_rank == pp - 1; }
};

// How this process was started. Filled from torchrun's variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT) or Slurm's (SLURM_PROCID, SLURM_NTASKS,
// SLURM_LOCALID, SLURM_NTASKS_PER_NODE/SLURM_STEP_TASKS_PER_NODE, first host of
// SLURM_JOB_NODELIST, a port derived from SLURM_JOB_ID).
struct RankEnv {
  bool distributed = false;  // false: a single process, nothing set
  int rank = 0, world = 1, local_rank = 0, local_world = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string source;        // "torchrun", "slurm" or "single"
};

RankEnv rankEnvFromEnvironment();
// "node[01-03],other" -> {"node01","node02","node03","other"} (Slurm's hostlist syntax).
std::vector<std::string> expandHostlist(const std::string& list);

}  // namespace trainscope::runtime
