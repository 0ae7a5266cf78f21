// framework_memory_test.cpp — FSDP's and DeepSpeed ZeRO's model state and buffers per rank, Megatron-LM's peak,
// (models/framework_memory.h; docs/memory-model.md, "FSDP and DeepSpeed") against hand computations
// from the parameter list, and predict's JSON carrying them. DeepSpeed's own estimators are the
// oracle in tests/models/deepspeed_memory_oracle.py.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/models/framework_memory.h"
#include "trainscope/workloads/memory.h"

namespace md = trainscope::models;
namespace wl = trainscope::workloads;
using trainscope::testing::cli;

namespace {

md::Plan plan(int64_t dp, trainscope::runconfig::ZeroStage zero) {
  md::Plan p;
  p.dp = dp;
  p.zero = zero;
  p.mbs = 1;
  p.gbs = dp;
  p.seq = 1024;
  return p;
}

double totalParams(const wl::Workload& w) {
  double n = 0;
  for (const auto& t : wl::parameterTensors(w)) n += double(t.numel());
  return n;
}

}  // namespace

TEST(FrameworkMemory, DeepSpeedZeroStagesByHand) {
  const wl::Workload w = wl::load("gpt2-774m");
  const double P = totalParams(w), N = 8;
  using Z = trainscope::runconfig::ZeroStage;
  const md::FrameworkMemory z2 = md::deepspeedMemory(w, plan(8, Z::Gradients));
  EXPECT_NEAR(double(z2.modelStates()), 2 * P + 18 * P / N, 8);
  EXPECT_EQ(z2.buffers, int64_t(5e8 * 2));  // one bf16 IPG bucket: overlap_comm is off below stage 3
  const md::FrameworkMemory z1 = md::deepspeedMemory(w, plan(8, Z::OptimizerStates));
  EXPECT_NEAR(double(z1.modelStates()), 4 * P + 16 * P / N, 8);
  md::DeepSpeedZero knobs;
  knobs.overlap_comm = 1;
  knobs.reduce_bucket_size = 1e8;
  EXPECT_EQ(md::deepspeedMemory(w, plan(8, Z::Gradients), knobs).buffers, int64_t(2 * 1e8 * 2));
  const md::ParamCounts c = md::paramCounts(w, plan(8, Z::Parameters), 1e5);
  EXPECT_DOUBLE_EQ(c.largest_module, 50257.0 * 1280);  // the tied embedding, GPT-2's largest module
  const md::FrameworkMemory z3 = md::deepspeedMemory(w, plan(8, Z::Parameters));
  EXPECT_NEAR(double(z3.modelStates()), 20 * P / N + 4 * c.largest_module, 8);
  EXPECT_NEAR(double(z3.transient), 2 * 5e7, 1);  // the prefetch bucket, bf16
  EXPECT_NEAR(double(z3.buffers), 2 * c.persistent * (1 - 1 / N) + 2 * 5e8, 8);
}

TEST(FrameworkMemory, FsdpFullShardByHand) {
  const wl::Workload w = wl::load("gpt2-774m");
  const double P = totalParams(w), N = 8;
  md::FrameworkProfile prof = md::builtinProfile(md::Framework::Fsdp);  // reduce_bytes 4: fp32 reductions
  const md::ParamCounts c = md::paramCounts(w, plan(8, trainscope::runconfig::ZeroStage::Parameters), 0);
  EXPECT_NEAR(c.block, 12.0 * 1280 * 1280 + 13 * 1280, 1);  // GPT-2's block: 12h² + 13h
  const md::FrameworkMemory m = md::fsdpMemory(w, plan(8, trainscope::runconfig::ZeroStage::Parameters), prof);
  EXPECT_NEAR(double(m.modelStates()), 16 * P / N, 8);
  const double transient = 2 * (c.root + 2 * c.block) + 2 * 2 * c.block / N + 4 * c.block * (1 + 1 / N);
  EXPECT_NEAR(double(m.transient), transient, 8);
  // SHARD_GRAD_OP keeps the whole bf16 model unsharded between forward and backward.
  const md::FrameworkMemory sgo = md::fsdpMemory(w, plan(8, trainscope::runconfig::ZeroStage::Gradients), prof);
  EXPECT_GT(sgo.transient, int64_t(2 * P));
}

TEST(FrameworkMemory, PredictReportsItForFsdpAndDeepspeedOnly) {
  for (const char* f : {"fsdp", "deepspeed", "trainscope"}) {
    const auto r = cli(std::string("predict --workload gpt2-774m --cluster a100-80gb-x8 --zero 3 --framework ") + f + " --json");
    ASSERT_EQ(r.status, 0) << r.output;
    const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
    EXPECT_EQ(j.contains("framework_memory"), std::string(f) != "trainscope") << f;
    if (j.contains("framework_memory")) {
      EXPECT_EQ(j["framework_memory"]["framework"], f);
      EXPECT_GT(j["framework_memory"]["peak_bytes"].get<int64_t>(), j["framework_memory"]["model_states_bytes"].get<int64_t>());
    }
  }
}

// frameworkPeak is the framework's model states, buffers and transients plus the op list's
// activations on a GPU; on a CPU cluster, and for the frameworks whose memory is the runtime's, 0.
TEST(FrameworkMemory, FrameworkPeakIsTheFrameworksStateAndTheOpListsActivations) {
  const wl::Workload w = wl::load("gpt2-774m");
  md::Plan p = plan(8, trainscope::runconfig::ZeroStage::Parameters);
  p.precision = trainscope::runconfig::Precision::BF16;
  const md::MemoryPrediction m = md::predictMemory(w, p);
  const md::Cluster gpu = md::loadCluster("a100-80gb-x8", 1), cpu = md::loadCluster("cpu-local", 1);
  const md::FrameworkMemory fsdp = md::fsdpMemory(w, p, gpu.profile(md::Framework::Fsdp));
  const md::StageMemory& worst = m.stages[size_t(m.worst_stage)];
  EXPECT_EQ(md::frameworkPeak(w, p, gpu, md::Framework::Fsdp, m), fsdp.total() + worst.activations + worst.head);
  EXPECT_EQ(md::frameworkPeak(w, p, gpu, md::Framework::Deepspeed, m),
            md::deepspeedMemory(w, p).total() + worst.activations + worst.head);
  EXPECT_EQ(md::frameworkPeak(w, p, gpu, md::Framework::Trainscope, m), 0);
  // Megatron-LM's: megatron-core's theoretical memory of its worst stage (tests/models/
  // megatron_memory_oracle.py checks it against megatron-core's own formula).
  const bool distopt = trainscope::runconfig::shardsOptimizer(p.zero);
  const md::StageMemory& s0 = m.stages.front();
  EXPECT_EQ(md::frameworkPeak(w, p, gpu, md::Framework::Megatron, m),
            md::megatronLayersParamsOpt(w, p, 0, distopt) +
                md::megatronEmbeddingTables(w, p, 0) *
                    md::megatronEmbeddingParamsOpt(w, p, md::megatronBytesPerParam(p, distopt)) +
                s0.megatron_activations);
  EXPECT_EQ(md::frameworkPeak(w, p, cpu, md::Framework::Megatron, m), 0);
  EXPECT_EQ(md::frameworkPeak(w, p, cpu, md::Framework::Fsdp, m), 0);
}

// `fits` follows the framework the user names: MosaicML ran MPT-30B at 8,192 tokens under FSDP
// FULL_SHARD on 8 A100 80 GB (mbs 1, full checkpointing; ../shared/calibration/mpt-a100.json), which
// FSDP's own figures fit (0.86 of the memory) and this runtime's ZeRO-3 would not (1.003 of it).
TEST(FrameworkMemory, FitsIsJudgedByTheNamedFrameworksPeak) {
  const std::string wpath = trainscope::testing::tempPath("mpt-30b.json");
  {
    std::ofstream f(wpath);
    f << R"({"name": "mpt-30b", "n_layer": 48, "n_head": 56, "n_embd": 7168, "n_positions": 8192, "vocab_size": 50368})";
  }
  const std::string base = "predict --workload " + wpath +
                           " --cluster a100-80gb-x8 --gpus 8 --zero 3 --precision bf16 --ckpt full --mbs 1 --gbs 168"
                           " --seq 8192 --attention flash --json --framework ";
  const auto fsdp = cli(base + "fsdp"), own = cli(base + "trainscope");
  ASSERT_EQ(fsdp.status, 0) << fsdp.output;
  ASSERT_EQ(own.status, 0) << own.output;
  const auto jf = nlohmann::json::parse(fsdp.output.substr(fsdp.output.find('{')));
  const auto jo = nlohmann::json::parse(own.output.substr(own.output.find('{')));
  EXPECT_EQ(jf["fits_by"], "fsdp");
  EXPECT_TRUE(jf["fits"].get<bool>()) << jf["framework_memory"]["peak_bytes"] << " of " << jf["memory_limit_bytes"];
  EXPECT_LT(jf["framework_memory"]["peak_bytes"].get<double>(), 0.9 * jf["memory_limit_bytes"].get<double>());
  EXPECT_EQ(jo["fits_by"], "trainscope");
  EXPECT_FALSE(jo["fits"].get<bool>()) << jo["peak_bytes"];
  EXPECT_EQ(jf["peak_bytes"], jo["peak_bytes"]);  // the runtime's figure is still reported beside it
  // The text says which peak decided.
  const auto text = cli("predict --workload " + wpath +
                        " --cluster a100-80gb-x8 --gpus 8 --zero 3 --precision bf16 --ckpt full --mbs 1 --gbs 168"
                        " --seq 8192 --attention flash --framework fsdp");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("fits: FSDP's peak"), std::string::npos) << text.output;
}

// FP8 under Megatron-LM: Transformer Engine caches each FP8 GEMM's E4M3 weight and its transpose for the
// step (2 bytes an element) beside megatron-core's theoretical memory. gpt2-774m (h = 1280, 36 layers)
// at tp 2: QKV 3h², projection h², MLP 8h² = 12h² weight elements a layer, ÷ 2.
TEST(FrameworkMemory, MegatronFp8AddsTransformerEnginesWeightWorkspacesByHand) {
  const wl::Workload w = wl::load("gpt2-774m");
  md::Plan p = plan(4, trainscope::runconfig::ZeroStage::None);
  p.tp = 2;
  p.sequence_parallel = true;
  p.precision = trainscope::runconfig::Precision::FP8;
  const md::MemoryPrediction m = md::predictMemory(w, p);
  const md::MegatronPeak mp = md::megatronPeak(w, p, m);
  const double h = 1280;
  EXPECT_EQ(mp.fp8_weights, int64_t(2.0 * 12 * h * h * 36 / 2));
  EXPECT_EQ(mp.bytes, mp.params_opt + mp.embedding_opt + mp.activations + mp.fp8_weights);
  p.precision = trainscope::runconfig::Precision::BF16;
  EXPECT_EQ(md::megatronPeak(w, p, md::predictMemory(w, p)).fp8_weights, 0);
}

// `fits` under --framework megatron is Megatron-LM's own: NVIDIA's NeMo 24.07 performance summary
// (docs/source/performance/performance_summary.md, DGX-H100) trained Llama-2-7B on 8 H100s at seq 4096,
// mbs 1, FP8, TP 1 PP 1 with the distributed optimizer. Megatron-LM's memory fits it (74 GiB of 79.18);
// this runtime's (fp32 master weights unsharded) would not.
TEST(FrameworkMemory, FitsUnderMegatronIsMegatronLmsTheoreticalMemory) {
  const std::string wpath = trainscope::testing::tempPath("llama2-7b.json");
  {
    std::ofstream f(wpath);
    f << R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008, "num_hidden_layers": 32,
             "num_attention_heads": 32, "num_key_value_heads": 32, "vocab_size": 32000,
             "max_position_embeddings": 4096, "tie_word_embeddings": false})";
  }
  const std::string args = "predict --workload " + wpath +
                           " --cluster h100-80gb-x8 --gbs 128 --mbs 1 --seq 4096 --precision fp8 --framework ";
  const auto meg = cli(args + "megatron --use-distributed-optimizer --json");
  const auto own = cli(args + "trainscope --zero 1 --json");
  ASSERT_EQ(meg.status, 0) << meg.output;
  ASSERT_EQ(own.status, 0) << own.output;
  const auto jm = nlohmann::json::parse(meg.output.substr(meg.output.find('{')));
  const auto jo = nlohmann::json::parse(own.output.substr(own.output.find('{')));
  EXPECT_EQ(jm["fits_by"], "megatron");
  EXPECT_TRUE(jm["fits"].get<bool>()) << jm["framework_memory"];
  const auto& fm = jm["framework_memory"];
  EXPECT_EQ(fm["framework"], "megatron");
  EXPECT_EQ(fm["peak_bytes"].get<int64_t>(),
            fm["params_opt_bytes"].get<int64_t>() + fm["embedding_opt_bytes"].get<int64_t>() +
                fm["activations_bytes"].get<int64_t>() + fm["fp8_weights_bytes"].get<int64_t>());
  // Its parts are the stage's Megatron columns.
  const auto& st = jm["stages"][fm["stage"].get<size_t>()];
  EXPECT_EQ(fm["params_opt_bytes"], st["megatron_params_opt_bytes"]);
  EXPECT_EQ(fm["embedding_opt_bytes"], st["megatron_embedding_opt_bytes"]);
  EXPECT_EQ(fm["activations_bytes"], st["megatron_activations_bytes"]);
  EXPECT_EQ(fm["fp8_weights_bytes"], st["fp8_weights_bytes"]);
  EXPECT_EQ(jo["fits_by"], "trainscope");
  EXPECT_FALSE(jo["fits"].get<bool>()) << jo["peak_bytes"];
  const auto text = cli(args + "megatron --use-distributed-optimizer");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_NE(text.output.find("fits: Megatron-LM's peak"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("Transformer Engine's FP8 weights"), std::string::npos) << text.output;
}
