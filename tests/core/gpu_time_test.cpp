// gpu_time_test.cpp — the GPU time model's terms, each against a hand computation: a GEMM's wave
// quantisation and roofline and its measured ceiling, a memory-bound kernel and the kernel floor, a
// collective's size regime, the host-dispatch bound, the op lists of the two frameworks (their
// kernels' traffic and what they keep for the backward), Megatron-LM's gradient accumulation, its
// pipeline sends, the tied embedding's reduction, the stage that sets the DP reduction, and ZeRO-2/3's
// reduce-scatters and prefetched per-layer gathers (with `predict --zero`).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <tuple>

#include <nlohmann/json.hpp>

#include "../common/cli.h"

#include "../../models/src/gpu_time.h"
#include "trainscope/common/error.h"
#include "trainscope/models/moe.h"
#include "trainscope/workloads/memory.h"
#include "trainscope/tuner/models.h"
#include "flat_cluster.h"

namespace tn = trainscope::tuner;
using trainscope::testing::flatGpu;

namespace {

tn::Op gemm(double m, double n, double k) {
  tn::Op g;
  g.kind = tn::Op::Kind::Gemm;
  g.m = m, g.n = n, g.k = k;
  return g;
}

}  // namespace

TEST(GpuTime, AGemmsLastWaveIsPaidInFull) {
  tn::Cluster c = flatGpu();
  c.memory_bandwidth = 1e16;  // compute-bound: the operands' traffic is free here
  // 109 tiles of 128×128 on 108 SMs: two waves, the second with one tile: 109/216 of peak.
  const tn::Op g = gemm(128.0 * 109, 128, 8192);
  const double flops = 2.0 * 128 * 109 * 128 * 8192;
  EXPECT_NEAR(tn::gpu::gemmSeconds(g, c, 100e12, 2), flops / (100e12 * 109.0 / 216.0), 1e-15);
  // 108 tiles: one full wave.
  EXPECT_NEAR(tn::gpu::gemmSeconds(gemm(128.0 * 108, 128, 8192), c, 100e12, 2), 2.0 * 128 * 108 * 128 * 8192 / 100e12, 1e-15);
}

TEST(GpuTime, AThinGemmIsBoundByItsOperandsTraffic) {
  const tn::Cluster c = flatGpu();
  // k = 8: 2·m·n·8 FLOPs but (m·8 + 8·n + m·n) elements to move — memory-bound at 0.5 TB/s.
  const double m = 128.0 * 108, n = 4096, k = 8, e = 2;
  const double bytes = (m * k + k * n + m * n) * e;
  EXPECT_NEAR(tn::gpu::gemmSeconds(gemm(m, n, k), c, 100e12, e), bytes / 0.5e12, 1e-15);
}

TEST(GpuTime, AMemoryBoundKernelRunsAtAchievedBandwidthAndNeverUnderTheFloor) {
  tn::Cluster c = flatGpu();
  tn::Op m;
  m.bytes = 1e9;
  EXPECT_NEAR(tn::gpu::memorySeconds(m, c), 1e9 / 0.5e12, 1e-15);
  c.kernel_floor_s = 4e-6;
  m.bytes = 1000;  // 2 ns of traffic: the floor
  EXPECT_DOUBLE_EQ(tn::gpu::memorySeconds(m, c), 4e-6);
}

TEST(GpuTime, ACollectiveReachesHalfItsBusBandwidthAtTheHalfSize) {
  tn::NetworkTier tier{100e9, 0.8, 5e-6, 4.0 * (1 << 20)};
  const double n = 8, factor = 2.0 * (n - 1) / n;
  // At the half size: α(1 + log2 n) + bytes · factor / (bandwidth · efficiency / 2).
  const double half = 4.0 * (1 << 20);
  EXPECT_NEAR(tn::gpu::collectiveSeconds(tier, half, n, factor), 5e-6 * 4 + half * factor / (80e9 / 2), 1e-15);
  // Far above it, the large-message rate; one rank moves nothing.
  const double big = 4e10;
  EXPECT_NEAR(tn::gpu::collectiveSeconds(tier, big, n, factor), 5e-6 * 4 + big * factor / (80e9 * big / (big + half)), 1e-12);
  EXPECT_EQ(tn::gpu::collectiveSeconds(tier, big, 1, factor), 0);
}

TEST(GpuTime, TinyKernelsAreBoundByTheHostsDispatch) {
  tn::Cluster c = flatGpu();
  c.dispatch_s = 1e-3;  // a slow host: 75 ops per layer (forward and backward) cost 75 ms
  trainscope::workloads::Workload w;
  w.name = "toy";
  w.n_layer = 2, w.n_head = 2, w.n_embd = 64, w.n_positions = 128, w.vocab_size = 256;
  tn::Plan p;
  p.mbs = 1, p.gbs = 1, p.seq = 128;
  const tn::TimePrediction t = tn::predictTime(w, p, c);
  EXPECT_EQ(t.bound, "host launch");
  EXPECT_NEAR(t.compute_s, 2 * 75 * 1e-3 + 8 * 1e-3, 1e-9);  // layers × ops × dispatch + the head's ops
  c.dispatch_s = 0;
  EXPECT_EQ(tn::predictTime(w, p, c).bound, "device");
}

TEST(GpuTime, MegatronMaterialisesTheScoresAndTrainscopeDoesNot) {
  trainscope::workloads::Workload w;
  w.n_layer = 4, w.n_head = 16, w.n_embd = 2048, w.n_positions = 2048, w.vocab_size = 51200;
  tn::Plan p;
  p.mbs = 2, p.gbs = 2, p.seq = 2048, p.tp = 4;
  p.precision = trainscope::runconfig::Precision::FP16;
  auto bytesOf = [](const tn::LayerOps& l, const std::string& name) {
    for (const auto& o : l.forward)
      if (o.name == name) return o.bytes;
    return -1.0;
  };
  const tn::LayerOps mega = tn::layerOps(w, p, tn::Framework::Megatron, tn::Attention::Unfused);
  // The fused causal softmax reads the unmasked half of b·(a/t)·s² 16-bit scores and writes them all.
  const double scores = 2.0 * (16 / 4) * 2048.0 * 2048;
  EXPECT_DOUBLE_EQ(bytesOf(mega, "scale-mask-softmax"), 1.5 * scores * 2);
  const tn::LayerOps ours = tn::layerOps(w, p, tn::Framework::Trainscope);
  EXPECT_EQ(bytesOf(ours, "scale-mask-softmax"), -1.0);
  EXPECT_GT(bytesOf(ours, "flash attention"), 0);
  // Selective recomputation reruns the attention core: Megatron's four kernels, or the one SDPA call
  // (this runtime's checkpointAttention).
  p.ckpt = trainscope::runconfig::Checkpointing::Selective;
  EXPECT_EQ(tn::layerOps(w, p, tn::Framework::Megatron, tn::Attention::Unfused).recompute.size(), 4u);
  ASSERT_EQ(tn::layerOps(w, p, tn::Framework::Trainscope).recompute.size(), 1u);
  EXPECT_EQ(tn::layerOps(w, p, tn::Framework::Trainscope).recompute[0].name, "flash attention");
}

namespace {

using trainscope::testing::megatron;
using trainscope::testing::seconds;
using trainscope::testing::toyGpt;
using trainscope::testing::toyPlan;

const tn::Op* find(const std::vector<tn::Op>& ops, const std::string& name) {
  for (const auto& o : ops)
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace

TEST(GpuTime, MegatronsFusedCausalSoftmaxAndDropoutMoveWhatTheirKernelsMove) {
  trainscope::workloads::Workload w = toyGpt();
  w.n_head = 8;  // b·heads/t = 4: the fused kernel takes the shape (megatronFusedSoftmax)
  tn::Plan p = toyPlan(2, 1, 1);
  const double scores = 1.0 * (8 / 2) * 512.0 * 512, e = 2;
  const tn::LayerOps l = tn::layerOps(w, p, tn::Framework::Megatron, tn::Attention::Unfused);
  // Softmax: forward reads the unmasked half and writes the row; backward reads half of y and dy.
  ASSERT_NE(find(l.backward, "scale-mask-softmax backward"), nullptr);
  EXPECT_DOUBLE_EQ(find(l.forward, "scale-mask-softmax")->bytes, 1.5 * scores * e);
  EXPECT_DOUBLE_EQ(find(l.backward, "scale-mask-softmax backward")->bytes, 2.0 * scores * e);
  // Dropout: output and byte mask forward; dy and the mask in, dx out backward — the same bytes.
  EXPECT_DOUBLE_EQ(find(l.forward, "attention dropout")->bytes, 2.0 * scores * e + scores);
  EXPECT_DOUBLE_EQ(find(l.backward, "attention dropout backward")->bytes, 2.0 * scores * e + scores);
  // The fused LayerNorm's backward reads x and dy twice (weight gradients, then dx) and writes dx;
  // bias-GeLU's reads dy and x, writes dx and reads it again for the bias gradient; bias-dropout-add's
  // scales dy by the mask, reads dx for the bias gradient and sums the residual stream's gradients.
  const double act = 512.0 * 256 * e, mlp = 512.0 * 4 * 256 / 2 * e;
  EXPECT_DOUBLE_EQ(find(l.backward, "layernorm 1 backward")->bytes, 5 * act);
  EXPECT_DOUBLE_EQ(find(l.backward, "bias-gelu backward")->bytes, 4 * mlp);
  EXPECT_DOUBLE_EQ(find(l.backward, "bias-dropout-add backward")->bytes, 6 * act + 512.0 * 256);
  // QKV's bias is added after its GEMM (F.linear on a 3-D input) and summed over tokens backward.
  EXPECT_DOUBLE_EQ(find(l.forward, "qkv bias")->bytes, 2 * 512.0 * 3 * 256 / 2 * e);
  // This runtime's kernels: 1.5× forward, no separate bias.
  const tn::LayerOps ours = tn::layerOps(w, p, tn::Framework::Trainscope);
  EXPECT_DOUBLE_EQ(find(ours.backward, "layernorm 1 backward")->bytes, 1.5 * 2 * act);
  EXPECT_EQ(find(ours.forward, "qkv bias"), nullptr);
  // Past 2048 keys the fused kernel is refused: PyTorch's fp32 path, 36 and 40 bytes per score.
  w.n_positions = 4096;
  p.seq = 4096;
  const double long_scores = 1.0 * (8 / 2) * 4096.0 * 4096;
  const tn::LayerOps big = tn::layerOps(w, p, tn::Framework::Megatron, tn::Attention::Unfused);
  EXPECT_DOUBLE_EQ(find(big.forward, "scale-mask-softmax")->bytes, 36.0 * long_scores);
  EXPECT_DOUBLE_EQ(find(big.backward, "scale-mask-softmax backward")->bytes, 40.0 * long_scores);
}

TEST(GpuTime, MegatronsCrossEntropyRunsInFp32OneKernelPerStep) {
  const trainscope::workloads::Workload w = toyGpt();
  const tn::Plan p = toyPlan(2, 1, 1);
  const double n = 512.0 * 1000 / 2;  // tokens × V/t logits
  const tn::LayerOps head = tn::headOps(w, p, tn::Framework::Megatron);
  double fwd = 0, bwd = 0;
  for (const auto& o : head.forward)
    if (o.kind == tn::Op::Kind::Memory && o.name != "final layernorm") fwd += o.bytes;
  for (const auto& o : head.backward)
    if (o.kind == tn::Op::Kind::Memory && o.name != "final layernorm backward") bwd += o.bytes;
  // Cast 6, max 4, subtract 8, exp 8, sum 4, normalise 8; backward: scale 8, cast 6 bytes per logit.
  EXPECT_DOUBLE_EQ(fwd, 38 * n);
  EXPECT_DOUBLE_EQ(bwd, 14 * n);
  EXPECT_EQ(head.forward.size(), 8u);  // the final LayerNorm, the LM head, six cross-entropy kernels
}

TEST(GpuTime, StageParametersCountTheWordEmbeddingWhereItLives) {
  const trainscope::workloads::Workload w = toyGpt();
  const double h = 256, V = 1000, P = 512;
  // One stage, one rank: the whole model.
  EXPECT_DOUBLE_EQ(tn::gpu::stageParams(w, toyPlan(1, 1, 1), 0), double(w.parameterCount()));
  // TP 2, PP 2: a layer is 12h²/2 + 7h/2 (sharded weights and biases) + 6h (LayerNorms, the biases
  // after a row-parallel GEMM); the first stage adds V/2·h + P·h, the last the final LayerNorm and
  // its own copy of the tied V/2·h.
  const tn::Plan p = toyPlan(2, 2, 1);
  const double layer = 12 * h * h / 2 + 7 * h / 2 + 6 * h;
  EXPECT_DOUBLE_EQ(tn::gpu::stageParams(w, p, 0), layer + V / 2 * h + P * h);
  EXPECT_DOUBLE_EQ(tn::gpu::stageParams(w, p, 1), layer + 2 * h + V / 2 * h);
  EXPECT_EQ(tn::gpu::stageTensors(w, p, 1).size(), 12u + 2u + 1u);
}

// A MoE layer's tensors follow the workload's biases (moeMlpShapes): Mixtral and Qwen1.5-MoE have no
// MLP biases (no expert, no shared-expert bias), small-cpu-moe (GPT-style) has them. On one stage and
// one rank the stage's tensors are the model's: the same count as parameterTensors (the zeros
// layerTensors keeps for an absent dense bias aside) and the same sum as parameterCount.
TEST(GpuTime, MoeStageTensorsFollowTheWorkloadsBiases) {
  for (const char* name : {"mixtral-8x7b", "qwen1.5-moe-a2.7b", "tiny-mixtral", "small-cpu-moe"}) {
    const trainscope::workloads::Workload w = trainscope::workloads::load(name);
    const tn::Plan p = toyPlan(1, 1, 1);
    EXPECT_DOUBLE_EQ(tn::gpu::stageParams(w, p, 0), double(w.parameterCount())) << name;
    size_t present = 0;
    for (const double n : tn::gpu::stageTensors(w, p, 0)) present += n > 0 ? 1 : 0;
    EXPECT_EQ(present, trainscope::workloads::parameterTensors(w).size()) << name;
  }
  // Mixtral's MoE layer: the router and two stacked expert matrices, no bias tensor.
  const trainscope::workloads::Workload mixtral = trainscope::workloads::load("mixtral-8x7b");
  const auto shapes = tn::moeMlpShapes(mixtral, toyPlan(1, 1, 1));
  ASSERT_EQ(shapes.size(), 3u);
  EXPECT_EQ(shapes[1], (std::vector<int64_t>{8, 2 * 14336, 4096}));
  EXPECT_EQ(shapes[2], (std::vector<int64_t>{8, 4096, 14336}));
  EXPECT_EQ(tn::moeMlpShapes(trainscope::workloads::load("small-cpu-moe"), toyPlan(1, 1, 1)).size(), 5u);
}

TEST(GpuTime, MegatronAddsEveryWeightGradientIntoItsMainGradEachMicroBatch) {
  // fp16 keeps main_grad in 16 bits (2 + 2·2 bytes per parameter per micro-batch), bf16 in fp32
  // (2 + 2·4); nothing else differs between the two here (same peak, one rank, no DP).
  const tn::Cluster c = flatGpu();
  const trainscope::workloads::Workload w = toyGpt();
  tn::Plan fp16 = toyPlan(1, 1, 1), bf16 = fp16;
  bf16.precision = trainscope::runconfig::Precision::BF16;
  const auto a = tn::predictTime(w, fp16, c, megatron()), b = tn::predictTime(w, bf16, c, megatron());
  const double params = double(w.parameterCount()), M = 4;
  EXPECT_NEAR(b.compute_s - a.compute_s, M * params * (10.0 - 6.0) / 0.5e12, 1e-12);
  EXPECT_NEAR(b.step_s - a.step_s, M * params * (10.0 - 6.0) / 0.5e12, 1e-12);
  // This runtime accumulates in the backward's own kernels: nothing of the sort.
  EXPECT_DOUBLE_EQ(tn::predictTime(w, fp16, c).compute_s, tn::predictTime(w, bf16, c).compute_s);
}

TEST(GpuTime, TheEmbeddingAndTheHeadAddOneTensorParallelCollectiveEach) {
  const tn::Cluster c = flatGpu();
  const trainscope::workloads::Workload w = toyGpt();
  tn::Plan p = toyPlan(2, 1, 1);
  const double act = 1.0 * 512 * 256 * 2, M = 4, L = 2;
  // Per layer 2 all-reduces forward and 2 backward; the embedding's forward all-reduce; the LM head
  // input's backward all-reduce; the cross-entropy's three all-reduces of one fp32 value per token.
  const double ar = seconds(c.intra_node, act, 2, 1.0), ce = 3 * seconds(c.intra_node, 4.0 * 512, 2, 1.0);
  EXPECT_NEAR(tn::predictTime(w, p, c, megatron()).tp_comm_s, M * ((L * 4 + 2) * ar + ce), 1e-12);
  EXPECT_NEAR(tn::predictTime(w, p, c).tp_comm_s, M * (L * 4 + 2) * ar, 1e-12);  // this runtime's fused head
  // Sequence parallelism: per layer 4 gathers forward and 6 backward; the embedding's
  // reduce-scatter; the head's all-gather and reduce-scatter.
  p.sequence_parallel = true;
  const double gather = seconds(c.intra_node, act, 2, 0.5);
  EXPECT_NEAR(tn::predictTime(w, p, c, megatron()).tp_comm_s, M * ((L * 10 + 3) * gather + ce), 1e-12);
}

TEST(GpuTime, MegatronSendsATthOfTheActivationAndGathersItInTheNode) {
  const tn::Cluster c = flatGpu();
  const trainscope::workloads::Workload w = toyGpt();
  const tn::Plan p = toyPlan(2, 2, 1);
  const double act = 1.0 * 512 * 256 * 2, M = 4;
  // Steady state 2·M hops (forward and backward), fill and drain 2·(p − 1): each a send of act/t
  // and an all-gather of act over the TP group.
  const double hop = seconds(c.intra_node, act / 2, 2, 1.0) + seconds(c.intra_node, act, 2, 0.5);
  EXPECT_NEAR(tn::predictTime(w, p, c, megatron()).pp_comm_s, (2 * M + 2) * hop, 1e-12);
  // This runtime sends the whole activation inside a node.
  EXPECT_NEAR(tn::predictTime(w, p, c).pp_comm_s, (2 * M + 2) * seconds(c.intra_node, act, 2, 1.0), 1e-12);
}

TEST(GpuTime, ThePipelinesFillAndDrainAreTheOtherStagesTimes) {
  // 1F1B with unequal stages: M·t_slowest + Σ_{s ≠ slowest} t_s. Equal stages: (p − 1)·t, the
  // textbook bubble; a last stage slowed by the head: the others' times, not p − 1 of its own.
  EXPECT_DOUBLE_EQ(tn::gpu::pipelineFillSeconds({1.0, 1.0, 1.0, 1.0}, 3), 3.0);
  EXPECT_DOUBLE_EQ(tn::gpu::pipelineFillSeconds({1.0, 1.0, 1.0, 2.0}, 3), 3.0);
  EXPECT_DOUBLE_EQ(tn::gpu::pipelineFillSeconds({1.5, 1.0, 1.0, 1.2}, 0), 3.2);
  const tn::Cluster c = flatGpu();
  trainscope::workloads::Workload w = toyGpt();
  w.n_layer = 8;
  const tn::Plan p = toyPlan(1, 4, 1);
  auto slowest = [&](const tn::TimePrediction& r) {  // the slowest stage's micro-batch
    return (r.compute_s + r.recompute_s + r.tp_comm_s + r.cp_comm_s + r.ep_comm_s) / 4.0;
  };
  // A vocabulary of 8: the head and the embedding cost next to nothing, the stages are equal.
  w.vocab_size = 8;
  const tn::TimePrediction flat = tn::predictTime(w, p, c, megatron());
  EXPECT_NEAR(flat.bubble_s, 3.0 * slowest(flat), 0.02 * flat.bubble_s);
  // A vocabulary of 32,000: the last stage's head is most of a stage's layers again; the bubble is
  // the three stages before it (the first now also accumulates the embedding's gradient), under three
  // of the last stage's micro-batches by at least most of the head, and it does not grow with M.
  w.vocab_size = 32000;
  const tn::TimePrediction heavy = tn::predictTime(w, p, c, megatron());
  const double head = slowest(heavy) - slowest(flat);
  EXPECT_GT(head, 0.5 * slowest(flat));
  EXPECT_GT(heavy.bubble_s, flat.bubble_s);
  EXPECT_LT(heavy.bubble_s, 3.0 * slowest(heavy) - 2.0 * head);
  tn::Plan more = p;
  more.gbs = 4 * p.gbs;  // M = 16
  EXPECT_NEAR(tn::predictTime(w, more, c, megatron()).bubble_s, heavy.bubble_s, 1e-12);
}

TEST(GpuTime, DataParallelReducesTheLargerStageAndTheTiedEmbeddingIsSummedAfter) {
  const tn::Cluster c = flatGpu();
  const trainscope::workloads::Workload w = toyGpt();
  const tn::Plan p = toyPlan(1, 2, 2);  // 4 ranks in one node
  const double most = std::max(tn::gpu::stageParams(w, p, 0), tn::gpu::stageParams(w, p, 1));
  // fp16 under Megatron: 16-bit gradients; all-reduce over 2 ranks (bus factor 1), then the word
  // embedding's all-reduce between the first and the last stage.
  const double expected = seconds(c.intra_node, most * 2, 2, 1.0) + seconds(c.intra_node, 1000.0 * 256 * 2, 2, 1.0);
  EXPECT_NEAR(tn::predictTime(w, p, c, megatron()).dp_comm_s, expected, 1e-12);
  // The optimizer waits for the same stage: 54 bytes per parameter at the achieved bandwidth.
  EXPECT_NEAR(tn::predictTime(w, p, c, megatron()).optimizer_s, most * 54 / 0.5e12, 1e-12);
}

TEST(GpuTime, ADataParallelGroupLeavesEachNodeThroughItsMembersPorts) {
  tn::Cluster c = flatGpu();  // NVLink 100 GB/s, one 10 GB/s port per GPU, both at efficiency 1
  c.nodes = 2;
  EXPECT_DOUBLE_EQ(tn::gpu::spanningTier(c, 1).bandwidth, 10e9);
  EXPECT_DOUBLE_EQ(tn::gpu::spanningTier(c, 4).bandwidth, 40e9);
  EXPECT_DOUBLE_EQ(tn::gpu::spanningTier(c, 16).bandwidth, 100e9);  // no faster than NVLink
  // TP 1, DP 16 on two nodes: 8 members per node, 80 GB/s; Megatron's fp16 gradients, after the
  // backward, all-reduce factor 2·15/16 at the inter-node latency.
  const trainscope::workloads::Workload w = toyGpt();
  const tn::Plan p = toyPlan(1, 1, 16);
  const double bytes = double(w.parameterCount()) * 2;
  EXPECT_NEAR(tn::predictTime(w, p, c, megatron()).dp_comm_s, 1e-6 * (1 + 4) + bytes * 2 * 15 / 16 / 80e9, 1e-12);
  // TP 8, DP 2: one member per node, the port's rate.
  const tn::Plan q = toyPlan(8, 1, 2);
  trainscope::workloads::Workload wide = w;
  wide.n_head = 8;
  const double most = tn::gpu::stageParams(wide, q, 0);
  EXPECT_NEAR(tn::predictTime(wide, q, c, megatron()).dp_comm_s, 1e-6 * 2 + most * 2 / 10e9, 1e-12);
}

TEST(GpuTime, Zero3ShowsAGatherOnlyWhereItOutlastsTheLayerItIsPrefetchedBehind) {
  // Per pass: the first gather whole, then (layers − 1) · max(0, gather − compute).
  EXPECT_DOUBLE_EQ(tn::gpu::zeroGatherSeconds(2e-3, 1e-3, 3e-3, 4), 2e-3);              // hidden
  EXPECT_DOUBLE_EQ(tn::gpu::zeroGatherSeconds(2e-3, 5e-3, 3e-3, 4), 2e-3 + 3 * 2e-3);   // 2 ms shows, 3 times
  EXPECT_DOUBLE_EQ(tn::gpu::zeroGatherSeconds(2e-3, 5e-3, 3e-3, 1), 2e-3);              // one layer: the first

  // End to end on the toy GPT, dp 2 in one node, fp16, M = 4 micro-batches, this runtime's kernels.
  namespace rt = trainscope::runconfig;
  const trainscope::workloads::Workload w = toyGpt();
  tn::Plan p = toyPlan(1, 1, 2);
  p.zero = rt::ZeroStage::Parameters;
  const double M = 4, L = 2, e = 2;
  const double params = tn::gpu::stageParams(w, p, 0), layer = tn::gpu::layerParams(w, p);
  EXPECT_DOUBLE_EQ(layer, 12.0 * 256 * 256 + 13.0 * 256);
  const tn::LayerOps ops = tn::layerOps(w, p, tn::Framework::Trainscope);
  auto expected = [&](const tn::Cluster& c) {
    const double peak = c.peak("fp16") * c.sustained_clock;
    auto time = [&](const std::vector<tn::Op>& v) {
      double t = 0;
      for (const auto& o : v)
        t += o.kind == tn::Op::Kind::Gemm ? tn::gpu::gemmSeconds(o, c, peak, e) : tn::gpu::memorySeconds(o, c);
      return t;
    };
    const double fwd = time(ops.forward), bwd = time(ops.backward);
    // Each micro-batch's fp32 gradients reduce-scattered: one bucket (params < 5e8), nothing hidden.
    const double rs = seconds(c.intra_node, params * 4, 2, 0.5);
    // The first gather brings the embeddings and the final LayerNorm with the first layer.
    const double first = seconds(c.intra_node, (params - (L - 1) * layer) * e, 2, 0.5);
    const double gather = seconds(c.intra_node, layer * e, 2, 0.5);
    const double gathers = M * (2 * first + (L - 1) * (std::max(0.0, gather - fwd) + std::max(0.0, gather - bwd)));
    return std::make_tuple(M * rs + gathers, gathers, gather < fwd && gather < bwd, M * 2 * first);
  };
  // NVLink at 100 GB/s: a layer's 1.6 MB gather (8 µs) hides behind its compute; only the first shows.
  tn::Cluster fast = flatGpu();
  const auto [fast_dp, fast_gathers, fast_hidden, fast_firsts] = expected(fast);
  ASSERT_TRUE(fast_hidden);
  EXPECT_DOUBLE_EQ(fast_gathers, fast_firsts);
  const tn::TimePrediction t = tn::predictTime(w, p, fast);
  EXPECT_NEAR(t.zero_gather_s, fast_gathers, 1e-12);
  EXPECT_NEAR(t.dp_comm_s, fast_dp, 1e-12);
  // At 1 GB/s the gathers outlast the layers: the second layer's shows beyond its predecessor's compute.
  tn::Cluster slow = flatGpu();
  slow.intra_node.bandwidth = 1e9;
  const auto [slow_dp, slow_gathers, slow_hidden, slow_firsts] = expected(slow);
  ASSERT_FALSE(slow_hidden);
  EXPECT_GT(slow_gathers, slow_firsts);
  EXPECT_NEAR(tn::predictTime(w, p, slow).zero_gather_s, slow_gathers, 1e-12);
  EXPECT_NEAR(tn::predictTime(w, p, slow).dp_comm_s, slow_dp, 1e-12);
  // ZeRO-2: the same reduce-scatters, then one all-gather of the fp32 master weights after the step.
  p.zero = rt::ZeroStage::Gradients;
  const tn::TimePrediction z2 = tn::predictTime(w, p, fast);
  EXPECT_EQ(z2.zero_gather_s, 0);
  const double rs_or_ag = seconds(fast.intra_node, params * 4, 2, 0.5);  // Ψ fp32 elements either way
  EXPECT_NEAR(z2.dp_comm_s, M * rs_or_ag + rs_or_ag, 1e-12);
  // The compute is the same at every stage.
  p.zero = rt::ZeroStage::OptimizerStates;
  EXPECT_DOUBLE_EQ(tn::predictTime(w, p, fast).compute_s, t.compute_s);
}

TEST(GpuTime, TheA100GemmCeilingIsItsMeasuredMaximumAtTheSustainedClock) {
  const tn::Cluster c = tn::loadCluster("a100-80gb-x8");
  EXPECT_DOUBLE_EQ(c.matmulEfficiency(1e9), 0.6);     // Calculon's small-GEMM point
  EXPECT_DOUBLE_EQ(c.matmulEfficiency(1e12), 0.859);  // MAMF 267.9 of 312 TFLOP/s
  EXPECT_LT(c.matmulEfficiency(4e9), 0.859);
  // 108 × 8 tiles of 128×128: eight full waves, compute-bound.
  const tn::Op g = gemm(128.0 * 108, 1024, 8192);
  const double peak = 312e12 * c.sustained_clock;
  EXPECT_NEAR(tn::gpu::gemmSeconds(g, c, peak, 2), g.flops() / (312e12 * 0.926 * 0.859), 1e-12);
}

TEST(MemoryModel, TheOpListKeepsWhatKorthikantiAndTheRuntimeCount) {
  // Every layer activation the memory model counts comes from the op list's `saved`: it must give
  // Korthikanti et al.'s closed form for Megatron-LM and docs/memory-model.md's for this runtime.
  namespace rt = trainscope::runconfig;
  trainscope::workloads::Workload w;
  w.n_layer = 4, w.n_head = 16, w.n_embd = 2048, w.n_positions = 2048, w.vocab_size = 51200;
  const double h = 2048, a = 16;
  for (int64_t t : {1, 2, 4, 8})
    for (bool sp : {false, true})
      for (rt::Checkpointing ck : {rt::Checkpointing::None, rt::Checkpointing::Selective, rt::Checkpointing::Full})
        for (int64_t b : {1, 4})
          for (int64_t s : {1024, 2048}) {
            if (sp && t == 1) continue;
            tn::Plan p;
            p.tp = t, p.mbs = b, p.seq = s, p.sequence_parallel = sp, p.ckpt = ck;
            const std::string at = "t" + std::to_string(t) + " sp" + std::to_string(sp) + " b" + std::to_string(b) +
                                   " s" + std::to_string(s) + " ckpt" + std::to_string(int(ck));
            EXPECT_DOUBLE_EQ(tn::layerOps(w, p, tn::Framework::Megatron, tn::Attention::Unfused).saved,
                             tn::megatronLayerActivationBytes(double(s), double(b), h, a, double(t), sp, ck))
                << at;
            const double sbh = double(s) * double(b) * h, td = double(t);
            double elements = ck == rt::Checkpointing::Full ? (sp ? sbh / td : sbh)
                                                             : (sp ? 17 * sbh / td : 4 * sbh + 13 * sbh / td);  // SP: shards only
            if (ck == rt::Checkpointing::Selective) elements -= sbh / td;  // the SDPA output
            const double lse = ck == rt::Checkpointing::None ? 4.0 * (a / td) * double(s) * double(b) : 0.0;
            EXPECT_DOUBLE_EQ(tn::layerOps(w, p, tn::Framework::Trainscope).saved, elements * 2 + lse) << at;
          }
}

// predict --batch: one result per line in order, the command line's flags as defaults, a bad line
// answered on its own line (exit 2) without stopping the others.
TEST(PredictBatch, AnswersEveryLineInOrderAndNamesTheBadOnes) {
  using trainscope::testing::cli;
  const std::string in = trainscope::testing::tempPath("batch.jsonl");
  {
    std::ofstream f(in);
    f << R"({"tp": 2, "mbs": 2})" << "\n"
      << R"({"tp": 4, "framework": "megatron", "ckpt": "full"})" << "\n"
      << "\n"
      << R"({"tp": 0})" << "\n"
      << R"({"n_layers": 3})" << "\n";
  }
  const auto r = cli("predict --workload gpt3-1.3b --cluster a100-80gb-x8 --gbs 64 --batch " + in);
  EXPECT_EQ(r.status, 2) << r.output;
  std::vector<nlohmann::json> out;
  std::istringstream lines(r.output);
  for (std::string l; std::getline(lines, l);)
    if (!l.empty() && l[0] == '{') out.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(out.size(), 4u) << r.output;
  EXPECT_EQ(out[0]["line"], 1);
  EXPECT_EQ(out[0]["tp"], 2);
  EXPECT_EQ(out[0]["mbs"], 2);
  EXPECT_EQ(out[0]["gbs"], 64);  // the command line's default
  EXPECT_EQ(out[1]["framework"], "megatron");
  EXPECT_GT(out[1]["time"]["recompute_s"].get<double>(), 0);
  EXPECT_EQ(out[2]["line"], 4);
  EXPECT_NE(out[2]["error"].get<std::string>().find("tp: must be a whole number of at least 1"), std::string::npos);
  EXPECT_NE(out[3]["error"].get<std::string>().find("n_layers: is not a flag of predict"), std::string::npos);
}

// predict --zero 3 (priced, not run): the JSON differs from --zero 1 in the sharded terms and the
// ZeRO-3 transients and gathers, nowhere else in memory; Megatron-LM's ZeRO-2/3 is refused by name.
TEST(PredictZero, Stage3DiffersFromStage1InTheShardedTermsAndMegatronIsRefused) {
  using trainscope::testing::cli;
  auto predict = [](const std::string& zero) {
    const auto r = cli("predict --workload gpt2-124m --cluster a100-80gb-x8 --json --zero " + zero);
    EXPECT_EQ(r.status, 0) << r.output;
    return nlohmann::json::parse(r.output.substr(r.output.find('{')));
  };
  const nlohmann::json one = predict("1"), three = predict("3");
  EXPECT_EQ(one["zero_stage"], "ZeRO-1");
  EXPECT_EQ(three["zero_stage"], "ZeRO-3");
  EXPECT_EQ(three["zero"], 3);
  EXPECT_NE(three["plan"].get<std::string>().find("zero3"), std::string::npos);
  const auto& a = one["stages"][0];
  const auto& b = three["stages"][0];
  const int64_t n = 124439808, d = 8;
  EXPECT_EQ(a["params_bytes"], 6 * n);
  EXPECT_EQ(b["params_bytes"], 6 * n / d);
  EXPECT_EQ(a["grads_bytes"], 4 * n);  // fp32 main gradients only
  EXPECT_EQ(b["grads_bytes"], 4 * n / d);
  EXPECT_EQ(b["optimizer_bytes"], 8 * n / d);
  EXPECT_EQ(a["grad_bucket_bytes"], 0);
  const int64_t layer = 12 * 768 * 768 + 13 * 768, rest = n - 12 * layer;  // ZeRO-3's units (zero3.h)
  EXPECT_EQ(b["grad_bucket_bytes"], 4 * (2 * layer + layer / d));  // two flat layers, the in-flight one's output
  EXPECT_EQ(a["gathered_bytes"], 0);
  EXPECT_EQ(b["gathered_bytes"], 2 * (rest + 2 * layer));
  EXPECT_EQ(b["sync_bytes"], 0);
  for (const char* same : {"activations_bytes", "head_bytes", "allowance_bytes", "head_chunk_bytes", "recompute_bytes"})
    EXPECT_EQ(a[same], b[same]) << same;
  EXPECT_LT(three["peak_bytes"].get<int64_t>(), one["peak_bytes"].get<int64_t>());
  // Time: the same kernels; ZeRO-3 adds its parameter gathers to the DP term.
  EXPECT_DOUBLE_EQ(one["time"]["compute_s"].get<double>(), three["time"]["compute_s"].get<double>());
  EXPECT_EQ(one["time"]["zero_gather_s"], 0.0);
  EXPECT_GT(three["time"]["zero_gather_s"].get<double>(), 0);
  EXPECT_GT(three["time"]["dp_comm_s"].get<double>(), three["time"]["zero_gather_s"].get<double>());

  const auto text = cli("predict --workload gpt2-124m --cluster a100-80gb-x8 --zero 2");
  EXPECT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("ZeRO-2: optimizer state and gradients sharded over dp=8"), std::string::npos)
      << text.output;
  const auto mega = cli("predict --framework megatron --zero 3");
  EXPECT_EQ(mega.status, 2) << mega.output;
  EXPECT_NE(mega.output.find("--zero: Megatron-LM has no ZeRO-3"), std::string::npos) << mega.output;
  EXPECT_NE(mega.output.find("--use-distributed-optimizer"), std::string::npos) << mega.output;
  const auto four = cli("predict --zero 4");
  EXPECT_EQ(four.status, 2) << four.output;
  EXPECT_NE(four.output.find("--zero: 4 not in"), std::string::npos) << four.output;
}

TEST(GpuTime, AttentionRunsAsTheFrameworkDoesUnlessForced) {
  const trainscope::workloads::Workload w = toyGpt();
  const tn::Plan p = toyPlan(1, 1, 1);
  const tn::Cluster c = flatGpu();
  auto step = [&](tn::Framework f, tn::Attention a) {
    tn::TimeOptions o;
    o.framework = f;
    o.attention = a;
    return tn::predictTime(w, p, c, o).step_s;
  };
  // The defaults: a fused flash kernel for every framework — Megatron-LM's Transformer Engine attention
  // (megatron-core's --attention-backend auto), this runtime's SDPA; unfused only when asked.
  EXPECT_EQ(step(tn::Framework::Megatron, tn::Attention::Default), step(tn::Framework::Megatron, tn::Attention::Flash));
  EXPECT_EQ(step(tn::Framework::Trainscope, tn::Attention::Default), step(tn::Framework::Trainscope, tn::Attention::Flash));
  // Forced: materialising the s×s scores (softmax and dropout over them, memory-bound) costs more
  // than the fused kernel, under either framework's other kernels.
  EXPECT_GT(step(tn::Framework::Megatron, tn::Attention::Unfused), step(tn::Framework::Megatron, tn::Attention::Flash));
  EXPECT_GT(step(tn::Framework::Trainscope, tn::Attention::Unfused), step(tn::Framework::Trainscope, tn::Attention::Flash));
  // The op list says which: the unfused core has the scores' softmax, the fused one does not.
  auto has_softmax = [&](tn::Attention a) {
    for (const auto& op : tn::layerOps(w, p, tn::Framework::Trainscope, a).forward)
      if (op.name.find("softmax") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(has_softmax(tn::Attention::Unfused));
  EXPECT_FALSE(has_softmax(tn::Attention::Flash));
  EXPECT_EQ(tn::parseAttention("flash"), tn::Attention::Flash);
  EXPECT_THROW(tn::parseAttention("fused"), trainscope::UserError);
}
