// deepspeed_config_test.cpp — a user's DeepSpeed config priced (`predict --framework deepspeed
// --deepspeed-config FILE`; apps/deepspeed_config.h, models/deepspeed_zero.h): ZeRO-3's partial
// prefetch and ZeRO-1/2's reduction with overlap_comm off against hand computations; the config's
// buckets in the memory, its communication_data_type as the reduce dtype, Hugging Face's "auto",
// and every bad value refused naming the flag and the key.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "../../models/src/gpu_time.h"
#include "../common/cli.h"
#include "flat_cluster.h"
#include "trainscope/common/error.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/models.h"

namespace tn = trainscope::tuner;
using trainscope::testing::cli;
using trainscope::testing::tempPath;
using nlohmann::json;

namespace {

std::string configFile(const json& j, const std::string& name) {
  const std::string path = tempPath(name + ".json");
  std::ofstream(path) << j.dump();
  return path;
}

json predictJson(const std::string& args) {
  const auto r = cli("predict " + args + " --json");
  EXPECT_EQ(r.status, 0) << r.output;
  return json::parse(r.output.substr(r.output.find('{')));
}

}  // namespace

TEST(DeepSpeedConfig, APrefetchOfLessThanALayerHidesThatShareOfTheGather) {
  // first 2 ms, gather 2 ms, reduce 1 ms, compute 3 ms, 4 layers. Half a layer ahead: 1 ms of the
  // gather and the 1 ms reduce-scatter hide behind the 3 ms, the other 1 ms shows: 2 + 3 × 1 ms.
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 2e-3, 1e-3, 3e-3, 4, 0.5, 0), 2e-3 + 3 * 1e-3);
  // A quarter, with a 3.5 ms reduce: 0.5 + 3.5 = 4 ms beside 3 ms (1 ms shows) and 1.5 ms not fetched.
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 2e-3, 3.5e-3, 3e-3, 4, 0.25, 0), 2e-3 + 3 * 2.5e-3);
  // A whole layer or more, and none, as before.
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 2e-3, 1e-3, 3e-3, 4, 1, 0), 2e-3);
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 2e-3, 1e-3, 3e-3, 4, 3, 0), 2e-3);
  EXPECT_DOUBLE_EQ(tn::gpu::zeroLayerSeconds(2e-3, 2e-3, 1e-3, 3e-3, 4, 0, 0), 2e-3 + 3 * 3e-3);
}

TEST(DeepSpeedConfig, OverlapCommOffReducesEveryBucketOnTheComputeStream) {
  // ZeRO-2 on 8 ranks of the flat cluster, no latency: per micro-batch a reduce-scatter of P bf16
  // gradients, rs = 2P·(7/8)/100 GB/s, in reduce_bucket_size = P/4 buckets. overlap_comm on: all but
  // the last bucket hide behind the backward (0.75 rs); off: every bucket shows.
  tn::Cluster c = trainscope::testing::flatGpu();
  c.intra_node.latency = 0;
  trainscope::workloads::Workload w;
  w.name = "toy", w.n_layer = 4, w.n_head = 16, w.n_embd = 1024, w.n_positions = 512, w.vocab_size = 1024;
  tn::Plan p;
  p.dp = 8, p.mbs = 4, p.gbs = 64, p.seq = 512, p.zero = trainscope::runconfig::ZeroStage::Gradients;
  const double P = tn::gpu::stageParams(w, p, 0), M = 2, rs = 2 * P * 7 / 8 / 100e9;
  tn::TimeOptions o;
  o.framework = tn::Framework::Deepspeed;
  o.deepspeed.from_config = true;
  o.deepspeed.reduce_bucket_size = P / 4;
  o.deepspeed.overlap_comm = 1;
  const tn::TimePrediction on = tn::predictTime(w, p, c, o);
  ASSERT_GT(on.compute_s / M, rs);  // the backward is longer than what hides behind it
  o.deepspeed.overlap_comm = 0;
  const tn::TimePrediction off = tn::predictTime(w, p, c, o);
  EXPECT_NEAR(off.dp_comm_s - on.dp_comm_s, M * 0.75 * rs, 1e-12);
  EXPECT_NEAR(off.dp_comm_s, M * rs + 4 * P * 7 / 8 / 100e9, 1e-12);  // and the fp32 master weights' all-gather
  // Without a config: the profile's (overlap on, DeepSpeed's default 5e8-element bucket: one bucket
  // here, so nothing hides but what the last bucket leaves: the whole reduction).
  o.deepspeed = {};
  EXPECT_NEAR(tn::predictTime(w, p, c, o).dp_comm_s, off.dp_comm_s, 1e-12);
}

TEST(DeepSpeedConfig, PredictPricesTheUsersConfigAndRefusesItsBadValuesByKey) {
  const std::string base = "--workload gpt2-774m --cluster a100-80gb-x8 --framework deepspeed";
  // ZeRO-2: the IPG buckets are reduce_bucket_size bf16 elements, twice with overlap_comm.
  const std::string on = configFile({{"zero_optimization", {{"stage", 2}, {"reduce_bucket_size", 1e8}, {"overlap_comm", true}}}}, "ds-on");
  const std::string off = configFile({{"zero_optimization", {{"stage", 2}, {"reduce_bucket_size", 1e8}}}}, "ds-off");
  const json a = predictJson(base + " --zero 2 --deepspeed-config " + on), b = predictJson(base + " --zero 2 --deepspeed-config " + off);
  EXPECT_EQ(a["framework_memory"]["buffers_bytes"], int64_t(2e8 * 2));
  EXPECT_EQ(b["framework_memory"]["buffers_bytes"], int64_t(2e8));
  EXPECT_GT(b["time"]["dp_comm_s"].get<double>(), a["time"]["dp_comm_s"].get<double>());  // overlap_comm off: exposed
  // communication_data_type is the reduce dtype: fp32 reduces twice bf16's bytes.
  const std::string fp32 = configFile({{"communication_data_type", "FP32"}, {"zero_optimization", {{"stage", 2}}}}, "ds-fp32");
  const json c32 = predictJson(base + " --zero 2 --deepspeed-config " + fp32);
  const json c16 = predictJson(base + " --zero 2 --reduce-dtype bf16 --deepspeed-config " +
                               configFile({{"zero_optimization", {{"stage", 2}}}}, "ds-plain"));
  EXPECT_GT(c32["time"]["dp_comm_s"].get<double>(), c16["time"]["dp_comm_s"].get<double>());
  EXPECT_EQ(c32["time"]["step_s"], predictJson(base + " --zero 2 --reduce-dtype fp32 --deepspeed-config " +
                                               configFile({{"zero_optimization", {{"stage", 2}}}}, "ds-plain"))["time"]["step_s"]);
  // Hugging Face's "auto": the hidden size squared (gpt2-774m: 1280²), as the Trainer fills it.
  const std::string hf = configFile({{"zero_optimization", {{"stage", 2}, {"reduce_bucket_size", "auto"}}}}, "ds-auto");
  EXPECT_EQ(predictJson(base + " --zero 2 --deepspeed-config " + hf)["framework_memory"]["buffers_bytes"],
            int64_t(1280 * 1280 * 2));
  // A --batch line with the key gives the flag's answer.
  const std::string lines = tempPath("ds-batch.jsonl");
  std::ofstream(lines) << json{{"zero", 2}, {"deepspeed_config", off}}.dump() << "\n";
  const auto r = cli("predict " + base + " --batch " + lines);
  ASSERT_EQ(r.status, 0) << r.output;
  const json line = json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(line["time"]["step_s"], b["time"]["step_s"]);
  EXPECT_EQ(line["framework_memory"]["buffers_bytes"], b["framework_memory"]["buffers_bytes"]);
  // Refusals, each naming the flag and the key.
  auto refused = [&](const std::string& args, const std::string& what) {
    const auto x = cli("predict " + base + " " + args);
    EXPECT_EQ(x.status, 2) << args << "\n" << x.output;
    EXPECT_NE(x.output.find(what), std::string::npos) << args << "\n" << x.output;
  };
  refused("--zero 3 --deepspeed-config " + off, "--deepspeed-config: zero_optimization.stage: is 2 in");
  refused("--zero 2 --deepspeed-config " + configFile({{"zero_optimization", {{"reduce_bucket_size", 0}}}}, "ds-zero"),
          "--deepspeed-config: zero_optimization.reduce_bucket_size: is 0");
  refused("--zero 2 --deepspeed-config " + configFile({{"zero_optimization", {{"overlap_comm", "yes"}}}}, "ds-bool"),
          "--deepspeed-config: zero_optimization.overlap_comm");
  refused("--zero 2 --deepspeed-config " + configFile({{"zero_optimization", {{"allgather_bucket_size", "auto"}}}}, "ds-auto2"),
          "--deepspeed-config: zero_optimization.allgather_bucket_size");
  refused("--zero 2 --deepspeed-config " + configFile({{"communication_data_type", "int8"}}, "ds-int8"),
          "--deepspeed-config: communication_data_type");
  refused("--zero 2 --reduce-dtype bf16 --deepspeed-config " + fp32, "--reduce-dtype: bf16 contradicts");
  refused("--zero 2 --deepspeed-config " + tempPath("no-such-ds.json"), "--deepspeed-config");
  refused("--zero 2 --deepspeed-config " + configFile(json::array(), "ds-array"), "is not a JSON object");
  // The engine's micro-batch and 16-bit mode are the plan's, or the file is not the job priced (they
  // were ignored: a file of micro-batch 8 priced at predict's 1).
  const std::string mb8 = configFile({{"train_micro_batch_size_per_gpu", 8}, {"zero_optimization", {{"stage", 2}}}}, "ds-mb8");
  refused("--zero 2 --mbs 1 --deepspeed-config " + mb8,
          "--deepspeed-config: train_micro_batch_size_per_gpu: is 8 in " + mb8 + ", but the plan priced has --mbs 1 (fix: pass --mbs 8");
  EXPECT_EQ(predictJson(base + " --zero 2 --mbs 8 --deepspeed-config " + mb8)["mbs"], 8);
  EXPECT_EQ(predictJson(base + " --zero 2 --deepspeed-config " +
                        configFile({{"train_micro_batch_size_per_gpu", "auto"}, {"zero_optimization", {{"stage", 2}}}}, "ds-mbauto"))["mbs"],
            1);
  refused("--zero 2 --deepspeed-config " + configFile({{"train_micro_batch_size_per_gpu", 0}}, "ds-mb0"),
          "--deepspeed-config: train_micro_batch_size_per_gpu: is 0");
  const std::string fp16 = configFile({{"fp16", {{"enabled", true}}}, {"zero_optimization", {{"stage", 2}}}}, "ds-fp16");
  refused("--zero 2 --deepspeed-config " + fp16, "--deepspeed-config: fp16: is enabled in " + fp16 +
                                                     ", but the plan priced is --precision bf16 (fix: pass --precision fp16");
  EXPECT_EQ(predictJson(base + " --zero 2 --precision fp16 --deepspeed-config " + fp16)["framework"], "deepspeed");
  const auto fsdp = cli("predict --workload gpt2-774m --cluster a100-80gb-x8 --framework fsdp --deepspeed-config " + off);
  EXPECT_EQ(fsdp.status, 2) << fsdp.output;
  EXPECT_NE(fsdp.output.find("--deepspeed-config: is DeepSpeed's config"), std::string::npos) << fsdp.output;
}

// export --format deepspeed says communication_data_type — the model's dtype by default (what
// DeepSpeed reduces in without the key), --reduce-dtype's otherwise — and predict --deepspeed-config
// prices the exported file with that reduce dtype; a config without the key is priced in the model's
// dtype (fp32 for an fp32 model, not the profile's 2 bytes). Issue 33.
TEST(DeepSpeedConfig, TheExportsCommunicationDataTypeRoundTripsThroughPredict) {
  namespace rt = trainscope::runconfig;
  rt::TrainConfig c;
  c.workload = "small-cpu";
  c.seq = 64, c.mbs = 2, c.gbs = 32, c.steps = 3, c.min_lr_ratio = 1.0;
  c.nproc = 8;  // the plan predict prices below: 8 data-parallel ranks (its batch keys are the plan's)
  c.zero = rt::ZeroStage::Gradients;
  auto exported = [&](rt::Precision prec, const std::string& reduce) {
    rt::TrainConfig x = c;
    x.precision = prec;
    x = tn::trainingRunOf(x);
    tn::ExportTarget t;
    t.reduce_dtype = reduce;
    return json::parse(tn::exportConfig(x, tn::ExportFormat::DeepSpeed, t).text);
  };
  EXPECT_EQ(exported(rt::Precision::FP32, "default").value("communication_data_type", ""), "fp32");
  EXPECT_EQ(exported(rt::Precision::BF16, "default").value("communication_data_type", ""), "bf16");
  EXPECT_EQ(exported(rt::Precision::FP16, "default").value("communication_data_type", ""), "fp16");
  EXPECT_EQ(exported(rt::Precision::FP8, "default").value("communication_data_type", ""), "bf16");
  const json bf16_fp32 = exported(rt::Precision::BF16, "fp32");
  EXPECT_EQ(bf16_fp32.value("communication_data_type", ""), "fp32");
  try {
    exported(rt::Precision::BF16, "int8");
    ADD_FAILURE() << "--reduce-dtype int8 was accepted";
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--reduce-dtype"), std::string::npos) << e.what();
  }
  // The exported file read back by predict: its reduce dtype is the one priced (at its batch: a file
  // of another one is refused).
  const std::string base = "--workload gpt2-774m --cluster a100-80gb-x8 --framework deepspeed --zero 2 --mbs 2 --gbs 32";
  const std::string file = configFile(bf16_fp32, "ds-exported-fp32");
  const json via_file = predictJson(base + " --deepspeed-config " + file);
  const json via_flag = predictJson(base + " --reduce-dtype fp32 --deepspeed-config " +
                                    configFile({{"zero_optimization", bf16_fp32["zero_optimization"]}}, "ds-exported-nokey"));
  EXPECT_EQ(via_file["time"]["step_s"], via_flag["time"]["step_s"]);
  EXPECT_GT(via_file["time"]["dp_comm_s"].get<double>(),
            predictJson(base + " --deepspeed-config " + configFile(exported(rt::Precision::BF16, "default"), "ds-exported-bf16"))
                ["time"]["dp_comm_s"].get<double>());
  // No key, an fp32 model: DeepSpeed reduces in fp32.
  const std::string nokey = configFile({{"zero_optimization", {{"stage", 2}}}}, "ds-nokey");
  EXPECT_EQ(predictJson(base + " --precision fp32 --deepspeed-config " + nokey)["time"]["step_s"],
            predictJson(base + " --precision fp32 --reduce-dtype fp32 --deepspeed-config " + nokey)["time"]["step_s"]);
}
