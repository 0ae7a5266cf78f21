// predict_flags_test.cpp — predict's flags and its --batch keys are one list (apps/predict_flags.h:
// runconfig's Parallelism list and predict's own fields): every field of it is a flag of
// `trainscope predict` and a key a --batch line takes, and every flag predict has is in it; the
// layout's fields set the priced plan (ep, which the batch lost once, and interleaving by its name).
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "predict_flags.h"

namespace rt = trainscope::runconfig;
namespace apps = trainscope::apps;
using trainscope::testing::cli;
using trainscope::testing::tempPath;

namespace {

// One JSON value for the field `key` of type T that a line of gpt2-124m on h100-80gb-x8 can take:
// the field's default, or for a count whose default means "not given" (0), a value of its own.
template <class T>
nlohmann::json valueFor(const std::string& key, const T& d) {
  if constexpr (std::is_same_v<T, rt::ZeroStage>)
    return rt::stageNumber(d);
  else if constexpr (std::is_same_v<T, rt::PipelineSchedule>)
    return rt::toString(d);
  else if constexpr (std::is_same_v<T, std::vector<std::string>>)
    return nlohmann::json::array();
  else if constexpr (std::is_same_v<T, double>)
    return 0.5;
  else if constexpr (std::is_same_v<T, int64_t>)
    return key == "nodes" ? 1 : key == "gpus" ? 8 : key == "gbs" ? 16 : key == "seq" ? 512 : d;
  else
    return d;
}

// The results of `predict ARGS --batch` over these lines, one JSON object per line, and the status.
std::pair<int, std::vector<nlohmann::json>> batch(const std::string& args, const std::vector<nlohmann::json>& lines,
                                                  const std::string& name) {
  const std::string in = tempPath(name + ".jsonl");
  {
    std::ofstream f(in);
    for (const auto& l : lines) f << l.dump() << "\n";
  }
  const auto r = cli("predict " + args + " --batch " + in);
  std::vector<nlohmann::json> out;
  std::istringstream text(r.output);
  for (std::string l; std::getline(text, l);)
    if (!l.empty() && l[0] == '{') out.push_back(nlohmann::json::parse(l));
  EXPECT_EQ(out.size(), lines.size()) << r.output;
  return {r.status, out};
}

}  // namespace

TEST(PredictFlags, EveryFieldOfTheOneListIsABatchKey) {
  std::vector<nlohmann::json> lines;
  std::vector<std::string> keys;
  int layout = 0;
  const apps::PredictFlags defaults;
  apps::visitPredictFields([&](const rt::Field& f, auto m) {
    keys.push_back(f.key);
    lines.push_back({{f.key, valueFor(f.key, defaults.*m)}});
  });
  // The layout's fields are among them, by the runconfig list's keys.
  rt::visitParallelism([&](const rt::Field& f, auto) {
    ++layout;
    EXPECT_NE(std::find(keys.begin(), keys.end(), f.key), keys.end()) << f.key;
  });
  EXPECT_EQ(layout, 9);  // tp, pp, cp, ep, virtual_stages, sequence_parallel, zero, zero_shard_size, pp_schedule
  const auto [status, out] = batch("--workload gpt2-124m --cluster h100-80gb-x8", lines, "every-key");
  EXPECT_EQ(status, 0);
  for (size_t i = 0; i < out.size(); ++i) {
    EXPECT_FALSE(out[i].contains("error")) << keys[i] << ": " << out[i];
    EXPECT_EQ(out[i]["line"], int64_t(i) + 1);
  }
}

TEST(PredictFlags, EveryFlagPredictHasIsInTheListOrIsAMode) {
  std::set<std::string> listed;
  apps::visitPredictFields([&](const rt::Field& f, auto) { listed.insert(f.flag); });
  const auto r = cli("predict --help");
  EXPECT_EQ(r.status, 0) << r.output;
  std::set<std::string> shown;
  std::istringstream text(r.output);
  for (std::string l; std::getline(text, l);) {
    const size_t at = l.find_first_not_of(' ');
    if (at == std::string::npos || l.compare(at, 2, "--") != 0) continue;
    const std::string flag = l.substr(at, l.find_first_of(" ,=", at) - at);
    shown.insert(flag);
    EXPECT_TRUE(listed.count(flag) || flag == "--batch" || flag == "--json" || flag == "--storage-gbps" || flag == "--help")
        << flag << " is a flag of predict outside the list: a --batch line could not take it";
  }
  for (const auto& f : listed) EXPECT_TRUE(shown.count(f)) << f << " is listed but not a flag of predict";
}

TEST(PredictFlags, TheLayoutKeysSetThePlanAndInterleavingHasOneName) {
  // ep on a MoE workload (once refused as "not a flag of predict"), and interleaving by its name,
  // in a batch line and on the command line alike.
  const std::string moe = "--workload gpt-moe-1.3b-128e --cluster h100-80gb-x8 --nodes 2 --gbs 64";
  const auto [status, out] = batch(moe,
                                   {{{"ep", 4}},
                                    {{"pp", 2}, {"pp_schedule", "interleaved"}},
                                    {{"pp", 2}, {"pp_schedule", "interleaved"}, {"virtual_stages", 4}},
                                    {{"pp", 2}, {"pp_schedule", "1f1b"}, {"virtual_stages", 3}},
                                    {{"pp", 2}, {"pp_schedule", "zigzag"}}},
                                   "layout");
  EXPECT_EQ(status, 2);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[0]["ep"], 4) << out[0];
  EXPECT_EQ(out[1]["pp_schedule"], "interleaved") << out[1];
  EXPECT_EQ(out[1]["virtual_stages"], 2) << out[1];  // interleaved alone: 2 chunks per stage
  EXPECT_EQ(out[2]["virtual_stages"], 4) << out[2];
  EXPECT_EQ(out[3]["pp_schedule"], "interleaved") << out[3];  // the older spelling, the same schedule
  EXPECT_EQ(out[3]["virtual_stages"], 3) << out[3];
  EXPECT_NE(out[4]["error"].get<std::string>().find("--batch line 5: pp_schedule"), std::string::npos) << out[4];
  EXPECT_NE(out[4]["error"].get<std::string>().find("gpipe|1f1b|interleaved"), std::string::npos) << out[4];
  // The command line: the same plan as the batch line.
  const auto r = cli("predict " + moe + " --pp 2 --pp-schedule interleaved --virtual-stages 4 --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output.substr(r.output.find('{')));
  EXPECT_EQ(j["virtual_stages"], 4);
  EXPECT_EQ(j["peak_bytes"], out[2]["peak_bytes"]);
  EXPECT_EQ(j["time"]["step_s"], out[2]["time"]["step_s"]);
}

TEST(PredictFlags, CpuLanesOnAGpuClusterAreRefusedNotIgnored) {
  const auto r = cli("predict --workload gpt2-124m --cluster h100-80gb-x8 --cpu-lanes 4");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--cpu-lanes: sets a CPU cluster's core lanes per rank; h100-80gb-x8 is a GPU cluster"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(cli("predict --workload gpt2-124m --cluster h100-80gb-x8 --cpu-lanes 1").status, 0);
}

// A file that is not a run database, as --profile: the error names --profile (it began "database:").
TEST(PredictFlags, AProfileThatIsNotARunDatabaseIsRefusedUnderItsFlag) {
  const std::string junk = tempPath("profile-junk.db");
  std::ofstream(junk) << "not sqlite\n";
  const auto r = cli("predict --workload gpt2-124m --cluster a100-80gb-x8 --profile " + junk);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("error: --profile: " + junk + " is not a trainscope run database"), std::string::npos) << r.output;
}

TEST(PredictFlags, InterleavedWithOneVirtualStageIsRefusedNotReadAsTwo) {
  // "interleaved" alone means 2 chunks a stage; given together with 1 the two contradict each other,
  // in either order on the command line and in a batch line (it once priced interleaved v2 silently).
  const std::string base = "predict --workload gpt3-13b --cluster a100-80gb-x8 --tp 2 --pp 4 --gbs 64 ";
  for (const std::string flags : {"--pp-schedule interleaved --virtual-stages 1", "--virtual-stages 1 --pp-schedule interleaved"}) {
    const auto r = cli(base + flags);
    EXPECT_EQ(r.status, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find("--pp-schedule: \"interleaved\" runs 2 or more model chunks"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("given as 1"), std::string::npos) << r.output;
  }
  // A flag's own parser that refuses while the command line is parsed exits 2 (it aborted, 134).
  const auto zigzag = cli("predict --pp-schedule zigzag");
  EXPECT_EQ(zigzag.status, 2) << zigzag.output;
  EXPECT_NE(zigzag.output.find("--pp-schedule: unknown value \"zigzag\""), std::string::npos) << zigzag.output;
  const auto [status, out] = batch("--workload gpt3-13b --cluster a100-80gb-x8 --tp 2 --gbs 64",
                                   {{{"pp", 4}, {"pp_schedule", "interleaved"}, {"virtual_stages", 1}},
                                    {{"pp", 4}, {"pp_schedule", "interleaved"}, {"virtual_stages", 3}}},
                                   "interleaved-one");
  EXPECT_EQ(status, 2);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NE(out[0]["error"].get<std::string>().find("pp_schedule: \"interleaved\" runs 2 or more"), std::string::npos) << out[0];
  // 40 layers do not split into 4 x 3 chunks: the message says which numbers.
  EXPECT_NE(out[1]["error"].get<std::string>().find("n_layer=40 divisible by pp x virtual_stages=4 x 3"), std::string::npos)
      << out[1];
}

TEST(PredictFlags, EveryFrameworkProfileIsABatchValueAndAnUnknownOneIsNamed) {
  const auto [status, out] = batch("--workload gpt2-124m --cluster a100-80gb-x8",
                                   {{{"framework", "fsdp"}, {"zero", 3}},
                                    {{"framework", "deepspeed"}, {"zero", 3}},
                                    {{"framework", "megatron"}},
                                    {{"framework", "jax"}}},
                                   "frameworks");
  EXPECT_EQ(status, 2);
  ASSERT_EQ(out.size(), 4u);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(out[i].contains("error")) << out[i];
  EXPECT_EQ(out[0]["framework"], "fsdp");
  EXPECT_EQ(out[1]["framework"], "deepspeed");
  const std::string e = out[3]["error"].get<std::string>();
  EXPECT_NE(e.find("--batch line 4: framework"), std::string::npos) << e;
  EXPECT_NE(e.find("trainscope, megatron, fsdp or deepspeed"), std::string::npos) << e;
}

TEST(PredictFlags, TheReduceDtypeIsAFlagAndABatchKeyCheckedAlikeAndRefusedWhereNothingReducesSo) {
  // FSDP FULL_SHARD of gpt2-124m on 8 A100s: fp32 reductions (the profile's) against bf16 (PURE).
  const std::string base = "--workload gpt2-124m --cluster a100-80gb-x8 --framework fsdp --zero 3";
  const auto flag = [&](const std::string& dtype) {
    const auto r = cli("predict " + base + " --reduce-dtype " + dtype + " --json");
    EXPECT_EQ(r.status, 0) << r.output;
    return nlohmann::json::parse(r.output.substr(r.output.find('{')));
  };
  const auto fp32 = flag("fp32"), bf16 = flag("bf16");
  const auto [status, out] = batch(base, {{{"reduce_dtype", "bf16"}}, {{"reduce_dtype", "fp32"}}, nlohmann::json::object(),
                                          {{"reduce_dtype", "int8"}}, {{"reduce_dtype", 2}}},
                                   "reduce-dtype");
  EXPECT_EQ(status, 2);
  ASSERT_EQ(out.size(), 5u);
  // A batch line with the key gives the flag's answer; the default is the profile's (fp32 for fsdp).
  EXPECT_EQ(out[0]["time"]["step_s"], bf16["time"]["step_s"]);
  EXPECT_EQ(out[0]["framework_memory"]["peak_bytes"], bf16["framework_memory"]["peak_bytes"]);
  EXPECT_EQ(out[1]["time"]["step_s"], fp32["time"]["step_s"]);
  EXPECT_EQ(out[2]["time"]["step_s"], fp32["time"]["step_s"]);
  EXPECT_GT(fp32["time"]["dp_comm_s"].get<double>(), bf16["time"]["dp_comm_s"].get<double>());
  // FSDP's reduce-scatter buffers are in the reduce dtype: the fp32 ones hold twice the bytes.
  EXPECT_GT(fp32["framework_memory"]["transient_bytes"].get<int64_t>(),
            bf16["framework_memory"]["transient_bytes"].get<int64_t>());
  for (size_t i : {3u, 4u}) {
    const std::string e = out[i]["error"].get<std::string>();
    EXPECT_NE(e.find("--batch line " + std::to_string(i + 1) + ": reduce_dtype"), std::string::npos) << e;
  }
  EXPECT_NE(out[3]["error"].get<std::string>().find("default, fp32, bf16 or fp16"), std::string::npos) << out[3];
  // A bad value on the command line names the flag and the values it takes.
  const auto bad = cli("predict " + base + " --reduce-dtype int8");
  EXPECT_EQ(bad.status, 2) << bad.output;
  EXPECT_NE(bad.output.find("--reduce-dtype"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("fp32"), std::string::npos) << bad.output;
  // This runtime reduces fp32 only; a CPU cluster's model prices fp32 reductions only.
  const auto own = cli("predict --workload gpt2-124m --cluster a100-80gb-x8 --zero 3 --reduce-dtype bf16");
  EXPECT_EQ(own.status, 2) << own.output;
  EXPECT_NE(own.output.find("--reduce-dtype: this runtime reduces gradients in fp32 only"), std::string::npos) << own.output;
  EXPECT_NE(own.output.find("--framework fsdp"), std::string::npos) << own.output;
  EXPECT_EQ(cli("predict --workload gpt2-124m --cluster a100-80gb-x8 --zero 3 --reduce-dtype fp32").status, 0);
  const auto cpu = cli("predict --workload gpt2-124m --cluster cpu-local --framework fsdp --reduce-dtype bf16");
  EXPECT_EQ(cpu.status, 2) << cpu.output;
  EXPECT_NE(cpu.output.find("--reduce-dtype: prices GPU clusters only"), std::string::npos) << cpu.output;
}

// Megatron-LM's distributed optimizer is its ZeRO-1. --use-distributed-optimizer had sharded only the
// Megatron column (DOES NOT FIT by the unsharded plan) and --zero 1 only the fit (18 bytes per
// parameter in the column): both flags now price one job. And the optimizer shards over dp x cp
// (megatron-core's intra_dp_cp_group): 6 + 12/4 bytes at dp 2 cp 2, not 6 + 12/2.
TEST(PredictFlags, MegatronsDistributedOptimizerAndZeroOneAreOneJob) {
  const std::string any = "predict --workload llama3-8b --cluster h100-80gb-x8 --gpus 8 --seq 4096 --gbs 16 "
                          "--ckpt selective --sequence-parallel --framework megatron --json",
                    base = any + " --tp 2";
  const auto json = [](const trainscope::testing::CliResult& r) {
    EXPECT_EQ(r.status, 0) << r.output;
    return nlohmann::json::parse(r.output.substr(r.output.find('{')));
  };
  const auto distopt = json(cli(base + " --use-distributed-optimizer")), zero1 = json(cli(base + " --zero 1")),
             plain = json(cli(base));
  for (const char* k : {"peak_bytes", "fits"}) EXPECT_EQ(distopt[k], zero1[k]) << k;
  const auto column = [](const nlohmann::json& j) { return j["stages"][0]["megatron_params_opt_bytes"].get<double>(); };
  EXPECT_EQ(column(distopt), column(zero1));
  EXPECT_NEAR(column(distopt) / column(plain), (6.0 + 12.0 / 4) / 18.0, 1e-9);  // dp 4
  EXPECT_LT(distopt["peak_bytes"].get<double>(), plain["peak_bytes"].get<double>());
  const auto cp = json(cli(base + " --cp 2 --use-distributed-optimizer")), cp_plain = json(cli(base + " --cp 2"));
  EXPECT_NEAR(column(cp) / column(cp_plain), (6.0 + 12.0 / 4) / 18.0, 1e-9);  // dp 2 x cp 2
  // One data-parallel rank: Megatron-LM takes the flag, and it shards nothing.
  const auto one = json(cli(any + " --tp 8 --use-distributed-optimizer")), one_plain = json(cli(any + " --tp 8"));
  EXPECT_EQ(column(one), column(one_plain));
  EXPECT_EQ(one["peak_bytes"], one_plain["peak_bytes"]);
}
