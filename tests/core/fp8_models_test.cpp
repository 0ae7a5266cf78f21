// fp8_models_test.cpp — --precision fp8 outside the runtime: the flag (parsed, printed, refused where
// it cannot work), predict's pricing (the block GEMMs at the fp8 peak and ceiling, the casts as
// memory ops, the FP8 weight copies in memory, a cluster without FP8 refused) and the exports.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <string>

#include "../common/cli.h"
#include "../../models/src/gpu_time.h"
#include "trainscope/common/error.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/rundb/fp8_scales.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/store.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/models.h"
#include "trainscope/workloads/workload.h"

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;
using trainscope::UserError;

namespace {

tn::Plan h100Plan(rt::Precision p) {
  tn::Plan plan;
  plan.dp = 8;
  plan.mbs = 2;
  plan.gbs = 64;
  plan.seq = 2048;
  plan.precision = p;
  return plan;
}

std::string refusal(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Fp8Flag, ParsesAndPrints) {
  EXPECT_EQ(rt::parsePrecision("fp8"), rt::Precision::FP8);
  EXPECT_STREQ(rt::toString(rt::Precision::FP8), "fp8");
  rt::TrainConfig c;
  c.workload = "tiny";
  c.precision = rt::Precision::FP8;
  EXPECT_NO_THROW(rt::resolve(c));
}

TEST(Fp8Flag, RefusedWhereItCannotWork) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.precision = rt::Precision::FP8;
  c.fp16_init_scale = 1024;
  std::string e = refusal([&] { rt::resolve(c); });
  EXPECT_NE(e.find("--precision"), std::string::npos) << e;
  EXPECT_NE(e.find("--fp16-init-scale"), std::string::npos) << e;
  // GEMM dimensions that FP8 kernels refuse (not multiples of 16).
  const std::string p = trainscope::testing::tempPath("fp8-odd.json");
  std::ofstream(p) << R"({"name":"odd","n_layer":1,"n_head":2,"n_embd":40,"n_positions":32,"vocab_size":64})";
  rt::TrainConfig odd;
  odd.workload = p;
  odd.precision = rt::Precision::FP8;
  e = refusal([&] { rt::resolve(odd); });
  EXPECT_NE(e.find("--precision"), std::string::npos) << e;
  EXPECT_NE(e.find("n_embd is 40"), std::string::npos) << e;
  odd.precision = rt::Precision::BF16;
  EXPECT_NO_THROW(rt::resolve(odd));
  // The token dimension too: dW = dY^T X runs mbs x seq / cp as its inner dimension (CUDA's rule).
  rt::TrainConfig few;
  few.workload = "tiny";
  few.precision = rt::Precision::FP8;
  few.mbs = 1, few.seq = 24;
  e = refusal([&] { rt::resolve(few); });
  EXPECT_NE(e.find("--precision"), std::string::npos) << e;
  EXPECT_NE(e.find("(mbs x seq / cp) are 24"), std::string::npos) << e;
  few.mbs = 2;  // 48 tokens
  EXPECT_NO_THROW(rt::resolve(few));
}

TEST(Fp8Predict, BlockGemmsRunAtTheFp8PeakAndTheCastsAreMemoryOps) {
  const auto w = trainscope::workloads::load("gpt3-1.3b");
  const tn::Plan p8 = h100Plan(rt::Precision::FP8), p16 = h100Plan(rt::Precision::BF16);
  const tn::LayerOps l8 = tn::layerOps(w, p8, tn::Framework::Trainscope);
  int fp8_gemms = 0, casts = 0;
  for (const tn::Op& o : l8.forward) {
    if (o.kind == tn::Op::Kind::Gemm && o.fp8) ++fp8_gemms;
    if (o.kind == tn::Op::Kind::Gemm && tn::attentionCore(o)) EXPECT_FALSE(o.fp8) << o.name;  // stays bf16
    if (o.name.rfind("fp8 cast", 0) == 0) ++casts;
  }
  EXPECT_EQ(fp8_gemms, 4);  // qkv, projection, fc1, fc2
  EXPECT_EQ(casts, 8);      // input and weight of each
  int grad_casts = 0, fp8_bwd = 0;
  for (const tn::Op& o : l8.backward) {
    if (o.name.rfind("fp8 cast", 0) == 0) ++grad_casts;
    if (o.kind == tn::Op::Kind::Gemm && o.fp8) ++fp8_bwd;
  }
  EXPECT_EQ(grad_casts, 4);
  EXPECT_EQ(fp8_bwd, 8);  // dgrad and wgrad of each
  for (const tn::Op& o : tn::headOps(w, p8, tn::Framework::Trainscope).forward) EXPECT_FALSE(o.fp8) << o.name;
  // Activations: the FP8 GEMMs keep their inputs in 1 byte.
  EXPECT_LT(l8.saved, tn::layerOps(w, p16, tn::Framework::Trainscope).saved);

  const tn::Cluster h100 = tn::loadCluster("h100-80gb-x8");
  const auto t8 = tn::predictTime(w, p8, h100), t16 = tn::predictTime(w, p16, h100);
  EXPECT_LT(t8.compute_s, t16.compute_s);        // the block GEMMs at 2x the peak...
  EXPECT_GT(t8.compute_s, 0.5 * t16.compute_s);  // ...but not the attention core, head, casts
  EXPECT_NEAR(t8.model_flops, t16.model_flops, 1e-9 * t16.model_flops);
  // A GEMM marked FP8: the fp8 peak, the curve rescaled to the fp8 ceiling (0.81 of 1979 at the top).
  tn::Op g;
  g.kind = tn::Op::Kind::Gemm;
  g.m = 16384, g.n = 16384, g.k = 16384;
  g.fp8 = true;
  tn::Cluster flat = h100;
  flat.sm_count = 0;
  const double s = tn::gpu::gemmSeconds(g, flat, 989e12, 2);
  EXPECT_NEAR(s, g.flops() / (1979e12 * 0.81), 1e-3 * s);
}

TEST(Fp8Predict, MemoryHoldsTheFp8WeightsAndTheirTransposes) {
  const auto w = trainscope::workloads::load("gpt3-1.3b");
  const auto m8 = tn::predictMemory(w, h100Plan(rt::Precision::FP8));
  const auto m16 = tn::predictMemory(w, h100Plan(rt::Precision::BF16));
  const double h = double(w.n_embd), per_layer = 12.0 * h * h;  // qkv 3h², proj h², fc1 4h², fc2 4h²
  EXPECT_NEAR(double(m8.stages[0].fp8_weights), 2.0 * per_layer * double(w.n_layer), 1.0);
  EXPECT_EQ(m16.stages[0].fp8_weights, 0);
  EXPECT_EQ(m8.stages[0].params, m16.stages[0].params);  // master weights as in bf16
}

TEST(Fp8Predict, AClusterWithoutFp8IsRefusedNamingTheFlag) {
  const auto w = trainscope::workloads::load("gpt3-1.3b");
  const tn::Cluster a100 = tn::loadCluster("a100-80gb-x8");
  const std::string e = refusal([&] { tn::predictTime(w, h100Plan(rt::Precision::FP8), a100); });
  EXPECT_NE(e.find("--precision"), std::string::npos) << e;
  EXPECT_NE(e.find("no fp8 peak"), std::string::npos) << e;
  const auto r = trainscope::testing::sh(std::string(TRAINSCOPE_CLI) +
                                         " predict --workload gpt3-1.3b --cluster a100-80gb-x8 --precision fp8 2>&1");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--precision"), std::string::npos) << r.output;
  const auto ok = trainscope::testing::sh(std::string(TRAINSCOPE_CLI) +
                                          " predict --workload gpt3-1.3b --cluster h100-80gb-x8 --precision fp8 2>&1");
  EXPECT_EQ(ok.status, 0) << ok.output;
}

TEST(Fp8Export, MegatronAndAccelerateCarryTheRecipe) {
  rt::TrainConfig c;
  c.workload = "small-cpu";
  c.seq = 64;
  c.mbs = 2;
  c.gbs = 4;
  c.precision = rt::Precision::FP8;
  c.steps = 3;
  c.min_lr_ratio = 1.0;
  c = tn::trainingRunOf(c);
  const std::string meg = tn::exportConfig(c, tn::ExportFormat::Megatron).text;
  EXPECT_NE(meg.find("--bf16 --fp8-format hybrid"), std::string::npos) << meg;
  EXPECT_NE(meg.find("--fp8-amax-history-len 16 --fp8-amax-compute-algo max"), std::string::npos) << meg;
  // Every term of the recipe is said, none left to megatron-core's defaults (issue 32).
  EXPECT_NE(meg.find("--fp8-recipe delayed"), std::string::npos) << meg;
  EXPECT_NE(meg.find("--fp8-margin 0"), std::string::npos) << meg;
  const std::string acc = tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {true}).text;
  EXPECT_NE(acc.find("mixed_precision: fp8"), std::string::npos) << acc;
  EXPECT_NE(acc.find("fp8_format: HYBRID"), std::string::npos) << acc;
  const auto ds = tn::exportConfig(c, tn::ExportFormat::DeepSpeed);
  EXPECT_NE(ds.text.find("\"bf16\""), std::string::npos);
  EXPECT_FALSE(ds.notes.empty());
}

// The fp8_scales table: rows written by RunStore read back in (step, rank, tensor, role) order, the
// per-role summary by hand (a stale scale counted as saturated), the report's section, and nothing
// for a run without rows.
TEST(Fp8Scales, StoredSummarisedAndReported) {
  namespace db = trainscope::rundb;
  const std::string path = trainscope::testing::tempPath("fp8_scales.db"), plain = trainscope::testing::tempPath("fp8_plain.db");
  for (const std::string& p : {path, plain}) {
    db::RunStore store(p, db::RunStore::Options{true});
    store.setMeta("world_size", "1");
    for (int k = 0; k < 2; ++k) {
      db::Step s;
      s.step = k;
      s.start_ns = 1000 * k;
      s.step_time_ns = 900;
      s.tokens = 128;
      store.appendStep(s);
    }
    if (p != path) continue;
    store.appendFp8Scales({{0, 1, "h.0.mlp.c_fc.weight", "input", 8.0, 448.0 / 4.0},   // 8 × 112 = 896 > 448
                           {0, 0, "h.0.mlp.c_fc.weight", "input", 4.0, 448.0 / 4.0},
                           {0, 0, "h.0.mlp.c_fc.weight", "grad_output", 1e-3, 57344.0 / 1e-3},
                           {0, 1, "h.0.mlp.c_fc.weight", "grad_output", 2e-3, 57344.0 / 1e-3}});
  }
  const auto rows = db::RunReader(path).fp8Scales();
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].step, 0);
  EXPECT_EQ(rows[0].role, "grad_output");  // (step, rank, tensor, role) order
  const auto sum = db::summarizeFp8Scales(rows);
  ASSERT_EQ(sum.size(), 2u);
  EXPECT_EQ(sum[0].role, "input");
  EXPECT_EQ(sum[0].linears, 1);
  EXPECT_EQ(sum[0].steps, 2);
  EXPECT_EQ(sum[0].saturated, 1);
  EXPECT_EQ(sum[0].last_amax_max, 8.0);
  EXPECT_EQ(sum[1].role, "grad_output");
  EXPECT_EQ(sum[1].saturated, 1);  // 2e-3 × 57344/1e-3 = 114688 > 57344
  const std::string text = db::formatReport(db::computeReport(path));
  EXPECT_NE(text.find("fp8 scaling"), std::string::npos) << text;
  EXPECT_NE(text.find("saturated 1 of 2"), std::string::npos) << text;
  EXPECT_EQ(db::formatReport(db::computeReport(plain)).find("fp8 scaling"), std::string::npos);
  EXPECT_TRUE(db::RunReader(plain).fp8Scales().empty());
}
