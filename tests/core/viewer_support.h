// viewer_support.h — what the viewer's model tests share: a rank's track of one kind.
#pragma once

#include <cstdint>

#include "trainscope/viewer/model.h"

inline const trainscope::viewer::Track* findTrack(const trainscope::viewer::Trace& t, int64_t rank,
                                                  trainscope::viewer::TrackKind kind) {
  for (const auto& tr : t.tracks)
    if (tr.rank == rank && tr.kind == kind) return &tr;
  return nullptr;
}
