// trainscope/viewer/comm.h — how the ranks relate: each rank's coordinates in the run's layout, and
// the collectives linked across ranks (a call's copies on its member ranks, a pipeline send and its
// receive) with what each member spent waiting for the last one and what the transfer took.
//
// The linking rule is rundb::linkCollectives (report.h), the one `trainscope report` uses, so the
// viewer and the report agree on every skew and bandwidth. What this file adds is where the linked
// rows sit on the timeline (EventRef). No drawing here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

inline constexpr uint32_t kNoTrack = UINT32_MAX;  // ref_of_row of a row no track holds

// A collectives track is built with each event's row id riding in its lanes' correlation (buildLanes
// keeps them with their events through the sort): this moves them out into ref_of_row[row] = where
// that row's event went (initialise it to {kNoTrack, 0, 0}), and leaves the lanes without correlation (a collective launches nothing).
void takeCollectiveRows(uint32_t track_index, Track& t, std::vector<EventRef>& ref_of_row);

// Fills trace.comm: the layout from trace.meta, and the calls rundb::linkCollectives finds among
// `rows` (the collectives as loaded; ref_of_row as takeCollectiveRows left it).
void linkTrace(Trace& trace, const std::vector<rundb::Collective>& rows, const std::vector<EventRef>& ref_of_row);

// "dp 1 tp 0 pp 0" for a rank of a run whose layout is known; "" otherwise.
std::string rankCoordinates(const Trace& trace, int64_t rank);

// One member's share of a linked call, from the event alone (the row's bytes are not in the model).
struct MemberTiming {
  int64_t wait_ns = 0;      // the last arrival − its start
  int64_t transfer_ns = 0;  // its end (p2p: the receive's) − the last arrival, at least 0
  int64_t last_rank = -1;   // the rank that arrived last
};
MemberTiming memberTiming(const Trace& trace, const CommCall& call, const EventRef& member);

}  // namespace trainscope::viewer
