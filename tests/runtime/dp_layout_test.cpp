// dp_layout_test.cpp — the one data-parallel layout (models/dp_layout.h) read by both sides:
//   the slots the models build from a workload and a plan (stageSlots) are the runtime's parameter
//   list of that stage (GptWeights::info's names, shardGpt's shapes, flat() order) for every file in
//   workloads/, under TP, PP, interleaving and EP;
//   --bucket-mb moves the memory prediction as it moves the measured peak (ZeRO-2's buckets).
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/models/dp_layout.h"
#include "trainscope/runtime/gpt.h"
#include "trainscope/workloads/workload.h"
#include "util.h"

namespace tn = trainscope::models;
namespace rt = trainscope::runtime;
namespace wl = trainscope::workloads;
using trainscope::testing::cli;
using trainscope::testing::tempPath;

namespace {

// The workload's structure (layers, heads, experts and where they are) at widths small enough to
// initialise: the shape rules are the same at any width. The vocabulary is odd, so that tp 2 pads it.
wl::Workload narrowed(wl::Workload w) {
  w.n_embd = w.n_head * 2;
  w.n_positions = 16;
  w.vocab_size = 101;
  if (w.moe_ffn_hidden > 0) w.moe_ffn_hidden = 6;
  if (w.ffn_hidden > 0) w.ffn_hidden = 8;  // the Llama presets' widths (53248 for 405B) would fill memory
  if (w.head_dim > 0) w.head_dim = 2;
  return w;
}

// The trainer's `managed` (runtime/src/train/trainer.cpp): the tied embedding under PP and the experts
// under ep > 1 are reduced outside GradSync.
bool runtimeManaged(const rt::ParamInfo& info, int64_t pp, int64_t ep, bool tied) {
  return !(info.wte && pp > 1 && tied) && !(info.expert && ep > 1);  // an untied head: no sync
}

void expectSameSlots(const wl::Workload& w, const tn::Plan& p, const rt::GptWeights& full) {
  for (int64_t s = 0; s < p.pp; ++s) {
    const std::string where = w.name + " " + p.describe() + " stage " + std::to_string(s);
    const rt::StageSpec stage = rt::StageSpec::of(w.n_layer, int(p.pp), int(s), int(p.virtual_stages)).withModel(w);
    const std::vector<rt::ParamInfo> info = rt::GptWeights::info(stage);
    const std::vector<at::Tensor> tensors =
        rt::shardGpt(full, stage, int(p.tp), int(p.tp - 1), at::kCPU, int(p.ep), 0).flat();
    const std::vector<tn::Slot> slots = tn::stageSlots(w, p, s);
    ASSERT_EQ(slots.size(), tensors.size()) << where;
    ASSERT_EQ(info.size(), tensors.size()) << where;
    for (size_t i = 0; i < slots.size(); ++i) {
      EXPECT_EQ(slots[i].name, info[i].name) << where << " tensor " << i;
      EXPECT_EQ(slots[i].shape, tensors[i].sizes().vec()) << where << " " << info[i].name;
      EXPECT_EQ(slots[i].managed, runtimeManaged(info[i], p.pp, p.ep, w.tie_embeddings)) << where << " " << info[i].name;
    }
  }
}

nlohmann::json lastJson(const std::string& out) {
  const auto at = out.rfind("\n{");
  return nlohmann::json::parse(out.substr(at == std::string::npos ? 0 : at + 1));
}

}  // namespace

TEST(DpLayout, ModelSlotsAreTheRuntimeParametersOfEveryWorkload) {
  const std::vector<std::string> names = wl::available();
  ASSERT_GE(names.size(), 10u);
  for (const auto& name : names) {
    const wl::Workload w = narrowed(wl::load(name));
    const rt::GptWeights full = rt::initGpt(w, 1, at::kCPU);
    for (int64_t tp : {1, 2})
      for (int64_t pp : {1, 2, 4})
        for (int64_t v : {1, 2})
          for (int64_t ep : {1, 2}) {
            tn::Plan p;
            p.tp = tp, p.pp = pp, p.virtual_stages = v, p.ep = ep, p.dp = 2, p.gbs = 2 * 2 * pp, p.seq = 16;
            if (!tn::whyInvalid(w, p).empty()) continue;
            expectSameSlots(w, p, full);
          }
  }
}

// ZeRO-2 on two ranks: 25 MiB buckets hold all of small-cpu's gradients at once, 1 MiB ones a few
// at a time. The prediction moves as the measured peak does, by about as much (both ≈ 31 MiB).
TEST(DpLayout, BucketMbMovesThePredictionAsItMovesTheMeasuredPeak) {
  const std::string shape = " --workload small-cpu --seq 64 --mbs 2 --gbs 8 --precision fp32 --zero 2";
  double measured[2] = {0, 0}, predicted[2] = {0, 0};
  const char* sizes[2] = {"25", "1"};
  for (int k = 0; k < 2; ++k) {
    const std::string bucket = std::string(" --bucket-mb ") + sizes[k];
    auto ran = cli("run" + shape + bucket + " --nproc 2 --cpu-lanes 1 --steps 2 --device cpu -q --json --overwrite --out " +
                   tempPath("dp_layout_bucket.db"));
    ASSERT_EQ(ran.status, 0) << ran.output;
    auto pred = cli("predict" + shape + bucket + " --cluster cpu-local --nodes 2 --gpus 2 --json");
    ASSERT_EQ(pred.status, 0) << pred.output;
    measured[k] = lastJson(ran.output)["summary"]["peak_bytes"].get<double>();
    predicted[k] = lastJson(pred.output)["peak_bytes"].get<double>();
  }
  const double dm = measured[1] - measured[0], dp = predicted[1] - predicted[0];
  std::printf("  bucket 25 -> 1 MiB: measured %+.2f MiB, predicted %+.2f MiB\n", dm / (1 << 20), dp / (1 << 20));
  ASSERT_LT(dm, -(8 << 20));  // the smaller buckets lower the peak
  EXPECT_LT(dp, 0);
  EXPECT_LE(std::abs(dp - dm), 0.1 * std::abs(dm));
}
