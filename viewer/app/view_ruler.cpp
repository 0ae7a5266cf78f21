// view_ruler.cpp — the timeline's ruler: tick marks and exact labels from ruler.h, and in the gutter
// either the window's width or, zoomed in far from the start, the base the labels count from.
#include <imgui.h>

#include "app.h"
#include "timeline.h"
#include "trainscope/viewer/image.h"

namespace trainscope::viewer {

void App::drawRuler(ImDrawList* dl, const TimelineContext& cx) {
  const float y = timeline_y0;
  dl->AddRectFilled(ImVec2(cx.left, y), ImVec2(cx.x1, y + kRulerH), IM_COL32(36, 38, 44, 255));
  ruler = makeRuler(view);
  dl->PushClipRect(ImVec2(cx.x0, y), ImVec2(cx.x1, y + kRulerH), true);
  for (const Tick& tk : ruler.ticks) {
    const float x = view.x0 + float((tk.t - view.t0) / cx.ns_px);
    dl->AddLine(ImVec2(x, y + (tk.major ? 4 : 13)), ImVec2(x, y + kRulerH), IM_COL32(150, 150, 160, 255));
    if (tk.major) dl->AddText(ImVec2(x + 3, y + 2), palette::kText, tk.label.c_str());
  }
  dl->PopClipRect();
  const std::string gutter = ruler.relative ? "+0 = " + ruler.base_label : "view " + formatDuration(view.t1 - view.t0);
  dl->AddText(ImVec2(cx.left + 4, y + 2), palette::kText, gutter.c_str());
}

}  // namespace trainscope::viewer
