// view_overlays.cpp — what the timeline draws over its rows: the selection's outline and its flow arrow
// (launch → kernel), the links between ranks (view_comm.cpp), search matches, the selected range, and,
// with two runs, why run B could not be aligned with run A when it could not (tracks.h, alignAtStep).
#include <imgui.h>

#include <algorithm>
#include <unordered_map>

#include "app.h"
#include "timeline.h"
#include "trainscope/viewer/image.h"

namespace trainscope::viewer {

namespace {

const RowRect* rowOf(const std::vector<RowRect>& rows, size_t doc, const EventRef& r) {
  for (const auto& rr : rows)
    if (rr.doc == doc && rr.track == r.track && rr.lane == r.lane) return &rr;
  return nullptr;
}

// A pinned track's rows are drawn in the band above the scrolled child these overlays draw in, so its
// outline is clipped to that band (not to the child, which would hide it) and a scrolled row's to the
// child (so that it never shows through the band). A flow may join the two: clipped to both.
struct OverlayClip {
  float x0, x1, band_top, band_bottom, top, bottom;
  bool pinned(const App& app, const RowRect& rr) const {
    if (band_bottom <= band_top) return false;
    for (const LayoutRow& p : app.track_layout.pinned)
      if (p.doc == rr.doc && p.track == rr.track) return true;
    return false;
  }
  void push(ImDrawList* dl, float y0, float y1) const { dl->PushClipRect(ImVec2(x0, y0), ImVec2(x1, y1), false); }
};

// The selected event outlined, and the flow from its launch (or to the device work it launched).
void selectionOverlay(App& app, ImDrawList* dl, const OverlayClip& clip) {
  const Selection& s = *app.selection;
  const Document& d = *app.docs[s.doc];
  const TimeView& view = app.view;
  auto box = [&](const EventRef& r, ImU32 col) {
    const RowRect* rr = rowOf(app.rows, s.doc, r);
    if (!rr) return;
    const Event& e = d.trace->event(r);
    const float x0 = view.x(e.start + d.offset), x1 = std::max(view.x(e.end + d.offset), x0 + 2);
    const bool in_band = clip.pinned(app, *rr);
    clip.push(dl, in_band ? clip.band_top : clip.top, in_band ? clip.band_bottom : clip.bottom);
    dl->AddRect(ImVec2(x0 - 1, rr->y0), ImVec2(x1 + 1, rr->y1), col, 0, 0, 2);
    dl->PopClipRect();
  };
  box(s.ref, palette::kSelection);
  if (!d.correlation || app.flow_mode == App::FlowMode::None) return;  // the flows switch: none
  const Event& e = d.trace->event(s.ref);
  std::vector<std::pair<EventRef, EventRef>> flows;  // launch → device work
  if (e.kind == EventKind::ApiCall)
    for (const auto& k : d.correlation->launchedBy(s.ref)) flows.push_back({s.ref, k});
  else if (auto l = d.correlation->launchOf(s.ref))
    flows.push_back({*l, s.ref});
  for (const auto& [from, to] : flows) {
    const RowRect* a = rowOf(app.rows, s.doc, from);
    const RowRect* b = rowOf(app.rows, s.doc, to);
    if (!a || !b) continue;
    // Launch above its kernel, as a rank's rows are; a pinned kernel is above its launch: the arrow goes up.
    const bool up = b->y0 < a->y0;
    const ImVec2 pa(view.x(d.trace->event(from).start + d.offset), up ? a->y0 : a->y1);
    const ImVec2 pb(view.x(d.trace->event(to).start + d.offset), up ? b->y1 : b->y0);
    const float head = up ? 7.f : -7.f;
    const bool band = clip.pinned(app, *a) || clip.pinned(app, *b);
    clip.push(dl, band ? clip.band_top : clip.top, clip.bottom);
    dl->AddBezierCubic(pa, ImVec2(pa.x, (pa.y + pb.y) / 2), ImVec2(pb.x, (pa.y + pb.y) / 2), pb, palette::kFlow, 2);
    dl->AddTriangleFilled(ImVec2(pb.x - 4, pb.y + head), ImVec2(pb.x + 4, pb.y + head), pb, palette::kFlow);
    dl->PopClipRect();
    box(from, palette::kFlow);
  }
}

// Search matches in view: a tick under each (matches are sorted by start; at most 4000 drawn).
void searchOverlay(App& app, ImDrawList* dl) {
  const Trace& tr = *app.docs[0]->trace;
  const TimeView& view = app.view;
  std::unordered_map<uint64_t, const RowRect*> row_of;
  for (const auto& rr : app.rows)
    if (rr.doc == 0) row_of[uint64_t(rr.track) << 32 | rr.lane] = &rr;
  auto it = std::partition_point(app.found.matches.begin(), app.found.matches.end(),
                                 [&](const EventRef& m) { return tr.event(m).start < view.begin(); });
  for (size_t drawn = 0; it != app.found.matches.end() && drawn < 4000; ++it, ++drawn) {
    const Event& e = tr.event(*it);
    if (e.start > view.end()) break;
    auto r = row_of.find(uint64_t(it->track) << 32 | it->lane);
    if (r == row_of.end()) continue;
    const float x = view.x(e.start);
    dl->AddRectFilled(ImVec2(x, r->second->y1 - 3), ImVec2(std::max(x + 2, view.x(e.end)), r->second->y1),
                      IM_COL32(255, 230, 0, 255));
  }
}

// Two runs that cannot be lined up at the step: say so where the rows are, not in a tab.
void alignmentMessage(App& app, ImDrawList* dl, const TimelineContext& cx) {
  const std::string& m = app.alignment.message;
  const float wrap = cx.x1 - cx.x0 - 16;
  const ImVec2 size = ImGui::CalcTextSize(m.c_str(), nullptr, false, wrap);
  // Right-aligned, clear of the rank header's text at the left.
  const ImVec2 a(std::max(cx.x0 + 4, cx.x1 - size.x - 28), cx.top + 4), b(a.x + size.x + 12, a.y + size.y + 8);
  dl->AddRectFilled(a, b, IM_COL32(120, 30, 30, 235), 3);
  dl->AddRect(a, b, IM_COL32(255, 120, 120, 255), 3);
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(a.x + 6, a.y + 4), IM_COL32(255, 235, 235, 255),
              m.c_str(), nullptr, wrap);
  app.alignment_drawn = true;
}

}  // namespace

void App::drawTimelineOverlays(ImDrawList* dl, const TimelineContext& cx, const Hover& hover) {
  dl->PushClipRect(ImVec2(cx.x0, cx.top), ImVec2(cx.x1, cx.bottom), true);
  // The pinned band ends 2 px above the scrolled child (view_timeline.cpp), where cx.top now is.
  const bool band = !track_layout.pinned.empty();
  const OverlayClip clip{cx.x0, cx.x1, band ? cx.pinned_y : cx.top, band ? cx.top - 2 : cx.top, cx.top, cx.bottom};
  if (selection && selection->doc < docs.size() && docs[selection->doc]->ready()) selectionOverlay(*this, dl, clip);
  drawCommLinks(dl, hover ? std::optional<Selection>(hover->first) : std::nullopt, band ? cx.pinned_y : 0);  // ranks related
  drawCriticalPath(dl);  // each step's chain of work and waits across ranks (view_path.cpp)
  if (!found.matches.empty() && docs[0]->ready()) searchOverlay(*this, dl);
  if (range) {
    const float a = view.x(range->first), b = view.x(range->second);
    dl->AddRectFilled(ImVec2(a, cx.top), ImVec2(b, cx.bottom), IM_COL32(70, 110, 170, 60));
    dl->AddLine(ImVec2(a, cx.top), ImVec2(a, cx.bottom), palette::kRangeSelect);
    dl->AddLine(ImVec2(b, cx.top), ImVec2(b, cx.bottom), palette::kRangeSelect);
  }
  alignment_drawn = false;
  if (docs.size() > 1 && docs[1]->ready() && !alignment.ok && !alignment.message.empty())
    alignmentMessage(*this, dl, cx);
  dl->PopClipRect();
}

}  // namespace trainscope::viewer
