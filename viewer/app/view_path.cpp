// view_path.cpp — each counted step's straggler (a red tag on its steps row) and its critical path (rundb step_analysis.h: the chain of work and
// waits across ranks that set the step's length) drawn over the ranks' steps rows: a thick amber bar
// under each segment on its rank's row — solid for work, lighter for a transfer — and a vertical
// line where the chain passes from one rank to another (at the late rank's arrival).
#include <imgui.h>

#include <algorithm>
#include <map>

#include "app.h"
#include "trainscope/viewer/fit.h"

namespace trainscope::viewer {

void App::drawCriticalPath(ImDrawList* dl) {
  if (!show_critical_path || docs.empty() || !docs[0]->ready()) return;
  const rundb::RunSummary* s = summary();
  if (!s || (s->critical_paths.empty() && s->step_stragglers.empty())) return;
  const Document& d = *docs[0];
  const Trace& t = *d.trace;
  std::map<int64_t, const RowRect*> steps_row;  // rank → its steps row on screen
  for (const RowRect& r : rows)
    if (r.doc == 0 && t.tracks[r.track].kind == TrackKind::Steps && !steps_row.count(t.tracks[r.track].rank))
      steps_row[t.tracks[r.track].rank] = &r;
  const bool record = !opt.layout.empty();
  const ImU32 work = IM_COL32(255, 180, 40, 255), transfer = IM_COL32(255, 215, 130, 200);
  const int64_t lo = view.timeAt(view.x0) - d.offset, hi = view.timeAt(view.x0 + view.width) - d.offset;
  // Each step's straggler: a red tag at the start of its step on its steps row.
  // The tag names its step and stays inside the step's box (cut with "...", whole on hover): drawn
  // whole, a short step's tag covered its "step N" and ran into the next step's box and tag, so that
  // "straggler" read as the next step's (audit 2026-12-07, DP 2 at scale 1 and 2).
  std::map<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>> step_span;  // (rank, step) → start, end
  for (const rundb::Step& st : t.steps) step_span[{st.rank, st.step}] = {st.start_ns, st.start_ns + st.step_time_ns};
  const auto width = [](const std::string& x) { return ImGui::CalcTextSize(x.c_str()).x; };
  const ImVec2 mouse = ImGui::GetMousePos();
  for (const rundb::StepStraggler& st : s->step_stragglers) {
    auto row = steps_row.find(st.rank);
    auto at = step_span.find({st.rank, st.step});
    if (st.rank < 0 || row == steps_row.end() || at == step_span.end() || at->second.first < lo || at->second.first > hi)
      continue;
    const float x = view.x(at->second.first + d.offset), y = row->second->y0 + 1;
    const float x_end = std::min(view.x(at->second.second + d.offset), view.x0 + view.width);
    // The longest form that fits: "step 3: straggler +1.19 ms", "straggler +1.19 ms", "+1.19 ms", cut.
    const std::string late = "+" + formatDuration(st.late_s * 1e9), tag = "step " + std::to_string(st.step) + ": straggler " + late;
    const float room = x_end - x - 6;
    std::string shown = ellipsize(late, room, width);
    for (const std::string& form : {"straggler " + late, tag})
      if (width(form) <= room) shown = form;
    const float h = ImGui::GetFontSize(), x1 = shown.empty() ? std::min(x + 4, x_end) : x + width(shown) + 6;
    dl->AddRectFilled(ImVec2(x, y), ImVec2(std::max(x + 1, x1), y + h), IM_COL32(200, 50, 50, 220));
    if (!shown.empty()) dl->AddText(ImVec2(x + 3, y), IM_COL32(255, 255, 255, 255), shown.c_str());
    if (shown != tag && mouse.x >= x && mouse.x < x_end && mouse.y >= y && mouse.y < y + h) ImGui::SetTooltip("%s", tag.c_str());
    if (record) path_drawn.push_back({st.step, st.rank, "straggler", x, x1, y, shown});
  }
  for (const rundb::StepCriticalPath& p : s->critical_paths) {
    if (p.end_ns < lo || p.start_ns > hi) continue;
    const RowRect* prev = nullptr;
    for (const rundb::PathSegment& g : p.segments) {
      auto it = steps_row.find(g.rank);
      if (it == steps_row.end()) {
        prev = nullptr;
        continue;
      }
      const RowRect& r = *it->second;
      const float x0 = view.x(g.start_ns + d.offset), x1 = std::max(x0 + 1, view.x(g.end_ns + d.offset));
      const float y = r.y1 - 3;
      dl->AddRectFilled(ImVec2(x0, y - 2), ImVec2(x1, y + 2), g.kind == "work" ? work : transfer);
      if (prev && prev != &r) dl->AddLine(ImVec2(x0, prev->y1 - 3), ImVec2(x0, y), work, 2.f);  // the chain changes rank
      prev = &r;
      if (record) path_drawn.push_back({p.step, g.rank, g.kind, x0, x1, y, ""});
    }
  }
}

}  // namespace trainscope::viewer
