// deepspeed_config_plan_test.cpp — `predict --framework deepspeed --deepspeed-config FILE` prices only
// the job DeepSpeed runs (apps/deepspeed_config.h, tuner/space.h frameworkRefusal): offload and ZeRO++
// are refused by key (device "none" priced as no key), the batch keys are the plan's by DeepSpeed's
// rule (train_batch_size = micro × ga × data-parallel ranks), an fp8 plan is a bf16 config, and what
// DeepSpeed's PipelineEngine refuses (ZeRO-2/3 with PP, interleaving) is refused by predict and
// rejected by the tuner alike.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "flat_cluster.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/space.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::tuner;
namespace rt = trainscope::runconfig;
using trainscope::testing::cli;
using trainscope::testing::tempPath;
using nlohmann::json;

namespace {

const std::string kBase = "predict --workload gpt2-774m --cluster a100-80gb-x8 --framework deepspeed ";

std::string configFile(const json& j, const std::string& name) {
  const std::string path = tempPath(name + ".json");
  std::ofstream(path) << j.dump();
  return path;
}

json predictJson(const std::string& args) {
  const auto r = cli(args + " --json");
  EXPECT_EQ(r.status, 0) << args << "\n" << r.output;
  return json::parse(r.output.substr(r.output.find('{')));
}

// Exit 2 and the message has `what` (the flag, the key).
void refused(const std::string& args, const std::string& what) {
  const auto r = cli(args);
  EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(what), std::string::npos) << args << "\n" << r.output;
}

}  // namespace

// Finding 1: Hugging Face's ZeRO-3 offload config was priced as if on the GPUs (174.79 GiB, exit 0).
TEST(DeepSpeedConfigPlan, OffloadAndZeroPlusPlusAreRefusedByKeyAndDeviceNoneIsTheDefault) {
  const json z3 = {{"stage", 3}, {"overlap_comm", true}, {"reduce_bucket_size", "auto"}, {"sub_group_size", 1e9},
                   {"stage3_max_reuse_distance", 1e9}, {"stage3_gather_16bit_weights_on_model_save", true}};
  auto with = [&](const json& extra) {
    json zo = z3;
    zo.update(extra);
    return json{{"bf16", {{"enabled", "auto"}}}, {"train_micro_batch_size_per_gpu", "auto"}, {"zero_optimization", zo}};
  };
  const std::string z = kBase + "--zero 3 --deepspeed-config ";
  const std::string hf = configFile(with({{"offload_optimizer", {{"device", "cpu"}, {"pin_memory", true}}},
                                          {"offload_param", {{"device", "cpu"}, {"pin_memory", true}}}}), "ds-hf-offload");
  refused(z + hf, "--deepspeed-config: zero_optimization.offload_optimizer.device: cpu in " + hf +
                      ": optimizer offload is not priced (fix: set \"device\": \"none\"");
  refused(z + configFile(with({{"offload_param", {{"device", "nvme"}, {"nvme_path", "/nvme"}}}}), "ds-nvme"),
          "--deepspeed-config: zero_optimization.offload_param.device: nvme");
  refused(z + configFile(with({{"offload_optimizer", {{"device", "gpu"}}}}), "ds-gpu"),
          "zero_optimization.offload_optimizer.device: is \"gpu\"");
  refused(z + configFile(with({{"cpu_offload", true}}), "ds-old"), "zero_optimization.cpu_offload: is true");
  // "none" is DeepSpeed's default: priced as the file without the keys, to the byte.
  const json plain = predictJson(z + configFile(with(json::object()), "ds-plain3"));
  const json none = predictJson(z + configFile(with({{"offload_optimizer", {{"device", "none"}}},
                                                     {"offload_param", {{"device", "none"}, {"pin_memory", false}}}}), "ds-none"));
  EXPECT_EQ(none["time"]["step_s"], plain["time"]["step_s"]);
  EXPECT_EQ(none["framework_memory"], plain["framework_memory"]);
  // ZeRO++, at its defaults accepted, otherwise refused by key.
  for (const auto& [key, on] : std::vector<std::pair<std::string, json>>{
           {"zero_quantized_weights", true}, {"zero_quantized_gradients", true}, {"zero_hpz_partition_size", 8}})
    refused(z + configFile(with({{key, on}}), "ds-" + key), "--deepspeed-config: zero_optimization." + key + ": is " +
                                                                on.dump() + " in");
  const json zpp_off = predictJson(z + configFile(with({{"zero_quantized_weights", false}, {"zero_quantized_gradients", false},
                                                        {"zero_hpz_partition_size", 1}}), "ds-zpp-off"));
  EXPECT_EQ(zpp_off["time"]["step_s"], plain["time"]["step_s"]);
  // Another unpriced key away from DeepSpeed's default, and a key DeepSpeed does not know (its config
  // refuses extra keys; MiCS was removed).
  refused(z + configFile(with({{"reduce_scatter", false}}), "ds-rs"), "zero_optimization.reduce_scatter: is false");
  refused(z + configFile(with({{"mics_shard_size", 4}}), "ds-mics"),
          "zero_optimization.mics_shard_size: is not a key of DeepSpeed's zero_optimization");
  // A field's own name is DeepSpeed's alias of the stage3_ key: read the same.
  const json alias = predictJson(z + configFile(with({{"prefetch_bucket_size", 1e6}}), "ds-alias"));
  EXPECT_EQ(alias["time"]["step_s"],
            predictJson(z + configFile(with({{"stage3_prefetch_bucket_size", 1e6}}), "ds-stage3-key"))["time"]["step_s"]);
}

// Finding 2: train_batch_size 1024 = 4 × 32 × 8 was priced at --mbs 4 as ga 1, gbs 32.
TEST(DeepSpeedConfigPlan, TheBatchKeysAreThePlansByDeepSpeedsRule) {
  const std::string ds = configFile({{"train_batch_size", 1024}, {"train_micro_batch_size_per_gpu", 4},
                                     {"gradient_accumulation_steps", 32}, {"zero_optimization", {{"stage", 2}}}}, "ds-1024");
  const std::string z2 = kBase + "--zero 2 --mbs 4 ";
  refused(z2 + "--deepspeed-config " + ds, "--deepspeed-config: train_batch_size: is 1024 in " + ds +
                                               ", but the plan priced has --gbs 32 (fix: pass --gbs 1024");
  // By hand: 1024 sequences over 8 data-parallel ranks of 4 = 32 micro-batches per step.
  const json ok = predictJson(z2 + "--gbs 1024 --deepspeed-config " + ds);
  EXPECT_EQ(ok["gbs"], 1024);
  EXPECT_EQ(ok["ga"], 32);
  // gradient_accumulation_steps alone against the plan: 4 × 32 × 8 = 1024 is the --gbs to pass.
  refused(z2 + "--gbs 256 --deepspeed-config " +
              configFile({{"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 32},
                          {"zero_optimization", {{"stage", 2}}}}, "ds-ga32"),
          "--deepspeed-config: gradient_accumulation_steps: is 32 in");
  refused(z2 + "--gbs 256 --deepspeed-config " +
              configFile({{"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 32},
                          {"zero_optimization", {{"stage", 2}}}}, "ds-ga32b"),
          "pass --gbs 1024 (4 x 32 x 8)");
  // The three keys out of step with each other: DeepSpeed's own assertion.
  refused(z2 + "--gbs 1024 --deepspeed-config " +
              configFile({{"train_batch_size", 1000}, {"train_micro_batch_size_per_gpu", 4}, {"gradient_accumulation_steps", 32},
                          {"zero_optimization", {{"stage", 2}}}}, "ds-1000"),
          "train_batch_size: is 1000 in");
  // One key alone: DeepSpeed accumulates 1 micro-batch (train_batch_size 64 alone: 8 per rank).
  refused(z2 + "--gbs 64 --deepspeed-config " +
              configFile({{"train_micro_batch_size_per_gpu", 4}, {"zero_optimization", {{"stage", 2}}}}, "ds-mb-alone"),
          "--deepspeed-config: train_micro_batch_size_per_gpu: is given without train_batch_size or gradient_accumulation_steps");
  const std::string tb64 = configFile({{"train_batch_size", 64}, {"zero_optimization", {{"stage", 2}}}}, "ds-tb64");
  refused(z2 + "--gbs 64 --deepspeed-config " + tb64, "--deepspeed-config: train_batch_size: is given without");
  EXPECT_EQ(predictJson(kBase + "--zero 2 --mbs 8 --gbs 64 --deepspeed-config " + tb64)["ga"], 1);
  refused(z2 + "--deepspeed-config " + configFile({{"gradient_accumulation_steps", 2}, {"zero_optimization", {{"stage", 2}}}}, "ds-ga-alone"),
          "--deepspeed-config: gradient_accumulation_steps: is the only batch key");
  refused(z2 + "--deepspeed-config " + configFile({{"gradient_accumulation_steps", 0}}, "ds-ga0"),
          "--deepspeed-config: gradient_accumulation_steps: is 0");
  // "auto" (Hugging Face's): the plan's, whatever it is.
  const std::string autos = configFile({{"train_batch_size", "auto"}, {"train_micro_batch_size_per_gpu", "auto"},
                                        {"gradient_accumulation_steps", "auto"}, {"zero_optimization", {{"stage", 2}}}}, "ds-autos");
  EXPECT_EQ(predictJson(z2 + "--gbs 1024 --deepspeed-config " + autos)["ga"], 32);
  // No zero_optimization.stage: DeepSpeed's stage 0, compared with --zero as the others are.
  const std::string nostage = configFile({{"zero_optimization", {{"reduce_bucket_size", 1e8}}}}, "ds-nostage");
  refused(kBase + "--zero 2 --deepspeed-config " + nostage,
          "--deepspeed-config: zero_optimization.stage: is absent (DeepSpeed's default, 0) in " + nostage +
              ", but the plan priced is ZeRO-2 (fix: pass --zero 0");
  EXPECT_EQ(predictJson(kBase + "--zero 0 --deepspeed-config " + configFile(json::object(), "ds-empty"))["framework"], "deepspeed");
}

// Finding 3: DeepSpeed has no FP8 mode; an FP8 job is its bf16 config (export writes it so).
TEST(DeepSpeedConfigPlan, AnFp8PlanIsABf16ConfigAndFp16WithBf16IsDeepSpeedsOwnRefusal) {
  rt::TrainConfig c;
  c.workload = "small-cpu";
  c.seq = 64, c.mbs = 2, c.gbs = 32, c.nproc = 8, c.min_lr_ratio = 1.0;
  c.zero = rt::ZeroStage::Gradients, c.precision = rt::Precision::FP8;
  const json exported = json::parse(tn::exportConfig(tn::trainingRunOf(c), tn::ExportFormat::DeepSpeed, {}).text);
  ASSERT_EQ(exported["bf16"]["enabled"], true);
  const std::string h100 = "predict --workload gpt2-774m --cluster h100-80gb-x8 --framework deepspeed --zero 2 --mbs 2 --gbs 32 ";
  const json fp8 = predictJson(h100 + "--precision fp8 --deepspeed-config " + configFile(exported, "ds-fp8-export"));
  EXPECT_NE(fp8["plan"].get<std::string>().find(" fp8 "), std::string::npos) << fp8["plan"];
  // The bf16 section changes nothing priced: the same step as the file without it.
  json bare = exported;
  bare.erase("bf16"), bare.erase("fp16");
  EXPECT_EQ(fp8["time"]["step_s"],
            predictJson(h100 + "--precision fp8 --deepspeed-config " + configFile(bare, "ds-fp8-bare"))["time"]["step_s"]);
  const std::string fp16 = configFile({{"fp16", {{"enabled", true}}}, {"zero_optimization", {{"stage", 2}}}}, "ds-fp8-fp16");
  refused(h100 + "--precision fp8 --deepspeed-config " + fp16,
          "--deepspeed-config: fp16: is enabled in " + fp16 + ", but the plan priced is --precision fp8 (fix: enable bf16 instead");
  const std::string both = configFile({{"fp16", {{"enabled", true}}}, {"bf16", {{"enabled", true}}}, {"zero_optimization", {{"stage", 2}}}},
                                      "ds-both");
  refused(h100 + "--precision bf16 --deepspeed-config " + both,
          "--deepspeed-config: fp16, bf16: are both enabled in " + both + ": DeepSpeed itself refuses both at once");
}

// Finding 4: DeepSpeed's PipelineEngine asserts ZeRO-2/3 off with PP and runs no interleaved
// schedule: predict refuses them (config or not), and the tuner rejects such candidates for a
// DeepSpeed runner while the runtime's own study keeps them.
TEST(DeepSpeedConfigPlan, WhatThePipelineEngineRefusesIsNeitherPricedNorTuned) {
  refused(kBase + "--pp 2 --zero 2", "--zero: ZeRO-2 with --pp 2: DeepSpeed's PipelineEngine asserts");
  refused(kBase + "--pp 2 --zero 3", "--zero: ZeRO-3 with --pp 2");
  refused(kBase + "--pp 2 --zero 2 --deepspeed-config " + configFile({{"zero_optimization", {{"stage", 2}}}}, "ds-pp"),
          "(fix: pass --zero 1 (or 0) with --pp 2");
  refused(kBase + "--pp 2 --gbs 64 --virtual-stages 2", "--virtual-stages: 2 model chunks per stage");
  refused(kBase + "--pp 2 --gbs 64 --pp-schedule interleaved", "DeepSpeed's PipelineEngine has no interleaved schedule");
  EXPECT_EQ(predictJson(kBase + "--pp 2 --zero 1")["pp"], 2);
  EXPECT_EQ(predictJson("predict --workload gpt2-774m --cluster a100-80gb-x8 --framework megatron --pp 2 --gbs 64 "
                        "--virtual-stages 2")["pp"], 2);
  tn::SpaceOptions o;
  o.gbs = 64, o.seq = 64, o.mbs = {1}, o.ckpt = {rt::Checkpointing::None}, o.cp = {1}, o.virtual_stages = {1, 2};
  o.zero = {rt::ZeroStage::OptimizerStates, rt::ZeroStage::Gradients}, o.sequence_parallel = {false};
  o.schedules = {rt::PipelineSchedule::OneFOneB};
  const auto w = trainscope::workloads::load("small-cpu");
  auto count = [&](tn::Framework f) {
    o.framework = f;
    std::map<std::string, int> n;
    for (const auto& cand : tn::enumerateSpace(w, trainscope::testing::flatGpu(), o)) {
      const tn::Plan& p = cand.plan;
      const bool ds_refuses = p.virtual_stages > 1 || (p.pp > 1 && p.zero >= rt::ZeroStage::Gradients);
      if (cand.rejected.empty()) ++n[ds_refuses ? "valid, DeepSpeed refuses" : "valid"];
      if (cand.rejected.find("deepspeed refuses it: --zero: ZeRO-2 with --pp") != std::string::npos) ++n["refused zero"];
      if (cand.rejected.find("deepspeed refuses it: --virtual-stages") != std::string::npos) ++n["refused interleaving"];
    }
    return n;
  };
  std::map<std::string, int> runtime = count(tn::Framework::Trainscope), deepspeed = count(tn::Framework::Deepspeed);
  EXPECT_GT(runtime["valid, DeepSpeed refuses"], 0);  // the runtime runs them
  EXPECT_EQ(deepspeed["valid, DeepSpeed refuses"], 0);
  EXPECT_GT(deepspeed["refused zero"], 0);
  EXPECT_GT(deepspeed["refused interleaving"], 0);
  EXPECT_GT(deepspeed["valid"], 0);
  EXPECT_EQ(runtime["refused zero"] + runtime["refused interleaving"], 0);
}

// Beyond zero_optimization: the optimizer and the pipeline's stages are the plan's, and a key that
// changes memory or time unpriced (CPU activation checkpoints, AutoTP, …) is refused by name; a Hugging
// Face config's usual sections (optimizer AdamW with "auto" params, scheduler, clipping) pass.
TEST(DeepSpeedConfigPlan, OtherKeysThatChangeTheStepArePricedOrRefusedByName) {
  const std::string z1 = kBase + "--zero 1 --deepspeed-config ";
  auto with = [](const json& extra, const std::string& name) {
    json j = {{"zero_optimization", {{"stage", 1}}}};
    j.update(extra);
    return configFile(j, name);
  };
  const json hf = {{"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}, {"weight_decay", "auto"}}}}},
                   {"scheduler", {{"type", "WarmupLR"}}}, {"gradient_clipping", "auto"}, {"wall_clock_breakdown", false},
                   {"activation_checkpointing", {{"partition_activations", false}}}};
  EXPECT_EQ(predictJson(z1 + with(hf, "ds-hf-usual"))["zero"], 1);
  refused(z1 + with({{"optimizer", {{"type", "Lamb"}}}}, "ds-lamb"),
          "--deepspeed-config: optimizer.type: is lamb in");
  refused(z1 + with({{"optimizer", {{"type", "SGD"}}}}, "ds-sgd"), "(fix: pass --optimizer sgd");
  EXPECT_EQ(predictJson(kBase + "--zero 1 --optimizer sgd --deepspeed-config " + with({{"optimizer", {{"type", "SGD"}}}}, "ds-sgd2"))["zero"], 1);
  refused(z1 + with({{"pipeline", {{"stages", 2}}}}, "ds-stages"), "--deepspeed-config: pipeline.stages: is 2 in");
  EXPECT_EQ(predictJson(kBase + "--zero 1 --pp 2 --deepspeed-config " + with({{"pipeline", {{"stages", 2}}}}, "ds-stages2"))["pp"], 2);
  refused(z1 + with({{"activation_checkpointing", {{"cpu_checkpointing", true}}}}, "ds-cpuckpt"),
          "--deepspeed-config: activation_checkpointing.cpu_checkpointing: is true in");
  refused(z1 + with({{"tensor_parallel", {{"autotp_size", 2}}}}, "ds-autotp"), "--deepspeed-config: tensor_parallel.autotp_size: is 2");
  refused(z1 + with({{"data_types", {{"grad_accum_dtype", "fp32"}}}}, "ds-accum"), "--deepspeed-config: data_types.grad_accum_dtype");
}
