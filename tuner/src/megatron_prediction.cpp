// megatron_prediction.cpp — see megatron_prediction.h.
#include "trainscope/tuner/megatron_prediction.h"

#include <cstdio>
#include <exception>

#include "trainscope/models/framework_memory.h"
#include "trainscope/tuner/job.h"
#include "trainscope/tuner/models.h"

namespace trainscope::tuner {

std::string megatronPrediction(const StudyInputs& study, const runconfig::TrainConfig& c) {
  Cluster cl;
  try {
    cl = loadCluster(study.cluster);
    if (study.devices > cl.devices_per_node) cl = loadCluster(study.cluster, study.devices / cl.devices_per_node);
  } catch (const std::exception&) {
    return "no Megatron-LM prediction: the study's cluster \"" + study.cluster +
           "\" is not a preset here (trainscope predict --framework megatron --cluster FILE gives one)";
  }
  if (cl.kind != ClusterKind::Gpu)
    return "no Megatron-LM prediction: the study ran on a CPU cluster (trainscope predict --framework megatron "
           "--cluster a100-80gb-x8 … prices the plan on GPUs)";
  const Plan p = planOf(c);
  // The export leaves --transformer-impl and --attention-backend at megatron-core's defaults
  // (transformer_engine, auto: a fused flash kernel), which is what Attention::Default prices, in the
  // time as in the memory column (layer_ops.h).
  const TimePrediction meg = predictTime(c.model, p, cl, exportedJobOptions(Framework::Megatron, p));
  const TimePrediction own = predictTime(c.model, p, cl, {-1.0, Framework::Trainscope});
  const MemoryPrediction m = predictMemory(c.model, p);
  const MegatronPeak meg_peak = megatronPeak(c.model, p, m);  // its theoretical memory, worst stage
  char text[400];
  std::snprintf(text, sizeof(text),
                "predicted on %s: Megatron-LM %.4g s/step (MFU %.0f%%), %.3g GiB on stage %lld; this runtime %.4g "
                "s/step, %.3g GiB on its busiest stage",
                cl.name.c_str(), meg.step_s, meg.mfu * 100, double(meg_peak.bytes) / double(1 << 30),
                static_cast<long long>(meg_peak.stage), own.step_s, double(m.peak()) / double(1 << 30));
  return text;
}

namespace {

// A CPU study (Gloo ranks): the job as that framework's runner would run the plan on these ranks
// (job.h jobRefusal, the same rule `tune --runner` applies), priced under the cluster's profile for
// it: the CPU rates plus the job's Python host work (time_model.h host_s; cpu-local.json's fitted
// `frameworks` constants). A plan the runner would not run as exported gets the reason instead.
std::string cpuFrameworkPrediction(const Cluster& cl, const runconfig::TrainConfig& c, const Plan& p, Framework f) {
  const JobKind runner = f == Framework::Deepspeed ? JobKind::DeepSpeed : JobKind::Hf;
  // The Trainer's layout on these ranks: DDP, or FSDP over dp > 1 (--runner hf's CPU trials run it
  // through the probe's cpu_fsdp shim, job.cpp).
  const char* who = f == Framework::Deepspeed                                     ? "DeepSpeed"
                    : p.dp <= 1 || c.zero < runconfig::ZeroStage::Gradients       ? "Hugging Face Trainer/Accelerate (DDP)"
                    : c.zero == runconfig::ZeroStage::Gradients                   ? "Hugging Face Trainer (FSDP SHARD_GRAD_OP)"
                                                                                   : "Hugging Face Trainer (FSDP FULL_SHARD)";
  const std::string refusal = jobRefusal(runner, p, /*cpu=*/true);
  if (!refusal.empty())
    return std::string("no ") + (f == Framework::Deepspeed ? "DeepSpeed" : "PyTorch FSDP") + " prediction on " +
           cl.name + ": " + refusal + " (trainscope predict --framework " + frameworkKey(f) +
           " --cluster a100-80gb-x8 … prices the plan on GPUs)";
  // Without per-op or per-micro-batch host costs in the file (a CPU file's dispatch_s is 0) the job
  // would price as this runtime's step plus, at most, ZeRO-3's hooks: not that framework's prediction.
  const FrameworkProfile& fp = cl.profile(f);
  const bool fitted = fp.host_micro_batch_s > 0 || fp.host_op_s > 0 || fp.host_backward_op_s > 0 ||
                      ((fp.host_op_s < 0 || fp.host_backward_op_s < 0) && cl.dispatch_s > 0);
  if (!fitted) {
    const std::string key = frameworkKey(f);
    return std::string("no ") + (f == Framework::Deepspeed ? "DeepSpeed" : "Hugging Face") + " prediction on " +
           cl.name + ": its cluster file fits no `" + key + "` host costs, so the job would price as this runtime "
           "(trainscope calibrate --cluster " + cl.name + " --from STUDY --fit frameworks." + key +
           ".host_op_s,frameworks." + key + ".host_micro_batch_s fits them from a tune --runner " +
           toString(runner) + " study)";
  }
  const TimePrediction them = predictTime(c.model, p, cl, {-1.0, f});
  const TimePrediction own = predictTime(c.model, p, cl, {-1.0, Framework::Trainscope});
  char text[400];
  std::snprintf(text, sizeof(text),
                "predicted on %s: %s %.4g s/step (of which the job's Python host work %.4g s); this runtime %.4g s/step",
                cl.name.c_str(), who, them.step_s, them.host_s, own.step_s);
  return text;
}

}  // namespace

std::string frameworkPrediction(const StudyInputs& study, const runconfig::TrainConfig& c, Framework f,
                                double reduce_bytes) {
  if (f == Framework::Megatron) return megatronPrediction(study, c);
  // The fsdp profile prices PyTorch's data parallelism: FSDP over dp > 1 at ZeRO-2/3, DDP otherwise.
  const bool sharded = c.dp > 1 && c.zero >= runconfig::ZeroStage::Gradients;
  const char* who = f == Framework::Deepspeed ? "DeepSpeed"
                    : f == Framework::Fsdp    ? (sharded ? "PyTorch FSDP" : "PyTorch DDP")
                                              : "this runtime";
  Cluster cl;
  try {
    cl = loadCluster(study.cluster);
    if (study.devices > cl.devices_per_node) cl = loadCluster(study.cluster, study.devices / cl.devices_per_node);
  } catch (const std::exception&) {
    return std::string("no ") + who + " prediction: the study's cluster \"" + study.cluster +
           "\" is not a preset here (trainscope predict --framework " + frameworkKey(f) + " --cluster FILE gives one)";
  }
  const Plan p = planOf(c);
  if (cl.kind != ClusterKind::Gpu) {
    if (f == Framework::Fsdp || f == Framework::Deepspeed) return cpuFrameworkPrediction(cl, c, p, f);
    return std::string("no ") + who + " prediction: the study ran on a CPU cluster (trainscope predict --framework " +
           frameworkKey(f) + " --cluster a100-80gb-x8 … prices the plan on GPUs)";
  }
  TimeOptions options{-1.0, f};
  options.reduce_bytes = reduce_bytes;
  const TimePrediction them = predictTime(c.model, p, cl, options);
  const TimePrediction own = predictTime(c.model, p, cl, {-1.0, Framework::Trainscope});
  char text[400];
  std::snprintf(text, sizeof(text), "predicted on %s: %s %.4g s/step (MFU %.0f%%, %s-bound); this runtime %.4g s/step",
                cl.name.c_str(), who, them.step_s, them.mfu * 100, them.bound.c_str(), own.step_s);
  return text;
}

}  // namespace trainscope::tuner
