// view_comm.cpp — the timeline's view of how ranks relate: the part of a collective spent waiting for
// the last rank (hatched, lighter), links from a selected or hovered collective to its copies on the
// other ranks, and an arrow from each pipeline send on screen to its receive. What is linked and the
// times come from the model (comm.h); this file only draws, and records what it drew for --layout.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "app.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/image.h"

namespace trainscope::viewer {

namespace {

ImU32 withAlpha(ImU32 c, uint8_t a) { return (c & 0x00ffffffu) | (ImU32(a) << 24); }

void arrowHead(ImDrawList* dl, ImVec2 from, ImVec2 to, ImU32 col) {
  const float dx = to.x - from.x, dy = to.y - from.y;
  const float len = std::max(1.f, std::sqrt(dx * dx + dy * dy));
  const float ux = dx / len, uy = dy / len;
  dl->AddTriangleFilled(to, ImVec2(to.x - 8 * ux - 4 * uy, to.y - 8 * uy + 4 * ux),
                        ImVec2(to.x - 8 * ux + 4 * uy, to.y - 8 * uy - 4 * ux), col);
}

}  // namespace

// Over the box [x0, x1) of a collective: its wait — from its start to the last member's arrival —
// lighter and hatched, so that the solid rest is the transfer. Returns where the wait ends (x0: no
// wait), or -1 for a collective that is not linked. Remembers pipeline sends for their arrows.
float App::drawCollectiveWait(ImDrawList* dl, size_t doc, const EventRef& r, float x0, float x1, float y0, float y1) {
  const Document& d = *docs[doc];
  const CommCall* call = d.trace->comm.callOf(r);
  if (!call) return -1;
  if (call->link.p2p && call->members[0] == r) sends_drawn.push_back({doc, call});
  const Event& e = d.trace->event(r);
  if (call->link.last_start_ns <= e.start) return x0;
  const float xw = std::clamp(view.x(call->link.last_start_ns + d.offset), x0, x1);
  if (xw <= x0) return x0;
  dl->AddRectFilled(ImVec2(x0, y0), ImVec2(xw, y1), IM_COL32(255, 255, 255, 80));
  dl->PushClipRect(ImVec2(x0, y0), ImVec2(xw, y1), true);
  const float h = y1 - y0;
  for (float hx = x0 - h; hx < xw; hx += 6) dl->AddLine(ImVec2(hx, y1), ImVec2(hx + h, y0), palette::kWaitHatch, 1.5f);
  dl->PopClipRect();
  return xw;
}

// Links of the selected and the hovered collective to their copies on the rows on screen, and the
// arrows of the pipeline sends drawn this frame. The caller has clipped to the timeline.
//
// The caller's clip is the scrolled rows' child; a link with an end in the pinned band (above the
// child, from band_top) is drawn under a clip that reaches up into the band: over the band alone when
// both ends are pinned, over the band and the rows when one is, so it is never cut off at the band's edge.
void App::drawCommLinks(ImDrawList* dl, const std::optional<Selection>& hovered, float band_top) {
  const bool record = !opt.layout.empty();
  const ImVec2 clip0 = dl->GetClipRectMin(), clip1 = dl->GetClipRectMax();
  auto pinned = [&](const RowRect* rr) {
    if (band_top <= 0) return false;
    for (const LayoutRow& p : track_layout.pinned)
      if (p.doc == rr->doc && p.track == rr->track) return true;
    return false;
  };
  // Clip for a link between rows a and b (pushed; the caller pops).
  auto pushClip = [&](const RowRect* a, const RowRect* b) {
    const bool pa = pinned(a), pb = pinned(b);
    const float top = pa || pb ? band_top : clip0.y, bottom = pa && pb ? clip0.y - 2 : clip1.y;
    dl->PushClipRect(ImVec2(clip0.x, top), ImVec2(clip1.x, bottom), false);
  };
  std::map<std::tuple<size_t, uint32_t, uint32_t>, const RowRect*> row_of;
  auto rowOf = [&](size_t doc, const EventRef& r) -> const RowRect* {
    if (row_of.empty())
      for (const auto& rr : rows) row_of[{rr.doc, rr.track, rr.lane}] = &rr;
    auto it = row_of.find({doc, r.track, r.lane});
    return it == row_of.end() ? nullptr : it->second;
  };
  auto recordLink = [&](size_t doc, const CommCall& call, const EventRef& from, const EventRef& to, ImVec2 a,
                        ImVec2 b, const char* source) {
    if (!record) return;
    const Trace& t = *docs[doc]->trace;
    const MemberTiming m = memberTiming(t, call, to);
    links.push_back({doc, call.link.p2p, source, t.tracks[from.track].rank, t.tracks[to.track].rank,
                     t.event(from).start, t.event(to).start, a.x, a.y, b.x, b.y, call.link.skewNs(), m.wait_ns,
                     m.transfer_ns});
  };
  // A send's arrow: from where it was issued to where its receive ended (the data had arrived).
  auto p2pArrow = [&](size_t doc, const CommCall& call, float thickness, const char* source) {
    const Document& d = *docs[doc];
    const EventRef &send = call.members[0], &recv = call.members[1];
    const RowRect* a = rowOf(doc, send);
    const RowRect* b = rowOf(doc, recv);
    if (!a || !b) return;
    const ImVec2 pa(view.x(d.trace->event(send).start + d.offset), (a->y0 + a->y1) / 2);
    const ImVec2 pb(view.x(d.trace->event(recv).end + d.offset), b->y1 < a->y0 ? b->y1 : b->y0);
    const ImVec2 c1(pa.x + (pb.x - pa.x) * 0.25f, pa.y), c2(pb.x - (pb.x - pa.x) * 0.25f, pb.y);
    pushClip(a, b);
    dl->AddBezierCubic(pa, c1, c2, pb, withAlpha(palette::kP2p, 220), thickness);
    arrowHead(dl, c2, pb, palette::kP2p);
    dl->PopClipRect();
    recordLink(doc, call, send, recv, pa, pb, source);
  };
  // A collective's links: from the focused copy's start to each other copy's start.
  auto collectiveLinks = [&](const Selection& s, const char* source) {
    const Document& d = *docs[s.doc];
    const Trace& t = *d.trace;
    const CommCall* call = t.comm.callOf(s.ref);
    if (!call) return;
    if (call->link.p2p) return p2pArrow(s.doc, *call, 3.f, source);
    const RowRect* a = rowOf(s.doc, s.ref);
    if (!a) return;
    const ImVec2 pa(view.x(t.event(s.ref).start + d.offset), (a->y0 + a->y1) / 2);
    const float last = view.x(call->link.last_start_ns + d.offset);
    for (const EventRef& m : call->members) {
      if (m == s.ref) continue;
      const RowRect* b = rowOf(s.doc, m);
      if (!b) continue;
      const ImVec2 pb(view.x(t.event(m).start + d.offset), (b->y0 + b->y1) / 2);
      pushClip(a, b);
      dl->AddLine(pa, pb, palette::kCommLink, 2);
      dl->AddCircleFilled(pb, 3.5f, palette::kCommLink);
      dl->AddRect(ImVec2(pb.x - 1, b->y0), ImVec2(std::max(view.x(t.event(m).end + d.offset), pb.x + 2) + 1, b->y1),
                  palette::kCommLink, 0, 0, 1.5f);
      // The last arrival, where every copy's transfer begins.
      dl->AddLine(ImVec2(last, std::min(a->y0, b->y0)), ImVec2(last, std::max(a->y1, b->y1)),
                  withAlpha(palette::kCommLink, 160), 1);
      dl->PopClipRect();
      recordLink(s.doc, *call, s.ref, m, pa, pb, source);
    }
    pushClip(a, a);
    dl->AddCircleFilled(pa, 3.5f, palette::kCommLink);
    dl->PopClipRect();
  };

  // The flows switch: all (every send's arrow, the selected and the hovered event's links), selected, none.
  if (flow_mode == FlowMode::None) return;
  if (flow_mode == FlowMode::All)
    for (const auto& [doc, call] : sends_drawn) p2pArrow(doc, *call, 1.5f, "send");
  if (selection && selection->doc < docs.size() && docs[selection->doc]->ready() &&
      docs[selection->doc]->trace->event(selection->ref).kind == EventKind::Collective)
    collectiveLinks(*selection, "selection");
  if (flow_mode == FlowMode::All && hovered && (!selection || hovered->doc != selection->doc || hovered->ref != selection->ref) &&
      docs[hovered->doc]->trace->event(hovered->ref).kind == EventKind::Collective)
    collectiveLinks(*hovered, "hover");
}

}  // namespace trainscope::viewer
