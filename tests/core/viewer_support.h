// viewer_support.h — what the viewer's model tests share: a rank's track of one kind, and a synthetic
// trace written once per test process.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "../common/cli.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/model.h"

inline const trainscope::viewer::Track* findTrack(const trainscope::viewer::Trace& t, int64_t rank,
                                                  trainscope::viewer::TrackKind kind) {
  for (const auto& tr : t.tracks)
    if (tr.rank == rank && tr.kind == kind) return &tr;
  return nullptr;
}

// The synthetic trace `name` in the test's temporary folder, written on first use and shared after.
inline std::string synthetic(const std::string& name, trainscope::viewer::SyntheticOptions o = {}) {
  const std::string path = trainscope::testing::tempPath(name);
  if (!std::filesystem::exists(path)) trainscope::viewer::writeSyntheticTrace(path, o);
  return path;
}
