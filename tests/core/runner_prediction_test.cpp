// runner_prediction_test.cpp — an external runner's trials priced under its framework's profile
// (issue 34): the framework's host work on a CPU cluster against a hand computation, each runner's
// profile, and the study's refit of that work from the trials' run databases (the probe's rows,
// rundb/import_probe.h) — what the tuner re-ranks the unmeasured candidates with.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainscope/rundb/import_probe.h"
#include "trainscope/tuner/job.h"
#include "trainscope/tuner/learner.h"
#include "trainscope/tuner/prediction_check.h"
#include "trainscope/tuner/study.h"
#include "trainscope/tuner/tune.h"
#include "trainscope/workloads/workload.h"

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;

namespace {

tn::TimeOptions under(tn::Framework f) {
  tn::TimeOptions o;
  o.framework = f;
  return o;
}

// The HF runner's space of the tests (tests/runner/hf_predict_test.py): tiny, gbs 8, seq 32, 1-2
// ranks, micro-batch 1/2/4, DDP or FSDP FULL_SHARD; what --runner hf refuses left out.
std::vector<tn::Candidate> hfSpace(const trainscope::workloads::Workload& w, const tn::Cluster& c) {
  tn::SpaceOptions o;
  o.gbs = 8, o.seq = 32, o.mbs = {1, 2, 4}, o.ckpt = {rt::Checkpointing::None}, o.cp = {1}, o.virtual_stages = {1};
  o.zero = {rt::ZeroStage::None, rt::ZeroStage::Parameters}, o.sequence_parallel = {false};
  o.schedules = {rt::PipelineSchedule::OneFOneB};
  o.framework = tn::frameworkOf(tn::JobKind::Hf);
  std::vector<tn::Candidate> all = tn::enumerateSpace(w, c, o);
  for (tn::Candidate& cand : all)
    if (cand.rejected.empty()) cand.rejected = tn::jobRefusal(tn::JobKind::Hf, cand.plan);
  return all;
}

// A probe's run database of a trial that measured `step_s` per step (4 steps, step 0 the warm-up).
std::string probeDb(const std::string& dir, int64_t id, double step_s) {
  const std::string rows = dir + "/rank0-" + std::to_string(id) + ".jsonl";
  {
    std::ofstream out(rows);
    for (int s = 0; s < 4; ++s)
      out << R"({"rank": 0, "step": )" << s << R"(, "start_ns": )" << 1000000000LL * (s + 1)
          << R"(, "step_time_ns": )" << int64_t((s == 0 ? 3.0 : 1.0) * step_s * 1e9)
          << R"(, "tokens": 256, "loss": 1.0, "peak_bytes": 1000000, "world": 1})" << "\n";
  }
  const std::string db = dir + "/t" + std::to_string(id) + ".db";
  trainscope::rundb::importProbe({rows}, {}, db, "tiny", "--study", {{"framework", "fsdp"}, {"device", "cpu"}});
  return db;
}

}  // namespace

// On a CPU the framework's host thread is the compute's: its work per micro-batch adds to the step.
// Per micro-batch: layers × (25 forward ops × host_op_s + 50 backward ops × host_backward_op_s
// [+ FSDP's 4 hooks × hook_s under sharding]) + host_micro_batch_s.
TEST(RunnerPrediction, AnotherFrameworksHostWorkAddsToACpuStepPerMicroBatch) {
  const trainscope::workloads::Workload w = trainscope::workloads::load("tiny");
  tn::Cluster c = tn::loadCluster("cpu-local");
  tn::FrameworkProfile& fp = c.mutableProfile(tn::Framework::Fsdp);
  fp.host_op_s = 1e-4, fp.host_backward_op_s = 2e-5, fp.host_micro_batch_s = 1e-3, fp.hook_s = 5e-5;
  tn::Plan p;
  p.cpu = true, p.dp = 1, p.mbs = 2, p.gbs = 8, p.seq = 32;  // 4 micro-batches
  const tn::TimePrediction own = tn::predictTime(w, p, c), hf = tn::predictTime(w, p, c, under(tn::Framework::Fsdp));
  EXPECT_EQ(own.host_s, 0);
  const double per_layer = 25 * 1e-4 + 50 * 2e-5;
  EXPECT_NEAR(hf.host_s, 4 * (2 * per_layer + 1e-3), 1e-12);
  EXPECT_NEAR(hf.step_s, own.step_s + hf.host_s, 1e-12);
  // FULL_SHARD on 2 ranks: 2 micro-batches each, and FSDP's 4 hooks per wrapped unit and micro-batch:
  // the 2 blocks and the root.
  p.dp = 2, p.zero = rt::ZeroStage::Parameters;
  const tn::TimePrediction sharded = tn::predictTime(w, p, c, under(tn::Framework::Fsdp));
  EXPECT_NEAR(sharded.host_s, 2 * (2 * (per_layer + 4 * 5e-5) + 4 * 5e-5 + 1e-3), 1e-12);
  // The CPU preset carries the HF job's host costs fitted on this machine; its backward ops cost the
  // file's dispatch_s (0 on a CPU), its hooks the file's hook_s (fitted on CPU FSDP trials).
  const tn::Cluster preset = tn::loadCluster("cpu-local");
  const tn::FrameworkProfile& pf = preset.profile(tn::Framework::Fsdp);
  EXPECT_GT(pf.host_op_s, 0);
  EXPECT_GT(pf.host_micro_batch_s, 0);
  EXPECT_GT(pf.hook_s, 50e-6);
  EXPECT_NEAR(tn::predictTime(w, p, preset, under(tn::Framework::Fsdp)).host_s,
              2 * (2 * (25 * pf.host_op_s + 4 * pf.hook_s) + 4 * pf.hook_s + pf.host_micro_batch_s), 1e-12);
}

// FSDP 1 under the Trainer on 2 Gloo CPU ranks (tiny GPT-2: 2 blocks + the root = 3 wrapped units),
// by hand with cpu-local's tier (50 us latency, 2 GB/s): each collective per unit, a unit's bytes a
// third of the model's; FULL_SHARD unshards all 3 units before each micro-batch's forward and the 2
// blocks before its backward (M (2U - 1)), SHARD_GRAD_OP each unit once a step (U), each unshard its
// gather plus host_collective_s (the flat parameter allocated, viewed and freed); one fp32
// reduce-scatter per unit a step (the other micro-batches run under no_sync) and the clip's
// all-reduce, on the tier alone as DDP's all-reduce.
TEST(RunnerPrediction, FsdpOnCpuRanksIssuesItsCollectivesPerWrappedUnit) {
  const trainscope::workloads::Workload w = trainscope::workloads::load("tiny");
  ASSERT_EQ(w.n_layer, 2);
  tn::Cluster c = tn::loadCluster("cpu-local");
  c.mutableProfile(tn::Framework::Fsdp).host_collective_s = 3e-4;  // each unshard's Python around its gather
  ASSERT_DOUBLE_EQ(c.intra_node.latency, 50e-6);
  ASSERT_DOUBLE_EQ(c.intra_node.bandwidth * c.intra_node.efficiency, 2e9);
  tn::Plan p;
  p.cpu = true, p.dp = 2, p.mbs = 1, p.gbs = 8, p.seq = 32, p.precision = rt::Precision::FP32;  // M = 4
  const double P = double(w.parameterCount()), U = 3, M = 4;
  auto wire = [](double bytes, double factor) { return 50e-6 * 2 + bytes * factor / 2e9; };
  const double unshard = wire(P * 4 / U, 0.5) + 3e-4;
  const double rs = U * wire(P * 4 / U, 0.5), clip = wire(4, 1.0);
  p.zero = rt::ZeroStage::Parameters;
  const tn::TimePrediction full = tn::predictTime(w, p, c, under(tn::Framework::Fsdp));
  EXPECT_NEAR(full.zero_gather_s, M * (2 * U - 1) * unshard, 1e-12);
  EXPECT_NEAR(full.dp_comm_s, full.zero_gather_s + rs + clip, 1e-12);
  p.zero = rt::ZeroStage::Gradients;
  const tn::TimePrediction grad = tn::predictTime(w, p, c, under(tn::Framework::Fsdp));
  EXPECT_NEAR(grad.zero_gather_s, U * unshard, 1e-12);
  EXPECT_NEAR(grad.dp_comm_s, grad.zero_gather_s + rs + clip, 1e-12);
  // ... and not again per layer in the host work (hostLayerSeconds' ZeRO-3 calls).
  EXPECT_NEAR(full.host_s, grad.host_s, 1e-12);
  // DDP under the same profile, and this runtime's own ZeRO-3, are priced as before (one all-reduce;
  // per micro-batch whole-model collectives, no host cost).
  p.zero = rt::ZeroStage::None;
  EXPECT_NEAR(tn::predictTime(w, p, c, under(tn::Framework::Fsdp)).dp_comm_s, wire(P * 4, 1.0), 1e-12);
  p.zero = rt::ZeroStage::Parameters;
  EXPECT_NEAR(tn::predictTime(w, p, c).zero_gather_s, 2 * M * wire(P * 4, 0.5), 1e-12);
}

// What FSDP adds to DDP's step on the preset, by hand, against the counts of instrumented trials
// (tiny GPT-2, 2 Gloo ranks, torch 2.11; docs/framework-profiles.md, "FSDP on CPU ranks"): FULL_SHARD
// at micro-batch 1 x 4 made 20 list all_gathers, 3 reduce_scatter_tensor and 1 all_reduce a step,
// SHARD_GRAD_OP 3, 3 and 1 at any accumulation; 4 hooks a unit and micro-batch. The preset's step
// of FSDP minus DDP's at the same micro-batch is those counts at its constants: unshards x
// (host_collective_s + gather) + 4 U M hook_s + the reductions on the tier - DDP's all-reduce - the
// optimizer's share FSDP shards away.
TEST(RunnerPrediction, FsdpOnCpuRanksAddsItsUnshardsAndHooksToDdpsStep) {
  const trainscope::workloads::Workload w = trainscope::workloads::load("tiny");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  const tn::FrameworkProfile& fp = c.profile(tn::Framework::Fsdp);
  EXPECT_DOUBLE_EQ(fp.host_collective_s, 1.8e-3);  // fitted, cpu-local.json's sources
  EXPECT_DOUBLE_EQ(fp.hook_s, 2.4e-4);
  tn::Plan p;
  p.cpu = true, p.dp = 2, p.gbs = 8, p.seq = 32, p.precision = rt::Precision::FP32;
  const double P = double(w.parameterCount()), U = 3;
  auto wire = [](double bytes, double factor) { return 50e-6 * 2 + bytes * factor / 2e9; };
  const struct { int mbs; rt::ZeroStage zero; double unshards; } cases[] = {
      {1, rt::ZeroStage::Parameters, 20}, {4, rt::ZeroStage::Parameters, 5},
      {1, rt::ZeroStage::Gradients, 3},   {4, rt::ZeroStage::Gradients, 3}};
  for (const auto& k : cases) {
    p.mbs = k.mbs, p.zero = rt::ZeroStage::None;
    const double M = 4.0 / k.mbs;
    const tn::TimePrediction ddp = tn::predictTime(w, p, c, under(tn::Framework::Fsdp));
    p.zero = k.zero;
    const tn::TimePrediction fsdp = tn::predictTime(w, p, c, under(tn::Framework::Fsdp));
    const double added = k.unshards * (1.8e-3 + wire(P * 4 / U, 0.5)) + 4 * U * M * 2.4e-4 +
                         U * wire(P * 4 / U, 0.5) + wire(4, 1.0) - wire(P * 4, 1.0) +
                         (fsdp.optimizer_s - ddp.optimizer_s);
    EXPECT_NEAR(fsdp.step_s - ddp.step_s, added, 1e-9) << "mbs " << k.mbs << " zero " << int(k.zero);
  }
  // FULL_SHARD at 1 x 4 unshards 20 times, SHARD_GRAD_OP 3; their hooks (48) and reductions are the same.
  p.mbs = 1, p.zero = rt::ZeroStage::Gradients;
  const double sgo = tn::predictTime(w, p, c, under(tn::Framework::Fsdp)).step_s;
  p.zero = rt::ZeroStage::Parameters;
  EXPECT_NEAR(tn::predictTime(w, p, c, under(tn::Framework::Fsdp)).step_s - sgo, 17 * (1.8e-3 + wire(P * 4 / U, 0.5)),
              1e-9);
}

// A DeepSpeed job on 2 CPU ranks (tiny GPT-2: 2 layers of 12 parameter tensors), per micro-batch:
// layers × (25 ops × host_op_s + 50 × host_backward_op_s + hooks × hook_s) + host_micro_batch_s,
// with no hook at ZeRO 0, 12 gradient hooks at ZeRO 1 and 2, and 12 + 13 modules × 4 at ZeRO 3.
TEST(RunnerPrediction, ADeepSpeedJobsHooksAreCountedByItsZeroStage) {
  const trainscope::workloads::Workload w = trainscope::workloads::load("tiny");
  ASSERT_EQ(w.n_layer, 2);
  tn::Cluster c = tn::loadCluster("cpu-local");
  tn::FrameworkProfile& fp = c.mutableProfile(tn::Framework::Deepspeed);
  fp.host_op_s = 1e-4, fp.host_backward_op_s = 2e-5, fp.host_micro_batch_s = 1e-3, fp.hook_s = 5e-5;
  fp.grad_bucket_s = 0, fp.zero0_step_tensor_s = 0;  // the per-step terms: the next test
  tn::Plan p;
  p.cpu = true, p.dp = 2, p.mbs = 2, p.gbs = 8, p.seq = 32;  // 2 micro-batches a rank
  const double ops = 25 * 1e-4 + 50 * 2e-5;
  const double hooks[] = {0, 12, 12, 12 + 52};
  for (int z = 0; z <= 3; ++z) {
    p.zero = rt::zeroStage(z);
    EXPECT_NEAR(tn::predictTime(w, p, c, under(tn::Framework::Deepspeed)).host_s,
                2 * (2 * (ops + hooks[z] * 5e-5) + 1e-3), 1e-12)
        << "ZeRO " << z;
  }
  // The CPU preset carries the DeepSpeed job's host costs fitted on this machine, priced the same way.
  const tn::Cluster preset = tn::loadCluster("cpu-local");
  const tn::FrameworkProfile& pf = preset.profile(tn::Framework::Deepspeed);
  EXPECT_GT(pf.host_op_s, 0);
  EXPECT_GT(pf.hook_s, 0);
  p.zero = rt::ZeroStage::Parameters;  // and ZeRO 3's 28 gradients bucketed on each of the 2 micro-batches
  EXPECT_NEAR(tn::predictTime(w, p, preset, under(tn::Framework::Deepspeed)).host_s,
              2 * (2 * (25 * pf.host_op_s + 64 * pf.hook_s) + pf.host_micro_batch_s) + 2 * 28 * pf.grad_bucket_s, 1e-12);
}

// DeepSpeed's per-step host work by ZeRO stage (framework_profile.h grad_bucket_s, zero0_step_tensor_s;
// deepspeed 0.19.8): tiny GPT-2 as Hugging Face holds it has 28 parameter tensors (2 layers × 12, wte,
// wpe, ln_f's weight and bias; the head tied), the tiny Llama 21 (2 × 9, embed_tokens, norm, lm_head).
// ZeRO 0 pays zero0_step_tensor_s per tensor once a step (engine.py buffered_allreduce_fallback,
// clipping, the optimizer's per-tensor loop); ZeRO 1 copies each gradient into its reduce bucket on the
// boundary micro-batch only, ZeRO 2 and 3 on every micro-batch (stage_1_and_2.py
// reduce_ready_partitions_and_remove_grads; stage3.py), grad_bucket_s each.
TEST(RunnerPrediction, ADeepSpeedJobsStepWorkIsCountedByItsZeroStage) {
  const trainscope::workloads::Workload gpt2 = trainscope::workloads::load("tiny");
  const trainscope::workloads::Workload llama = trainscope::workloads::load("tiny-llama");
  tn::Cluster c = tn::loadCluster("cpu-local");
  tn::FrameworkProfile& fp = c.mutableProfile(tn::Framework::Deepspeed);
  fp.host_op_s = 0, fp.host_backward_op_s = 0, fp.host_micro_batch_s = 0, fp.hook_s = 0;
  fp.grad_bucket_s = 1e-4, fp.zero0_step_tensor_s = 3e-4;
  tn::Plan p;
  p.cpu = true, p.dp = 2, p.mbs = 1, p.gbs = 8, p.seq = 32;  // 4 micro-batches a rank
  const double per_step[] = {28 * 3e-4, 28 * 1e-4, 4 * 28 * 1e-4, 4 * 28 * 1e-4};
  for (int z = 0; z <= 3; ++z) {
    p.zero = rt::zeroStage(z);
    EXPECT_NEAR(tn::predictTime(gpt2, p, c, under(tn::Framework::Deepspeed)).host_s, per_step[z], 1e-12) << "ZeRO " << z;
    EXPECT_NEAR(tn::predictTime(llama, p, c, under(tn::Framework::Deepspeed)).host_s, per_step[z] * 21 / 28, 1e-12)
        << "ZeRO " << z;
  }
  // One micro-batch a step: ZeRO 1 and 2 bucket alike.
  p.mbs = 4;
  for (int z = 1; z <= 2; ++z) {
    p.zero = rt::zeroStage(z);
    EXPECT_NEAR(tn::predictTime(gpt2, p, c, under(tn::Framework::Deepspeed)).host_s, 28 * 1e-4, 1e-12) << "ZeRO " << z;
  }
  // Other frameworks' profiles have neither term: their ZeRO 0 step is unchanged.
  p.zero = rt::ZeroStage::None;
  EXPECT_EQ(tn::builtinProfile(tn::Framework::Fsdp).zero0_step_tensor_s, 0);
  EXPECT_EQ(tn::builtinProfile(tn::Framework::Deepspeed).grad_bucket_s, 0);
  // On a GPU cluster the same host work waits at the step boundary (with the optimizer's step).
  tn::Cluster gpu = tn::loadCluster("a100-80gb-x8");
  tn::Plan g;
  g.dp = 8, g.mbs = 1, g.gbs = 32, g.seq = 32;  // 4 micro-batches a rank
  const double base = tn::predictTime(gpt2, g, gpu, under(tn::Framework::Deepspeed)).optimizer_s;
  gpu.mutableProfile(tn::Framework::Deepspeed).zero0_step_tensor_s = 3e-4;
  EXPECT_NEAR(tn::predictTime(gpt2, g, gpu, under(tn::Framework::Deepspeed)).optimizer_s, base + 28 * 3e-4, 1e-12);
}

TEST(RunnerPrediction, EachRunnerIsPricedUnderItsFrameworksProfile) {
  EXPECT_EQ(tn::frameworkOf(tn::JobKind::Trainscope), tn::Framework::Trainscope);
  EXPECT_EQ(tn::frameworkOf(tn::JobKind::Hf), tn::Framework::Fsdp);
  EXPECT_EQ(tn::frameworkOf(tn::JobKind::Accelerate), tn::Framework::Fsdp);
  EXPECT_EQ(tn::frameworkOf(tn::JobKind::Torchtitan), tn::Framework::Fsdp);
  EXPECT_EQ(tn::frameworkOf(tn::JobKind::DeepSpeed), tn::Framework::Deepspeed);
  EXPECT_EQ(tn::frameworkOf(tn::JobKind::Megatron), tn::Framework::Megatron);
  // The space's predictions are the runner's framework's.
  const trainscope::workloads::Workload w = trainscope::workloads::load("tiny");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  for (const tn::Candidate& cand : hfSpace(w, c))
    if (cand.rejected.empty())
      EXPECT_NEAR(cand.predicted_step_s, tn::predictTime(w, cand.plan, c, under(tn::Framework::Fsdp)).step_s, 1e-15)
          << cand.plan.describe();
}

// Trials measured as an HF job whose host work is 0.2 ms per forward op and 3 ms per micro-batch (the
// CPU preset says 0.055 ms and 1.7 ms): the learner reads the probe's databases, refits the fsdp profile's host costs
// with the CPU's rates, and ranks every candidate as the job measured them.
TEST(RunnerPrediction, TheStudyRefitsAnExternalJobsHostWorkFromItsTrials) {
  char tmpl[] = "/tmp/ts-runner-pred-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const trainscope::workloads::Workload w = trainscope::workloads::load("tiny");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  tn::Cluster truth = c;
  truth.mutableProfile(tn::Framework::Fsdp).host_op_s = 2e-4;
  truth.mutableProfile(tn::Framework::Fsdp).host_micro_batch_s = 3e-3;
  std::vector<tn::Candidate> all = hfSpace(w, c);
  tn::Learner learner(w, c, tn::Framework::Fsdp);
  std::vector<double> measured, at_launch;
  std::vector<size_t> valid;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].rejected.empty()) continue;
    tn::TrialRecord t;
    t.candidate = int64_t(i), t.steps = 4, t.status = tn::TrialStatus::Ok;
    const double step = tn::predictTime(w, all[i].plan, truth, under(tn::Framework::Fsdp)).step_s;
    t.db_path = probeDb(dir, int64_t(i), step);
    t = learner.add(t, all[i].plan);
    ASSERT_EQ(t.status, tn::TrialStatus::Ok) << t.message;
    EXPECT_NEAR(t.step_s, step, 1e-6 * step + 2e-9);
    measured.push_back(step);
    at_launch.push_back(all[i].predicted_step_s);
    valid.push_back(i);
  }
  ASSERT_GE(valid.size(), 6u);
  learner.rerank(all);
  const auto& fitted = learner.fittedConstants();
  ASSERT_TRUE(fitted.count("frameworks.fsdp.host_micro_batch_s")) << "fitted: " << fitted.size();
  std::vector<double> predicted;
  for (size_t i : valid) predicted.push_back(all[i].predicted_step_s);
  EXPECT_GT(tn::spearman(predicted, measured), 0.9);
  for (size_t k = 0; k < valid.size(); ++k)
    EXPECT_NEAR(predicted[k] / measured[k], 1.0, 0.10) << all[valid[k]].plan.describe();
  std::filesystem::remove_all(dir);
}

// The refit's held-out error (learner.h): calibrate's crossValidate over the trials grouped by
// configuration. Trials measured as a job whose host work the preset misses (as above): each fold's
// refit on the other configurations recovers it, so the held-out error is small; a configuration run
// twice is one group (its repeat never predicts it). With 3 configurations the refit is made but
// not cross-validated, and says why.
TEST(RunnerPrediction, TheRefitsHeldOutErrorIsCrossValidatedByConfiguration) {
  char tmpl[] = "/tmp/ts-refit-cv-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const trainscope::workloads::Workload w = trainscope::workloads::load("tiny");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  tn::Cluster truth = c;
  truth.mutableProfile(tn::Framework::Fsdp).host_op_s = 2e-4;
  truth.mutableProfile(tn::Framework::Fsdp).host_micro_batch_s = 3e-3;
  std::vector<tn::Candidate> all = hfSpace(w, c);
  std::vector<size_t> valid;
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].rejected.empty()) valid.push_back(i);
  ASSERT_GE(valid.size(), 6u);
  const auto trial = [&](tn::Learner& learner, size_t i, int64_t id) {
    tn::TrialRecord t;
    t.id = id, t.candidate = int64_t(i), t.steps = 4, t.status = tn::TrialStatus::Ok;
    t.db_path = probeDb(dir, id, tn::predictTime(w, all[i].plan, truth, under(tn::Framework::Fsdp)).step_s);
    EXPECT_EQ(learner.add(t, all[i].plan).status, tn::TrialStatus::Ok);
  };
  tn::Learner learner(w, c, tn::Framework::Fsdp);
  int64_t id = 0;
  for (size_t i : valid) trial(learner, i, id++);
  trial(learner, valid[0], id++);  // the first configuration again: one more trial, no more configurations
  learner.rerank(all);
  ASSERT_FALSE(learner.fittedConstants().empty());
  const tn::RefitCrossValidation& cv = learner.refitCrossValidation();
  EXPECT_EQ(cv.configurations, int64_t(valid.size()));
  EXPECT_EQ(cv.folds, std::min<int64_t>(tn::kRefitFolds, int64_t(valid.size())));
  EXPECT_EQ(cv.held_out.rows, int64_t(valid.size()) + 1);
  EXPECT_LT(cv.held_out.mape, 0.10);
  EXPECT_GT(cv.held_out.mape, 0);  // held out: not the in-sample fit's exact recovery of every row
  const nlohmann::json j = nlohmann::json::parse(tn::refitCrossValidationJson(cv));
  EXPECT_EQ(j["folds"], cv.folds);
  EXPECT_EQ(j["rows"], cv.held_out.rows);
  EXPECT_DOUBLE_EQ(j["abs_error_p90"].get<double>(), cv.held_out.abs_p90);
  EXPECT_EQ(j["by"], "configuration (plan and micro-batch; never by trial)");
  EXPECT_EQ(tn::refitCrossValidationText(cv).rfind("held out by configuration, k=" + std::to_string(cv.folds), 0), 0u)
      << tn::refitCrossValidationText(cv);

  tn::Learner three(w, c, tn::Framework::Fsdp);
  for (size_t k = 0; k < 3; ++k) trial(three, valid[k], id++);
  three.rerank(all);
  ASSERT_FALSE(three.fittedConstants().empty());  // the refit itself needs 3
  EXPECT_EQ(three.refitCrossValidation().folds, 0);
  EXPECT_EQ(tn::refitCrossValidationText(three.refitCrossValidation()),
            "not cross-validated: 3 configurations measured; holding one out takes 4 or more (each fold's refit "
            "keeps 3)");
  const nlohmann::json none = nlohmann::json::parse(tn::refitCrossValidationJson(three.refitCrossValidation()));
  EXPECT_EQ(none["folds"], 0);
  EXPECT_EQ(none["configurations"], 3);
  EXPECT_FALSE(none.contains("mape"));
  std::filesystem::remove_all(dir);
}

namespace {

// A runner whose trials "measured" the truth's step time, each written as a probe's run database.
class ProbeRunner : public tn::TrialRunner {
 public:
  ProbeRunner(const trainscope::workloads::Workload& w, const tn::Cluster& truth, std::vector<tn::Candidate> all,
              std::string dir)
      : w_(w), truth_(truth), all_(std::move(all)), dir_(std::move(dir)) {}
  tn::TrialRecord run(const tn::TrialSpec&, tn::TrialRecord t) override {
    const tn::Plan& p = all_.at(size_t(t.candidate)).plan;  // tune's ids are the space's order
    const double step = tn::predictTime(w_, p, truth_, under(tn::Framework::Fsdp)).step_s;
    t.db_path = probeDb(dir_, t.id * 1000 + t.candidate, step);
    t.status = tn::TrialStatus::Ok;
    return t;
  }

 private:
  const trainscope::workloads::Workload& w_;
  const tn::Cluster& truth_;
  std::vector<tn::Candidate> all_;
  std::string dir_;
};

}  // namespace

// The study records the refit's held-out error beside the constants, as tune's result holds it.
TEST(RunnerPrediction, TheStudyRecordsTheRefitsHeldOutError) {
  char tmpl[] = "/tmp/ts-refit-study-XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  const trainscope::workloads::Workload w = trainscope::workloads::load("tiny");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  tn::Cluster truth = c;
  truth.mutableProfile(tn::Framework::Fsdp).host_op_s = 2e-4;
  truth.mutableProfile(tn::Framework::Fsdp).host_micro_batch_s = 3e-3;
  tn::SpaceOptions space;
  space.gbs = 8, space.seq = 32, space.mbs = {1, 2, 4}, space.ckpt = {rt::Checkpointing::None}, space.cp = {1};
  space.virtual_stages = {1}, space.zero = {rt::ZeroStage::None, rt::ZeroStage::Parameters};
  space.sequence_parallel = {false}, space.schedules = {rt::PipelineSchedule::OneFOneB};
  space.framework = tn::Framework::Fsdp;
  ProbeRunner runner(w, truth, tn::enumerateSpace(w, c, space), dir);
  tn::TuneOptions o;
  o.study_path = dir + "/study.db";
  o.work_dir = dir + "/trials";
  o.first_round = 6, o.base_steps = 3, o.final_rounds = 1;
  o.runner = &runner;
  const tn::TuneResult r = tn::tune(w, c, space, o, nullptr);
  ASSERT_FALSE(r.fitted_constants.empty());
  ASSERT_GE(r.refit_cv.folds, 2) << r.refit_cv.why;
  tn::Study study(o.study_path);
  const std::string recorded = study.value("refit_cross_validation");
  ASSERT_FALSE(recorded.empty());
  EXPECT_EQ(nlohmann::json::parse(recorded), nlohmann::json::parse(tn::refitCrossValidationJson(r.refit_cv)));
  EXPECT_FALSE(study.value("fitted_constants").empty());
  std::filesystem::remove_all(dir);
}
