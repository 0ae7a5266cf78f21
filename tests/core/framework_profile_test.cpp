// framework_profile_test.cpp — issue 33's terms, each against a hand computation: FlashAttention-2's
// rate by keys, head dim, causality and pass; the host thread (per op, per collective call, per hook,
// per micro-batch) and the bound predict reports; a TP group spanning nodes through all its members'
// NICs; FSDP's per-layer gathers and reduce-scatters on the same links; the cluster file's
// "frameworks" object (defaults, overrides, errors naming the key).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "../../models/src/gpu_time.h"
#include "trainscope/common/error.h"
#include "trainscope/tuner/models.h"
#include "flat_cluster.h"

namespace tn = trainscope::tuner;
using trainscope::testing::flatGpu;

namespace {

trainscope::workloads::Workload toy(int64_t layers = 2, int64_t hidden = 64, int64_t heads = 2) {
  trainscope::workloads::Workload w;
  w.name = "toy";
  w.n_layer = layers, w.n_head = heads, w.n_embd = hidden, w.n_positions = 128, w.vocab_size = 256;
  return w;
}

tn::TimeOptions with(tn::Framework f) {
  tn::TimeOptions o;
  o.framework = f;
  return o;
}

}  // namespace

TEST(FlashRate, RisesWithTheKeysAndTheHeadDimAndIsLowerBackwardAndCausal) {
  // top · k / (k + k½): 0.73 forward, 0.63 backward at head dim ≥ 128; k½ 800 causal, 300 not.
  EXPECT_NEAR(tn::flashEfficiency(2048, 128, true, false), 0.73 * 2048 / 2848, 1e-12);
  EXPECT_NEAR(tn::flashEfficiency(2048, 128, true, true), 0.63 * 2048 / 2848, 1e-12);
  EXPECT_NEAR(tn::flashEfficiency(512, 128, false, false), 0.73 * 512 / 812, 1e-12);
  EXPECT_NEAR(tn::flashEfficiency(16384, 64, true, false), 0.73 * 0.84 * 16384 / 17184, 1e-12);
  EXPECT_NEAR(tn::flashEfficiency(16384, 32, true, true), 0.63 * 0.84 * 0.84 * 16384 / 17184, 1e-12);
  EXPECT_NEAR(tn::flashEfficiency(4096, 256, false, true), 0.63 * 4096 / 4396, 1e-12);
}

TEST(FlashRate, TheFlashOpRunsAtItsRateWithoutTheGemmCurveOrWaves) {
  tn::Cluster c = flatGpu();
  c.matmul_efficiency = {{1e9, 0.5}, {1e12, 0.5}};  // would halve a GEMM; the flash kernel ignores it
  tn::Op fa;
  fa.kind = tn::Op::Kind::Gemm;
  fa.m = 2048, fa.n = 2048, fa.k = 128, fa.batch = 16, fa.flash = 1, fa.bytes = 1;
  fa.efficiency_cap = tn::flashEfficiency(2048, 128, true, false);
  const double flops = 2.0 * 2048 * 2048 * 128 * 16;
  EXPECT_NEAR(tn::gpu::gemmSeconds(fa, c, 100e12, 2), flops / (100e12 * 0.73 * 2048 / 2848), 1e-12);
  // The op list: the forward's cap is the forward rate, the backward's the backward rate (2.5× products).
  tn::Plan p;
  p.mbs = 1, p.gbs = 1, p.seq = 1024;
  const auto w = toy(2, 256, 2);  // head dim 128
  const tn::LayerOps L = tn::layerOps(w, p, tn::Framework::Trainscope);
  bool fwd = false, bwd = false;
  for (const auto& o : L.forward)
    if (o.flash == 1) {
      fwd = true;
      EXPECT_NEAR(o.efficiency_cap, 0.73 * 1024 / 1824, 1e-12);
    }
  for (const auto& o : L.backward)
    if (o.flash == 2) {
      bwd = true;
      EXPECT_NEAR(o.efficiency_cap, 0.63 * 1024 / 1824, 1e-12);
    }
  EXPECT_TRUE(fwd && bwd);
}

TEST(HostBound, TheHostThreadCountsOpsCollectivesHooksAndTheMicroBatch) {
  tn::Cluster c = flatGpu();
  c.dispatch_s = 7e-6;
  tn::FrameworkProfile fp;
  fp.host_op_s = 40e-6, fp.host_backward_op_s = 10e-6, fp.host_collective_s = 50e-6, fp.hook_s = 20e-6;
  fp.hooks_per_layer = 4;
  tn::Plan p;
  p.tp = 2, p.ckpt = trainscope::runconfig::Checkpointing::Full;
  // 25 forward ops twice (recomputation), 50 backward, 2 + 2 + 2 TP all-reduces; no ZeRO: no hooks.
  EXPECT_NEAR(tn::gpu::hostLayerSeconds(p, c, fp), 50 * 40e-6 + 50 * 10e-6 + 6 * 50e-6, 1e-12);
  // ZeRO-3 over dp 4: 2 gathers (forward, recomputation) and a reduce-scatter more, 4 hooks × 1.5.
  p.dp = 4, p.zero = trainscope::runconfig::ZeroStage::Parameters;
  EXPECT_NEAR(tn::gpu::hostLayerSeconds(p, c, fp), 50 * 40e-6 + 50 * 10e-6 + 9 * 50e-6 + 6 * 20e-6, 1e-12);
  // A negative per-op cost is the cluster's dispatch_s (the trainscope profile's).
  tn::Plan q;
  EXPECT_NEAR(tn::gpu::hostLayerSeconds(q, c, tn::builtinProfile(tn::Framework::Trainscope)), 75 * 7e-6, 1e-15);
}

// DeepSpeed 0.19.8 hooks by ZeRO stage: none at 0; at 1 and 2 one gradient hook per parameter tensor
// (stage_1_and_2.py create_gradient_handling_hooks); at 3 those and 4 hooks on each of the block's 13
// modules (parameter_offload.py _register_deepspeed_module), half in each pass. FSDP's 4 block hooks
// run at any sharding and it hooks no gradient.
TEST(HostBound, DeepSpeedHooksModulesOnlyAtZero3AndEveryGradientFromZero1) {
  namespace rc = trainscope::runconfig;
  tn::Cluster c = flatGpu();
  tn::FrameworkProfile ds = tn::builtinProfile(tn::Framework::Deepspeed);
  ds.host_op_s = 0, ds.host_backward_op_s = 0, ds.host_collective_s = 0, ds.hook_s = 1e-5;
  trainscope::workloads::Workload gpt2 = toy(), llama = toy();
  llama.norm = trainscope::workloads::Norm::RMSNorm, llama.positions = trainscope::workloads::Positions::Rope;
  llama.mlp = trainscope::workloads::Mlp::SwiGLU, llama.qkv_bias = llama.proj_bias = llama.mlp_bias = false;
  // GPT-2: ln_1, c_attn, c_proj, ln_2, c_fc, c_proj, each weight and bias; Llama: two RMSNorm weights,
  // q, k, v, o, gate, up, down.
  EXPECT_EQ(tn::gpu::layerParamTensors(gpt2), 12);
  EXPECT_EQ(tn::gpu::layerParamTensors(llama), 9);
  tn::Plan p;
  p.dp = 2;
  const double T = 12;
  auto host = [&](rc::ZeroStage z, const tn::FrameworkProfile& fp) {
    p.zero = z;
    return tn::gpu::hostLayerSeconds(p, c, fp, T);
  };
  EXPECT_NEAR(host(rc::ZeroStage::None, ds), 0, 1e-15);
  EXPECT_NEAR(host(rc::ZeroStage::OptimizerStates, ds), 12 * 1e-5, 1e-15);
  EXPECT_NEAR(host(rc::ZeroStage::Gradients, ds), 12 * 1e-5, 1e-15);
  EXPECT_NEAR(host(rc::ZeroStage::Parameters, ds), (12 + 13 * 4) * 1e-5, 1e-15);
  p.zero = rc::ZeroStage::Parameters;
  const tn::gpu::HostPhases h3 = tn::gpu::hostLayerPhases(p, c, ds, 0, 0, T);
  EXPECT_NEAR(h3.fwd, 26 * 1e-5, 1e-15);
  EXPECT_NEAR(h3.bwd, (26 + 12) * 1e-5, 1e-15);
  tn::FrameworkProfile fsdp = tn::builtinProfile(tn::Framework::Fsdp);
  fsdp.host_op_s = 0, fsdp.host_backward_op_s = 0, fsdp.hook_s = 1e-5;
  EXPECT_NEAR(host(rc::ZeroStage::Gradients, fsdp), 4 * 1e-5, 1e-15);
  EXPECT_NEAR(host(rc::ZeroStage::Parameters, fsdp), 4 * 1e-5, 1e-15);
  // The counts are the cluster file's to change.
  const tn::FrameworkProfile set =
      tn::parseProfile(R"({"module_hooks_from_zero": 1, "grad_hooks": 0})", ds, "frameworks.deepspeed");
  EXPECT_NEAR(host(rc::ZeroStage::OptimizerStates, set), 52 * 1e-5, 1e-15);
}

TEST(HostBound, AHostBoundStepIsTheHostThreadsAndPredictSaysSo) {
  tn::Cluster c = flatGpu();
  tn::FrameworkProfile& fp = c.frameworks["megatron"];
  fp = tn::builtinProfile(tn::Framework::Megatron);
  fp.host_op_s = 1e-3, fp.host_backward_op_s = 1e-3, fp.host_micro_batch_s = 5e-3;
  const auto w = toy();
  tn::Plan p;
  p.mbs = 1, p.gbs = 2, p.seq = 128;  // 2 micro-batches
  tn::TimeOptions unfused = with(tn::Framework::Megatron);  // the published runs' kernels: PyTorch's softmax path
  unfused.attention = tn::Attention::Unfused;
  const tn::TimePrediction t = tn::predictTime(w, p, c, unfused);
  EXPECT_EQ(t.bound, "host launch");
  const double head = std::max(8.0, double(tn::headOps(w, p, tn::Framework::Megatron).forward.size() +
                                          tn::headOps(w, p, tn::Framework::Megatron).backward.size()));
  // layers × ops (25 + 50, and 4 + 4 for the softmax on PyTorch's path: the toy's b·heads = 2 is
  // not a multiple of 4, megatronFusedSoftmax) + the head's + the micro-batch's.
  const double per_micro = 2 * (75 + 8) * 1e-3 + head * 1e-3 + 5e-3;
  EXPECT_NEAR(t.compute_s + t.recompute_s + t.tp_comm_s, 2 * per_micro, 1e-9);
  fp.host_op_s = fp.host_backward_op_s = fp.host_micro_batch_s = 0;
  EXPECT_EQ(tn::predictTime(w, p, c, unfused).bound, "device");
}

TEST(TpAcrossNodes, ATpGroupSpanningNodesLeavesThroughAllItsMembersNics) {
  tn::Cluster c = flatGpu();  // 8 per node, NVLink 100 GB/s, one 10 GB/s port per GPU
  c.nodes = 2;
  const auto w = toy(2, 1024, 16);
  tn::Plan p;
  p.tp = 16, p.mbs = 1, p.gbs = 1, p.seq = 128;
  // Per layer 2 all-reduces forward and 2 backward of the (1, 128, 1024) fp32 activation... in bf16:
  const double bytes = 1.0 * 128 * 1024 * double(p.elementBytes());
  // over 8 ports a node: 80 GB/s, the inter-node latency; factor 2·15/16.
  const double ar = 1e-6 * (1 + 4) + bytes * 2 * 15 / 16 / 80e9;
  const tn::TimePrediction t = tn::predictTime(w, p, c);
  // The layers' 4 each, the embedding's and the head's one each.
  EXPECT_NEAR(t.tp_comm_s, (2 * 4 + 2) * ar, 1e-12);
}

TEST(FsdpZero3, EachLayersGatherAndReduceScatterHideBehindItsBackward) {
  // first + (layers − 1) · max(0, gather + reduce − compute); no prefetch: all of it.
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 1e-3, 1e-3, 3e-3, 4, 1), 2e-3);
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 2e-3, 2e-3, 3e-3, 4, 1), 2e-3 + 3 * 1e-3);
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 2e-3, 1e-3, 3e-3, 4, 0), 2e-3 + 3 * 3e-3);
}

TEST(FrameworkProfiles, TheClusterFileSetsConstantsAndRefusesUnknownOnesByName) {
  const std::string base =
      R"({"devices_per_node": 8, "memory_bytes": 80e9, "peak_flops": {"bf16": 1e15}, "memory_bandwidth": 1e12,
          "intra_node": {"bandwidth": 1e11}, "inter_node": {"bandwidth": 1e10})";
  const tn::Cluster plain = tn::parseCluster(base + "}", "c.json");
  EXPECT_EQ(plain.profile(tn::Framework::Fsdp).hook_s, tn::builtinProfile(tn::Framework::Fsdp).hook_s);
  EXPECT_EQ(plain.frameworks.size(), 4u);
  const tn::Cluster set =
      tn::parseCluster(base + R"(, "frameworks": {"fsdp": {"hook_s": 3e-5, "flash_backward_scale": 0.5}}})", "c.json");
  EXPECT_DOUBLE_EQ(set.profile(tn::Framework::Fsdp).hook_s, 3e-5);
  EXPECT_DOUBLE_EQ(set.profile(tn::Framework::Fsdp).flash_backward_scale, 0.5);
  EXPECT_DOUBLE_EQ(set.profile(tn::Framework::Deepspeed).hook_s, tn::builtinProfile(tn::Framework::Deepspeed).hook_s);
  auto error = [&](const std::string& frameworks) {
    try {
      tn::parseCluster(base + R"(, "frameworks": )" + frameworks + "}", "c.json");
    } catch (const trainscope::UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_NE(error(R"({"jax": {}})").find("frameworks.jax"), std::string::npos);
  EXPECT_NE(error(R"({"fsdp": {"hoook_s": 1}})").find("frameworks.fsdp.hoook_s"), std::string::npos);
  EXPECT_NE(error(R"({"fsdp": {"flash_forward_scale": 2}})").find("frameworks.fsdp.flash_forward_scale"),
            std::string::npos);
  EXPECT_NE(error(R"({"fsdp": {"hook_s": "fast"}})").find("must be a number"), std::string::npos);
  EXPECT_NE(error(R"([1])").find("frameworks"), std::string::npos);
}

TEST(FrameworkProfiles, EveryFrameworkParsesAndEveryConstantIsBoundedAndNamed) {
  for (const auto f : tn::allFrameworks()) EXPECT_EQ(tn::parseFramework(tn::frameworkKey(f)), f);
  EXPECT_THROW(tn::parseFramework("jax"), trainscope::UserError);
  for (const auto& k : tn::profileConstants()) {
    EXPECT_LT(k.lower, k.upper) << k.key;
    EXPECT_GE(k.lower, 0) << k.key;
    for (const auto f : tn::allFrameworks()) {
      const double v = tn::builtinProfile(f).*k.member;
      EXPECT_TRUE(v < 0 || (v >= k.lower && v <= k.upper)) << tn::frameworkKey(f) << "." << k.key;
    }
  }
}

TEST(FrameworkProfiles, AClusterBuiltInCodeChangesABuiltInProfileNotAnEmptyOne) {
  tn::Cluster c = flatGpu();  // no "frameworks" entries
  EXPECT_EQ(c.profile(tn::Framework::Megatron).overlap_reduce, 0);  // the built-in one
  c.mutableProfile(tn::Framework::Megatron).host_micro_batch_s = 1e-3;
  EXPECT_EQ(c.profile(tn::Framework::Megatron).overlap_reduce, 0);  // still Megatron-LM's, now with the change
  EXPECT_DOUBLE_EQ(c.profile(tn::Framework::Megatron).host_micro_batch_s, 1e-3);
}

TEST(FrameworkProfiles, EveryConstantOfEveryFrameworkHasItsClusterFilePath) {
  const auto paths = tn::profilePaths();
  EXPECT_EQ(paths.size(), tn::allFrameworks().size() * tn::profileConstants().size());
  bool hook = false;
  for (const auto& q : paths) {
    if (q.path == "frameworks.fsdp.hook_s") {
      hook = true;
      tn::Cluster c = flatGpu();
      c.mutableProfile(q.framework).*q.member = 7e-5;  // what calibrate's setParam does
      EXPECT_DOUBLE_EQ(c.profile(tn::Framework::Fsdp).hook_s, 7e-5);
    }
  }
  EXPECT_TRUE(hook);
}

TEST(FlashRate, AGpusOwnCeilingMovesTheCurveAndTheProfileScalesIt) {
  // The flash forward of one layer at a given cap: FLOPs / (peak × cap); doubling the ceiling over
  // A100's halves it, the profile's scale multiplies the rate.
  tn::Cluster c = flatGpu();
  tn::Plan p;
  p.mbs = 1, p.gbs = 1, p.seq = 2048;
  const auto w = toy(1, 256, 2);
  auto flashSeconds = [&](const tn::Cluster& cl) {
    const tn::TimePrediction a = tn::predictTime(w, p, cl, with(tn::Framework::Trainscope));
    return a.compute_s;
  };
  const double base = flashSeconds(c);
  tn::Cluster slow = c;
  slow.flash_forward_ceiling = tn::kFlashTopForward / 2, slow.flash_backward_ceiling = tn::kFlashTopBackward / 2;
  // The layer's flash forward and backward take twice as long; nothing else changes.
  const tn::LayerOps L = tn::layerOps(w, p, tn::Framework::Trainscope);
  double flash = 0;
  for (const auto* ops : {&L.forward, &L.backward})
    for (const auto& o : *ops)
      if (o.flash) flash += tn::gpu::gemmSeconds(o, c, c.peak("bf16"), 2);
  EXPECT_NEAR(flashSeconds(slow) - base, flash, 1e-9 * base);
  tn::Cluster scaled = c;
  scaled.mutableProfile(tn::Framework::Trainscope).flash_forward_scale = 0.5;
  scaled.mutableProfile(tn::Framework::Trainscope).flash_backward_scale = 0.5;
  EXPECT_NEAR(flashSeconds(scaled), flashSeconds(slow), 1e-12);
  EXPECT_THROW(tn::parseCluster(R"({"devices_per_node": 8, "memory_bytes": 80e9, "peak_flops": {"bf16": 1e15},
      "memory_bandwidth": 1e12, "intra_node": {"bandwidth": 1e11}, "inter_node": {"bandwidth": 1e10},
      "flash_forward_ceiling": 1.5})", "c.json"), trainscope::UserError);
}

TEST(HostBound, TheHostAndTheDeviceMeetPassByPass) {
  // Σ max(host, device) over forward, recomputation, backward: 2 + 2 + 3 = 7, not max(6, 4) = 6.
  EXPECT_DOUBLE_EQ(tn::gpu::phasedSeconds({1, 2, 3}, {2, 1, 1}), 7.0);
  tn::Cluster c = flatGpu();
  tn::FrameworkProfile fp;
  fp.host_op_s = 40e-6, fp.host_backward_op_s = 10e-6, fp.host_collective_s = 50e-6;
  tn::Plan p;
  p.tp = 2, p.ckpt = trainscope::runconfig::Checkpointing::Full;
  // Forward and its rerun: 25 ops and 2 all-reduces each; backward 50 ops and 2 all-reduces; the
  // layer's 4 extra ops each way (Megatron's unfused softmax) land in every pass.
  const tn::gpu::HostPhases h = tn::gpu::hostLayerPhases(p, c, fp, 4, 4);
  EXPECT_NEAR(h.fwd, 29 * 40e-6 + 2 * 50e-6, 1e-15);
  EXPECT_NEAR(h.rec, 29 * 40e-6 + 2 * 50e-6, 1e-15);
  EXPECT_NEAR(h.bwd, 54 * 10e-6 + 2 * 50e-6, 1e-15);
  const tn::gpu::HostPhases plain = tn::gpu::hostLayerPhases(p, c, fp);
  EXPECT_NEAR(plain.fwd + plain.rec + plain.bwd, tn::gpu::hostLayerSeconds(p, c, fp), 1e-15);
}

TEST(MegatronSoftmax, TheFusedKernelTakesOnlyItsShapesAndTheRestRunsPyTorchsFp32Path) {
  // FusedScaleMaskSoftmax.is_kernel_available: 16 < keys <= 2048, queries and keys % 4, and
  // b·np % 4 (get_batch_per_block: 4 rows a block past 128 keys, 8 at <= 128).
  EXPECT_TRUE(tn::megatronFusedSoftmax(4, 1024, 1024));
  EXPECT_FALSE(tn::megatronFusedSoftmax(2, 1024, 1024));  // TP 8 of 16 heads at micro-batch 1
  EXPECT_FALSE(tn::megatronFusedSoftmax(6, 2048, 2048));  // 48 heads over TP 8
  EXPECT_FALSE(tn::megatronFusedSoftmax(8, 4096, 4096));  // past 2048 keys
  EXPECT_FALSE(tn::megatronFusedSoftmax(4, 128, 128));    // 8 rows a block at 128 keys
  EXPECT_TRUE(tn::megatronFusedSoftmax(8, 128, 128));
  // In the op list: 16 heads over TP 8, sequence 1024: b = 1 unfused, b = 2 fused.
  const auto w = toy(2, 1024, 16);
  tn::Plan p;
  p.tp = 8, p.mbs = 1, p.gbs = 1, p.seq = 1024, p.precision = trainscope::runconfig::Precision::FP16;
  auto softmax = [&](const tn::LayerOps& L) {
    for (const tn::Op& o : L.forward)
      if (o.name == "scale-mask-softmax") return o;
    return tn::Op{};
  };
  const double scores = 1.0 * 2 * 1024 * 1024;  // b·np·s·s
  const tn::LayerOps one = tn::layerOps(w, p, tn::Framework::Megatron, tn::Attention::Unfused);
  EXPECT_DOUBLE_EQ(softmax(one).bytes, 36 * scores);
  EXPECT_DOUBLE_EQ(softmax(one).backward_bytes, 40 * scores);
  EXPECT_EQ(one.extra_host_ops_forward, 4);
  EXPECT_EQ(one.extra_host_ops_backward, 4);
  p.mbs = 2;
  const tn::LayerOps two = tn::layerOps(w, p, tn::Framework::Megatron, tn::Attention::Unfused);
  EXPECT_DOUBLE_EQ(softmax(two).bytes, 1.5 * 2 * scores * 2);
  EXPECT_EQ(two.extra_host_ops_forward, 0);
}
