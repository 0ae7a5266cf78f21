// trainscope/viewer/compact.h — a rank as one thin row (the compact mode for many ranks, as Perfetto's
// and Nsight's collapsed process rows summarise a process): per pixel column, how busy the rank's
// compute and its communication keep it. Arithmetic only; view_tracks.cpp draws it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

// [begin, end) cut into `columns` equal slices; for each, in [0, 1]:
//   compute — the busiest of the rank's streams (its kernels, copies and sets, NCCL kernels left out;
//             lanes summed and capped at 1, as busyColumns), or, for a rank with no stream (a CPU run),
//             the busiest of its threads' outermost lane (nested events are not counted twice);
//   comm    — the share its collectives row keeps busy, its wait included, or its busiest stream's
//             NCCL kernels (lod.h, commBusyIn), whichever is more;
//   wait    — of that, the share a linked call spent waiting for its peer (its start to the last
//             arrival, comm.h's rule): a collective for its last member, a pipeline send or receive
//             for its partner (what the Steps tab counts as bubble);
//   pipeline — of that wait, the share at pipeline sends and receives (the rest, wait − pipeline, is
//             at collectives): drawn in a colour of its own, as the Steps tab splits waiting and bubble.
// So comm − wait is the transfer, and a straggler's peers show wait where it shows compute.
struct CompactColumns {
  std::vector<float> compute, comm, wait, pipeline;
};
CompactColumns compactColumns(const Trace& trace, const RankGroup& rank, int64_t begin, int64_t end, size_t columns);

}  // namespace trainscope::viewer
