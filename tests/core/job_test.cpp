// job_test.cpp — tune --runner's launch made before anything runs (tuner/job.h): the exact argument
// vector and environment of a trial, the files written into its folder, --entry's words, what each
// runner refuses; and the probe's rows into a run database (rundb/import_probe.h).
#include "trainscope/tuner/job.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>

#include "trainscope/common/error.h"
#include "trainscope/rundb/import_probe.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/models/cluster.h"
#include "trainscope/tuner/tune_inputs.h"
#include "trainscope/workloads/workload.h"

namespace rt = trainscope::runconfig;
namespace tn = trainscope::tuner;

namespace {

rt::TrainConfig twoRanks(rt::ZeroStage zero, rt::Checkpointing ckpt = rt::Checkpointing::None) {
  rt::TrainConfig c;
  c.workload = "tiny";
  c.seq = 32;
  c.mbs = 2;
  c.gbs = 8;
  c.nproc = 2;
  c.zero = zero;
  c.ckpt = ckpt;
  c.steps = 4;
  c.warmup = 0;
  c.min_lr_ratio = 1.0;
  rt::resolve(c);
  return c;
}

tn::JobOptions hf() {
  tn::JobOptions o;
  o.kind = tn::JobKind::Hf;
  o.entry = {"/src/train.py", "--model", "gpt2"};
  o.python = "/venv/bin/python";
  o.probe_root = "/repo/python";
  o.mem_limit = 1 << 30;
  return o;
}

std::map<std::string, std::string> envOf(const tn::JobLaunch& l) {
  return {l.env.begin(), l.env.end()};
}

const std::string& fileOf(const tn::JobLaunch& l, const std::string& name) {
  for (const auto& f : l.files)
    if (f.name == name) return f.text;
  throw std::runtime_error("no " + name);
}

std::string tempDir() {
  char t[] = "/tmp/job_test.XXXXXX";
  return ::mkdtemp(t);
}

}  // namespace

TEST(Job, HfTrialIsTorchrunOverTheEntryWithTheCandidatesTrainingArguments) {
  const tn::JobLaunch l = tn::jobLaunch(hf(), twoRanks(rt::ZeroStage::Parameters, rt::Checkpointing::Full), "/s/c3-r0.job",
                                        /*profile=*/true, "");
  EXPECT_EQ(l.argv, (std::vector<std::string>{"/venv/bin/python", "-m", "torch.distributed.run", "--standalone",
                                              "--nnodes", "1", "--nproc_per_node", "2", "/src/train.py", "--model",
                                              "gpt2"}));
  const auto env = envOf(l);
  EXPECT_EQ(env.at("PYTHONPATH").rfind("/repo/python/trainscope_probe/site:/repo/python", 0), 0u);
  EXPECT_EQ(env.at("TRAINSCOPE_PROBE_DIR"), "/s/c3-r0.job/probe");
  EXPECT_EQ(env.at("TRAINSCOPE_TRAINING_ARGS"), "/s/c3-r0.job/training_args.json");
  EXPECT_EQ(env.at("TRAINSCOPE_PROBE_PROFILE_STEPS"), "2");
  EXPECT_EQ(env.at("TRAINSCOPE_MEM_LIMIT"), std::to_string(1 << 30));
  EXPECT_EQ(env.at("TRAINSCOPE_OOM_EXIT"), "3");
  const auto ta = nlohmann::json::parse(fileOf(l, "training_args.json"));
  EXPECT_EQ(ta["per_device_train_batch_size"], 2);
  EXPECT_EQ(ta["gradient_accumulation_steps"], 2);
  EXPECT_EQ(ta["gradient_checkpointing"], true);
  EXPECT_EQ(ta["max_steps"], 4);
  EXPECT_EQ(ta["fsdp"], true);
  EXPECT_EQ(ta["fsdp_config"]["reshard_after_forward"], "full_shard");
  // Accelerate refuses sync_module_states without an accelerator: a CPU trial's FSDP leaves it off.
  EXPECT_EQ(ta["fsdp_config"]["sync_module_states"], false);
  EXPECT_NE(fileOf(l, "accelerate.yaml").find("fsdp_sync_module_states: false"), std::string::npos);
  EXPECT_NO_THROW(fileOf(l, "config.json"));
}

TEST(Job, ZeroStagesAreDdpShardGradOpAndFullShard) {
  const auto strategy = [](rt::ZeroStage z) {
    const auto ta = nlohmann::json::parse(fileOf(tn::jobLaunch(hf(), twoRanks(z), "/d", false, ""), "training_args.json"));
    return ta.contains("fsdp") ? ta["fsdp_config"]["reshard_after_forward"].get<std::string>() : std::string("ddp");
  };
  EXPECT_EQ(strategy(rt::ZeroStage::None), "ddp");
  EXPECT_EQ(strategy(rt::ZeroStage::Gradients), "shard_grad_op");
  EXPECT_EQ(strategy(rt::ZeroStage::Parameters), "full_shard");
}

TEST(Job, OnlyACpuFsdpTrialOfTheHfOrAccelerateRunnerLoadsTheCpuFsdpShim) {
  const auto shim = [](tn::JobKind kind, bool cpu, rt::ZeroStage z) {
    tn::JobOptions o = hf();
    o.kind = kind;
    o.cpu = cpu;
    const auto env = envOf(tn::jobLaunch(o, twoRanks(z), "/d", false, "", 29400));
    return env.count("TRAINSCOPE_PROBE_CPU_FSDP") ? env.at("TRAINSCOPE_PROBE_CPU_FSDP") : std::string();
  };
  EXPECT_EQ(shim(tn::JobKind::Hf, true, rt::ZeroStage::Gradients), "1");
  EXPECT_EQ(shim(tn::JobKind::Hf, true, rt::ZeroStage::Parameters), "1");
  EXPECT_EQ(shim(tn::JobKind::Hf, true, rt::ZeroStage::None), "");        // DDP: Accelerate's own MULTI_CPU
  EXPECT_EQ(shim(tn::JobKind::Hf, false, rt::ZeroStage::Parameters), "");  // GPU trials never load it
  EXPECT_EQ(shim(tn::JobKind::DeepSpeed, true, rt::ZeroStage::Parameters), "");
  EXPECT_EQ(shim(tn::JobKind::Accelerate, true, rt::ZeroStage::Gradients), "1");  // accelerate launch's ranks too
  EXPECT_EQ(shim(tn::JobKind::Accelerate, true, rt::ZeroStage::Parameters), "1");
  EXPECT_EQ(shim(tn::JobKind::Accelerate, true, rt::ZeroStage::None), "");
  EXPECT_EQ(shim(tn::JobKind::Accelerate, false, rt::ZeroStage::Parameters), "");
}

// Accelerate 1.15's FSDP 1 plugin takes its sharding strategy from FSDP_SHARDING_STRATEGY (FULL_SHARD
// when unset) over the Trainer's reshard_after_forward: an --runner hf FSDP trial is handed the
// variable, the strategy of its accelerate.yaml (a SHARD_GRAD_OP trial ran FULL_SHARD without it).
TEST(Job, AnHfFsdpTrialIsHandedItsShardingStrategyAsAccelerateReadsIt) {
  const auto strategy = [](tn::JobKind kind, rt::ZeroStage z) {
    tn::JobOptions o = hf();
    o.kind = kind;
    const auto env = envOf(tn::jobLaunch(o, twoRanks(z), "/d", false, "", 29400));
    return env.count("FSDP_SHARDING_STRATEGY") ? env.at("FSDP_SHARDING_STRATEGY") : std::string("-");
  };
  EXPECT_EQ(strategy(tn::JobKind::Hf, rt::ZeroStage::Gradients), "SHARD_GRAD_OP");
  EXPECT_EQ(strategy(tn::JobKind::Hf, rt::ZeroStage::Parameters), "FULL_SHARD");
  EXPECT_EQ(strategy(tn::JobKind::Hf, rt::ZeroStage::None), "-");
  EXPECT_EQ(strategy(tn::JobKind::Accelerate, rt::ZeroStage::Gradients), "-");  // accelerate launch sets it
}

TEST(Job, DeepSpeedTrialHandsItsEngineTheExportedConfig) {
  tn::JobOptions o = hf();
  o.kind = tn::JobKind::DeepSpeed;
  const tn::JobLaunch l = tn::jobLaunch(o, twoRanks(rt::ZeroStage::Gradients), "/d", false, "");
  EXPECT_EQ(l.argv, (std::vector<std::string>{"/venv/bin/python", "-m", "deepspeed.launcher.runner", "--num_nodes",
                                              "1", "--num_gpus", "2", "/src/train.py", "--model", "gpt2",
                                              "--deepspeed", "/d/ds_config.json"}));
  EXPECT_EQ(envOf(l).at("DS_ACCELERATOR"), "cpu");
  const auto ds = nlohmann::json::parse(fileOf(l, "ds_config.json"));
  EXPECT_EQ(ds["zero_optimization"]["stage"], 2);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 2);
  EXPECT_EQ(ds["optimizer"]["params"]["torch_adam"], true);  // no compiled Adam on CPU ranks
}

TEST(Job, MegatronAndTorchtitanTrialsCarryTheirFlags) {
  tn::JobOptions o = hf();
  o.kind = tn::JobKind::Megatron;
  const tn::JobLaunch m = tn::jobLaunch(o, twoRanks(rt::ZeroStage::None), "/d", false, "");
  std::string argv;
  for (const auto& a : m.argv) argv += a + " ";
  EXPECT_NE(argv.find("/src/train.py --model gpt2 --num-layers 2 "), std::string::npos) << argv;
  EXPECT_NE(argv.find("--micro-batch-size 2 --global-batch-size 8"), std::string::npos) << argv;
  // An unmodified pretrain_gpt.py / torchtitan.train is measured by the probe's sitecustomize hooks
  // (python/trainscope_probe/megatron.py, titan.py): the trial carries the site folder and its probe dir.
  EXPECT_EQ(envOf(m).at("PYTHONPATH").rfind("/repo/python/trainscope_probe/site:/repo/python", 0), 0u);
  EXPECT_EQ(envOf(m).at("TRAINSCOPE_PROBE_DIR"), "/d/probe");
  o.kind = tn::JobKind::Torchtitan;
  const tn::JobLaunch t = tn::jobLaunch(o, twoRanks(rt::ZeroStage::Parameters), "/d", false, "");
  EXPECT_EQ(envOf(t).at("PYTHONPATH").rfind("/repo/python/trainscope_probe/site:/repo/python", 0), 0u);
  EXPECT_EQ(envOf(t).at("TRAINSCOPE_PROBE_DIR"), "/d/probe");
  const std::string& flags = fileOf(t, "torchtitan_args.txt");
  EXPECT_EQ(t.argv[t.argv.size() - 2], "--lr_scheduler.min_lr_factor");  // the flags follow the entry
  // torchtitan 0.3 has no --optimizer.lr (its parser refuses it): the AdamW group's kwargs.
  EXPECT_EQ(flags.find("--optimizer.lr "), std::string::npos) << flags;
  EXPECT_NE(flags.find("--optimizer.param_groups.0.optimizer_kwargs.lr "), std::string::npos) << flags;
  EXPECT_NE(flags.find("--training.local_batch_size 2 --training.global_batch_size 8"), std::string::npos) << flags;
  EXPECT_NE(flags.find("--parallelism.data_parallel_replicate_degree 1 --parallelism.data_parallel_shard_degree 2"),
            std::string::npos)
      << flags;
}

TEST(Job, BadPathFaultNamesAScriptThatIsNotThere) {
  const tn::JobLaunch l = tn::jobLaunch(hf(), twoRanks(rt::ZeroStage::None), "/d", false, "badpath");
  EXPECT_EQ(l.argv[8], "/d/no-such-script.py");
  EXPECT_EQ(envOf(l).at("TRAINSCOPE_PROBE_INJECT"), "");
  EXPECT_EQ(envOf(tn::jobLaunch(hf(), twoRanks(rt::ZeroStage::None), "/d", false, "hang")).at("TRAINSCOPE_PROBE_INJECT"),
            "hang");
}

TEST(Job, EntryIsSplitLikeShellWordsAndNeverRunThroughAShell) {
  EXPECT_EQ(tn::splitEntry("train.py --name 'a b' \"c \\\"d\\\"\" e\\ f"),
            (std::vector<std::string>{"train.py", "--name", "a b", "c \"d\"", "e f"}));
  EXPECT_EQ(tn::splitEntry("train.py; rm -rf /"), (std::vector<std::string>{"train.py;", "rm", "-rf", "/"}));
  EXPECT_THROW(tn::splitEntry("  "), trainscope::UserError);
  EXPECT_THROW(tn::splitEntry("train.py 'open"), trainscope::UserError);
}

TEST(Job, EachRunnerRefusesWhatItsFrameworkDoesNotRun) {
  tn::Plan p;
  p.dp = 1;
  p.tp = 2;
  EXPECT_NE(tn::jobRefusal(tn::JobKind::Hf, p).find("data parallelism only"), std::string::npos);
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::Megatron, p), "");
  p.tp = 1;
  p.dp = 2;
  p.zero = rt::ZeroStage::OptimizerStates;
  EXPECT_NE(tn::jobRefusal(tn::JobKind::Hf, p).find("ZeRO-1 is DeepSpeed's"), std::string::npos);
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::DeepSpeed, p), "");
  p.zero = rt::ZeroStage::None;
  p.ckpt = rt::Checkpointing::Selective;
  EXPECT_NE(tn::jobRefusal(tn::JobKind::Hf, p).find("--ckpt none,full"), std::string::npos);
  p.ckpt = rt::Checkpointing::None;
  p.cpu_lanes = 2;
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::Hf, p), "");  // a one-process layout's threads are the job's own
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::Trainscope, p), "");
  // FSDP (ZeRO-2/3) under the Trainer or accelerate launch: on GPUs, and on Gloo CPU ranks through the
  // probe's cpu_fsdp shim (Accelerate alone wraps DDP there).
  p.zero = rt::ZeroStage::Parameters;
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::Hf, p, /*cpu=*/false), "");
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::Hf, p, /*cpu=*/true), "");
  p.zero = rt::ZeroStage::Gradients;
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::Hf, p, /*cpu=*/true), "");
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::Accelerate, p, /*cpu=*/true), "");
  p.zero = rt::ZeroStage::Parameters;
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::DeepSpeed, p, /*cpu=*/true), "");  // DeepSpeed's ZeRO runs on CPU ranks
  // torchtitan's experts borrow their ranks from dp_shard x cp x tp: FSDP's data-parallel ranks lend
  // them, replicated ones (ZeRO 0/1) do not.
  p.ep = 2;
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::Torchtitan, p), "");
  p.zero = rt::ZeroStage::OptimizerStates;
  EXPECT_NE(tn::jobRefusal(tn::JobKind::Torchtitan, p).find("expert parallelism takes its ranks"), std::string::npos);
  p.tp = 2;
  EXPECT_EQ(tn::jobRefusal(tn::JobKind::Torchtitan, p), "");
  EXPECT_THROW(tn::parseJobKind("horovod"), trainscope::UserError);
}

TEST(ProbeImport, RowsBecomeStepsTheSummaryReads) {
  const std::string dir = tempDir();
  {
    std::ofstream r0(dir + "/rank0.steps.jsonl"), r1(dir + "/rank1.steps.jsonl");
    for (int s = 0; s < 4; ++s) {
      r0 << R"({"rank": 0, "step": )" << s << R"(, "start_ns": )" << 1000000000LL * (s + 1)
         << R"(, "step_time_ns": )" << (s == 0 ? 900000000 : 100000000) << R"(, "tokens": 256, "loss": 4.5, "peak_bytes": )"
         << (700 << 20) << R"(, "world": 2})" << "\n";
      r1 << R"({"rank": 1, "step": )" << s << R"(, "start_ns": )" << 1000000000LL * (s + 1)
         << R"(, "step_time_ns": )" << (s == 0 ? 900000000 : 120000000) << R"(, "tokens": 256, "loss": null, "peak_bytes": )"
         << (710 << 20) << R"(, "world": 2})" << "\n";
    }
    r1 << R"({"rank": 1, "step": 4, "start)";  // a last line cut short by a killed rank
  }
  const auto st = trainscope::rundb::importProbe({dir + "/rank0.steps.jsonl", dir + "/rank1.steps.jsonl"}, {},
                                                 dir + "/t.db", "tiny", "--study");
  EXPECT_EQ(st.steps, 8);
  EXPECT_EQ(st.ranks, 2);
  trainscope::rundb::RunReader reader(dir + "/t.db");
  EXPECT_EQ(reader.worldSize(), 2);
  const auto s = trainscope::rundb::summarize(reader);
  EXPECT_NEAR(s.step_s_median, 0.12, 1e-9);  // the slower rank's time; step 0 (the warm-up) left out
  EXPECT_NEAR(s.tokens_per_s, 256 / 0.12, 1e-6);
  EXPECT_EQ(s.peak_bytes, int64_t(710) << 20);
  // An existing path is refused (a trial's paths are fresh), and no rows at all is a clear error.
  EXPECT_THROW(trainscope::rundb::importProbe({dir + "/rank0.steps.jsonl"}, {}, dir + "/t.db", "tiny", "--study"),
               trainscope::UserError);
  std::ofstream(dir + "/empty.jsonl").close();
  try {
    trainscope::rundb::importProbe({dir + "/empty.jsonl"}, {}, dir + "/e.db", "tiny", "--study");
    FAIL() << "no rows accepted";
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("recorded no step"), std::string::npos) << e.what();
  }
  struct stat sb {};
  EXPECT_NE(::lstat((dir + "/e.db").c_str(), &sb), 0);
  std::ofstream(dir + "/bad.jsonl") << "{\"rank\": 0}\n{\"rank\": 0, \"step\": 1}\n";
  EXPECT_THROW(trainscope::rundb::importProbe({dir + "/bad.jsonl"}, {}, dir + "/b.db", "tiny", "--study"),
               trainscope::UserError);
}

// Megatron's hook (python/trainscope_probe/megatron.py): a step whose update the framework skipped
// (train_step's skipped_iter: a non-finite gradient) is a row with "skipped": true, read into
// steps.skipped and counted (its forward/backward ran, as a native run's skipped step); "iteration"
// (Megatron's own number: --iterations-to-skip leaves gaps, those iterations never reach train_step
// and have no row) is the probe's record only.
TEST(ProbeImport, SkippedUpdateIsRecordedAndCounted) {
  const std::string dir = tempDir();
  {
    std::ofstream r0(dir + "/rank0.steps.jsonl");
    const int iteration[] = {1, 2, 4, 5};
    for (int s = 0; s < 4; ++s)
      r0 << R"({"rank": 0, "step": )" << s << R"(, "iteration": )" << iteration[s] << R"(, "start_ns": )"
         << 1000000000LL * (s + 1) << R"(, "step_time_ns": )" << (s == 0 ? 900000000 : 100000000 * s)
         << R"(, "tokens": 128, "loss": 2.5, "peak_bytes": 1000, "world": 1)" << (s == 2 ? R"(, "skipped": true})" : "}")
         << "\n";
  }
  trainscope::rundb::importProbe({dir + "/rank0.steps.jsonl"}, {}, dir + "/t.db", "tiny", "--study");
  trainscope::rundb::RunReader reader(dir + "/t.db");
  const auto steps = reader.steps();
  ASSERT_EQ(steps.size(), 4u);
  for (const auto& st : steps) EXPECT_EQ(st.skipped, st.step == 2) << "step " << st.step;
  const auto s = trainscope::rundb::summarize(reader);
  EXPECT_EQ(s.steps, 3);                     // steps 1-3, the skipped update's step 2 among them
  EXPECT_NEAR(s.step_s_mean, 0.2, 1e-9);     // (0.1 + 0.2 + 0.3) / 3
}

// A row without a loss (torchtitan's train_step; Megatron's non-last pipeline stages) is stored as
// none (NULL), not 0, and read back as not recorded; a row's 0.0 loss stays a recorded 0.
TEST(ProbeImport, ARowWithoutALossIsStoredAsNone) {
  const std::string dir = tempDir();
  {
    std::ofstream r0(dir + "/rank0.steps.jsonl");
    r0 << R"({"rank": 0, "step": 0, "start_ns": 1000, "step_time_ns": 100, "tokens": 128, "loss": null, "world": 1})"
       << "\n"
       << R"({"rank": 0, "step": 1, "start_ns": 2000, "step_time_ns": 100, "tokens": 128, "world": 1})" << "\n"
       << R"({"rank": 0, "step": 2, "start_ns": 3000, "step_time_ns": 100, "tokens": 128, "loss": 0.0, "world": 1})"
       << "\n";
  }
  trainscope::rundb::importProbe({dir + "/rank0.steps.jsonl"}, {}, dir + "/t.db", "tiny", "--study");
  trainscope::rundb::RunReader reader(dir + "/t.db");
  const auto steps = reader.steps();
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_FALSE(steps[0].loss_recorded);
  EXPECT_FALSE(steps[1].loss_recorded);
  EXPECT_TRUE(steps[2].loss_recorded);
  EXPECT_EQ(steps[2].loss, 0.0);
}

// accelerate launch of num_processes > 1 points its process at --main_process_port (29500 unless
// given) over torchrun's MASTER_PORT: both get the trial's own port, torchrun a static rendezvous there.
TEST(Job, AccelerateTrialOnCpuRanksHandsTorchrunAndAccelerateOnePort) {
  tn::JobOptions o = hf();
  o.kind = tn::JobKind::Accelerate;
  const tn::JobLaunch l = tn::jobLaunch(o, twoRanks(rt::ZeroStage::None), "/d", false, "", 41234);
  EXPECT_EQ(l.argv, (std::vector<std::string>{"/venv/bin/python", "-m", "torch.distributed.run", "--nnodes", "1",
                                              "--nproc_per_node", "2", "--master_addr", "127.0.0.1", "--master_port",
                                              "41234", "-m", "accelerate.commands.launch", "--config_file",
                                              "/d/accelerate.yaml", "--main_process_port", "41234", "/src/train.py",
                                              "--model", "gpt2"}));
  EXPECT_NE(fileOf(l, "accelerate.yaml").find("num_processes: 2"), std::string::npos);
  // FSDP (ZeRO-2/3): accelerate launch starts its ranks itself (torch.distributed.run at that port); its
  // config may not ask for cpu_ram_efficient_loading without sync_module_states, off on the CPU.
  const tn::JobLaunch z = tn::jobLaunch(o, twoRanks(rt::ZeroStage::Parameters), "/d", false, "", 41234);
  EXPECT_EQ(std::vector<std::string>(z.argv.begin(), z.argv.begin() + 7),
            (std::vector<std::string>{"/venv/bin/python", "-m", "accelerate.commands.launch", "--config_file",
                                      "/d/accelerate.yaml", "--main_process_port", "41234"}));
  EXPECT_NE(fileOf(z, "accelerate.yaml").find("fsdp_cpu_ram_efficient_loading: false"), std::string::npos);
  EXPECT_NE(fileOf(z, "accelerate.yaml").find("fsdp_sync_module_states: false"), std::string::npos);
  // FSDP is the config file's alone: the Trainer is handed no fsdp fields (they would build its own
  // plugin over the one accelerate launch's variables make); the rest of the arguments stay.
  const auto ta = nlohmann::json::parse(fileOf(z, "training_args.json"));
  EXPECT_FALSE(ta.contains("fsdp"));
  EXPECT_FALSE(ta.contains("fsdp_config"));
  EXPECT_EQ(ta["per_device_train_batch_size"], 2);
  EXPECT_NE(fileOf(z, "accelerate.yaml").find("fsdp_sharding_strategy: FULL_SHARD"), std::string::npos);
  o.kind = tn::JobKind::Hf;  // --runner hf: the Trainer's fields are how FSDP reaches it
  EXPECT_TRUE(nlohmann::json::parse(fileOf(tn::jobLaunch(o, twoRanks(rt::ZeroStage::Parameters), "/d", false, "", 41234),
                                           "training_args.json"))
                  .contains("fsdp_config"));
  o.kind = tn::JobKind::Accelerate;
  // No port given: a free one, the same in both places.
  const tn::JobLaunch f = tn::jobLaunch(o, twoRanks(rt::ZeroStage::None), "/d", false, "");
  EXPECT_EQ(f.argv[10], f.argv[16]);
  EXPECT_GT(std::stoi(f.argv[10]), 0);
}

// Intra-op threads (issue 34): a launch that starts several ranks a node without torchrun (the
// deepspeed launcher) gives each rank torchrun's OMP_NUM_THREADS=1 (2 ranks × 2 threads on 2 cores ran
// tiny Llama's ZeRO 0 at 142 ms a step against 22 ms); torchrun's and accelerate launch's own rule is
// left to them, srun's tasks are the rank's to decide (its node's tasks), one rank is left alone, and
// a value in the tuner's environment is the user's: never replaced. Each says who set it.
TEST(Job, EveryRankOfASeveralRanksANodeLaunchGetsTorchrunsThreadRuleAndTheUsersValueIsKept) {
  const char* old = std::getenv("OMP_NUM_THREADS");
  const std::string saved = old ? old : "";
  ::unsetenv("OMP_NUM_THREADS");
  auto threads = [](tn::JobKind kind, const rt::TrainConfig& c, bool cpu = true) {
    tn::JobOptions o = hf();
    o.kind = kind;
    o.cpu = cpu;
    if (c.launcher == rt::Launcher::Slurm) o.slurm_name = tn::slurmStepName("0123456789abcdef");
    const auto env = envOf(tn::jobLaunch(o, c, "/d", false, "", 40001));
    return (env.count("OMP_NUM_THREADS") ? env.at("OMP_NUM_THREADS") : "-") + " " + env.at("TRAINSCOPE_THREADS_SOURCE");
  };
  const rt::TrainConfig ddp = twoRanks(rt::ZeroStage::None);
  rt::TrainConfig one = ddp;
  one.nproc = 1;
  one.gbs = 4;
  rt::resolve(one);
  rt::TrainConfig srun = ddp;
  srun.launcher = rt::Launcher::Slurm;
  EXPECT_EQ(threads(tn::JobKind::DeepSpeed, ddp), "1 runner");
  EXPECT_EQ(threads(tn::JobKind::DeepSpeed, twoRanks(rt::ZeroStage::Parameters)), "1 runner");
  EXPECT_EQ(threads(tn::JobKind::DeepSpeed, one), "- none");
  EXPECT_EQ(threads(tn::JobKind::DeepSpeed, srun), "- per-node");
  EXPECT_EQ(threads(tn::JobKind::Hf, srun), "- per-node");
  EXPECT_EQ(threads(tn::JobKind::Hf, ddp), "- torchrun");
  EXPECT_EQ(threads(tn::JobKind::Megatron, ddp), "- torchrun");
  EXPECT_EQ(threads(tn::JobKind::Accelerate, ddp), "- torchrun");                        // torchrun, then one launch a rank
  EXPECT_EQ(threads(tn::JobKind::Accelerate, twoRanks(rt::ZeroStage::Gradients)), "- accelerate");  // FSDP: its launch
  ::setenv("OMP_NUM_THREADS", "2", 1);
  EXPECT_EQ(threads(tn::JobKind::DeepSpeed, ddp), "- user");
  EXPECT_EQ(threads(tn::JobKind::Hf, srun), "- user");
  EXPECT_EQ(threads(tn::JobKind::Hf, ddp), "- user");
  if (old) ::setenv("OMP_NUM_THREADS", saved.c_str(), 1);
  else ::unsetenv("OMP_NUM_THREADS");
}

// --launcher slurm: one srun step of W tasks, each a rank running the job itself (no torchrun or
// deepspeed launcher), told to map Slurm's variables to torch.distributed's and the trial's port.
TEST(Job, SlurmTrialIsOneSrunStepOfWorldTasks) {
  rt::TrainConfig c = twoRanks(rt::ZeroStage::Gradients);
  c.launcher = rt::Launcher::Slurm;
  // Every step of a study is named after the study's id (cancelled by that name when srun is killed,
  // and by a resumed tuner): the same name in every run, another for another study; nothing but a
  // study's name is taken.
  tn::JobOptions named = hf();
  named.slurm_name = tn::slurmStepName("0123456789abcdef");
  EXPECT_EQ(named.slurm_name, "trainscope-study-0123456789abcdef");
  EXPECT_NE(tn::slurmStepName("0123456789abcdef"), tn::slurmStepName("0123456789abcdee"));
  EXPECT_TRUE(tn::validStudyId("0123456789abcdef"));
  for (const char* bad : {"", "0123456789abcde", "0123456789ABCDEF", "0123456789abcdef0", "01234567,9abcdef"})
    EXPECT_FALSE(tn::validStudyId(bad)) << bad;
  for (const char* bad : {"", "trainscope-trial-0123456789abcdef", "x,trainscope-study-0123456789abcdef"}) {
    tn::JobOptions o = hf();
    o.slurm_name = bad;
    EXPECT_THROW(tn::jobLaunch(o, c, "/d", false, "", 40001), std::invalid_argument) << bad;
  }
  const tn::JobLaunch h = tn::jobLaunch(named, c, "/d", false, "", 40001);
  const std::string name = "--job-name=trainscope-study-0123456789abcdef";
  EXPECT_EQ(h.argv, (std::vector<std::string>{"srun", "--ntasks=2", "--kill-on-bad-exit=1", name, "--export=ALL",
                                              "/venv/bin/python", "/src/train.py", "--model", "gpt2"}));
  EXPECT_EQ(envOf(h).at("TRAINSCOPE_PROBE_SLURM"), "1");
  EXPECT_EQ(envOf(h).at("MASTER_PORT"), "40001");
  tn::JobOptions o = named;
  o.kind = tn::JobKind::DeepSpeed;
  EXPECT_EQ(tn::jobLaunch(o, c, "/d", false, "", 40001).argv,
            (std::vector<std::string>{"srun", "--ntasks=2", "--kill-on-bad-exit=1", name, "--export=ALL",
                                      "/venv/bin/python", "/src/train.py", "--model", "gpt2", "--deepspeed", "/d/ds_config.json"}));
  o.kind = tn::JobKind::Accelerate;
  rt::TrainConfig ddp = twoRanks(rt::ZeroStage::None);
  ddp.launcher = rt::Launcher::Slurm;
  const tn::JobLaunch a = tn::jobLaunch(o, ddp, "/d", false, "", 40001);
  EXPECT_EQ(std::vector<std::string>(a.argv.begin() + 5, a.argv.begin() + 12),
            (std::vector<std::string>{"/venv/bin/python", "-m", "accelerate.commands.launch", "--config_file",
                                      "/d/accelerate.yaml", "--main_process_port", "40001"}));
  // Where accelerate launch starts the config's processes itself (FSDP, GPUs), a launch per task
  // would multiply them: refused.
  EXPECT_THROW(tn::jobLaunch(o, c, "/d", false, "", 40001), trainscope::UserError);  // ZeRO-2: FSDP
  o.cpu = false;
  EXPECT_THROW(tn::jobLaunch(o, ddp, "/d", false, "", 40001), trainscope::UserError);
}

#ifdef TRAINSCOPE_SOURCE_DIR
// --runner's default probe is this build's own checkout's python/, never the one --python imports (a
// shared venv's .pth once named whichever clone last ran scripts/setup). Here --python imports another
// checkout's, an older one without site/: it was taken, and refused (--probe: … holds no sitecustomize).
TEST(Job, TheDefaultProbeIsThisCheckoutsNotTheOneTheVenvImports) {
  tn::TuneInputs f;
  f.runner = "hf";
  f.entry = std::string(TRAINSCOPE_SOURCE_DIR) + "/examples/hf_trainer.py";
  f.python = "python3";
  const char* old = std::getenv("PYTHONPATH");
  const std::string saved = old ? old : "";
  ::setenv("PYTHONPATH", TRAINSCOPE_SOURCE_DIR "/tests/data/other_checkout_probe", 1);
  std::string root, error;
  try {
    root = tn::jobOptions(f, trainscope::models::loadCluster("cpu-local"), trainscope::workloads::load("tiny")).probe_root;
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (old) ::setenv("PYTHONPATH", saved.c_str(), 1);
  else ::unsetenv("PYTHONPATH");
  EXPECT_EQ(error, "");
  EXPECT_EQ(root, TRAINSCOPE_SOURCE_DIR "/python");
}
#endif
