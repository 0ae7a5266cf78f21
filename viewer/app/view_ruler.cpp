// view_ruler.cpp — the timeline's ruler: tick marks and exact labels from ruler.h, and in the gutter
// either the window's width or, zoomed in far from the start, the base the labels count from.
#include <imgui.h>

#include "app.h"
#include "timeline.h"
#include "trainscope/viewer/fit.h"
#include "trainscope/viewer/image.h"

namespace trainscope::viewer {

void App::drawRuler(ImDrawList* dl, const TimelineContext& cx) {
  const float y = timeline_y0;
  dl->AddRectFilled(ImVec2(cx.left, y), ImVec2(cx.x1, y + kRulerH), IM_COL32(36, 38, 44, 255));
  ruler = makeRuler(view);
  dl->PushClipRect(ImVec2(cx.x0, y), ImVec2(cx.x1, y + kRulerH), true);
  // Labels whole and apart (fit.h): the last ends left of its tick rather than being cut at the edge.
  std::vector<float> xs, ws;
  std::vector<size_t> majors;
  for (size_t i = 0; i < ruler.ticks.size(); ++i) {
    const Tick& tk = ruler.ticks[i];
    const float x = view.x0 + float((tk.t - view.t0) / cx.ns_px);
    dl->AddLine(ImVec2(x, y + (tk.major ? 4 : 13)), ImVec2(x, y + kRulerH), IM_COL32(150, 150, 160, 255));
    if (tk.major) majors.push_back(i), xs.push_back(x), ws.push_back(ImGui::CalcTextSize(tk.label.c_str()).x);
  }
  const std::vector<float> at = placeTickLabels(xs, ws, cx.x0, cx.x1);
  ruler_label_x.assign(ruler.ticks.size(), {-1.f, -1.f});
  for (size_t k = 0; k < majors.size(); ++k) {
    if (at[k] < 0) continue;
    dl->AddText(ImVec2(at[k], y + 2), palette::kText, ruler.ticks[majors[k]].label.c_str());
    ruler_label_x[majors[k]] = {at[k], at[k] + ws[k]};
  }
  dl->PopClipRect();
  const std::string gutter = ruler.relative ? "+0 = " + ruler.base_label : "view " + formatDuration(view.t1 - view.t0);
  dl->AddText(ImVec2(cx.left + 4, y + 2), palette::kText, gutter.c_str());
}

}  // namespace trainscope::viewer
