// test_workloads.cpp — workload files, analytic parameter counts, FLOPs formula, config checks.
#include <gtest/gtest.h>

#include <fstream>

#include "test_util.h"
#include "trainscope/common/error.h"
#include "trainscope/workloads/flops.h"
#include "trainscope/workloads/workload.h"

namespace wl = trainscope::workloads;
namespace rt = trainscope::runtime;
using trainscope::UserError;
using trainscope::testing::tempPath;

TEST(Workloads, Gpt2SmallHasItsKnownParameterCount) {
  EXPECT_EQ(wl::load("gpt2-124m").parameterCount(), 124439808);
  EXPECT_EQ(wl::load("gpt2-1.5b").parameterCount(), 1557611200);
}

TEST(Workloads, AllShippedWorkloadsLoadAndValidate) {
  auto names = wl::available();
  ASSERT_GE(names.size(), 11u);
  for (const auto& n : names) EXPECT_NO_THROW(wl::load(n)) << n;
}

TEST(Workloads, ModelParameterCountEqualsAnalytic) {
  rt::TrainConfig c = trainscope::testing::tinyConfig();
  rt::Trainer t(c, trainscope::testing::cpu());
  EXPECT_EQ(t.parameterCount(), c.model.parameterCount());
}

TEST(Workloads, ReadsHuggingFaceGpt2Config) {
  std::string p = tempPath("config.json");
  std::ofstream(p) << R"({"model_type":"gpt2","n_layer":3,"n_head":4,"n_embd":64,"n_positions":128,
                          "n_ctx":128,"vocab_size":500,"activation_function":"gelu_new"})";
  wl::Workload w = wl::load(p);
  EXPECT_EQ(w.n_layer, 3);
  EXPECT_EQ(w.n_head, 4);
  EXPECT_EQ(w.vocab_size, 500);
}

TEST(Workloads, HeadsNotDividingHiddenIsAUserError) {
  std::string p = tempPath("bad_heads.json");
  std::ofstream(p) << R"({"n_layer":2,"n_head":3,"n_embd":32,"n_positions":64,"vocab_size":128})";
  try {
    wl::load(p);
    FAIL() << "expected UserError";
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "workload.n_head");
  }
}

TEST(Workloads, HuggingFaceMlpWidthOtherThan4CIsRejected) {
  std::string p = tempPath("inner.json");
  std::ofstream(p) << R"({"n_layer":2,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128,"n_inner":100})";
  try {
    wl::load(p);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "workload.n_inner");
  }
}

TEST(Workloads, UnknownNameListsTheAvailableOnes) {
  try {
    wl::load("gpt5");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "--workload");
    EXPECT_NE(std::string(e.what()).find("gpt2-124m"), std::string::npos);
  }
}

TEST(Workloads, MissingFieldIsNamed) {
  std::string p = tempPath("missing.json");
  std::ofstream(p) << R"({"n_layer":2,"n_head":2,"n_positions":64,"vocab_size":128})";
  try {
    wl::load(p);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "workload.n_embd");
  }
}

TEST(Flops, MatchesNarayananFormulas) {
  // Megatron-LM paper: 96 B s l h^2 (1 + s/6h + V/16lh) with full recomputation.
  const double B = 8, s = 2048, l = 24, h = 2048, V = 50257;
  auto f = wl::stepFlops(8, 2048, 24, 2048, 50257, wl::Recompute::Full);
  EXPECT_NEAR(f.hardware / (96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))), 1.0, 1e-12);
  EXPECT_NEAR(f.model / (72 * B * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h))), 1.0, 1e-12);
  auto sel = wl::stepFlops(8, 2048, 24, 2048, 50257, wl::Recompute::Selective);
  EXPECT_DOUBLE_EQ(sel.hardware - sel.model, 4 * B * s * s * h * l);
}

TEST(Config, GbsMustBeAMultipleOfMbs) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.mbs = 3;
  c.gbs = 8;
  try {
    rt::resolve(c);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "--gbs");
  }
}

TEST(Config, GbsGivesGa) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.mbs = 2;
  c.gbs = 8;
  rt::resolve(c);
  EXPECT_EQ(c.ga_steps, 4);
  EXPECT_EQ(c.global_batch, 8);
}

TEST(Config, UnknownEnumValueNamesFlagAndChoices) {
  try {
    rt::parsePrecision("fp8");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "--precision");
    EXPECT_NE(std::string(e.what()).find("fp32|bf16|fp16"), std::string::npos);
  }
}

TEST(Config, SeqLongerThanPositionsIsRejected) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.seq = 65;
  EXPECT_THROW(rt::resolve(c), UserError);
}
