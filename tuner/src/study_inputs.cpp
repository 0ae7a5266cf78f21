// study_inputs.cpp — see study_inputs.h.
#include "trainscope/tuner/study_inputs.h"

#include <stdexcept>

#include <nlohmann/json.hpp>

namespace trainscope::tuner {

StudyInputs parseStudyInputs(const std::string& json) {
  const nlohmann::json in = nlohmann::json::parse(json.empty() ? "{}" : json);
  if (!in.is_object()) throw std::runtime_error("its inputs are not a JSON object");
  StudyInputs out;
  out.workload = in.value("workload", "");
  out.cluster = in.value("cluster", "");
  out.devices = in.value("devices", int64_t(0));
  out.memory_bytes = in.value("memory_bytes", int64_t(0));
  // By name, as tune.cpp writes it; anything but "cpu" is a GPU cluster, as before the kind was kept.
  out.kind = in.value("kind", std::string(toString(ClusterKind::Gpu))) == toString(ClusterKind::Cpu) ? ClusterKind::Cpu
                                                                                                   : ClusterKind::Gpu;
  return out;
}

}  // namespace trainscope::tuner
