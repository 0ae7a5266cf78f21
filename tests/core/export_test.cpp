// export_test.cpp — tuner/export.h without a subprocess: each format of one TrainConfig parsed
// back field by field (JSON through nlohmann, the Accelerate YAML line by line, Megatron-LM's flags
// token by token), against the config and against the targets' own key names.
#include "trainscope/tuner/export.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>

#include "../common/flags_of.h"
#include "trainscope/common/error.h"

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;

namespace {

// Whether one of the export's notes says `text`.
bool noted(const tn::ExportResult& r, const std::string& text) {
  return std::any_of(r.notes.begin(), r.notes.end(), [&](const std::string& n) { return n.find(text) != std::string::npos; });
}

// small-cpu, 2 × dp, bf16, ZeRO-1, selective checkpointing, GA 2: a config that exercises most keys.
rt::TrainConfig dpConfig() {
  rt::TrainConfig c;
  c.workload = "small-cpu";
  c.seq = 64;
  c.mbs = 2;
  c.gbs = 8;
  c.nproc = 2;
  c.zero = rt::ZeroStage::OptimizerStates;
  c.precision = rt::Precision::BF16;
  c.ckpt = rt::Checkpointing::Selective;
  c.steps = 3;
  c.warmup = 0;
  c.min_lr_ratio = 1.0;
  c.inject_failure = "0:1:segv";
  return tn::trainingRunOf(c);
}

// TP 2 × PP 2 over 4 ranks, GPipe, fp16, full checkpointing, Adafactor.
rt::TrainConfig modelParallelConfig() {
  rt::TrainConfig c;
  c.workload = "small-cpu";
  c.seq = 64;
  c.mbs = 2;
  c.gbs = 4;
  c.nproc = 4;
  c.tp = 2;
  c.pp = 2;
  c.pp_schedule = rt::PipelineSchedule::GPipe;
  c.precision = rt::Precision::FP16;
  c.ckpt = rt::Checkpointing::Full;
  c.optimizer = rt::OptimizerKind::Adafactor;
  return tn::trainingRunOf(c);
}

// `key: value` lines (what `accelerate config` writes); a line of any other shape fails the test.
std::map<std::string, std::string> yamlLines(const std::string& text) {
  std::map<std::string, std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    const auto colon = line.find(": ");
    EXPECT_NE(colon, std::string::npos) << "not a key: value line: " << line;
    if (colon == std::string::npos) continue;
    EXPECT_TRUE(out.emplace(line.substr(0, colon), line.substr(colon + 2)).second) << "repeated: " << line;
  }
  return out;
}

using trainscope::testing::flagsOf;

std::string num(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

}  // namespace

TEST(Export, FormatNamesRoundTripAndAnUnknownOneIsRefusedNamingTheFlag) {
  for (const char* name :
       {"run", "command", "megatron", "deepspeed", "accelerate", "accelerate-config", "training-args"})
    EXPECT_NO_THROW(tn::parseExportFormat(name)) << name;
  try {
    tn::parseExportFormat("pytorch");
    FAIL() << "pytorch was accepted";
  } catch (const trainscope::UserError& e) {
    EXPECT_EQ(e.field(), "--format");
    EXPECT_NE(std::string(e.what()).find("accelerate-config"), std::string::npos) << e.what();
  }
}

TEST(Export, ATrainingRunGetsTheUsualScheduleAndNoInjectedFault) {
  const rt::TrainConfig c = dpConfig();
  EXPECT_EQ(c.steps, 1000);
  EXPECT_EQ(c.warmup, 20);
  EXPECT_DOUBLE_EQ(c.min_lr_ratio, rt::TrainConfig{}.min_lr_ratio);
  EXPECT_TRUE(c.inject_failure.empty());
  EXPECT_EQ(c.dp, 2);
  EXPECT_EQ(c.ga_steps, 2);
}

TEST(Export, RunIsATrainConfigThatReadsBackTheSame) {
  const rt::TrainConfig c = dpConfig();
  const auto e = tn::exportConfig(c, tn::ExportFormat::Run);
  rt::TrainConfig back = rt::fromJson(e.text, "export");
  rt::resolve(back);
  EXPECT_EQ(rt::toJson(back), rt::toJson(c));
  EXPECT_TRUE(e.notes.empty());
}

TEST(Export, CommandHasALocalAndASlurmLine) {
  const auto e = tn::exportConfig(dpConfig(), tn::ExportFormat::Command);
  EXPECT_NE(e.text.find("# local\ntrainscope run "), std::string::npos) << e.text;
  EXPECT_NE(e.text.find("salloc --ntasks 2\ntrainscope run "), std::string::npos) << e.text;
  EXPECT_NE(e.text.find("--launcher slurm"), std::string::npos) << e.text;
}

TEST(Export, DeepSpeedHasEveryFieldAndTheWarmupCosineSchedule) {
  const rt::TrainConfig c = dpConfig();
  const auto e = tn::exportConfig(c, tn::ExportFormat::DeepSpeed);
  const auto d = nlohmann::json::parse(e.text);
  EXPECT_EQ(d["train_batch_size"], c.global_batch);
  EXPECT_EQ(d["train_micro_batch_size_per_gpu"], c.mbs);
  EXPECT_EQ(d["gradient_accumulation_steps"], c.ga_steps);
  // DeepSpeed checks train_batch_size = micro × accumulation × data-parallel ranks.
  EXPECT_EQ(d["train_batch_size"].get<int64_t>(), c.mbs * c.ga_steps * c.dp);
  EXPECT_DOUBLE_EQ(d["gradient_clipping"].get<double>(), c.clip);
  EXPECT_EQ(d["bf16"]["enabled"], true);
  EXPECT_EQ(d["fp16"]["enabled"], false);
  EXPECT_EQ(d["zero_optimization"]["stage"], 1);
  EXPECT_EQ(d["optimizer"]["type"], "AdamW");
  EXPECT_DOUBLE_EQ(d["optimizer"]["params"]["lr"].get<double>(), c.lr);
  EXPECT_DOUBLE_EQ(d["optimizer"]["params"]["weight_decay"].get<double>(), c.weight_decay);
  EXPECT_DOUBLE_EQ(d["optimizer"]["params"]["betas"][0].get<double>(), c.beta1);
  EXPECT_DOUBLE_EQ(d["optimizer"]["params"]["betas"][1].get<double>(), c.beta2);
  EXPECT_DOUBLE_EQ(d["optimizer"]["params"]["eps"].get<double>(), c.eps);
  // The schedule: DeepSpeed's WarmupCosineLR and exactly its parameters (lr_schedules.py).
  const auto& s = d["scheduler"];
  EXPECT_EQ(s["type"], "WarmupCosineLR");
  std::set<std::string> keys;
  for (const auto& [k, v] : s["params"].items()) keys.insert(k);
  EXPECT_EQ(keys, (std::set<std::string>{"total_num_steps", "warmup_num_steps", "warmup_min_ratio", "warmup_type",
                                         "cos_min_ratio"}));
  EXPECT_EQ(s["params"]["total_num_steps"], c.steps);
  EXPECT_EQ(s["params"]["warmup_num_steps"], c.warmup);
  EXPECT_EQ(s["params"]["warmup_type"], "linear");
  EXPECT_DOUBLE_EQ(s["params"]["warmup_min_ratio"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(s["params"]["cos_min_ratio"].get<double>(), c.min_lr_ratio);
  EXPECT_FALSE(d.contains("pipeline"));
  EXPECT_EQ(e.notes.size(), 1u);  // checkpointing is set in the model code
}

TEST(Export, DeepSpeedWithoutWarmupStillHasAValidScheduleAndNotesTp) {
  rt::TrainConfig c = modelParallelConfig();
  c.warmup = 0;  // DeepSpeed refuses warmup_num_steps 0
  const auto e = tn::exportConfig(c, tn::ExportFormat::DeepSpeed);
  const auto d = nlohmann::json::parse(e.text);
  EXPECT_EQ(d["scheduler"]["params"]["warmup_num_steps"], 1);
  EXPECT_EQ(d["pipeline"]["stages"], 2);
  EXPECT_EQ(d["fp16"]["enabled"], true);
  EXPECT_EQ(d["fp16"]["initial_scale_power"], 16);
  bool tp_noted = false;
  for (const auto& n : e.notes) tp_noted = tp_noted || n.find("tp=2") != std::string::npos;
  EXPECT_TRUE(tp_noted);
}

TEST(Export, MegatronFlagsCarryTheModelVocabularyNoDropoutAndTheBatch) {
  const rt::TrainConfig c = modelParallelConfig();
  const auto e = tn::exportConfig(c, tn::ExportFormat::Megatron);
  auto f = flagsOf(e.text);
  EXPECT_EQ(f["--num-layers"], std::to_string(c.model.n_layer));
  EXPECT_EQ(f["--hidden-size"], std::to_string(c.model.n_embd));
  EXPECT_EQ(f["--num-attention-heads"], std::to_string(c.model.n_head));
  EXPECT_EQ(f["--seq-length"], std::to_string(c.seq));
  EXPECT_EQ(f["--max-position-embeddings"], std::to_string(c.model.n_positions));
  // This runtime has no dropout (Megatron-LM's default is 0.1) and pads the vocabulary to a
  // multiple of tp: divisible-by 1 makes Megatron-LM pad it the same way.
  EXPECT_EQ(f["--vocab-size"], std::to_string(c.model.vocab_size));
  EXPECT_EQ(f["--make-vocab-size-divisible-by"], "1");
  EXPECT_EQ(f["--hidden-dropout"], "0");
  EXPECT_EQ(f["--attention-dropout"], "0");
  EXPECT_EQ(f["--tensor-model-parallel-size"], "2");
  EXPECT_EQ(f["--pipeline-model-parallel-size"], "2");
  EXPECT_EQ(f["--micro-batch-size"], std::to_string(c.mbs));
  EXPECT_EQ(f["--global-batch-size"], std::to_string(c.global_batch));
  EXPECT_EQ(f["--lr"], num(c.lr));
  EXPECT_EQ(f["--min-lr"], num(c.lr * c.min_lr_ratio));
  EXPECT_EQ(f["--lr-decay-style"], "cosine");
  EXPECT_EQ(f["--lr-warmup-iters"], std::to_string(c.warmup));
  EXPECT_EQ(f["--train-iters"], std::to_string(c.steps));
  EXPECT_EQ(f["--recompute-granularity"], "full");
  EXPECT_EQ(f["--recompute-method"], "uniform");
  EXPECT_TRUE(f.count("--fp16"));
  EXPECT_FALSE(f.count("--bf16"));
  EXPECT_FALSE(f.count("--use-distributed-optimizer"));
  EXPECT_EQ(f["--optimizer"], "adam");
  EXPECT_EQ(e.notes.size(), 2u);  // GPipe runs 1F1B; Adafactor is not Megatron-LM's
  const auto zero = flagsOf(tn::exportConfig(dpConfig(), tn::ExportFormat::Megatron).text);
  EXPECT_TRUE(zero.count("--use-distributed-optimizer"));
  EXPECT_TRUE(zero.count("--bf16"));
  EXPECT_EQ(zero.at("--recompute-granularity"), "selective");
}

TEST(Export, AccelerateConfigIsTheYamlAccelerateLaunchReadsAsItIs) {
  const rt::TrainConfig c = dpConfig();
  auto y = yamlLines(tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {true}).text);
  // Exactly ClusterConfig's fields (accelerate/commands/config/config_args.py): an unknown key is
  // refused by ClusterConfig.from_yaml_file.
  const std::map<std::string, std::string> want = {{"compute_environment", "LOCAL_MACHINE"},
                                                   {"debug", "false"},
                                                   {"distributed_type", "MULTI_CPU"},
                                                   {"machine_rank", "0"},
                                                   {"main_training_function", "main"},
                                                   {"mixed_precision", "bf16"},
                                                   {"num_machines", "1"},
                                                   {"num_processes", "2"},
                                                   {"rdzv_backend", "static"},
                                                   {"same_network", "true"},
                                                   {"use_cpu", "true"}};
  EXPECT_EQ(y, want);
  // One process in fp32 on a GPU: "NO" and "no" are quoted, or YAML 1.1 reads them as false.
  rt::TrainConfig one = c;
  one.nproc = 1;
  one.gbs = 4;
  one.zero = rt::ZeroStage::None;
  one.precision = rt::Precision::FP32;
  rt::resolve(one);
  y = yamlLines(tn::exportConfig(one, tn::ExportFormat::AccelerateConfig, {false}).text);
  EXPECT_EQ(y["distributed_type"], "'NO'");
  EXPECT_EQ(y["mixed_precision"], "'no'");
  EXPECT_EQ(y["use_cpu"], "false");
  EXPECT_EQ(y["num_processes"], "1");
  y = yamlLines(tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {false}).text);
  EXPECT_EQ(y["distributed_type"], "MULTI_GPU");
}

// A candidate of 16 processes on 8-GPU nodes: num_machines 2 (accelerate launch starts
// num_processes / num_machines on each node: accelerate/utils/launch.py). It had been 1 always: 16
// processes on one 8-GPU node.
TEST(Export, AccelerateConfigOfACandidateOverSeveralNodesNamesTheirNumber) {
  rt::TrainConfig c = dpConfig();
  c.nproc = 16;
  c.gbs = 32;
  c = tn::trainingRunOf(c);
  tn::ExportTarget t;
  t.devices_per_node = 8;
  const tn::ExportResult e = tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, t);
  auto y = yamlLines(e.text);
  EXPECT_EQ(y["num_machines"], "2");
  EXPECT_EQ(y["num_processes"], "16");
  EXPECT_TRUE(noted(e, "num_machines 2 (16 processes, 8 a node)")) << e.text;
  EXPECT_TRUE(noted(e, "--machine_rank"));
  // The cluster not known here: 1, and a note asks for the number.
  const tn::ExportResult unknown = tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {});
  EXPECT_EQ(yamlLines(unknown.text)["num_machines"], "1");
  EXPECT_TRUE(noted(unknown, "set num_machines"));
  // Two processes on one 8-GPU node: 1, nothing to say.
  const tn::ExportResult one = tn::exportConfig(dpConfig(), tn::ExportFormat::AccelerateConfig, t);
  EXPECT_EQ(yamlLines(one.text)["num_machines"], "1");
  EXPECT_FALSE(noted(one, "num_machines"));
}

TEST(Export, TrainingArgsAreTransformersFieldsWithTheCosineToTheMinimumRate) {
  const rt::TrainConfig c = dpConfig();
  const auto e = tn::exportConfig(c, tn::ExportFormat::TrainingArgs);
  const auto a = nlohmann::json::parse(e.text);
  EXPECT_EQ(a["per_device_train_batch_size"], c.mbs);
  EXPECT_EQ(a["gradient_accumulation_steps"], c.ga_steps);
  EXPECT_EQ(a["gradient_checkpointing"], true);
  EXPECT_EQ(a["bf16"], true);
  EXPECT_EQ(a["fp16"], false);
  EXPECT_EQ(a["optim"], "adamw_torch");
  EXPECT_DOUBLE_EQ(a["learning_rate"].get<double>(), c.lr);
  EXPECT_DOUBLE_EQ(a["weight_decay"].get<double>(), c.weight_decay);
  EXPECT_DOUBLE_EQ(a["adam_beta1"].get<double>(), c.beta1);
  EXPECT_DOUBLE_EQ(a["adam_beta2"].get<double>(), c.beta2);
  EXPECT_DOUBLE_EQ(a["adam_epsilon"].get<double>(), c.eps);
  EXPECT_DOUBLE_EQ(a["max_grad_norm"].get<double>(), c.clip);
  EXPECT_EQ(a["lr_scheduler_type"], "cosine_with_min_lr");
  EXPECT_DOUBLE_EQ(a["lr_scheduler_kwargs"]["min_lr_rate"].get<double>(), c.min_lr_ratio);
  EXPECT_EQ(a["warmup_steps"], c.warmup);
  EXPECT_EQ(a["max_steps"], c.steps);
  EXPECT_EQ(a["seed"], c.seed);
  EXPECT_TRUE(a["output_dir"].is_string());
  EXPECT_EQ(a["use_cpu"], false);
  // ZeRO-1 is DeepSpeed's in Accelerate: said, not silently dropped.
  ASSERT_EQ(e.notes.size(), 1u);
  EXPECT_NE(e.notes[0].find("deepspeed"), std::string::npos) << e.notes[0];
  // A CPU study: use_cpu, or TrainingArguments refuses bf16 on a machine without a GPU.
  const auto cpu = nlohmann::json::parse(tn::exportConfig(c, tn::ExportFormat::TrainingArgs, {true}).text);
  EXPECT_EQ(cpu["use_cpu"], true);
  EXPECT_EQ(cpu["bf16"], true);
}

TEST(Export, MultiCpuAccelerateExportsSayHowToStartTheProcesses) {
  // accelerate launch starts MULTI_CPU processes only through mpirun; alone it runs one.
  const rt::TrainConfig c = dpConfig();
  for (auto f : {tn::ExportFormat::AccelerateConfig, tn::ExportFormat::TrainingArgs, tn::ExportFormat::Accelerate}) {
    const auto cpu = tn::exportConfig(c, f, {true});
    ASSERT_EQ(cpu.notes.size(), 2u);
    EXPECT_NE(cpu.notes[1].find("torchrun --nproc_per_node 2 "), std::string::npos) << cpu.notes[1];
    EXPECT_NE(cpu.notes[1].find("--main_process_port P"), std::string::npos) << cpu.notes[1];
    EXPECT_EQ(tn::exportConfig(c, f, {false}).notes.size(), 1u);  // MULTI_GPU: accelerate launch runs torchrun
  }
  rt::TrainConfig one = c;
  one.nproc = 1;
  one.gbs = 4;
  one.zero = rt::ZeroStage::None;
  rt::resolve(one);
  EXPECT_TRUE(tn::exportConfig(one, tn::ExportFormat::AccelerateConfig, {true}).notes.empty());
}

TEST(Export, TheAccelerateBundleHoldsBothPartsAsTheirOwnFormatsGiveThem) {
  const rt::TrainConfig c = dpConfig();
  const auto bundle = nlohmann::json::parse(tn::exportConfig(c, tn::ExportFormat::Accelerate, {true}).text);
  EXPECT_EQ(bundle.size(), 2u);
  EXPECT_EQ(bundle["training_arguments"],
            nlohmann::json::parse(tn::exportConfig(c, tn::ExportFormat::TrainingArgs, {true}).text));
  const auto y = yamlLines(tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {true}).text);
  EXPECT_EQ(bundle["accelerate_config"].size(), y.size());
  for (const auto& [k, v] : bundle["accelerate_config"].items()) {
    ASSERT_TRUE(y.count(k)) << k;
    EXPECT_EQ(v.is_string() ? v.get<std::string>() : v.dump(), y.at(k)) << k;
  }
  EXPECT_EQ(bundle["accelerate_config"]["num_processes"], c.dp);
}

// The knobs of issue 22 in each format. The runtime refuses some of them until it runs them, so these
// configs are resolved without them and the knob set after, as a resolved config would carry it.
namespace {

rt::TrainConfig withZero(rt::ZeroStage z) {
  rt::TrainConfig c = dpConfig();
  c.zero = z;
  return c;
}

// The YAML's nested fsdp_config block, key → value.
std::map<std::string, std::string> fsdpBlock(const std::string& yaml) {
  std::map<std::string, std::string> out;
  std::stringstream ss(yaml);
  bool inside = false;
  for (std::string line; std::getline(ss, line);) {
    if (line == "fsdp_config:") inside = true;
    else if (line.rfind("  ", 0) != 0) inside = false;
    else if (inside) out[line.substr(2, line.find(": ") - 2)] = line.substr(line.find(": ") + 2);
  }
  return out;
}

}  // namespace

TEST(Export, DeepSpeedZeroStagesCarryTheirBucketAndPrefetchKnobs) {
  const auto zero = [](rt::ZeroStage z) {
    return nlohmann::json::parse(tn::exportConfig(withZero(z), tn::ExportFormat::DeepSpeed).text)["zero_optimization"];
  };
  EXPECT_EQ(zero(rt::ZeroStage::None), nlohmann::json({{"stage", 0}}));
  const auto one = zero(rt::ZeroStage::OptimizerStates), two = zero(rt::ZeroStage::Gradients);
  const auto three = zero(rt::ZeroStage::Parameters);
  EXPECT_EQ(one["stage"], 1);
  EXPECT_EQ(two["stage"], 2);
  EXPECT_EQ(three["stage"], 3);
  // The sizes the models price (DeepSpeed's defaults, elements).
  for (const auto& z : {one, two, three}) {
    EXPECT_EQ(z["reduce_bucket_size"], 500000000);
    EXPECT_EQ(z["allgather_bucket_size"], 500000000);
    EXPECT_EQ(z["overlap_comm"], true);
  }
  EXPECT_EQ(one["contiguous_gradients"], false);
  EXPECT_EQ(two["contiguous_gradients"], true);
  EXPECT_FALSE(two.contains("stage3_prefetch_bucket_size"));
  EXPECT_EQ(three["stage3_prefetch_bucket_size"], 50000000);
  EXPECT_EQ(three["stage3_param_persistence_threshold"], 100000);
  EXPECT_EQ(three["stage3_max_live_parameters"], 1000000000);
}

TEST(Export, MegatronCarriesVirtualStagesContextParallelismAndTheDistributedOptimizer) {
  rt::TrainConfig c = modelParallelConfig();  // small-cpu: 4 layers, tp 2, pp 2
  c.pp_schedule = rt::PipelineSchedule::OneFOneB;
  c.virtual_stages = 2;
  c.cp = 2;
  auto e = tn::exportConfig(c, tn::ExportFormat::Megatron);
  auto f = flagsOf(e.text);
  EXPECT_EQ(f["--num-layers-per-virtual-pipeline-stage"], "1");  // 4 layers / (pp 2 · v 2)
  EXPECT_EQ(f["--context-parallel-size"], "2");
  EXPECT_FALSE(f.count("--use-distributed-optimizer"));
  // ZeRO-1 is the distributed optimizer; ZeRO-2/3 are too, with a note on what Megatron-LM keeps whole.
  for (rt::ZeroStage z : {rt::ZeroStage::OptimizerStates, rt::ZeroStage::Gradients, rt::ZeroStage::Parameters}) {
    e = tn::exportConfig(withZero(z), tn::ExportFormat::Megatron);
    f = flagsOf(e.text);
    EXPECT_TRUE(f.count("--use-distributed-optimizer"));
    EXPECT_FALSE(f.count("--context-parallel-size"));  // cp 1: Megatron-LM's default
    EXPECT_EQ(e.notes.size(), z == rt::ZeroStage::OptimizerStates ? 0u : 1u);
  }
  EXPECT_NE(e.notes[0].find("optim_grads_params"), std::string::npos) << e.notes[0];
}

TEST(Export, DeepSpeedSaysItHasNoInterleavingNoContextParallelismAndNoZero2WithPipelines) {
  rt::TrainConfig c = modelParallelConfig();
  c.pp_schedule = rt::PipelineSchedule::OneFOneB;
  c.virtual_stages = 2;
  c.cp = 2;
  c.zero = rt::ZeroStage::Gradients;
  const auto e = tn::exportConfig(c, tn::ExportFormat::DeepSpeed);
  std::string notes;
  for (const auto& n : e.notes) notes += n + "\n";
  EXPECT_NE(notes.find("no interleaved schedule"), std::string::npos) << notes;
  EXPECT_NE(notes.find("no ring context parallelism"), std::string::npos) << notes;
  EXPECT_NE(notes.find("refuses ZeRO-2 and ZeRO-3"), std::string::npos) << notes;
  EXPECT_EQ(nlohmann::json::parse(e.text)["pipeline"]["stages"], 2);
}

TEST(Export, AccelerateRunsZero2And3AsFsdpAndTrainingArgsLikewise) {
  // ZeRO-3: FULL_SHARD; ZeRO-2: SHARD_GRAD_OP; ZeRO-0 and 1: no FSDP.
  for (const auto& [z, strategy] : std::vector<std::pair<rt::ZeroStage, std::string>>{
           {rt::ZeroStage::Parameters, "FULL_SHARD"}, {rt::ZeroStage::Gradients, "SHARD_GRAD_OP"}}) {
    const rt::TrainConfig c = withZero(z);
    const std::string yaml = tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {false}).text;
    EXPECT_NE(yaml.find("distributed_type: FSDP\n"), std::string::npos) << yaml;
    const auto fsdp = fsdpBlock(yaml);
    EXPECT_EQ(fsdp.at("fsdp_sharding_strategy"), strategy);
    EXPECT_EQ(fsdp.at("fsdp_auto_wrap_policy"), "TRANSFORMER_BASED_WRAP");
    EXPECT_EQ(fsdp.at("fsdp_transformer_layer_cls_to_wrap"), "GPT2Block");
    EXPECT_EQ(fsdp.at("fsdp_backward_prefetch"), "BACKWARD_PRE");
    EXPECT_EQ(fsdp.at("fsdp_offload_params"), "false");
    EXPECT_EQ(fsdp.at("fsdp_version"), "1");
    const auto a = nlohmann::json::parse(tn::exportConfig(c, tn::ExportFormat::TrainingArgs).text);
    std::string lower = strategy;
    for (char& ch : lower) ch = char(std::tolower(static_cast<unsigned char>(ch)));
    EXPECT_EQ(a["fsdp"], true);
    EXPECT_EQ(a["fsdp_config"]["version"], 1);
    EXPECT_EQ(a["fsdp_config"]["reshard_after_forward"], lower);
    EXPECT_EQ(a["fsdp_config"]["transformer_layer_cls_to_wrap"], nlohmann::json::array({"GPT2Block"}));
  }
  for (rt::ZeroStage z : {rt::ZeroStage::None, rt::ZeroStage::OptimizerStates}) {
    const rt::TrainConfig c = withZero(z);
    EXPECT_EQ(tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {false}).text.find("fsdp"), std::string::npos);
    EXPECT_FALSE(nlohmann::json::parse(tn::exportConfig(c, tn::ExportFormat::TrainingArgs).text).contains("fsdp"));
  }
}

TEST(Export, HybridShardingIsFsdpsHybridShardAndANoteForDeepSpeed) {
  rt::TrainConfig c = withZero(rt::ZeroStage::Parameters);
  c.dp = 4, c.nproc = 4, c.gbs = 16;
  c.zero_shard_size = 2;  // shards over 2 ranks, 2 replicas
  // DeepSpeed 0.19.8 refuses mics_shard_size (MiCS removed): plain stage 3 and a note saying so.
  const auto de = tn::exportConfig(c, tn::ExportFormat::DeepSpeed);
  const auto ds = nlohmann::json::parse(de.text);
  EXPECT_EQ(ds["zero_optimization"]["stage"], 3);
  EXPECT_FALSE(ds["zero_optimization"].contains("mics_shard_size"));
  std::string ds_notes;
  for (const auto& n : de.notes) ds_notes += n + "\n";
  EXPECT_NE(ds_notes.find("no hybrid ZeRO-3"), std::string::npos) << ds_notes;
  const auto y = fsdpBlock(tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {false}).text);
  EXPECT_EQ(y.at("fsdp_sharding_strategy"), "HYBRID_SHARD");
  const auto args = nlohmann::json::parse(tn::exportConfig(c, tn::ExportFormat::TrainingArgs, {false}).text);
  EXPECT_EQ(args["fsdp_config"]["reshard_after_forward"], "hybrid_shard");
  std::string notes;
  for (const auto& n : tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {false}).notes) notes += n + "\n";
  EXPECT_NE(notes.find("device_mesh (replicas 2 x shard 2)"), std::string::npos) << notes;
  // A shard group of every DP rank is plain ZeRO-3.
  c.zero_shard_size = 4;
  for (const auto& n : tn::exportConfig(c, tn::ExportFormat::DeepSpeed).notes)
    EXPECT_EQ(n.find("hybrid"), std::string::npos) << n;
  EXPECT_EQ(fsdpBlock(tn::exportConfig(c, tn::ExportFormat::AccelerateConfig, {false}).text).at("fsdp_sharding_strategy"),
            "FULL_SHARD");
}

// small-cpu-moe (8 experts, top-2, capacity 1.25, experts every other layer) on 4 ranks: dp 4 with
// experts over ep 2, ZeRO-1. Every format carries the expert-parallel degree the run has.
TEST(Export, MixtureOfExpertsCarriesTheExpertParallelDegreeEverywhere) {
  rt::TrainConfig c;
  c.workload = "small-cpu-moe";
  c.seq = 64, c.mbs = 2, c.gbs = 16, c.nproc = 4, c.ep = 2;
  c.zero = rt::ZeroStage::OptimizerStates;
  c.steps = 3, c.warmup = 0;
  c = tn::trainingRunOf(c);
  ASSERT_EQ(c.dp, 4);
  // Megatron-LM: the experts over ep, whole on each TP rank, by all-to-all (the dispatcher its
  // capacity factor needs), and a note that its distributed optimizer shards the experts' state.
  auto m = tn::exportConfig(c, tn::ExportFormat::Megatron);
  auto f = flagsOf(m.text);
  EXPECT_EQ(f["--num-experts"], "8");
  EXPECT_EQ(f["--expert-model-parallel-size"], "2");
  EXPECT_EQ(f["--expert-tensor-parallel-size"], "1");
  EXPECT_EQ(f["--moe-token-dispatcher-type"], "alltoall");
  EXPECT_EQ(f["--moe-router-topk"], "2");
  EXPECT_EQ(f["--moe-layer-freq"], "2");
  EXPECT_EQ(f["--moe-expert-capacity-factor"], "1.25");
  EXPECT_EQ(f["--moe-token-drop-policy"], "position");
  EXPECT_TRUE(f.count("--use-distributed-optimizer"));
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_NE(m.notes[0].find("over their 2 expert-data-parallel rank(s)"), std::string::npos) << m.notes[0];
  // Drop-less: no capacity flags at all.
  rt::TrainConfig dropless = c;
  dropless.model.capacity_factor = 0;
  f = flagsOf(tn::exportConfig(dropless, tn::ExportFormat::Megatron).text);
  EXPECT_FALSE(f.count("--moe-expert-capacity-factor"));
  EXPECT_FALSE(f.count("--moe-token-drop-policy"));
  // DeepSpeed: the MoE layer's ep_size in the model-code note, and the optimizer-group split ZeRO needs.
  const auto ds = tn::exportConfig(c, tn::ExportFormat::DeepSpeed);
  std::string note;
  for (const auto& n : ds.notes)
    if (n.find("deepspeed.moe.layer.MoE") != std::string::npos) note = n;
  EXPECT_NE(note.find("num_experts=8, ep_size=2, k=2"), std::string::npos) << note;
  EXPECT_NE(note.find("split_params_into_different_moe_groups_for_optimizer"), std::string::npos) << note;
  // The run config and the command line: --ep 2, and ep read back from the JSON.
  EXPECT_NE(tn::exportConfig(c, tn::ExportFormat::Command).text.find(" --ep 2"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(tn::exportConfig(c, tn::ExportFormat::Run).text)["ep"], 2);
}

// 126 layers (Llama 3.1 405B's) over 16 pipeline stages: this runtime splits them 14 x 8 then 2 x 7.
// Megatron-LM refuses an uneven split unless the first and last stages' layers are named: 7 | 14 x 8 |
// 7, the same largest stage. torchtitan makes ceil(126 / layers_per_stage) stages: 8 a stage gives 16
// (the floor's 7 gave 18, which it refuses). Both parsers read them in tests/exports/.
TEST(Export, LayersThatDoNotDivideOverThePipelineAreSplitAsEachTargetTakesThem) {
  auto layout = [](const char* workload, int pp) {
    rt::TrainConfig c = dpConfig();
    c.workload = workload;
    c.seq = 4096;
    c.nproc = pp;
    c.pp = pp;
    c.mbs = 1;
    c.gbs = 32;
    c.zero = rt::ZeroStage::None;
    return tn::trainingRunOf(c);
  };
  const rt::TrainConfig c = layout("llama3.1-405b", 16);
  ASSERT_EQ(c.model.n_layer, 126);
  const tn::ExportResult m = tn::exportConfig(c, tn::ExportFormat::Megatron);
  auto f = flagsOf(m.text);
  EXPECT_EQ(f["--decoder-first-pipeline-num-layers"], "7");
  EXPECT_EQ(f["--decoder-last-pipeline-num-layers"], "7");
  EXPECT_TRUE(noted(m, "7 | 14 x 8 | 7")) << m.text;
  EXPECT_TRUE(noted(m, "the same largest stage"));
  const tn::ExportResult t = tn::exportConfig(c, tn::ExportFormat::Torchtitan);
  EXPECT_EQ(flagsOf(t.text)["--parallelism.pipeline_parallel_layers_per_stage"], "8");
  EXPECT_FALSE(noted(t, "layers_per_stage cannot"));
  // Four stages: 31 | 2 x 32 | 31 against this runtime's 2 x 32 then 2 x 31.
  f = flagsOf(tn::exportConfig(layout("llama3.1-405b", 4), tn::ExportFormat::Megatron).text);
  EXPECT_EQ(f["--decoder-first-pipeline-num-layers"], "31");
  EXPECT_EQ(f["--decoder-last-pipeline-num-layers"], "31");
  // Layers that divide (Llama 3 70B's 80 over 16): no first/last flags, as before.
  f = flagsOf(tn::exportConfig(layout("llama3-70b", 16), tn::ExportFormat::Megatron).text);
  EXPECT_FALSE(f.count("--decoder-first-pipeline-num-layers"));
}
