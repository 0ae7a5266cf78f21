// megatron_overlap_test.cpp — `predict --framework megatron`'s communication overlaps (time_model.h
// MegatronOverlap; docs/framework-profiles.md, "Megatron-LM's overlaps"), each against a hand
// computation on flatGpu(): Transformer Engine's TP comm+GEMM overlap, the DDP buckets of
// --overlap-grad-reduce and the distributed optimizer's --overlap-param-gather, the interleaved
// schedule's overlapped sends; and the flags' refusals where Megatron-LM refuses them.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "../../models/src/gpu_sync.h"
#include "../../models/src/gpu_time.h"
#include "flat_cluster.h"
#include "trainscope/models/framework_memory.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::tuner;
using trainscope::testing::cli;
using trainscope::testing::flatGpu;
using trainscope::testing::megatron;
using trainscope::testing::seconds;
using trainscope::testing::toyGpt;
using trainscope::testing::toyPlan;

namespace {

// A GPT whose GEMMs outlast its collectives on flatGpu() (h 2048: a layer's forward is about a
// millisecond of GEMMs at tp 2, its collectives tens of microseconds).
trainscope::workloads::Workload wideGpt(int64_t layers, int64_t seq) {
  trainscope::workloads::Workload w = toyGpt();
  w.n_layer = layers, w.n_head = 16, w.n_embd = 2048, w.n_positions = seq;
  return w;
}

}  // namespace

TEST(MegatronOverlap, WhatShowsOfAPassesCollectivesByHand) {
  // The forward's tail: 1/8 of its collectives (the last of four chunks of its two reduce-scatters),
  // then whatever outlasts the compute.
  EXPECT_DOUBLE_EQ(tn::gpu::tpOverlapShown(8.0, 10.0, tn::gpu::kTeForwardTail), 1.0);
  EXPECT_DOUBLE_EQ(tn::gpu::tpOverlapShown(20.0, 10.0, tn::gpu::kTeForwardTail), 2.5 + 7.5);
  EXPECT_DOUBLE_EQ(tn::gpu::tpOverlapShown(6.0, 10.0, 0.0), 0.0);
  EXPECT_DOUBLE_EQ(tn::gpu::tpOverlapShown(12.0, 10.0, 0.0), 2.0);
}

TEST(MegatronOverlap, TpCommOverlapLeavesTheForwardsTailAndTheEmbeddingAndHead) {
  const tn::Cluster c = flatGpu();
  const auto w = wideGpt(2, 2048);
  tn::Plan p = toyPlan(2, 1, 1);
  p.seq = 2048;
  p.sequence_parallel = true;
  const double act = 1.0 * 2048 * 2048 * 2, M = 4, L = 2;
  const double gather = seconds(c.intra_node, act, 2, 0.5), ce = 3 * seconds(c.intra_node, 4.0 * 2048, 2, 1.0);
  tn::TimeOptions o = megatron();
  const tn::TimePrediction off = tn::predictTime(w, p, c, o);
  // Per layer 4 gathers forward and 6 backward; the embedding's one, the head's two, the cross-entropy's.
  EXPECT_NEAR(off.tp_comm_s, M * ((L * 10 + 3) * gather + ce), 1e-12);
  o.megatron.tp_comm = true;
  const tn::TimePrediction on = tn::predictTime(w, p, c, o);
  // The GEMMs outlast the collectives: a layer's forward shows 4·gather/8, its backward nothing; the
  // embedding's and the head's collectives and the cross-entropy's are not overlapped.
  EXPECT_NEAR(on.tp_comm_s, M * (L * 4 * gather / 8 + 3 * gather + ce), 1e-12);
  EXPECT_NEAR(off.step_s - on.step_s, M * L * (10 - 0.5) * gather, 1e-12);
  EXPECT_DOUBLE_EQ(on.compute_s, off.compute_s);
}

TEST(MegatronOverlap, GradReduceInMegatronsBucketsAndParamGatherBesideTheForward) {
  EXPECT_DOUBLE_EQ(tn::gpu::megatronBucketParams(toyPlan(1, 1, 8)), 4e7);
  EXPECT_DOUBLE_EQ(tn::gpu::megatronBucketParams(toyPlan(1, 1, 64)), 6.4e7);
  const tn::Cluster c = flatGpu();
  const auto w = wideGpt(8, 4096);
  tn::Plan p = toyPlan(1, 1, 8);  // 8 ranks in one node
  p.seq = 4096, p.mbs = 2, p.gbs = 2 * 8 * 4;  // M = 4; a micro-batch's backward far outlasts the reduction
  const double params = tn::gpu::stageParams(w, p, 0);
  // fp16 under Megatron: 16-bit gradients, all-reduced over 8 ranks after the backward (built in).
  const double full = seconds(c.intra_node, params * 2, 8, 2.0 * 7 / 8);
  tn::TimeOptions o = megatron();
  EXPECT_NEAR(tn::predictTime(w, p, c, o).dp_comm_s, full, 1e-12);
  // --overlap-grad-reduce: buckets of 4e7 parameters during the last backward; the last shows.
  const double buckets = std::ceil(params / 4e7);
  ASSERT_GT(buckets, 5);
  o.megatron.grad_reduce = true;
  EXPECT_NEAR(tn::predictTime(w, p, c, o).dp_comm_s, full / buckets, 1e-12);
  // The distributed optimizer: the reduce-scatter (half the bus bytes) in the backward, the all-gather
  // after the step; with --overlap-param-gather beside the next forward, its first bucket showing.
  p.zero = trainscope::runconfig::ZeroStage::OptimizerStates;
  EXPECT_NEAR(tn::predictTime(w, p, c, o).dp_comm_s, full / 2 / buckets + full / 2, 1e-12);
  o.megatron.param_gather = true;
  EXPECT_NEAR(tn::predictTime(w, p, c, o).dp_comm_s, 2 * (full / 2 / buckets), 1e-12);
}

TEST(MegatronOverlap, TheInterleavedSchedulesSendsHideBehindTheNextChunk) {
  const tn::Cluster c = flatGpu();
  const auto w = wideGpt(8, 4096);
  tn::Plan p = toyPlan(1, 4, 1);
  p.seq = 4096, p.virtual_stages = 2;
  const double act = 1.0 * 4096 * 2048 * 2, M = 4, v = 2, pp = 4;
  const double hop = seconds(c.intra_node, act, 2, 1.0);
  tn::TimeOptions o = megatron();
  o.megatron.p2p = false;  // --no-overlap-p2p-comm: blocking, as the published runs
  EXPECT_NEAR(tn::predictTime(w, p, c, o).pp_comm_s, (2 * M * v + 2 * (pp - 1)) * hop, 1e-12);
  // Megatron-LM's default: a chunk (a third of 1/v of a micro-batch, milliseconds here) outlasts each
  // send; only the fill's and the drain's hops show.
  o.megatron.p2p = true;
  EXPECT_NEAR(tn::predictTime(w, p, c, o).pp_comm_s, 2 * (pp - 1) * hop, 1e-12);
  // 1F1B without interleaving: Megatron-LM overlaps nothing.
  p.virtual_stages = 1;
  EXPECT_NEAR(tn::predictTime(w, p, c, o).pp_comm_s, (2 * M + 2 * (pp - 1)) * hop, 1e-12);
}

TEST(MegatronOverlap, TheFlagsAreRefusedWhereMegatronLmRefusesThem) {
  const std::string base = "predict --workload gpt3-1.3b --cluster h100-80gb-x8 --seq 2048 --mbs 1 --gbs 64 ";
  struct Case {
    std::string args, names, fix;
  } cases[] = {
      {"--tp 2 --sequence-parallel --tp-comm-overlap", "--tp-comm-overlap", "--framework megatron"},
      {"--framework fsdp --overlap-grad-reduce", "--overlap-grad-reduce", "--framework megatron"},
      {"--framework megatron --tp 2 --tp-comm-overlap", "--tp-comm-overlap", "--sequence-parallel"},
      {"--framework megatron --overlap-grad-reduce --overlap-param-gather", "--overlap-param-gather",
       "--use-distributed-optimizer"},
      {"--framework megatron --use-distributed-optimizer --overlap-param-gather", "--overlap-param-gather",
       "--overlap-grad-reduce"},
      {"--framework megatron --pp 2 --virtual-stages 2 --no-overlap-p2p-comm", "--no-overlap-p2p-comm", "--pp 3"},
  };
  for (const Case& k : cases) {
    const auto r = cli(base + k.args);
    EXPECT_EQ(r.status, 2) << k.args << "\n" << r.output;
    EXPECT_NE(r.output.find(k.names), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(k.fix), std::string::npos) << r.output;
  }
}

TEST(MegatronOverlap, PredictAndItsBatchLinesPriceTheFlags) {
  const std::string base =
      "predict --workload gpt3-13b --cluster h100-80gb-x8 --nodes 2 --tp 4 --sequence-parallel --seq 2048 --mbs 1 "
      "--gbs 64 --framework megatron --use-distributed-optimizer --json";
  const auto off = cli(base), on = cli(base + " --tp-comm-overlap --overlap-grad-reduce --overlap-param-gather");
  ASSERT_EQ(off.status, 0) << off.output;
  ASSERT_EQ(on.status, 0) << on.output;
  const auto a = nlohmann::json::parse(off.output.substr(off.output.find('{')));
  const auto b = nlohmann::json::parse(on.output.substr(on.output.find('{')));
  EXPECT_LT(b["time"]["tp_comm_s"].get<double>(), 0.5 * a["time"]["tp_comm_s"].get<double>());
  EXPECT_LT(b["time"]["dp_comm_s"].get<double>(), a["time"]["dp_comm_s"].get<double>());
  EXPECT_LT(b["time"]["step_s"].get<double>(), a["time"]["step_s"].get<double>());
  // A --batch line takes them as keys and prices the same.
  const std::string lines = trainscope::testing::tempPath("megatron-overlap.jsonl");
  {
    std::ofstream f(lines);
    f << R"({"tp_comm_overlap": true, "overlap_grad_reduce": true, "overlap_param_gather": true})" << "\n";
  }
  const auto batch = cli(base + " --batch " + lines);
  ASSERT_EQ(batch.status, 0) << batch.output;
  const auto j = nlohmann::json::parse(batch.output.substr(batch.output.find('{')));
  EXPECT_DOUBLE_EQ(j["time"]["step_s"].get<double>(), b["time"]["step_s"].get<double>());
}

// --fp8-param-gather: Megatron-LM holds the parameters in FP8 (the 16-bit copy gone, Transformer
// Engine's transposes beside them), so the FP8 workspaces add nothing to megatron-core's theoretical
// memory, and the distributed optimizer all-gathers 1 byte a parameter.
TEST(MegatronOverlap, Fp8ParamGatherHoldsAndGathersFp8Parameters) {
  const trainscope::workloads::Workload w = trainscope::workloads::load("gpt2-774m");
  tn::Plan p = toyPlan(2, 1, 4);
  p.sequence_parallel = true;
  p.precision = trainscope::runconfig::Precision::FP8;
  p.zero = trainscope::runconfig::ZeroStage::OptimizerStates;
  const tn::MemoryPrediction m = tn::predictMemory(w, p);
  const tn::MegatronPeak cached = tn::megatronPeak(w, p, m);
  ASSERT_GT(cached.fp8_weights, 0);
  p.fp8_param_gather = true;
  const tn::MegatronPeak fp8 = tn::megatronPeak(w, p, m);
  EXPECT_EQ(fp8.fp8_weights, 0);
  EXPECT_EQ(fp8.bytes, cached.bytes - cached.fp8_weights);
  // The DP step on flatGpu: the reduce-scatter half the all-reduce's bus bytes in fp32 main grads (4
  // bytes: FP8 trains in bf16), the all-gather the FP8 parameters, a quarter of that.
  tn::Cluster c = flatGpu();
  c.peak_flops["fp8"] = 200e12;
  const auto wide = wideGpt(8, 4096);
  tn::Plan q = toyPlan(1, 1, 8);
  q.seq = 4096, q.mbs = 2, q.gbs = 2 * 8 * 4;
  q.precision = trainscope::runconfig::Precision::FP8;
  q.zero = trainscope::runconfig::ZeroStage::OptimizerStates;
  const tn::TimePrediction bf = tn::predictTime(wide, q, c, megatron());
  q.fp8_param_gather = true;
  const tn::TimePrediction f8 = tn::predictTime(wide, q, c, megatron());
  const double grad_bytes = 4;
  EXPECT_NEAR(f8.dp_comm_s, bf.dp_comm_s / 2 + bf.dp_comm_s / 2 / grad_bytes, 1e-9 * bf.dp_comm_s);
  // predict refuses it without FP8 or the distributed optimizer, and under other frameworks.
  const std::string base = "predict --workload gpt3-1.3b --cluster h100-80gb-x8 --seq 2048 --mbs 1 --gbs 64 --fp8-param-gather ";
  for (const auto& [args, fix] : {std::pair<std::string, std::string>{"--framework megatron --use-distributed-optimizer", "--precision fp8"},
                                  {"--framework megatron --precision fp8", "--use-distributed-optimizer"},
                                  {"--framework fsdp --precision fp8", "--framework megatron"}}) {
    const auto r = cli(base + args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("--fp8-param-gather"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(fix), std::string::npos) << r.output;
  }
  const auto ok = cli(base + "--framework megatron --precision fp8 --use-distributed-optimizer --json");
  ASSERT_EQ(ok.status, 0) << ok.output;
  const auto j = nlohmann::json::parse(ok.output.substr(ok.output.find('{')));
  EXPECT_EQ(j["framework_memory"]["fp8_weights_bytes"].get<int64_t>(), 0);
}
