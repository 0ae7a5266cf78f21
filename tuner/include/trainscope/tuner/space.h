// trainscope/tuner/space.h — the configuration space of a tuning study and its pruning.
//
// Every combination of DP × CP × TP × PP = world (TP within a node; on a CPU cluster every world that
// divides its ranks, so one- and two-rank layouts compete), micro-batch, checkpointing, precision,
// ZeRO 0–3, pipeline schedule, virtual pipeline stages and sequence parallelism. Each candidate is
// valid, or rejected with its reason (heads % tp, layers < pp, gbs % (mbs × dp), seq % 2·cp, layers %
// pp·v, what the runtime refuses to run — resolve()'s own words —, predicted memory over the limit …);
// valid ones carry the models' predictions and are ranked by predicted step time.
#pragma once

#include <string>
#include <vector>

#include "trainscope/tuner/models.h"

namespace trainscope::tuner {

struct SpaceOptions {
  int64_t gbs = 0, seq = 0;
  std::vector<runconfig::Precision> precisions;  // empty: fp32 on CPU clusters, bf16 on GPUs
  double memory_margin = 0.10;                 // a candidate fits when predicted × (1 − margin) ≤ limit
  // The knobs' values to try (the defaults: all of them).
  std::vector<int64_t> mbs = {1, 2, 4, 8, 16, 32};
  std::vector<runconfig::Checkpointing> ckpt = {runconfig::Checkpointing::None, runconfig::Checkpointing::Selective,
                                              runconfig::Checkpointing::Full};
  std::vector<runconfig::ZeroStage> zero = {runconfig::ZeroStage::None, runconfig::ZeroStage::OptimizerStates,
                                         runconfig::ZeroStage::Gradients, runconfig::ZeroStage::Parameters};
  std::vector<int64_t> cp = {1, 2, 4};              // context-parallel degrees (those dividing the world)
  std::vector<int64_t> virtual_stages = {1, 2, 4};  // model chunks per pipeline rank (interleaved 1F1B)
  std::vector<bool> sequence_parallel = {false, true};
  std::vector<runconfig::PipelineSchedule> schedules = {runconfig::PipelineSchedule::OneFOneB,
                                                      runconfig::PipelineSchedule::GPipe};
  // false: 1F1B only interleaved (virtual_stages > 1), as `--pp-schedules interleaved` without 1f1b asks.
  bool plain_one_f_one_b = true;
  std::vector<int64_t> worlds;                 // empty: every device (a CPU cluster: each divisor of its ranks)
  // Whose job the trials run (an external runner's framework, job.h frameworkOf): the time model's
  // profile for every candidate's prediction and the study's refit (framework_profile.h).
  Framework framework = Framework::Trainscope;
};

struct Candidate {
  int64_t id = 0;
  Plan plan;
  std::string rejected;           // "" when valid
  int64_t predicted_peak = 0;     // bytes, worst stage
  double predicted_step_s = 0;    // the current ranking's: re-priced from measured costs (cost_model.h)
  double predicted_tokens_per_s = 0;
  double analytic_step_s = 0;     // the analytic model's, as priced when the space was made (kept)
  bool time_measured = false;     // predicted_step_s composed from measured layer costs (profile.h)
};

// The config the runtime trains for plan `p` (what, not how long: steps, outputs and limits are the
// caller's): a candidate's trial and its exports start from it.
runconfig::TrainConfig runConfigOf(const workloads::Workload& w, const Plan& p);
// "" when the runtime runs `p`; else "the runtime refuses it: " and resolve()'s UserError (the flag and
// its fix). A knob the runtime does not run yet is refused here, and joins the space once it does.
std::string runtimeRefusal(const workloads::Workload& w, const Plan& p);

// What framework `f` itself refuses to run of plan `p` (`why` "" when it runs it): the flag at fault,
// why, and the fix. DeepSpeed's PipelineEngine asserts ZeRO-2/3 off with pipeline parallelism and runs
// one schedule (1F1B, one model chunk per stage). `predict --framework` throws it as its UserError;
// the tuner rejects the candidate with it (--runner deepspeed), so neither prices a job that never runs.
struct FrameworkRefusal {
  std::string flag, why, fix;
};
FrameworkRefusal frameworkRefusal(Framework f, const Plan& p);
// The same, and what the framework refuses of this model under `p`: Megatron-LM runs a sliding window
// under context parallelism only with Transformer Engine's all-to-all exchange (--cp-comm-type a2a,
// Ulysses-style), which scatters each TP rank's query and K/V heads over the cp ranks: cp must divide
// both (TE's "The number of attention heads needs to be divisible by CP size!").
FrameworkRefusal frameworkRefusal(Framework f, const Plan& p, const workloads::Workload& w);
// That window rule alone, for any framework's file that uses the exchange (the Megatron export).
FrameworkRefusal megatronWindowCpRefusal(const Plan& p, const workloads::Workload& w);

// Every candidate, valid ones first by predicted step time, then the rejected ones (with reasons).
std::vector<Candidate> enumerateSpace(const workloads::Workload& w, const Cluster& c, const SpaceOptions& o);

}  // namespace trainscope::tuner
