// trainscope/tuner/study_inputs.h — a study's inputs (the `inputs` row tune.cpp writes when it makes
// the study: the workload, the cluster and the knobs), read back typed. The readers (export's notes,
// the viewer's snapshot) take these fields from here instead of each parsing the JSON.
#pragma once

#include <cstdint>
#include <string>

#include "trainscope/tuner/models.h"

namespace trainscope::tuner {

struct StudyInputs {
  std::string workload, cluster;  // the workload's and the cluster's names
  int64_t devices = 0;            // the cluster's devices (its nodes × devices per node)
  int64_t memory_bytes = 0;       // per device / rank: the limit the recommendation had to fit
  ClusterKind kind = ClusterKind::Gpu;  // studies made before the kind was kept: a GPU one
};

// `json`: the study's `inputs` value ("" reads as {}). A missing key keeps its default; text that is
// not a JSON object, or a key of the wrong type, throws std::exception (the caller says the study is
// damaged, or goes without what it wanted).
StudyInputs parseStudyInputs(const std::string& json);

}  // namespace trainscope::tuner
