// megatron_prediction.cpp — see megatron_prediction.h.
#include "trainscope/tuner/megatron_prediction.h"

#include <cstdio>
#include <exception>

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
  const TimePrediction meg = predictTime(c.model, p, cl, {-1.0, Framework::Megatron});
  const TimePrediction own = predictTime(c.model, p, cl, {-1.0, Framework::Trainscope});
  const MemoryPrediction m = predictMemory(c.model, p);
  const double bpp = megatronBytesPerParam(p, runconfig::shardsOptimizer(c.zero));
  const int64_t meg_first = megatronLayersParamsOpt(c.model, p, 0, bpp) +
                            megatronEmbeddingTables(c.model, p, 0) * megatronEmbeddingParamsOpt(c.model, p, bpp) +
                            m.stages.front().megatron_activations;
  char text[400];
  std::snprintf(text, sizeof(text),
                "predicted on %s: Megatron-LM %.4g s/step (MFU %.0f%%), first stage %.3g GiB; this runtime %.4g "
                "s/step, %.3g GiB on its busiest stage",
                cl.name.c_str(), meg.step_s, meg.mfu * 100, double(meg_first) / double(1 << 30), own.step_s,
                double(m.peak()) / double(1 << 30));
  return text;
}

std::string frameworkPrediction(const StudyInputs& study, const runconfig::TrainConfig& c, Framework f) {
  if (f == Framework::Megatron) return megatronPrediction(study, c);
  const char* who = f == Framework::Deepspeed ? "DeepSpeed" : f == Framework::Fsdp ? "PyTorch FSDP" : "this runtime";
  Cluster cl;
  try {
    cl = loadCluster(study.cluster);
    if (study.devices > cl.devices_per_node) cl = loadCluster(study.cluster, study.devices / cl.devices_per_node);
  } catch (const std::exception&) {
    return std::string("no ") + who + " prediction: the study's cluster \"" + study.cluster +
           "\" is not a preset here (trainscope predict --framework " + frameworkKey(f) + " --cluster FILE gives one)";
  }
  if (cl.kind != ClusterKind::Gpu)
    return std::string("no ") + who + " prediction: the study ran on a CPU cluster (trainscope predict --framework " +
           frameworkKey(f) + " --cluster a100-80gb-x8 … prices the plan on GPUs)";
  const Plan p = planOf(c);
  const TimePrediction them = predictTime(c.model, p, cl, {-1.0, f});
  const TimePrediction own = predictTime(c.model, p, cl, {-1.0, Framework::Trainscope});
  char text[400];
  std::snprintf(text, sizeof(text), "predicted on %s: %s %.4g s/step (MFU %.0f%%, %s-bound); this runtime %.4g s/step",
                cl.name.c_str(), who, them.step_s, them.mfu * 100, them.bound.c_str(), own.step_s);
  return text;
}

}  // namespace trainscope::tuner
