// predict_framework_memory.cpp — see predict_framework_memory.h.
#include "predict_framework_memory.h"

#include <cstdio>

#include "trainscope/models/framework_memory.h"

namespace trainscope::apps {

namespace tn = trainscope::tuner;

void addFrameworkMemoryJson(nlohmann::json& j, const workloads::Workload& w, const tn::Plan& p, tn::Framework f,
                            const tn::Cluster& c, const tn::MemoryPrediction& m,
                            const tn::DeepSpeedZero& z) {
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
  tn::FrameworkMemory fm;
  if (!tn::frameworkMemory(w, p, f, c.profile(f), fm, z)) return;
  const auto gib = [](int64_t b) { return double(b) / double(int64_t(1) << 30); };
  std::printf("%s memory per rank: model states %.2f GiB (params %.2f, grads %.2f, optimizer %.2f), buffers %.2f GiB, "
              "transient %.2f GiB, + activations %.2f GiB = peak %.2f GiB\n",
              fm.framework == "fsdp" ? "FSDP" : "DeepSpeed", gib(fm.modelStates()), gib(fm.params), gib(fm.grads),
              gib(fm.optimizer), gib(fm.buffers), gib(fm.transient), gib(tn::opListActivations(m)),
              gib(fm.total() + tn::opListActivations(m)));
}

}  // namespace trainscope::apps
