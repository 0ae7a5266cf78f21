// config_test.cpp — run configs: the batch arithmetic, enum values, JSON and flag forms, the bounds
// resolve() puts on the optimizer's and the host's knobs.
#include <gtest/gtest.h>

#include <fstream>
#include <tuple>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/workloads/workload.h"

namespace rt = trainscope::runconfig;
using trainscope::UserError;
using trainscope::testing::tempPath;

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
    rt::parsePrecision("fp4");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_EQ(e.field(), "--precision");
    EXPECT_NE(std::string(e.what()).find("fp32|bf16|fp16|fp8"), std::string::npos);
  }
}

TEST(Config, SeqLongerThanPositionsIsRejected) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.seq = 65;
  EXPECT_THROW(rt::resolve(c), UserError);
}

TEST(Config, JsonAndFlagFormsRoundTrip) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.seq = 32;
  c.mbs = 2;
  c.gbs = 8;
  c.steps = 7;
  c.ckpt = rt::Checkpointing::Selective;
  c.precision = rt::Precision::BF16;
  c.optimizer = rt::OptimizerKind::Adafactor;
  c.lr = 1.0 / 3.0;  // not a short decimal: must survive the text forms exactly
  c.seed = 18446744073709551557ull;
  c.nproc = 2;
  c.zero = rt::ZeroStage::OptimizerStates;
  c.peak_tflops = 12.5;
  rt::resolve(c);
  const std::string json = rt::toJson(c);
  rt::TrainConfig back = rt::fromJson(json, "test");
  rt::resolve(back);
  EXPECT_EQ(rt::toJson(back), json);
  EXPECT_EQ(back.lr, c.lr);
  EXPECT_EQ(back.seed, c.seed);
  EXPECT_EQ(rt::toArgs(back), rt::toArgs(c));
  const auto args = rt::toArgs(c);
  auto at = [&](const std::string& flag) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == flag) return args[i + 1];
    return std::string("<missing>");
  };
  EXPECT_EQ(at("--workload"), "tiny");
  EXPECT_EQ(at("--gbs"), "8");
  EXPECT_EQ(at("--nproc"), "2");
  EXPECT_EQ(at("--ckpt"), "selective");
  EXPECT_EQ(std::stod(at("--lr")), c.lr);
  // A whole `run --json` line is accepted too; a wrong type names the key.
  EXPECT_EQ(rt::toJson([&] {
              auto x = rt::fromJson("{\"steps\": 3, \"config\": " + json + "}", "line");
              rt::resolve(x);
              return x;
            }()),
            json);
  try {
    rt::fromJson(R"({"mbs": "two"})", "cfg.json");
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: mbs"), std::string::npos) << e.what();
  }
}

TEST(Config, AWorkloadGivenByPathIsRecordedByAbsolutePath) {
  const std::string p = tempPath("path-model.json");
  std::ofstream(p) << R"({"name":"path-model","n_layer":1,"n_head":2,"n_embd":16,"n_positions":32,"vocab_size":64})";
  rt::TrainConfig c;
  c.workload = p;
  rt::resolve(c);
  auto j = rt::toJson(c);
  EXPECT_NE(j.find("\"workload\":\"path-model\""), std::string::npos) << j;
  EXPECT_NE(j.find("\"workload_spec\":\"" + p + "\""), std::string::npos) << j;
  rt::TrainConfig back = rt::fromJson(j, "t");
  EXPECT_EQ(back.workload, p);
}

TEST(Config, Adam8bitBlockAndThreadsHaveBoundsAndLanesAreRefusedByResolve) {
  auto fieldOf = [](rt::TrainConfig c) {
    try {
      rt::resolve(c);
    } catch (const UserError& e) {
      return e.field();
    }
    return std::string();
  };
  rt::TrainConfig c;
  c.workload = "tiny";
  c.optimizer = rt::OptimizerKind::Adam8bit;
  c.adam8bit_block = 2147483647;  // every bias would hold two 2 GiB blocks; the memory model assumes 256
  EXPECT_EQ(fieldOf(c), "--adam8bit-block");
  c.adam8bit_block = 4096;
  EXPECT_EQ(fieldOf(c), "");
  rt::TrainConfig t;
  t.workload = "tiny";
  t.threads = 100000;
  t.oversubscribe = true;  // still refused: it would only livelock the host
  EXPECT_EQ(fieldOf(t), "--threads");
  // Lanes that the config rules out are refused by resolve(), which the launcher runs once.
  rt::TrainConfig l;
  l.workload = "tiny";
  l.nproc = 2;
  l.mbs = 2;
  l.cpu_lanes = 2;
  EXPECT_EQ(fieldOf(l), "--cpu-lanes");
  l.local_sgd = 1;  // no gradient all-reduce: lanes are fine
  EXPECT_EQ(fieldOf(l), "");
}

TEST(Config, EveryOptimizerFieldIsRefusedOutsideItsRangeNamingTheRange) {
  // The same check for a flag and a --config file's key (both resolve()); each message names the flag,
  // the range and the value, and the fix names the file's key. A finite valid value has no cap.
  const std::tuple<const char*, const char*, const char*> bad[] = {
      {"lr", "-1", "--lr: must be positive"},          {"lr", "0", "--lr: must be positive"},
      {"beta1", "1", "--beta1: must be in [0, 1)"},      {"beta2", "1.5", "--beta2: must be in [0, 1)"},
      {"eps", "0", "--eps: must be positive"},           {"momentum", "-0.1", "--momentum: must be in [0, 1)"},
      {"warmup", "-5", "--warmup: must be >= 0"},        {"clip", "-1", "--clip: must be >= 0"},
      {"weight_decay", "-0.1", "--weight-decay: must be >= 0"}, {"min_lr_ratio", "2", "--min-lr-ratio: must be in [0, 1]"},
      {"local_sgd", "-2", "--local-sgd: must be >= 0"},  {"adam8bit_block", "8", "--adam8bit-block: must be >= 16"}};
  for (const auto& [key, value, want] : bad) {
    rt::TrainConfig c = rt::fromJson(std::string(R"({"workload": "tiny", ")") + key + "\": " + value + "}", "cfg.json");
    try {
      rt::resolve(c);
      ADD_FAILURE() << key << " " << value << " was accepted";
    } catch (const UserError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(want), std::string::npos) << what;
      EXPECT_NE(what.find(", got "), std::string::npos) << what;  // the value given
    }
  }
  // The fix names the --config file's key too.
  rt::TrainConfig c = rt::fromJson(R"({"workload": "tiny", "min_lr_ratio": 2})", "cfg.json");
  try {
    rt::resolve(c);
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("\"min_lr_ratio\": 0.1"), std::string::npos) << e.what();
  }
  // Finite, in range, however large: run (a divergent lr is skipped step by step, not refused).
  rt::TrainConfig big = rt::fromJson(R"({"workload": "tiny", "lr": 1e20, "eps": 1e20, "weight_decay": 1e20})", "cfg.json");
  EXPECT_NO_THROW(rt::resolve(big));
}

TEST(Config, WarmupCoveringEveryStepIsNotedNotRefused) {
  // --warmup >= --steps: every step is a warm-up step (the lr only rises); allowed (the first steps of
  // a longer run, continued with --resume), with a note that names both flags and the lr reached.
  rt::TrainConfig c = rt::fromJson(R"({"workload": "tiny", "steps": 3, "warmup": 5, "lr": 1e-3})", "cfg.json");
  EXPECT_NO_THROW(rt::resolve(c));
  const std::string note = rt::warmupNote(c);
  EXPECT_NE(note.find("--warmup 5 covers all 3 steps"), std::string::npos) << note;
  EXPECT_NE(note.find("to 0.0006, --lr is 0.001"), std::string::npos) << note;  // lr x 3 / 5 at the last step
  EXPECT_NE(note.find("pass --warmup below --steps"), std::string::npos) << note;
  EXPECT_EQ(note.find('\n'), std::string::npos);  // one line
  c.warmup = 3;  // reaches --lr at the last step, still no decay
  EXPECT_NE(rt::warmupNote(c).find("to 0.001,"), std::string::npos) << rt::warmupNote(c);
  c.warmup = 2;  // a warm-up, then the cosine: nothing to say
  EXPECT_EQ(rt::warmupNote(c), "");
  c.warmup = 0;
  c.steps = 1;
  EXPECT_EQ(rt::warmupNote(c), "");
}
