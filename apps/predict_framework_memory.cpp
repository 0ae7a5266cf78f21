// predict_framework_memory.cpp — see predict_framework_memory.h.
#include "predict_framework_memory.h"

#include <cstdio>

#include "trainscope/models/framework_memory.h"

namespace trainscope::apps {

namespace tn = trainscope::tuner;

void addFrameworkMemoryJson(nlohmann::json& j, const workloads::Workload& w, const tn::Plan& p, tn::Framework f,
                            const tn::Cluster& c, const tn::MemoryPrediction& m,
                            const tn::DeepSpeedZero& z) {
  if (f == tn::Framework::Megatron && c.kind == tn::ClusterKind::Gpu) {
    const tn::MegatronPeak mp = tn::megatronPeak(w, p, m);
    j["framework_memory"] = {{"framework", "megatron"}, {"stage", mp.stage},
                             {"params_opt_bytes", mp.params_opt}, {"embedding_opt_bytes", mp.embedding_opt},
                             {"activations_bytes", mp.activations}, {"fp8_weights_bytes", mp.fp8_weights},
                             {"peak_bytes", mp.bytes}};
    return;
  }
  tn::FrameworkMemory fm;
  if (!tn::frameworkMemory(w, p, f, c.profile(f), fm, z)) return;
  nlohmann::json items = nlohmann::json::array();
  for (const auto& i : fm.items)
    items.push_back({{"name", i.name}, {"bytes", i.bytes}, {"when", i.when}, {"source", i.source}});
  j["framework_memory"] = {{"framework", fm.framework},     {"params_bytes", fm.params},
                           {"grads_bytes", fm.grads},       {"optimizer_bytes", fm.optimizer},
                           {"model_states_bytes", fm.modelStates()}, {"buffers_bytes", fm.buffers},
                           {"transient_bytes", fm.transient}, {"activations_bytes", tn::opListActivations(m)},
                           {"peak_bytes", fm.total() + tn::opListActivations(m)}, {"items", items}};
}

void printFrameworkMemory(const workloads::Workload& w, const tn::Plan& p, tn::Framework f, const tn::Cluster& c,
                          const tn::MemoryPrediction& m, const tn::DeepSpeedZero& z) {
  const auto gib = [](int64_t b) { return double(b) / double(int64_t(1) << 30); };
  if (f == tn::Framework::Megatron && c.kind == tn::ClusterKind::Gpu) {
    const tn::MegatronPeak mp = tn::megatronPeak(w, p, m);
    std::printf("Megatron-LM memory per rank, stage %lld: parameters + optimizer %.2f GiB, embedding/output tables "
                "%.2f GiB, activations %.2f GiB",
                static_cast<long long>(mp.stage), gib(mp.params_opt), gib(mp.embedding_opt), gib(mp.activations));
    if (mp.fp8_weights > 0) std::printf(", Transformer Engine's FP8 weights %.2f GiB", gib(mp.fp8_weights));
    std::printf(" = peak %.2f GiB (megatron-core's theoretical memory)\n", gib(mp.bytes));
    return;
  }
  tn::FrameworkMemory fm;
  if (!tn::frameworkMemory(w, p, f, c.profile(f), fm, z)) return;
  std::printf("%s memory per rank: model states %.2f GiB (params %.2f, grads %.2f, optimizer %.2f), buffers %.2f GiB, "
              "transient %.2f GiB, + activations %.2f GiB = peak %.2f GiB\n",
              fm.framework == "fsdp" ? "FSDP" : "DeepSpeed", gib(fm.modelStates()), gib(fm.params), gib(fm.grads),
              gib(fm.optimizer), gib(fm.buffers), gib(fm.transient), gib(tn::opListActivations(m)),
              gib(fm.total() + tn::opListActivations(m)));
}

}  // namespace trainscope::apps
