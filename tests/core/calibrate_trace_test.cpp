// calibrate_trace_test.cpp — `trainscope calibrate --trace` (tuner/trace_fit.h; docs/time-model.md,
// "Calibration from a trace"): a synthetic Kineto trace whose kernels last what the time model gives
// on a cluster with known constants is imported, and calibrate from the preset finds the constants
// again; kernel names are classified; bad input is refused naming the flag or key and the fix.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "kineto_events.h"
#include "trainscope/common/files.h"
#include "trainscope/models/fit_params.h"
#include "trainscope/rundb/import_probe.h"
#include "trainscope/tuner/trace_fit.h"

using trainscope::testing::cli;
using trainscope::testing::tempPath;
namespace ke = trainscope::testing::kineto_events;
namespace md = trainscope::models;
using nlohmann::json;

namespace {

const char* kConfig = R"({"workload": "gpt2-774m", "gpus": 8, "mbs": 8, "seq": 1024, "gbs": 64})";
const char* kFlags = "--workload gpt2-774m --gpus 8 --mbs 8 --seq 1024 --gbs 64";

std::string presetText(const std::string& name) {
  return trainscope::files::readTextFile(md::loadCluster(name).source, "--cluster", "");
}

json lastJson(const std::string& out) {
  const size_t at = out.rfind("\n{");
  return json::parse(out.substr(at == std::string::npos ? out.find('{') : at + 1));
}

double predictStep(const std::string& cluster) {
  const auto r = cli("predict --cluster " + cluster + " " + kFlags + " --json");
  EXPECT_EQ(r.status, 0) << r.output;
  return lastJson(r.output)["time"]["step_s"].get<double>();
}

// The time model's seconds per step in the class that `path` sets, on `truth` (trace_fit.h's rule:
// the step's change when the constant moves by 25%, times (1 + ε)/ε).
double classSeconds(const std::map<std::string, double>& truth, const std::string& path) {
  std::map<std::string, double> moved = truth;
  moved[path] *= 1.25;
  const std::string a = tempPath("trace-truth.json"), b = tempPath("trace-moved.json");
  std::ofstream(a) << md::withParams(presetText("a100-80gb-x8"), truth, "a100-80gb-x8");
  std::ofstream(b) << md::withParams(presetText("a100-80gb-x8"), moved, "a100-80gb-x8");
  return (predictStep(a) - predictStep(b)) * 5;
}

// One step's kernels: `n` kernels named `name` lasting `total_s` together, back to back from `t` (µs).
void kernels(json& ev, const std::string& name, double total_s, int n, double& t, int stream) {
  for (int i = 0; i < n; ++i) {
    ev.push_back(ke::kernel(name, -1, stream, t, total_s * 1e6 / n));
    t += total_s * 1e6 / n;
  }
}

json ncclKernel(int64_t bytes, double ts, double dur) {
  json k = ke::kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", -1, 20, ts, dur);
  k["args"]["Collective name"] = "allreduce";
  k["args"]["In msg nelems"] = bytes / 2;
  k["args"]["Out msg nelems"] = bytes / 2;
  k["args"]["dtype"] = "BFloat16";
  k["args"]["Group size"] = 8;
  k["args"]["Process Group Name"] = "0";
  return k;
}

}  // namespace

TEST(CalibrateTrace, KernelsAndOpsAreClassifiedByName) {
  namespace tn = trainscope::tuner;
  EXPECT_EQ(tn::kernelClass("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32"), "gemm");
  EXPECT_EQ(tn::kernelClass("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"), "gemm");
  EXPECT_EQ(tn::kernelClass("nvjet_tst_192x192_64x4_1x2_h_bz_coopB_TNT"), "gemm");
  EXPECT_EQ(tn::kernelClass("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>"), "attention_forward");
  EXPECT_EQ(tn::kernelClass("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel"), "attention_backward");
  EXPECT_EQ(tn::kernelClass("fmha_cutlassB_bf16_aligned_64x64_k128_sm80"), "attention_backward");
  EXPECT_EQ(tn::kernelClass("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>"), "memory");
  EXPECT_EQ(tn::kernelClass("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"), "comm");
  EXPECT_EQ(tn::hostOpClass("aten::addmm"), "gemm");
  EXPECT_EQ(tn::hostOpClass("MmBackward0"), "gemm");
  EXPECT_EQ(tn::hostOpClass("aten::_scaled_dot_product_flash_attention_for_cpu"), "attention_forward");
  EXPECT_EQ(tn::hostOpClass("ScaledDotProductFlashAttentionForCpuBackward0"), "attention_backward");
  EXPECT_EQ(tn::hostOpClass("aten::gelu"), "memory");
  // This runtime's CPU ops (--trace-level ops): oneDNN's linear, its own autograd nodes.
  EXPECT_EQ(tn::hostOpClass("mkldnn::_linear_pointwise"), "gemm");
  EXPECT_EQ(tn::hostOpClass("autograd::engine::evaluate_function: torch::autograd::CppNode<trainscope::runtime::"
                            "(anonymous namespace)::LinearAdd>"), "gemm");
  EXPECT_EQ(tn::hostOpClass("torch::autograd::CppNode<trainscope::runtime::cpu_ops::(anonymous namespace)::"
                            "CausalAttention>"), "attention_backward");
  EXPECT_EQ(tn::hostOpClass("autograd::engine::evaluate_function: NativeLayerNormBackward0"), "");
}

// Tolerance: 5% on every constant (the trace's times are the model's own at the truth, rounded to the
// ns the importer keeps; what is left is the fixed point's interaction through the overlap terms).
TEST(CalibrateTrace, RecoversKnownConstantsFromASyntheticKinetoTrace) {
  const md::Cluster preset = md::loadCluster("a100-80gb-x8");
  const std::map<std::string, double> truth = {{"sustained_clock", 0.8},
                                               {"memory_efficiency", 0.6},
                                               {"frameworks.trainscope.flash_forward_scale", 0.8},
                                               {"frameworks.trainscope.flash_backward_scale", 0.7},
                                               {"dispatch_s", 2e-5}};
  const double gemm = classSeconds(truth, "sustained_clock"), memory = classSeconds(truth, "memory_efficiency"),
               fwd = classSeconds(truth, "frameworks.trainscope.flash_forward_scale"),
               bwd = classSeconds(truth, "frameworks.trainscope.flash_backward_scale");
  ASSERT_GT(gemm, 0);
  ASSERT_GT(memory, 0);
  ASSERT_GT(fwd, 0);
  ASSERT_GT(bwd, 0);
  const double alpha = 1e-5, bw = 0.5 * preset.intra_node.bandwidth;  // the collectives' truth
  const int per_class = 40, launches = 4 * per_class;
  const double step_us = (gemm + memory + fwd + bwd) * 1e6 + 5000;
  json ev = json::array();
  for (int k = 0; k < 4; ++k) {
    const double s = 100 + k * step_us;
    ev.push_back(ke::step(k, s, step_us - 1));
    double t = s + 1;
    kernels(ev, "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4", gemm, per_class, t, 7);
    kernels(ev, "void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", fwd, per_class, t, 7);
    kernels(ev, "flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", bwd, per_class, t, 7);
    kernels(ev, "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor>", memory, per_class, t, 7);
    for (int i = 0; i < launches; ++i) ev.push_back(ke::op("aten::add", s + 1 + i * 20.0, 20.0));  // 20 us per launch
    double c = s + 1;
    for (int64_t bytes = 1 << 20; bytes <= (32 << 20); bytes *= 2) {
      const double dur = (alpha * 14 + double(bytes) * 14.0 / 8.0 / bw) * 1e6;
      ev.push_back(ncclKernel(bytes, c, dur));
      c += dur + 1;
    }
  }
  const std::string db = ke::importOne(ev, "calibrate-trace"), out = tempPath("trace-fitted.json");
  std::remove(out.c_str());
  const auto r = cli("calibrate --cluster a100-80gb-x8 --trace " + db + " --config '" + kConfig + "' -o " + out + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const json cal = lastJson(r.output);
  std::map<std::string, double> want = truth;
  want["intra_node.efficiency"] = 0.5;
  want["intra_node.latency"] = alpha;
  for (const auto& [path, v] : want) {
    ASSERT_TRUE(cal["fitted"].contains(path)) << path << "\n" << r.output;
    EXPECT_NEAR(cal["fitted"][path]["value"].get<double>() / v, 1.0, 0.05) << path << "\n" << cal.dump(1);
  }
  // The written file is a cluster file predict reads, with the fitted values and the record.
  const md::Cluster fitted = md::loadCluster(out);
  EXPECT_NEAR(fitted.sustained_clock, 0.8, 0.04);
  const auto p = cli("predict --cluster " + out + " " + kFlags);
  EXPECT_EQ(p.status, 0) << p.output;
  EXPECT_NE(p.output.find("from the calibration of"), std::string::npos) << p.output;
  // A trace's fit is not cross-validated: its interval is the fit's own rows', and says so (it said
  // "held-out rows").
  EXPECT_NE(p.output.find("90% of its fitted rows, in sample (it was not cross-validated"), std::string::npos)
      << p.output;
  EXPECT_EQ(p.output.find("held-out"), std::string::npos) << p.output;
  // The same trace on a file whose record says a study fitted sustained_clock (0.9): --keep-fitted
  // keeps it and fits every other class around it, within 5%; the trace's 0.8 is recorded. The flash
  // scales multiply the clock (attention runs at clock × scale), so they come out 0.8/0.9 of theirs:
  // the attention kernels' measured time is kept whole.
  json study = json::parse(presetText("a100-80gb-x8"));
  study["sustained_clock"] = 0.9;
  study["calibration"] = {{"fitted", {{"sustained_clock", {{"value", 0.9}}}}},
                          {"rows", {{{"source", "study.db"}, {"rows", 40}}}}, {"date", "2026-12-07T10:00:00Z"}};
  const std::string studied = tempPath("trace-studied.json"), kept = tempPath("trace-kept.json");
  std::ofstream(studied) << study.dump(2);
  std::remove(kept.c_str());
  const auto k = cli("calibrate --cluster " + studied + " --trace " + db + " --config '" + kConfig + "' -o " + kept +
                     " --keep-fitted --json");
  ASSERT_EQ(k.status, 0) << k.output;
  EXPECT_NE(k.output.find("kept sustained_clock at 0.9 (fitted by calibrate --from study.db (40 rows), "
                          "2026-12-07T10:00:00Z); this trace alone gives 0.8"),
            std::string::npos)
      << k.output;
  const json kcal = lastJson(k.output);
  // Recorded as fitted still, inherited from the study: a later --trace keeps guarding it.
  ASSERT_TRUE(kcal["fitted"].contains("sustained_clock")) << kcal.dump(1);
  EXPECT_DOUBLE_EQ(kcal["fitted"]["sustained_clock"]["value"].get<double>(), 0.9);
  EXPECT_EQ(kcal["fitted"]["sustained_clock"]["inherited"].get<std::string>().rfind("calibrate --from study.db (40 rows)", 0),
            0u)
      << kcal.dump(1);
  EXPECT_NEAR(kcal["kept"]["sustained_clock"]["trace_value"].get<double>(), 0.8, 0.04);
  EXPECT_EQ(kcal["previous"], study["calibration"]);
  EXPECT_DOUBLE_EQ(md::loadCluster(kept).sustained_clock, 0.9);
  for (const auto& [path, v] : want) {
    if (path == "sustained_clock") continue;
    const double ratio = path.find("flash_") != std::string::npos ? 0.8 / 0.9 : 1.0;
    EXPECT_NEAR(kcal["fitted"][path]["value"].get<double>() / v, ratio, 0.05) << path;
  }
}

// A trace whose forward runs on the Python thread and backward on CUDA's autograd thread (their
// launches joined to their kernels by correlation id), and whose gradient all-reduce runs partly
// beside compute: calibrate finds the forward's host cost per launch (dispatch_s, which the
// trainscope profile defers to), the backward's (host_backward_op_s) and the share of the reduction
// the model could hide that the trace shows hidden (overlap_reduce), with the kernel classes' rates
// as the test above, each within 5%.
TEST(CalibrateTrace, RecoversTheBackwardsHostCostAndTheReductionsOverlap) {
  const std::map<std::string, double> truth = {{"sustained_clock", 0.8},
                                               {"memory_efficiency", 0.6},
                                               {"frameworks.trainscope.flash_forward_scale", 0.8},
                                               {"frameworks.trainscope.flash_backward_scale", 0.7},
                                               {"dispatch_s", 2e-5},
                                               {"frameworks.trainscope.host_backward_op_s", 8e-6},
                                               {"frameworks.trainscope.overlap_reduce", 0.6}};
  const double gemm = classSeconds(truth, "sustained_clock"), memory = classSeconds(truth, "memory_efficiency"),
               fwd = classSeconds(truth, "frameworks.trainscope.flash_forward_scale"),
               bwd = classSeconds(truth, "frameworks.trainscope.flash_backward_scale");
  // What the model could hide of the reduction (the step at overlap_reduce 0 less at 1), at the truth.
  auto stepWith = [&](double share) {
    std::map<std::string, double> t = truth;
    t["frameworks.trainscope.overlap_reduce"] = share;
    const std::string f = tempPath("trace-overlap.json");
    std::ofstream(f) << md::withParams(presetText("a100-80gb-x8"), t, "a100-80gb-x8");
    return predictStep(f);
  };
  const double hideable = stepWith(0) - stepWith(1), hidden = 0.6 * hideable, exposed = 2e-3;
  ASSERT_GT(hideable, 1e-3);
  const int per_class = 40;
  const double compute_us = (gemm + memory + fwd + bwd) * 1e6;
  ASSERT_GT(compute_us, hidden * 1e6 + 10);
  const double step_us = compute_us + exposed * 1e6 + 5000;
  json ev = json::array();
  int corr = 1;
  // A kernel of `name` lasting `total_s / per_class` at `t` on stream 7, launched from host thread
  // `tid` inside an op of `op_us` named `op` that starts at `h` (µs).
  auto launched = [&](const std::string& name, double total_s, double& t, int tid, const std::string& op,
                      double op_us, double& h) {
    for (int i = 0; i < per_class; ++i, ++corr) {
      json o = ke::op(op, h, op_us), l = ke::launch(corr, h + 1);
      o["tid"] = tid, l["tid"] = tid;
      ev.push_back(o), ev.push_back(l);
      ev.push_back(ke::kernel(name, corr, 7, t, total_s * 1e6 / per_class));
      t += total_s * 1e6 / per_class;
      h += op_us;
    }
  };
  for (int k = 0; k < 4; ++k) {
    const double s = 100 + k * step_us;
    ev.push_back(ke::step(k, s, step_us - 1));
    double t = s + 1, hf = s + 1, hb = s + 1;
    launched("sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4", gemm, t, 1, "aten::mm", 20, hf);
    launched("void flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4>>", fwd, t, 1, "aten::add", 20, hf);
    launched("flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel", bwd, t, 2,
             "autograd::engine::evaluate_function: FlashAttnBackward0", 8, hb);
    launched("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor>", memory, t, 2,
             "autograd::engine::evaluate_function: AddBackward0", 8, hb);
    // The gradient all-reduce: `hidden` beside the compute kernels, `exposed` after them (one size:
    // no alpha-beta fit of the tier).
    ev.push_back(ncclKernel(64 << 20, s + 1, hidden * 1e6));
    ev.push_back(ncclKernel(64 << 20, t + 1, exposed * 1e6));
  }
  const std::string db = ke::importOne(ev, "calibrate-trace-bwd"), out = tempPath("trace-bwd-fitted.json");
  std::remove(out.c_str());
  const auto r = cli("calibrate --cluster a100-80gb-x8 --trace " + db + " --config '" + kConfig + "' -o " + out + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const json cal = lastJson(r.output);
  for (const auto& [path, v] : truth) {
    ASSERT_TRUE(cal["fitted"].contains(path)) << path << "\n" << cal.dump(1);
    EXPECT_NEAR(cal["fitted"][path]["value"].get<double>() / v, 1.0, 0.05) << path << "\n" << cal.dump(1);
  }
  EXPECT_NEAR(cal["rows"][0]["gradient_reduction_hidden_s"].get<double>(), hidden, hidden * 1e-3);
  EXPECT_NEAR(cal["rows"][0]["backward_launches_per_step"].get<double>(), 2 * per_class, 1e-9);
  // Without a backward thread of its own (the same kernels, no launches): the backward keeps its
  // value, and the record says why.
  json plain = json::array();
  for (const json& e : ev)
    if (e["cat"] != "cuda_runtime") plain.push_back(e);
  const std::string db2 = ke::importOne(plain, "calibrate-trace-nobwd");
  const auto r2 = cli("calibrate --cluster a100-80gb-x8 --trace " + db2 + " --config '" + kConfig + "' -o " + out +
                      " --overwrite --json");
  ASSERT_EQ(r2.status, 0) << r2.output;
  const json cal2 = lastJson(r2.output);
  EXPECT_FALSE(cal2["fitted"].contains("frameworks.trainscope.host_backward_op_s")) << cal2.dump(1);
  EXPECT_NE(cal2["notes"].dump().find("host cost per backward op: not fitted"), std::string::npos) << cal2.dump(1);
}

TEST(CalibrateTrace, BadInputIsRefusedNamingTheFlagAndTheFix) {
  json ev = json::array();
  for (int k = 0; k < 3; ++k) {
    ev.push_back(ke::step(k, 100 + k * 1000, 900));
    ev.push_back(ke::kernel("sm80_xmma_gemm_bf16bf16", -1, 7, 110 + k * 1000, 500));
  }
  const std::string db = ke::importOne(ev, "calibrate-trace-bad"), out = tempPath("trace-bad.json");
  auto refused = [&](const std::string& args, const std::string& what) {
    const auto r = cli("calibrate --cluster a100-80gb-x8 -o " + out + " " + args);
    EXPECT_NE(r.status, 0) << args;
    EXPECT_NE(r.output.find(what), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("terminate"), std::string::npos) << r.output;
  };
  refused("--trace " + db, "--config: " + db + " records no training configuration");
  refused("--trace " + db + " --config '[1]'", "--config: is not a JSON object");
  refused("--trace " + db + " --config '{\"gpus\": 8, \"mbs\": 0}'", "--config");
  refused("--trace " + db + " --config '{\"measured_step_s\": 1}'", "--config: measured_step_s");
  refused("--from x.jsonl --trace " + db, "--trace: cannot be given with --from");
  refused("--config '{}'", "--from: is needed");
  // The configuration's ranks against the trace's: rank 3 in a 2-rank configuration.
  const std::string r3 = tempPath("calibrate-rank3.json"), r3db = tempPath("calibrate-rank3.db");
  std::ofstream(r3) << json{{"baseTimeNanoseconds", ke::kEventsBase}, {"distributedInfo", {{"rank", 3}}}, {"traceEvents", ev}}.dump();
  ASSERT_EQ(cli("import " + r3 + " -o " + r3db).status, 0);
  refused("--trace " + r3db + " --config '{\"workload\": \"gpt2-124m\", \"gpus\": 2, \"mbs\": 1, \"seq\": 128, \"gbs\": 2}'",
          "the largest rank 3");
  // A trace with steps and nothing in them.
  const std::string empty = ke::importOne(json::array({ke::step(0, 100, 900), ke::step(1, 1100, 900)}), "calibrate-trace-empty");
  refused("--trace " + empty + " --config '{\"gpus\": 8}'", "holds no kernels and no CPU ops");
  // CPU ops only, against a GPU cluster.
  const std::string ops = ke::importOne(json::array({ke::step(0, 100, 900), ke::op("aten::mm", 110, 500)}), "calibrate-trace-ops");
  refused("--trace " + ops + " --config '{\"gpus\": 8}'", "--cluster: " + ops + " holds no GPU kernels");
}

// Another framework's CPU job (an external runner's trial, or --config's "framework"): its step is its
// ops plus its Python host work. The trace fits the ops' rates, and the step they leave (here 36 of 40
// ms) sets the profile's host cost per op, so the fitted file prices the measured step; the same
// trace of this runtime's own job keeps the note (its CPU ops are the work itself) and fits no host
// constant. Before, the external job's fit moved only the rates and its error grew (69.6% -> 70.8% on
// a `tune --runner hf` trial, docs/time-model.md).
TEST(CalibrateTrace, AnExternalFrameworksCpuTraceFitsItsHostCostPerOp) {
  json ev = json::array();
  const double step_us = 40000;
  for (int k = 0; k < 4; ++k) {
    const double s = 100 + k * step_us;
    ev.push_back(ke::step(k, s, step_us - 1));
    for (int i = 0; i < 8; ++i) ev.push_back(ke::op("aten::mm", s + 10 + i * 4000, 400));    // 3.2 ms of GEMMs
    for (int i = 0; i < 8; ++i) ev.push_back(ke::op("aten::gelu", s + 500 + i * 4000, 100));  // 0.8 ms memory-bound
  }
  const std::string db = ke::importOne(ev, "calibrate-trace-external");
  const std::string config = R"({"workload": "tiny", "gpus": 1, "mbs": 2, "seq": 32, "gbs": 4)";
  const auto fit = [&](const std::string& fw, const std::string& name) {
    const std::string out = tempPath(name);
    std::remove(out.c_str());
    const auto r = cli("calibrate --cluster cpu-local --replace-fitted --trace " + db + " --config '" + config + fw + "}' -o " + out +
                       " --json");
    EXPECT_EQ(r.status, 0) << r.output;
    return lastJson(r.output);
  };
  const json ext = fit(R"(, "framework": "fsdp")", "trace-external.json");
  ASSERT_TRUE(ext["fitted"].contains("frameworks.fsdp.host_op_s")) << ext.dump(1);
  const json& host = ext["fitted"]["frameworks.fsdp.host_op_s"];
  EXPECT_FALSE(host["at_bound"].get<bool>()) << host.dump(1);
  EXPECT_GT(host["value"].get<double>(), 0);
  EXPECT_NEAR(host["per_step_s"]["measured"].get<double>(), 0.040, 1e-4);
  EXPECT_NEAR(host["per_step_s"]["model_fitted"].get<double>(), 0.040, 4e-4);  // the step, closed by the host work
  EXPECT_GT(ext["base_residuals"]["mape"].get<double>(), 0.5);
  EXPECT_LT(ext["residuals"]["mape"].get<double>(), 0.01) << ext["residuals"].dump();
  const auto p = cli("predict --cluster " + tempPath("trace-external.json") +
                     " --workload tiny --gpus 1 --mbs 2 --seq 32 --gbs 4 --framework fsdp --json");
  ASSERT_EQ(p.status, 0) << p.output;
  EXPECT_NEAR(lastJson(p.output)["time"]["step_s"].get<double>(), 0.040, 4e-4) << p.output;
  const json own = fit("", "trace-own.json");
  EXPECT_FALSE(own["fitted"].contains("frameworks.trainscope.host_op_s")) << own.dump(1);
  EXPECT_FALSE(own["fitted"].contains("dispatch_s")) << own.dump(1);
  EXPECT_NE(own["notes"].dump().find("the CPU ops are the work itself"), std::string::npos) << own.dump(1);
}

// Known constants: a trace whose steps last what the time model gives for an FSDP job with
// frameworks.fsdp.host_op_s 40 us on cpu-local (its ops unclassified, so the rates stay the preset's)
// gives 40 us back from the preset's 55 us.
TEST(CalibrateTrace, AnExternalFrameworksHostCostPerOpIsRecovered) {
  const std::string truth = tempPath("trace-host-truth.json");
  std::ofstream(truth) << md::withParams(presetText("cpu-local"), {{"frameworks.fsdp.host_op_s", 4e-5}}, "cpu-local");
  const std::string flags = "--workload tiny --gpus 1 --mbs 2 --seq 32 --gbs 4 --framework fsdp";
  const auto p = cli("predict --cluster " + truth + " " + flags + " --json");
  ASSERT_EQ(p.status, 0) << p.output;
  const double step_us = lastJson(p.output)["time"]["step_s"].get<double>() * 1e6;
  json ev = json::array();
  for (int k = 0; k < 4; ++k) {
    ev.push_back(ke::step(k, 100 + k * step_us, step_us));
    ev.push_back(ke::op("autograd::engine::evaluate_function: NativeLayerNormBackward0", 110 + k * step_us, 50));
  }
  const std::string db = ke::importOne(ev, "calibrate-trace-host"), out = tempPath("trace-host-fitted.json");
  std::remove(out.c_str());
  const std::string args = "calibrate --cluster cpu-local --trace " + db +
                           R"( --config '{"workload": "tiny", "gpus": 1, "mbs": 2, "seq": 32, "gbs": 4, "framework": "fsdp"}' -o )" +
                           out + " --json";
  // cpu-local's host_op_s is a shipped fit (its "fitted"): a trace replaces it only when told to.
  const auto refused = cli(args);
  EXPECT_EQ(refused.status, 2) << refused.output;
  EXPECT_NE(refused.output.find("would replace frameworks.fsdp.host_op_s: 5.503e-05 -> 4e-05 (this trace); 5.503e-05 "
                                "was fitted by the shipped fit of cpu-local"),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("--replace-fitted"), std::string::npos) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing written";
  const auto r = cli(args + " --replace-fitted");
  ASSERT_EQ(r.status, 0) << r.output;
  const json cal = lastJson(r.output);
  ASSERT_TRUE(cal["fitted"].contains("frameworks.fsdp.host_op_s")) << cal.dump(1);
  EXPECT_NEAR(cal["fitted"]["frameworks.fsdp.host_op_s"]["value"].get<double>(), 4e-5, 4e-7) << cal.dump(1);
  EXPECT_NEAR(cal["fitted"]["frameworks.fsdp.host_op_s"]["base"].get<double>(), 5.503e-5, 1e-9);
  EXPECT_FALSE(cal["fitted"].contains("frameworks.fsdp.zero0_step_tensor_s")) << "one micro-batch count";
  EXPECT_FALSE(cal["fitted"].contains("peak_flops.fp32")) << cal.dump(1);
}

namespace {

// A `tune --runner hf` trial's database as the tuner writes it (rundb::importProbe): the probe's steps
// (4 after the warm-up, each `step_s`), a Kineto trace holding one unclassified CPU op a step (so no
// rate moves), and the trial's resolved configuration and framework in its meta.
std::string hfTrial(const std::string& name, int64_t mbs, double step_s) {
  const std::string dir = tempPath(name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const double step_us = step_s * 1e6;
  json ev = json::array();
  std::ofstream steps(dir + "/rank0.steps.jsonl");
  for (int k = 0; k < 5; ++k) {
    const double s = 100 + k * step_us;
    ev.push_back(ke::step(k, s, step_us));
    ev.push_back(ke::op("autograd::engine::evaluate_function: NativeLayerNormBackward0", s + 10, 50));
    steps << json{{"rank", 0}, {"step", k}, {"start_ns", ke::kEventsBase + int64_t(s * 1000)},
                  {"step_time_ns", int64_t(step_us * 1000)}, {"tokens", 128}, {"loss", 4.7}, {"peak_bytes", 700 << 20},
                  {"world", 1}}.dump() << "\n";
  }
  steps.close();
  std::ofstream(dir + "/rank0.trace.json") << json{{"baseTimeNanoseconds", ke::kEventsBase}, {"traceEvents", ev}}.dump();
  const json config = {{"workload", "tiny"}, {"mbs", mbs}, {"ga", 4 / mbs}, {"gbs", 4}, {"seq", 32}, {"dp", 1},
                       {"tp", 1}, {"pp", 1}, {"precision", "fp32"}, {"ckpt", "none"}, {"zero", 0}, {"cpu_lanes", 2}};
  trainscope::rundb::importProbe({dir + "/rank0.steps.jsonl"}, {dir + "/rank0.trace.json"}, dir + "/trial.db", "tiny",
                                 "--study", {{"config", config.dump()}, {"framework", "fsdp"}, {"device", "cpu"}});
  return dir + "/trial.db";
}

// The model's step for `db`'s configuration on `cluster`: its measured step × (1 + the signed error).
double modelStep(const std::string& cluster, const std::string& db, double measured_s) {
  const auto r = cli("calibrate --cluster " + cluster + " --from " + db + " --evaluate --json");
  EXPECT_EQ(r.status, 0) << r.output;
  return measured_s * (1 + lastJson(r.output)["median_signed_error"].get<double>());
}

}  // namespace

// Two trials of an HF job at 2 and 4 micro-batches a step: their steps, at what the model gives with
// frameworks.fsdp.host_op_s 40 us and zero0_step_tensor_s 0.2 ms on cpu-local, give both back (the
// per-step term is separable from the per-micro-batch one only across micro-batch counts); the
// trials' own meta names the framework, no --config.
TEST(CalibrateTrace, TwoMicroBatchCountsSeparateThePerStepHostWork) {
  const std::string truth = tempPath("trace-hf-truth.json");
  std::ofstream(truth) << md::withParams(presetText("cpu-local"),
                                         {{"frameworks.fsdp.host_op_s", 4e-5}, {"frameworks.fsdp.zero0_step_tensor_s", 2e-4}},
                                         "cpu-local");
  const double a = modelStep(truth, hfTrial("trace-hf-probe-a", 2, 0.012), 0.012);
  const double b = modelStep(truth, hfTrial("trace-hf-probe-b", 1, 0.016), 0.016);
  ASSERT_GT(b, a);
  const std::string da = hfTrial("trace-hf-a", 2, a), db = hfTrial("trace-hf-b", 1, b), out = tempPath("trace-hf-fitted.json");
  std::remove(out.c_str());
  const auto r = cli("calibrate --cluster cpu-local --replace-fitted --trace " + da + " --trace " + db + " -o " + out + " --json");
  ASSERT_EQ(r.status, 0) << r.output;
  const json cal = lastJson(r.output);
  for (const auto& [path, v] : {std::pair<const char*, double>{"frameworks.fsdp.host_op_s", 4e-5},
                                {"frameworks.fsdp.zero0_step_tensor_s", 2e-4}}) {
    ASSERT_TRUE(cal["fitted"].contains(path)) << path << "\n" << cal.dump(1);
    EXPECT_NEAR(cal["fitted"][path]["value"].get<double>() / v, 1.0, 0.02) << path << "\n" << cal.dump(1);
  }
  EXPECT_LT(cal["residuals"]["mape"].get<double>(), 0.005) << cal["residuals"].dump();
}
