// architecture_models_test.cpp — the models price the Llama family from the workload's architecture
// (issue 32): the runtime's tensors per rank (GQA's K/V, SwiGLU's three matrices, no biases, untied
// head), the op list's GEMMs and saved activations, GQA under TP, FLOPs with SwiGLU and GQA.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "trainscope/models/dp_layout.h"
#include "trainscope/tuner/models.h"
#include "trainscope/tuner/space.h"
#include "trainscope/workloads/flops.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::tuner;
namespace wl = trainscope::workloads;
namespace rt = trainscope::runconfig;

namespace {

tn::Plan plan(int64_t tp, int64_t pp, int64_t seq) {
  tn::Plan p;
  p.dp = 1, p.tp = tp, p.pp = pp, p.mbs = 1, p.gbs = 1, p.seq = seq;
  p.precision = rt::Precision::BF16;
  return p;
}

const tn::Op* find(const std::vector<tn::Op>& ops, const std::string& name) {
  for (const auto& o : ops)
    if (o.name == name) return &o;
  return nullptr;
}

}  // namespace

TEST(ArchitectureModels, StageTensorsAreTheWholeLlamaModel) {
  // llama3-8b: 8,030,261,248 parameters (untied head, RMSNorm, GQA 8, SwiGLU 14336, no biases).
  const wl::Workload w = wl::load("llama3-8b");
  int64_t n = 0;
  for (const auto& s : tn::stageSlots(w, plan(1, 1, 8192), 0)) n += s.numel();
  EXPECT_EQ(n, w.parameterCount());
  EXPECT_EQ(n, 8030261248);
  // Under tp 2, pp 2 every tensor is split by 2 (vocabulary 128256 is even): the stages' sums, × tp.
  int64_t split = 0;
  for (int64_t st = 0; st < 2; ++st)
    for (const auto& s : tn::stageSlots(w, plan(2, 2, 8192), st)) split += s.numel();
  EXPECT_EQ(split * 2, n + 65 * 4096);  // the 65 norms (h each) are whole on each TP rank: twice
  // No wpe (RoPE), no biases, lm_head on the last stage only.
  bool wpe = false, bias = false, head_first = false, head_last = false;
  for (const auto& s : tn::stageSlots(w, plan(1, 2, 8192), 0)) {
    wpe |= s.name == "wpe", bias |= s.name.find(".bias") != std::string::npos, head_first |= s.name == "lm_head.weight";
  }
  for (const auto& s : tn::stageSlots(w, plan(1, 2, 8192), 1)) head_last |= s.name == "lm_head.weight";
  EXPECT_FALSE(wpe);
  EXPECT_FALSE(bias);
  EXPECT_FALSE(head_first);
  EXPECT_TRUE(head_last);
}

TEST(ArchitectureModels, GqaKvHeadsSplitOrReplicatedUnderTp) {
  const wl::Workload w = wl::load("llama3-8b");  // 32 query heads, 8 K/V heads, head size 128
  EXPECT_EQ(tn::kvHeadsPerRank(w, 1), 8);
  EXPECT_EQ(tn::kvHeadsPerRank(w, 4), 2);
  EXPECT_EQ(tn::kvHeadsPerRank(w, 16), 1);  // replicated twice
  for (const auto& [tp, n] : std::vector<std::pair<int64_t, double>>{{1, 6144}, {2, 3072}, {8, 768}, {16, 512}}) {
    const tn::LayerOps L = tn::layerOps(w, plan(tp, 1, 8192), tn::Framework::Trainscope);
    const tn::Op* qkv = find(L.forward, "qkv");
    ASSERT_NE(qkv, nullptr);
    EXPECT_EQ(qkv->n, n) << "tp " << tp;  // (32/tp + 2 · max(8/tp, 1)) · 128
  }
  // tp 14 splits qwen2.5-7b's 28 query heads but neither splits nor replicates its 4 K/V heads.
  const wl::Workload qwen = wl::load("qwen2.5-7b");
  tn::Plan p = plan(14, 1, 4096);
  EXPECT_NE(tn::whyInvalid(qwen, p).find("tp=14 neither divides n_kv_head=4"), std::string::npos);
  p.tp = 4;
  EXPECT_EQ(tn::whyInvalid(qwen, p), "");
}

TEST(ArchitectureModels, LlamaLayerOpsAndSavedBytesByHand) {
  const wl::Workload w = wl::load("llama3-8b");
  const tn::LayerOps L = tn::layerOps(w, plan(1, 1, 8192), tn::Framework::Trainscope);
  // SwiGLU: [gate; up] of 2F, the SiLU-multiply, down of F; RoPE on q and k; RMSNorms.
  const tn::Op* gate_up = find(L.forward, "gate+up");
  const tn::Op* down = find(L.forward, "down");
  ASSERT_TRUE(gate_up && down);
  EXPECT_EQ(gate_up->n, 2.0 * 14336);
  EXPECT_EQ(down->k, 14336.0);
  ASSERT_NE(find(L.forward, "silu-multiply"), nullptr);
  ASSERT_NE(find(L.forward, "rope q, k"), nullptr);
  EXPECT_EQ(find(L.forward, "rope q, k")->bytes, 2.0 * 8192 * (4096 + 1024) * 2);
  ASSERT_NE(find(L.forward, "rmsnorm 1"), nullptr);
  EXPECT_EQ(find(L.forward, "projection")->k, 4096.0);
  // Saved, one micro-batch (s 8192, b 1, bf16), no recomputation: A = s·h·2 bytes.
  const double A = 8192.0 * 4096 * 2, rows = 8192;
  // The runtime's eager RMSNorm (bf16) keeps x in fp32 (2A), 1/rms and the normalised y (A), twice.
  const double norms = 2 * (3 * A + 4 * rows);
  const double gemm_inputs = A /* qkv */ + A /* projection */ + A /* gate+up */ + rows * 14336 * 2 /* down */;
  // In bf16 (SDPA) the core is handed multi-head Q, K, V (each K/V head repeated for its 4 query
  // heads) and keeps them and O, and the fp32 log-sum-exp.
  const double flash = rows * (4 * 4096) * 2 + 4.0 * 32 * 8192;
  const double swiglu = 3 * rows * 14336 * 2;                         // gate, silu(gate), up
  EXPECT_DOUBLE_EQ(L.saved, norms + gemm_inputs + flash + swiglu);
  // fp32 on the CPU: the runtime's fused RMSNorm keeps x and 1/rms, the grouped-query core Q, O and
  // the 8 K/V heads as they are, the fused SwiGLU [gate; up] (cpu_ops, decoder_ops.h).
  tn::Plan cpu = plan(1, 1, 8192);
  cpu.cpu = true, cpu.precision = rt::Precision::FP32;
  const tn::LayerOps C = tn::layerOps(w, cpu, tn::Framework::Trainscope);
  const double A4 = 2 * A;
  const double cpu_saved = 2 * (A4 + 4 * rows) + 3 * A4 + rows * 14336 * 4 +
                           rows * (2 * 4096 + 2 * 1024) * 4 + 4.0 * 32 * 8192 + 2 * rows * 14336 * 4;
  EXPECT_DOUBLE_EQ(C.saved, cpu_saved);
  // A 4096-token sliding window at s 8192: query t multiplies min(t + 1, 4096) keys, 4096·8192 −
  // 4096·4095/2 in all, the causal products of 2·4096 − 4096²/8192 = 6144 keys; the memory is flash's.
  wl::Workload windowed = w;
  windowed.sliding_window = 4096;
  const tn::LayerOps Wd = tn::layerOps(windowed, plan(1, 1, 8192), tn::Framework::Trainscope);
  EXPECT_DOUBLE_EQ(find(Wd.forward, "flash attention")->n, 6144.0);
  EXPECT_DOUBLE_EQ(find(L.forward, "flash attention")->n, 8192.0);
  EXPECT_DOUBLE_EQ(Wd.saved, L.saved);
  // Megatron-LM's list: no QKV bias op, the fused bias_swiglu keeping [gate; up] only.
  const tn::LayerOps M = tn::layerOps(w, plan(1, 1, 8192), tn::Framework::Megatron, tn::Attention::Unfused);
  EXPECT_EQ(find(M.forward, "qkv bias"), nullptr);
  EXPECT_EQ(find(M.forward, "silu-multiply")->saved, 2.0 * rows * 14336 * 2);
  // The untied head: no tied-gradient sum in the embedding's backward, no positions.
  const tn::LayerOps E = tn::embeddingOps(w, plan(1, 1, 8192));
  EXPECT_EQ(find(E.backward, "tied embedding gradient sum"), nullptr);
  EXPECT_NE(find(E.forward, "embedding lookup"), nullptr);
}

TEST(ArchitectureModels, Llama3FlopsCountSwigluAndGqa) {
  // Per token and layer, forward: 2·C·(NH·HS) + 4·C·(KV·HS) + 2·(NH·HS)·C + 4·s·(NH·HS) + 3·2·C·F
  //   = 33,554,432 + 16,777,216 + 33,554,432 + 134,217,728 + 352,321,536 = 570,425,344 (s 8192),
  // × 32 layers, plus the head 2·C·V = 1,050,673,152; × 3 (forward and backward) per token.
  const wl::Workload w = wl::load("llama3-8b");
  const double per_token = 3.0 * (32.0 * 570425344.0 + 1050673152.0);
  EXPECT_DOUBLE_EQ(per_token, 57912852480.0);
  const wl::StepFlops f = wl::stepFlops(w, 1, 8192, wl::Recompute::None);
  EXPECT_DOUBLE_EQ(f.model, per_token * 8192);
  // Full recomputation adds one forward of every layer; selective the attention core 4·s²·NH·HS·L.
  EXPECT_DOUBLE_EQ(wl::stepFlops(w, 1, 8192, wl::Recompute::Full).hardware, f.model + 32.0 * 570425344.0 * 8192);
  EXPECT_DOUBLE_EQ(wl::stepFlops(w, 1, 8192, wl::Recompute::Selective).hardware,
                   f.model + 4.0 * 8192.0 * 8192.0 * 4096.0 * 32.0);
  // MFU in predict counts these: the time model's model FLOPs are stepFlops' for the global batch.
  tn::Plan p = plan(8, 1, 8192);
  p.dp = 1, p.gbs = 4;
  const tn::Cluster c = tn::loadCluster("h100-80gb-x8", 1);
  EXPECT_DOUBLE_EQ(tn::predictTime(w, p, c, {}).model_flops, per_token * 8192 * 4);
}

// MFU counts only the keys inside a sliding window (workloads/flops.h windowKeys): llama3-8b with a
// 4096-token window at s 8192 — a windowed row sees min(t + 1, 4096) keys, twice their mean is
// 2·4096 − 4096²/8192 = 6144 keys against the paper's 8192, so each windowed layer's core is
// 4·6144·4096 = 100,663,296 per token, not 134,217,728: the layer 570,425,344 − 33,554,432 = 536,870,912.
TEST(ArchitectureModels, SlidingWindowFlopsCountOnlyTheKeysInsideTheWindow) {
  wl::Workload w = wl::load("llama3-8b");
  w.sliding_window = 4096;
  const double head = 1050673152.0, full = 570425344.0, windowed = 536870912.0, s = 8192;
  EXPECT_DOUBLE_EQ(wl::windowKeys(4096, 8192), 6144.0);
  EXPECT_DOUBLE_EQ(wl::windowKeys(8192, 8192), 8192.0);  // a window as long as the sequence: no change
  const wl::StepFlops f = wl::stepFlops(w, 1, 8192, wl::Recompute::None);
  EXPECT_DOUBLE_EQ(f.model, 3.0 * (32.0 * windowed + head) * s);
  // Full recomputation: one more forward of the (windowed) layers; selective: their cores again.
  EXPECT_DOUBLE_EQ(wl::stepFlops(w, 1, 8192, wl::Recompute::Full).hardware, f.model + 32.0 * windowed * s);
  EXPECT_DOUBLE_EQ(wl::stepFlops(w, 1, 8192, wl::Recompute::Selective).hardware,
                   f.model + 4.0 * s * 6144.0 * 4096.0 * 32.0);
  // Qwen2's max_window_layers 16: the first 16 layers full, the other 16 windowed.
  w.window_from_layer = 16;
  EXPECT_DOUBLE_EQ(wl::stepFlops(w, 1, 8192, wl::Recompute::None).model, 3.0 * (16.0 * full + 16.0 * windowed + head) * s);
  // predict's MFU counts the same model FLOPs.
  tn::Plan p = plan(8, 1, 8192);
  p.dp = 1, p.gbs = 4;
  EXPECT_DOUBLE_EQ(tn::predictTime(w, p, tn::loadCluster("h100-80gb-x8", 1), {}).model_flops,
                   4.0 * 3.0 * (16.0 * full + 16.0 * windowed + head) * s);
  // The op list's flash op sweeps each layer's own keys: 8192 on layer 15, 6144 on layer 16.
  auto keysOf = [&](int64_t layer) {
    return find(tn::layerOps(w, plan(1, 1, 8192), tn::Framework::Trainscope, tn::Attention::Default, false, layer)
                    .forward, "flash attention")->n;
  };
  EXPECT_DOUBLE_EQ(keysOf(15), 8192.0);
  EXPECT_DOUBLE_EQ(keysOf(16), 6144.0);
}

// Qwen2 windows only the layers from max_window_layers on, so under PP the stage holding them pays
// their (cheaper) attention and the others the full one — not the mean over the model's layers.
// llama3-8b, a 1024-token window at s 8192 from layer 16 (A) on pp 2: stage 0 holds layers 0-15 (no
// window: as B, no layer windowed), stage 1 layers 16-31 (every one windowed: as C, all windowed).
// Hand count: windowKeys(1024, 8192) = 2·1024 − 1024²/8192 = 1920 keys on layers 16-31 only.
TEST(ArchitectureModels, PipelineStagesPayTheirOwnLayersWindows) {
  wl::Workload a = wl::load("llama3-8b");
  a.sliding_window = 1024, a.window_from_layer = 16;
  wl::Workload b = a, c = a;
  b.sliding_window = 0;
  c.window_from_layer = 0;
  tn::Plan p = plan(1, 2, 8192);
  p.gbs = 4;  // 4 micro-batches
  EXPECT_EQ(tn::windowedLayersOfStage(a, p, 0), 0);
  EXPECT_EQ(tn::windowedLayersOfStage(a, p, 1), 16);
  EXPECT_EQ(tn::windowedLayersOfStage(c, p, 1), 0);  // every layer windowed: layer 0's ops stand for all
  tn::Plan v = p;
  v.virtual_stages = 2;  // chunks of 8: stage 0 holds 0-7 and 16-23, stage 1 8-15 and 24-31
  EXPECT_EQ(tn::windowedLayersOfStage(a, v, 0), 8);
  EXPECT_EQ(tn::windowedLayersOfStage(a, v, 1), 8);
  const tn::LayerOps windowed = tn::layerOps(a, p, tn::Framework::Trainscope, tn::Attention::Default, false, 16);
  EXPECT_DOUBLE_EQ(find(windowed.forward, "flash attention")->n, 1920.0);
  EXPECT_DOUBLE_EQ(find(tn::layerOps(a, p, tn::Framework::Trainscope).forward, "flash attention")->n, 8192.0);
  // Per stage: A's stage 0 is B's, A's stage 1 is C's. With pp 2 the step holds M = 4 micro-batches
  // of the slowest stage (compute_s) and one of the other (bubble_s). Here the full stage 0 is the
  // slowest (4 micro-batches: 1.553 s, against 1.382 s on the windowed stage with the head): B's stage 0 is its
  // bubble, C's stage 1 its slowest. A mean over the layers would price both stages alike and
  // make the head's stage the bottleneck.
  const tn::Cluster cl = tn::loadCluster("h100-80gb-x8", 1);
  const tn::TimePrediction ta = tn::predictTime(a, p, cl, {}), tb = tn::predictTime(b, p, cl, {}),
                           tc = tn::predictTime(c, p, cl, {});
  const double M = 4;
  ASSERT_GT(tc.compute_s, 0.0);
  EXPECT_NEAR(ta.compute_s / M, tb.bubble_s, 1e-12 * tb.bubble_s);  // stage 0: no window, the slowest
  EXPECT_NEAR(ta.bubble_s, tc.compute_s / M, 1e-12 * ta.bubble_s);  // stage 1: every layer windowed
  EXPECT_GT(tb.compute_s / M, tb.bubble_s);  // without windows the head's stage is the slowest
}

// ALiBi's bias in the op list: the runtime's SDPA (bf16, GPU) reads a (NH/t, s, s) bias it builds
// (written and read forward, read again backward); the fp32 CPU kernel adds it in its loop (no op);
// an unfused core adds it to the materialised scores.
TEST(ArchitectureModels, AlibiBiasIsPricedWhereItIsInMemory) {
  wl::Workload w = wl::load("llama3-8b");
  w.positions = wl::Positions::Alibi;
  const tn::LayerOps G = tn::layerOps(w, plan(2, 1, 8192), tn::Framework::Trainscope);
  const double elems = 32.0 / 2 * 8192 * 8192;
  ASSERT_NE(find(G.forward, "score bias"), nullptr);
  EXPECT_DOUBLE_EQ(find(G.forward, "score bias")->bytes, 2.0 * elems * 2);
  EXPECT_DOUBLE_EQ(find(G.backward, "score bias backward")->bytes, elems * 2);
  tn::Plan cpu = plan(1, 1, 8192);
  cpu.cpu = true, cpu.precision = rt::Precision::FP32;
  EXPECT_EQ(find(tn::layerOps(w, cpu, tn::Framework::Trainscope).forward, "score bias"), nullptr);
  const tn::LayerOps U = tn::layerOps(w, plan(1, 1, 8192), tn::Framework::Trainscope, tn::Attention::Unfused);
  ASSERT_NE(find(U.forward, "alibi bias add"), nullptr);
  const double scores = 1.0 * 32 * 8192 * 8192;
  EXPECT_DOUBLE_EQ(find(U.forward, "alibi bias add")->bytes, 2.0 * scores * 2 + scores * 2);
  // RoPE's op is gone with RoPE.
  EXPECT_EQ(find(G.forward, "rope q, k"), nullptr);
}

TEST(ArchitectureModels, MegatronTheoreticalMemoryTermsForLlama) {
  // theoretical_memory_usage.py's terms on llama3-8b, tp 2 SP selective, pp 1, b 1, s 8192:
  // per layer sbh(18 + 4F/h)/t, 32 layers, + (8sb + sbh)/t, + 4sbh(1 + V/h)/t.
  const wl::Workload w = wl::load("llama3-8b");
  tn::Plan p = plan(2, 1, 8192);
  p.dp = 4, p.gbs = 64, p.sequence_parallel = true, p.ckpt = rt::Checkpointing::Selective;
  ASSERT_EQ(tn::whyInvalid(w, p), "");
  const double s = 8192, h = 4096, V = 128256, t = 2;
  const double want = 32 * s * h * (18 + 4 * 14336 / h) / t + (8 * s + s * h) / t + 4 * s * h * (1 + V / h) / t;
  EXPECT_EQ(tn::predictMemory(w, p).stages[0].megatron_activations, int64_t(want));
  // Weights: per layer 2h (RMSNorms) + h(q + 2kv) + q·h + 3hF, 32 layers, + two V·h tables (untied).
  const double layer = 2 * h + h * (4096 + 2 * 1024) + 4096 * h + 3 * h * 14336;
  EXPECT_EQ(tn::megatronLayerParams(w), layer);
  EXPECT_EQ(tn::megatronEmbeddingTables(w, p, 0), 2);
}

TEST(ArchitectureModels, TheTunersSpaceRespectsGqa) {
  // 24 query heads, 8 K/V heads: on 6 GPUs tp 3 and 6 divide the query heads but neither split nor
  // replicate the K/V heads; the space lists them rejected with that reason, tp 1 and 2 not for it
  // (whether the runtime runs them is the runtime's resolve, checked after).
  const wl::Workload w = wl::parse(R"({"model_type": "llama", "hidden_size": 384, "intermediate_size": 1024,
      "num_hidden_layers": 4, "num_attention_heads": 24, "num_key_value_heads": 8, "vocab_size": 1000,
      "max_position_embeddings": 512, "hidden_act": "silu", "tie_word_embeddings": false})",
                                   "gqa-test.json");
  tn::SpaceOptions o;
  o.gbs = 12, o.seq = 256, o.mbs = {1}, o.worlds = {6}, o.cp = {1}, o.virtual_stages = {1};
  const tn::Cluster c = tn::loadCluster("h100-80gb-x8", 1);
  std::set<int64_t> tps;
  int64_t gqa_rejected = 0;
  for (const auto& cand : tn::enumerateSpace(w, c, o)) {
    const bool gqa = cand.rejected.find("neither divides n_kv_head=8") != std::string::npos;
    EXPECT_EQ(gqa, cand.plan.tp == 3 || cand.plan.tp == 6) << cand.plan.describe() << ": " << cand.rejected;
    gqa_rejected += gqa;
    tps.insert(cand.plan.tp);
  }
  EXPECT_GT(gqa_rejected, 0);
  EXPECT_EQ(tps, (std::set<int64_t>{1, 2, 3, 6}));
}

TEST(ArchitectureModels, MixtralsSwigluExpertsAreItsRealParameters) {
  // mixtral-8x7b: 46,702,792,704 parameters (8 SwiGLU experts of 14336, no biases, GQA 8, untied).
  const wl::Workload w = wl::load("mixtral-8x7b");
  int64_t n = 0;
  for (const auto& s : tn::stageSlots(w, plan(1, 1, 4096), 0)) n += s.numel();
  EXPECT_EQ(n, w.parameterCount());
  EXPECT_EQ(n, 46702792704);
  // Its experts' fc1 is [gate; up]: 2F columns per expert GEMM.
  const tn::LayerOps L = tn::layerOps(w, plan(1, 1, 4096), tn::Framework::Trainscope, tn::Attention::Default, true);
  const tn::Op* fc1 = find(L.forward, "expert fc1");
  ASSERT_NE(fc1, nullptr);
  EXPECT_EQ(fc1->n, 2.0 * 14336);
  EXPECT_NE(find(L.forward, "expert silu-multiply"), nullptr);
}
