// moe_models_test.cpp — the models' mixture of experts (models/moe.h) against hand computations:
// routing at the realised per-expert batch and its capacity bound, the MoE layer's kernels and what
// they keep, the all-to-all bytes and seconds, expert weights over ep in the memory model, the space's
// ep knob with its rejections' reasons, the Megatron-LM/DeepSpeed/Accelerate exports, `predict --ep`.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>

#include "../common/cli.h"

#include "trainscope/models/moe.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/models.h"
#include "moe_fixture.h"
#include "flat_cluster.h"
#include "trainscope/tuner/space.h"
#include "trainscope/workloads/flops.h"

namespace tn = trainscope::tuner;
using trainscope::testing::flatGpu;
namespace wl = trainscope::workloads;
namespace rt = trainscope::runconfig;

namespace {

wl::Workload moe() { return trainscope::testing::moeTestWorkload(); }

// dp 4, ep 2, mbs 2 × seq 8: N = 16 tokens per rank, kN = 32 assignments; balanced routing (load 1:
// the hand computations below; random routing's default and a given load: moe_routing_load_test.cpp).
tn::Plan plan(int64_t ep = 2) { return trainscope::testing::moeTestPlan(ep, 1); }


const tn::Op& find(const std::vector<tn::Op>& ops, const std::string& name) {
  for (const auto& o : ops)
    if (o.name == name) return o;
  ADD_FAILURE() << "no op " << name;
  static tn::Op none;
  return none;
}

}  // namespace

TEST(MoeModels, RoutingIsTheRealisedPerExpertBatchBoundedByCapacity) {
  // capacity = ⌈1.25·32/4⌉ = 10 per expert; 4·10 ≥ 32 keeps all: M = 32. Rank holds 2 experts,
  // each gets ep·M/E = 2·32/4 = 16 rows, R = 32.
  auto r = tn::moeRouting(moe(), plan());
  EXPECT_EQ(r.tokens, 16);
  EXPECT_EQ(r.assignments, 32);
  EXPECT_EQ(r.capacity, 10);
  EXPECT_EQ(r.kept, 32);
  EXPECT_EQ(r.local_experts, 2);
  EXPECT_EQ(r.per_expert, 16);
  EXPECT_EQ(r.received, 32);
  // cf 0.5: ⌈0.5·32/4⌉ = 4, M = min(32, 16) = 16 (half dropped), 8 rows per expert.
  wl::Workload w = moe();
  w.capacity_factor = 0.5;
  r = tn::moeRouting(w, plan());
  EXPECT_EQ(r.capacity, 4);
  EXPECT_EQ(r.kept, 16);
  EXPECT_EQ(r.per_expert, 8);
  // Drop-less: no capacity, M = kN.
  w.capacity_factor = 0;
  EXPECT_EQ(tn::moeRouting(w, plan()).kept, 32);
}

TEST(MoeModels, LayerOpsPriceRouterExpertsAndSharedExpert) {
  wl::Workload w = moe();
  w.shared_expert = true;
  const tn::LayerOps L = tn::layerOps(w, plan(), tn::Framework::Trainscope, tn::Attention::Default, true);
  const tn::Op& router = find(L.forward, "router");
  EXPECT_EQ(router.flops(), 2.0 * 16 * 4 * 64);
  const tn::Op& fc1 = find(L.forward, "expert fc1");
  EXPECT_EQ(fc1.m, 16);
  EXPECT_EQ(fc1.batch, 2);
  EXPECT_EQ(fc1.flops(), 2.0 * 16 * 128 * 64 * 2);  // 2 local experts × 16 rows × C→F
  EXPECT_EQ(find(L.forward, "expert fc2").flops(), 2.0 * 16 * 64 * 128 * 2);
  EXPECT_EQ(find(L.forward, "shared fc1").flops(), 2.0 * 16 * 128 * 64);
  EXPECT_EQ(find(L.backward, "expert fc1 dgrad").flops(), fc1.flops());
  EXPECT_EQ(find(L.backward, "expert fc1 wgrad").flops(), fc1.flops());
  EXPECT_EQ(find(L.backward, "routing one-hot + cumsum backward").bytes, 0);  // integers: no backward
  // No dense MLP in a MoE layer.
  for (const auto& o : L.forward) EXPECT_NE(o.name, "fc1");
}

TEST(MoeModels, MoeLayerKeepsItsDispatchBuffers) {
  // bf16 (e = 2), ep 2, no shared expert. The MoE MLP keeps: x for the router N·C·e, logits and probs
  // 2·N·E·4, the regrouped rows once, as fc1's input R·C·e (the all-to-all's output is not kept),
  // GELU in and out 2·R·F·e, the expert outputs M·C·e; the dense MLP kept fc1's input N·C·e and 2·N·4C·e.
  const wl::Workload w = moe();
  const double N = 16, C = 64, E = 4, F = 128, M = 32, R = 32, e = 2;
  const double moe_mlp = N * C * e + 2 * N * E * 4 + R * C * e + 2 * R * F * e + M * C * e;
  const double dense_mlp = N * C * e + 2 * N * 4 * C * e;
  const auto dense = tn::layerOps(w, plan(), tn::Framework::Trainscope);
  const auto expert = tn::layerOps(w, plan(), tn::Framework::Trainscope, tn::Attention::Default, true);
  EXPECT_DOUBLE_EQ(expert.saved - dense.saved, moe_mlp - dense_mlp);
}

TEST(MoeModels, AllToAllBytesAndSecondsByTier) {
  // M·C·e = 32·64·2 bytes per all-to-all; (ep − 1)/ep leave the rank; ep − 1 latency steps.
  EXPECT_EQ(tn::moeAllToAllBytes(moe(), plan()), 4096);
  EXPECT_EQ(tn::moeAllToAllBytes(moe(), plan(1)), 0);
  const tn::Cluster c = flatGpu();
  EXPECT_DOUBLE_EQ(tn::moeAllToAllSeconds(c.intra_node, 4096, 2), 1e-6 + 4096 * 0.5 / 100e9);
  tn::Plan p = plan();
  EXPECT_EQ(&tn::moeTier(p, c), &c.intra_node);
  p.cp = 8;  // tp·cp·ep = 16 > 8 devices per node: the ep group crosses nodes
  EXPECT_EQ(&tn::moeTier(p, c), &c.inter_node);
}

TEST(MoeModels, GpuStepCountsFourAllToAllsPerMoeLayerAndActiveFlops) {
  // Large enough to be device-bound: C 1024, 16 heads, E 8 top-2 of 4096, seq 1024, mbs 4.
  wl::Workload w;
  w.name = "moe-big";
  w.n_layer = 4, w.n_head = 16, w.n_embd = 1024, w.n_positions = 1024, w.vocab_size = 4096;
  w.n_experts = 8, w.top_k = 2, w.moe_every = 2;
  tn::Plan p;
  p.dp = 8, p.ep = 8, p.mbs = 4, p.gbs = 64, p.seq = 1024;  // ga 2, 2 MoE layers
  p.moe_load = 1;                                           // balanced routing (R = M)
  const tn::Cluster c = flatGpu();
  const tn::TimePrediction t = tn::predictTime(w, p, c);
  ASSERT_EQ(t.bound, "device");
  const double bytes = 2.0 * 4 * 1024 * 1024 * 2;  // M = kN = 8192 rows of C in bf16
  const double a2a = 1e-6 * 7 + bytes * 7.0 / 8.0 / 100e9;
  EXPECT_NEAR(t.ep_comm_s, 2 * 2 * 4 * a2a, 1e-12);
  EXPECT_NEAR(t.step_s, t.compute_s + t.recompute_s + t.tp_comm_s + t.dp_comm_s + t.pp_comm_s + t.cp_comm_s +
                            t.ep_comm_s + t.bubble_s + t.optimizer_s, 1e-12);
  EXPECT_DOUBLE_EQ(t.model_flops, wl::stepFlops(w, 64, 1024, wl::Recompute::None).model);
  EXPECT_LT(t.model_flops, wl::stepFlops(64, 1024, 4, 1024, 4096, wl::Recompute::None).model * 2);
}

TEST(MoeModels, AMoePatternPricesItsOwnLayers) {
  // moe_pattern [0, 0, 1, 1] (Qwen2-MoE's mlp_only_layers [0, 1]): under pp 2 stage 0 holds no MoE
  // layer and stage 1 both; the step's all-to-alls and FLOPs are those of 2 MoE layers, as moe_every 2's.
  wl::Workload w;
  w.name = "moe-big";
  w.n_layer = 4, w.n_head = 16, w.n_embd = 1024, w.n_positions = 1024, w.vocab_size = 4096;
  w.n_experts = 8, w.top_k = 2, w.moe_pattern = {0, 0, 1, 1};
  tn::Plan p;
  p.dp = 8, p.ep = 8, p.mbs = 4, p.gbs = 64, p.seq = 1024, p.moe_load = 1;
  p.pp = 2;
  EXPECT_EQ(tn::moeLayersOfStage(w, p, 0), 0);
  EXPECT_EQ(tn::moeLayersOfStage(w, p, 1), 2);
  wl::Workload every = w;
  every.moe_pattern.clear();
  every.moe_every = 2;
  EXPECT_EQ(tn::moeLayersOfStage(every, p, 0), 1);
  EXPECT_EQ(w.parameterCount(), every.parameterCount());
  p.pp = 1;
  const tn::Cluster c = flatGpu();
  EXPECT_DOUBLE_EQ(tn::predictTime(w, p, c).ep_comm_s, tn::predictTime(every, p, c).ep_comm_s);
  EXPECT_DOUBLE_EQ(tn::predictTime(w, p, c).model_flops, tn::predictTime(every, p, c).model_flops);
}

TEST(MoeModels, GpuDataParallelSumsExpertsOverTheExpertDpGroup) {
  // The same model on 8 GPUs of dp: with ep 8 no rank shares its experts (no expert all-reduce), with
  // ep 2 each expert's gradient is summed over 4 ranks, with ep 1 over all 8 with the dense ones.
  wl::Workload w;
  w.name = "moe-big";
  w.n_layer = 4, w.n_head = 16, w.n_embd = 1024, w.n_positions = 1024, w.vocab_size = 4096;
  w.n_experts = 8, w.top_k = 2, w.moe_every = 2;
  tn::Plan p;
  p.dp = 8, p.mbs = 4, p.gbs = 64, p.seq = 1024;
  const tn::Cluster c = flatGpu();
  tn::TimeOptions o;
  o.dp_overlap = 0;  // fully exposed: the comparison is of bytes and group sizes alone
  double comm[3];
  int i = 0;
  for (int64_t ep : {8, 2, 1}) {
    p.ep = ep;
    comm[i++] = tn::predictTime(w, p, c, o).dp_comm_s;
  }
  EXPECT_LT(comm[0], comm[1]);
  EXPECT_LT(comm[1], comm[2]);
  // ep 8: the dense tensors' all-reduce remains.
  EXPECT_GT(comm[0], 0);
}

TEST(MoeModels, ExpertWeightsSplitOverEp) {
  // Per MoE layer the rank holds E/ep experts of 2CF + F + C: ep 2 holds 2 fewer of 4 per layer,
  // 2 layers; bf16 + fp32 master = 6 bytes each, fp32 gradients 4.
  const wl::Workload w = moe();
  const int64_t expert = 2 * 64 * 128 + 128 + 64;
  const auto one = tn::predictMemory(w, plan(1)).stages[0], two = tn::predictMemory(w, plan(2)).stages[0];
  EXPECT_EQ(one.params - two.params, 6 * 2 * 2 * expert);
  EXPECT_EQ(one.grads - two.grads, 4 * 2 * 2 * expert);
  // ep 1 holds every expert: the workload's parameter count.
  tn::Plan p = plan(1);
  p.dp = 1, p.gbs = 2;
  EXPECT_EQ(tn::predictMemory(w, p).stages[0].params, 6 * w.parameterCount());
}

TEST(MoeModels, TheExpertsBackwardIsAMomentOfItsOwn) {
  // small-cpu-moe (layers 0 and 2 MoE, 8 experts of 256 → 1024), one process, fp32, seq 128, mbs 8:
  // the unbinds' backward of layer 2 holds 3 stacks of 8·1024·256 fp32 gradients, after layer 3
  // (dense) freed what it saved and layer 2's expert chains theirs (R = M = 2048 rows: fc1's input
  // R·C·4, GELU's 2·R·F·4, the outputs M·C·4), and without the LM head's dX/dW: below the
  // layer-backward moment here. Interleaved over pp 2, stage 0's last chunk is MoE layer 2: its peak.
  const wl::Workload w = wl::load("small-cpu-moe");
  tn::Plan p;
  p.mbs = 8, p.gbs = 16, p.seq = 128, p.cpu = true, p.precision = rt::Precision::FP32;
  const auto sm = tn::predictMemory(w, p).stages[0];
  EXPECT_EQ(sm.expert_grads, 3 * 8 * 1024 * 256 * 4);
  const double chains = 2048.0 * 256 * 4 + 2 * 2048.0 * 1024 * 4 + 2048.0 * 256 * 4;
  EXPECT_EQ(sm.moe_freed, int64_t(tn::layerOps(w, p, tn::Framework::Trainscope).saved + chains));
  EXPECT_EQ(sm.moeBackward(), sm.layerBackward() - sm.head - sm.moe_freed + sm.expert_grads);
  EXPECT_LT(sm.moeBackward(), sm.layerBackward());
  tn::Plan q = p;
  q.pp = 2, q.virtual_stages = 2, q.gbs = 32;
  const auto first = tn::predictMemory(w, q).stages[0];
  EXPECT_EQ(first.moe_freed, int64_t(chains));
  EXPECT_EQ(first.transient(), first.layerBackward() - first.moe_freed + first.expert_grads);
  EXPECT_STREQ(first.peakPhase(), "moe bwd");
  // A dense workload has no such moment.
  EXPECT_EQ(tn::predictMemory(wl::load("small-cpu"), p).stages[0].moeBackward(), 0);
  // The runtime's stage split: interleaving gives stage 0 layers 0 and 2 (both MoE here).
  EXPECT_EQ(tn::layerIdsOfStage(4, 2, 0, 2), (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(tn::layerIdsOfStage(4, 2, 1, 2), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(tn::layerIdsOfStage(4, 2, 0, 1), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(tn::layerIdsOfStage(5, 2, 0, 1), (std::vector<int64_t>{0, 1, 2}));
  p.pp = 2, p.virtual_stages = 2;
  EXPECT_EQ(tn::moeLayersOfStage(w, p, 0), 2);
  EXPECT_EQ(tn::moeLayersOfStage(w, p, 1), 0);
}

TEST(MoeModels, TheRecomputedMoeLayersCombineBackwardIsAMoment) {
  // tiny-mixtral (C 64, 4 SwiGLU experts of F 128, top-2, drop-less), seq 64, mbs 4, fp32, full
  // recomputation: N = 256 tokens, M = R = 512 rows. At the rebuilt layer's combine backward the
  // block's dY and rebuilt output (2·N·C·4) and the gate multiply's dsrc, dys and dsrc·ys (3·M·C·4)
  // are held beside that layer's recomputed tensors: 131072 + 393216 bytes.
  const wl::Workload w = wl::load("tiny-mixtral");
  tn::Plan p;
  p.mbs = 4, p.gbs = 8, p.seq = 64, p.cpu = true, p.precision = rt::Precision::FP32, p.ckpt = rt::Checkpointing::Full;
  p.moe_load = 1;  // balanced routing at ep 2 below (R = M)
  EXPECT_EQ(tn::moeRecomputedCombineBytes(w, p), 2.0 * 256 * 64 * 4 + 3.0 * 512 * 64 * 4);
  tn::Plan whole = p;
  whole.ckpt = rt::Checkpointing::None;
  const tn::LayerOps moe = tn::layerOps(w, whole, tn::Framework::Trainscope, tn::Attention::Default, true);
  const auto sm = tn::predictMemory(w, p).stages[0];
  EXPECT_EQ(sm.moe_recompute, int64_t(moe.saved - moe.saved_fp32 + 524288.0));
  EXPECT_EQ(sm.recompute, int64_t(moe.saved - moe.saved_fp32));  // every layer is MoE
  EXPECT_EQ(sm.moeRecomputeBackward(), sm.layerBackward() - sm.recompute - sm.allowance + sm.moe_recompute);
  EXPECT_STREQ(sm.peakPhase(), "moe recomp");
  // Without full recomputation there is no rebuilt layer: the calibrated between-op allowance prices it.
  p.ckpt = rt::Checkpointing::Selective;
  EXPECT_EQ(tn::predictMemory(w, p).stages[0].moeRecomputeBackward(), 0);
  // The unbinds' backward for SwiGLU experts: the buffers hold [gate; up] (2F·C) and down (C·F) per
  // expert and the first unbind (down's) stacks its own: (E/ep)·C·4·(2F + 2F), 4 stacks of (E/ep)·F·C.
  EXPECT_EQ(tn::moeExpertGradientBuffers(w, p), 4.0 * 4 * 128 * 64 * 4);
  // The chains free fc1's input R·C, [gate; up] and silu(gate) 3·R·F, fc2's input R·F and the outputs M·C.
  EXPECT_EQ(tn::moeExpertChainSaved(w, p), 512.0 * 64 * 4 + 4.0 * 512 * 128 * 4 + 512.0 * 64 * 4);
  // GELU experts (small-cpu-moe): 3 stacks, as TheExpertsBackwardIsAMomentOfItsOwn.
  EXPECT_EQ(tn::moeExpertGradientBuffers(wl::load("small-cpu-moe"), p), 3.0 * 8 * 1024 * 256 * 4);
  // ep 2 (R = M = 512 received rows on balanced routing): the rebuilt forward's return all-to-all is
  // the larger moment: dY 256·64·4, the dispatched rows 512·64·4, got/y/back 3·512·64·4, and the
  // routing's int64 one-hot (512 × 4) and five assignment lists of 512 (drop-less: no cumsum).
  p.ckpt = rt::Checkpointing::Full, p.ep = 2, p.dp = 2, p.gbs = 16;
  EXPECT_EQ(tn::moeRecomputedCombineBytes(w, p), 65536.0 + 131072 + 393216 + 8.0 * 512 * (4 + 5));
  // Without full recomputation that all-to-all is a forward moment of its own, above every kept
  // activation of the micro-batch (ep 1: none, the experts run in place).
  p.ckpt = rt::Checkpointing::Selective;
  const auto ep2 = tn::predictMemory(w, p).stages[0];
  EXPECT_EQ(ep2.moe_dispatch, 131072 + 393216 + 8 * 512 * (4 + 5));
  EXPECT_EQ(ep2.moeDispatchForward(), ep2.activations + ep2.moe_dispatch);
  EXPECT_EQ(tn::moeDispatchBytes(w, whole), 0);
}

TEST(MoeModels, OneZeroTwoBucketIsMadeAfterTheHeadsBackward) {
  // small-cpu-moe at ep 2: its experts leave the buckets, and the dense tensors (wte 4096·256, wpe
  // 256·256, two GPT layers of 12h² + 13h, two MoE layers' attention 4h² + 8h and router 8·256,
  // ln_f 2h: 3,226,624 elements) are one bucket of 25 MiB, made at ln_f's gradient, after the LM
  // head's backward: at the layer-backward moment it stands in place of the head's dX and dW
  // (4·s·b·h + 4·V·h = 5 MiB), as the walk's first bucket does with several.
  const wl::Workload w = wl::load("small-cpu-moe");
  tn::Plan p;
  p.dp = 2, p.ep = 2, p.mbs = 8, p.gbs = 32, p.seq = 128, p.cpu = true, p.precision = rt::Precision::FP32;
  p.zero = rt::ZeroStage::Gradients;
  const auto sm = tn::predictMemory(w, p).stages[0];
  EXPECT_EQ(sm.head, 4 * 1024 * 256 + 4 * 4096 * 256);
  EXPECT_EQ(sm.grad_bucket, 4 * 3226624 - sm.head);
}

TEST(MoeModels, PlanRefusesEpWithReasons) {
  const wl::Workload w = moe();
  tn::Plan p = plan(3);
  EXPECT_EQ(tn::whyInvalid(w, p), "ep=3 does not divide dp=4");
  p.dp = 8, p.ep = 8, p.gbs = 16;
  EXPECT_EQ(tn::whyInvalid(w, p), "ep=8 does not divide n_experts=4");
  wl::Workload dense = w;
  dense.n_experts = 0;
  EXPECT_NE(tn::whyInvalid(dense, plan(2)).find("needs a mixture-of-experts workload"), std::string::npos);
  EXPECT_EQ(tn::whyInvalid(w, plan(2)), "");
  EXPECT_EQ(plan(2).describe().find("ep2") != std::string::npos, true);
}

TEST(MoeModels, SpaceEnumeratesEpWithEveryRejectionsReason) {
  const wl::Workload w = wl::load("small-cpu-moe");  // 8 experts
  const tn::Cluster c = tn::loadCluster("cpu-local");  // 2 ranks
  tn::SpaceOptions o;
  o.gbs = 8, o.seq = 64, o.mbs = {1}, o.ckpt = {rt::Checkpointing::None}, o.cp = {1, 2}, o.virtual_stages = {1};
  o.zero = {rt::ZeroStage::None, rt::ZeroStage::OptimizerStates, rt::ZeroStage::Parameters};
  o.sequence_parallel = {false, true};
  std::set<int64_t> eps;
  int64_t ep2_valid = 0, ep2_zero3 = 0, cp = 0, sp = 0;
  for (const auto& cand : tn::enumerateSpace(w, c, o)) {
    const tn::Plan& p = cand.plan;
    eps.insert(p.ep);
    EXPECT_EQ(p.dp % p.ep, 0) << p.describe();  // only divisors of dp are enumerated
    EXPECT_EQ(p.cpu_lanes, 1) << p.describe();  // the runtime runs no core lanes for a MoE
    if (p.cp > 1) {
      ++cp;
      EXPECT_NE(cand.rejected.find("--cp: context parallelism is not run with a mixture-of-experts"), std::string::npos)
          << p.describe() << ": " << cand.rejected;
    } else if (p.sequence_parallel) {
      ++sp;
      EXPECT_NE(cand.rejected.find("--sequence-parallel"), std::string::npos) << cand.rejected;
    } else if (p.ep == 2 && p.zero == rt::ZeroStage::Parameters) {
      ++ep2_zero3;
      EXPECT_NE(cand.rejected.find("ZeRO-3 with ep=2"), std::string::npos) << cand.rejected;
    } else if (p.ep == 2) {
      ++ep2_valid;
      EXPECT_EQ(cand.rejected, "") << p.describe();  // the runtime trains it now: priced, not refused
      EXPECT_GT(cand.predicted_step_s, 0);
    } else if (p.tp == 2 && p.pp == 1) {
      EXPECT_EQ(cand.rejected, "") << p.describe();  // TP with experts replicated over it
    }
  }
  EXPECT_EQ(eps, (std::set<int64_t>{1, 2}));
  EXPECT_GT(ep2_valid, 0);
  EXPECT_GT(ep2_zero3, 0);
  EXPECT_GT(cp, 0);
  EXPECT_GT(sp, 0);
  // runConfigOf carries ep to the trial's run config.
  tn::Plan p;
  p.dp = 2, p.ep = 2, p.mbs = 1, p.gbs = 8, p.seq = 64;
  EXPECT_EQ(tn::runConfigOf(w, p).ep, 2);
  EXPECT_EQ(tn::runtimeRefusal(w, p), "");
  // A dense workload: ep 1 only.
  for (const auto& cand : tn::enumerateSpace(wl::load("small-cpu"), c, o)) EXPECT_EQ(cand.plan.ep, 1);
}

TEST(MoeModels, ExpertsStayOutsideZeroShardsUnderEp) {
  // dp 4, ep 2, AdamW in bf16: 4 experts of 2CF + F + C in each of 2 layers, 2 on a rank. Under ZeRO-2
  // the dense tensors' gradients and state are ⌈n/4⌉ each; the rank's experts keep their whole fp32
  // main gradient (4 bytes) and AdamW state (8 bytes), as GradSync's unmanaged tensors.
  const wl::Workload w = moe();
  const double expert = 2 * 64 * 128 + 128 + 64, local = 2 * 2 * expert;
  tn::Plan p = plan(2);
  const auto none = tn::predictMemory(w, p).stages[0];
  p.zero = rt::ZeroStage::Gradients;
  const auto two = tn::predictMemory(w, p).stages[0];
  const double dense = double(none.grads) / 4 - local;
  EXPECT_EQ(two.grads, int64_t(4 * std::ceil(dense / 4) + 4 * local));
  EXPECT_NEAR(double(two.optimizer), 8 * (dense / 4 + local), 8.0 * 4);  // ⌈·⌉ of the dense share
  // ZeRO-1: the experts' state on every rank beside the rank's share of the dense tensors.
  p.zero = rt::ZeroStage::OptimizerStates;
  EXPECT_GE(tn::predictMemory(w, p).stages[0].optimizer, int64_t(8 * local));
  // ep 1: experts are sharded like any tensor.
  tn::Plan q = plan(1);
  q.zero = rt::ZeroStage::Gradients;
  EXPECT_EQ(tn::predictMemory(w, q).stages[0].grads, int64_t(4 * std::ceil(double(tn::predictMemory(w, plan(1)).stages[0].grads) / 16)));
}

TEST(MoeModels, CpuDataParallelSumsExpertsOverTheExpertDpGroup) {
  // small-cpu-moe on 4 CPU ranks: with ep 2 the experts' gradients (2 MoE layers × 8 experts of
  // 2CF + F + C, half on a rank) are all-reduced over dp/ep = 2 ranks and the dense ones over 4; with
  // ep 4 the experts need no all-reduce at all, so the DP sync is the dense tensors' alone.
  const wl::Workload w = wl::load("small-cpu-moe");
  tn::Cluster c = tn::loadCluster("cpu-local");
  c.devices_per_node = 4;
  tn::Plan p;
  p.dp = 4, p.mbs = 1, p.gbs = 8, p.seq = 64, p.cpu = true;
  const double all = double(w.parameterCount()), experts = tn::moeExpertParameters(w);
  EXPECT_EQ(experts, 2.0 * 8 * (2.0 * 256 * 1024 + 1024 + 256));
  auto allReduce = [&](double params, double n) {
    const double bw = c.intra_node.bandwidth * c.intra_node.efficiency;
    return c.intra_node.latency * 2 * (n - 1) + params * 4 * 2 * (n - 1) / n / bw;
  };
  tn::TimeOptions o;
  o.dp_overlap = 0;
  p.ep = 4;
  EXPECT_NEAR(tn::predictTime(w, p, c, o).dp_comm_s, allReduce(all - experts, 4), 1e-9);
  p.ep = 2;
  EXPECT_NEAR(tn::predictTime(w, p, c, o).dp_comm_s, allReduce(all - experts, 4) + allReduce(experts / 2, 2), 1e-9);
  p.ep = 1;  // every expert on every rank, all through GradSync over dp
  EXPECT_NEAR(tn::predictTime(w, p, c, o).dp_comm_s, allReduce(all, 4), 1e-9);
  // ep 2 adds the counts' all-gather to the all-to-alls (one per MoE layer and micro-batch).
  p.ep = 2;
  const auto t = tn::predictTime(w, p, c, o);
  const double a2a = tn::moeAllToAllSeconds(c.intra_node, tn::moeAllToAllBytes(w, p), 2);
  EXPECT_NEAR(t.ep_comm_s, 2.0 * 2 * (4 * a2a + tn::moeCountsAllGatherSeconds(c.intra_node, w, 2)), 1e-12);
}

TEST(MoeModels, ExportsCarryTheExperts) {
  rt::TrainConfig c;
  c.workload = "small-cpu-moe";
  c.seq = 64, c.mbs = 2, c.gbs = 8, c.nproc = 2;
  c.steps = 3, c.warmup = 0;
  c = tn::trainingRunOf(c);
  const std::string m = tn::exportConfig(c, tn::ExportFormat::Megatron).text;
  for (const char* flag : {" --num-experts 8", " --moe-router-topk 2", " --moe-layer-freq 2", " --moe-ffn-hidden-size 1024",
                           " --expert-model-parallel-size 1", " --moe-aux-loss-coeff 0.01", " --moe-z-loss-coeff 0.001",
                           " --moe-expert-capacity-factor 1.25", " --moe-token-drop-policy position"})
    EXPECT_NE(m.find(flag), std::string::npos) << flag << " in " << m;
  EXPECT_EQ(m.find("--moe-shared-expert-intermediate-size"), std::string::npos);
  const auto ds = tn::exportConfig(c, tn::ExportFormat::DeepSpeed);
  bool note = false;
  for (const auto& n : ds.notes) note |= n.find("deepspeed.moe.layer.MoE(hidden_size=256") != std::string::npos &&
                                         n.find("num_experts=8, ep_size=1, k=2, capacity_factor=1.25") != std::string::npos;
  EXPECT_TRUE(note);
  const auto acc = tn::exportConfig(c, tn::ExportFormat::TrainingArgs);
  bool acc_note = false;
  for (const auto& n : acc.notes) acc_note |= n.find("8 experts, top-2") != std::string::npos;
  EXPECT_TRUE(acc_note);
  // A dense workload gets none of it.
  c.workload = "small-cpu";
  c.model = wl::load("small-cpu");
  EXPECT_EQ(tn::exportConfig(c, tn::ExportFormat::Megatron).text.find("--num-experts"), std::string::npos);
}

TEST(MoeModels, PredictTakesEp) {
  namespace ts = trainscope::testing;
  const auto r = ts::cli("predict --workload small-cpu-moe --cluster cpu-local --ep 2 --mbs 1 --gbs 2 --seq 64 --precision fp32 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("\"ep\":2"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"ep_comm_s\""), std::string::npos);
  const auto bad = ts::cli("predict --workload small-cpu-moe --cluster cpu-local --ep 3");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("ep=3"), std::string::npos) << bad.output;
}
