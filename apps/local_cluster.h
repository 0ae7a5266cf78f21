// local_cluster.h — `trainscope tune --cluster local` (see local_cluster.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace trainscope::apps {

// Measures this machine and writes STUDY.cluster.json; returns its path. With `reuse` (a resumed
// study) an existing file is taken as it is, so that the study's inputs stay the same.
std::string measureLocalCluster(const std::string& study, const std::string& self_dir, int64_t mem_limit, bool reuse);

}  // namespace trainscope::apps
