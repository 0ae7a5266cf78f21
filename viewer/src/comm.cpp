// comm.cpp — collectives linked across ranks, placed on the timeline (see comm.h).
#include "trainscope/viewer/comm.h"

#include <algorithm>

namespace trainscope::viewer {

const CommCall* CommIndex::callOf(const EventRef& r) const {
  auto it = call_of.find(r.track);
  if (it == call_of.end() || r.lane >= it->second.size() || r.index >= it->second[r.lane].size()) return nullptr;
  const int32_t c = it->second[r.lane][r.index];
  return c >= 0 ? &calls[size_t(c)] : nullptr;
}

size_t CommIndex::bytes() const {
  size_t b = sizeof(CommIndex) + calls.capacity() * sizeof(CommCall);
  for (const auto& c : calls) b += c.members.capacity() * sizeof(EventRef);
  for (const auto& [track, lanes] : call_of)
    for (const auto& l : lanes) b += sizeof(l) + l.capacity() * sizeof(int32_t);
  return b;
}

void takeCollectiveRows(uint32_t track_index, Track& t, std::vector<EventRef>& ref_of_row) {
  for (uint32_t li = 0; li < t.lanes.size(); ++li) {
    Lane& lane = t.lanes[li];
    for (uint32_t i = 0; i < lane.correlation.size(); ++i) {
      const auto row = size_t(lane.correlation[i]);
      if (row < ref_of_row.size()) ref_of_row[row] = {track_index, li, i};
    }
    std::vector<int64_t>().swap(lane.correlation);
  }
}

void linkTrace(Trace& trace, const std::vector<rundb::Collective>& rows, const std::vector<EventRef>& ref_of_row) {
  CommIndex& comm = trace.comm;
  comm.layout = rundb::runLayout(trace.meta);
  rundb::CollectiveLinks links = rundb::linkRunCollectives(rows, trace.meta, trace.steps);
  // Every collectives track gets a table of calls, -1 where a row is not linked.
  for (uint32_t ti = 0; ti < trace.tracks.size(); ++ti) {
    const Track& t = trace.tracks[ti];
    if (t.kind != TrackKind::Collectives) continue;
    auto& lanes = comm.call_of[ti];
    for (const Lane& l : t.lanes) lanes.emplace_back(l.events.size(), -1);
  }
  comm.unlinked.why = links.why;  // for Details' "not linked" (rundb::notLinkedReason)
  comm.calls.reserve(links.calls.size());
  for (rundb::LinkedCall& l : links.calls) {
    CommCall c;
    for (size_t row : l.rows) c.members.push_back(ref_of_row[row]);
    if (std::any_of(c.members.begin(), c.members.end(), [](const EventRef& r) { return r.track == kNoTrack; }))
      continue;  // a row of a rank the timeline does not show
    std::vector<size_t>().swap(l.rows);  // the rows are not kept; members say where they are
    c.link = std::move(l);
    for (const EventRef& m : c.members) comm.call_of[m.track][m.lane][m.index] = int32_t(comm.calls.size());
    comm.calls.push_back(std::move(c));
  }
}

std::string rankCoordinates(const Trace& trace, int64_t rank) {
  if (!trace.comm.layout || rank < 0 || rank >= trace.comm.layout->world) return {};
  const rundb::RunLayout::Coords c = trace.comm.layout->coords(rank);
  const std::string cp = trace.comm.layout->cp > 1 ? " cp " + std::to_string(c.cp) : "";
  return "dp " + std::to_string(c.dp) + cp + " tp " + std::to_string(c.tp) + " pp " + std::to_string(c.pp);
}

MemberTiming memberTiming(const Trace& trace, const CommCall& call, const EventRef& member) {
  const Event& e = trace.event(member);
  MemberTiming m;
  m.wait_ns = rundb::spanNs(e.start, call.link.last_start_ns);  // saturated: any file's times
  m.transfer_ns = std::max<int64_t>(0, rundb::spanNs(call.link.last_start_ns, call.link.p2p ? call.link.end_ns : e.end));
  for (const EventRef& r : call.members)
    if (trace.event(r).start == call.link.last_start_ns) m.last_rank = trace.tracks[r.track].rank;
  return m;
}

}  // namespace trainscope::viewer
