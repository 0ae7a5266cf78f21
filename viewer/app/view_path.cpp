// view_path.cpp — each counted step's straggler (a red tag on its steps row) and its critical path (rundb step_analysis.h: the chain of work and
// waits across ranks that set the step's length) drawn over the ranks' steps rows: a thick amber bar
// under each segment on its rank's row — solid for work, lighter for a transfer — and a vertical
// line where the chain passes from one rank to another (at the late rank's arrival).
#include <imgui.h>

#include <algorithm>
#include <map>

#include "app.h"

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
  std::map<std::pair<int64_t, int64_t>, int64_t> step_start;  // (rank, step) → start
  for (const rundb::Step& st : t.steps) step_start[{st.rank, st.step}] = st.start_ns;
  for (const rundb::StepStraggler& st : s->step_stragglers) {
    auto row = steps_row.find(st.rank);
    auto at = step_start.find({st.rank, st.step});
    if (st.rank < 0 || row == steps_row.end() || at == step_start.end() || at->second < lo || at->second > hi) continue;
    const float x = view.x(at->second + d.offset), y = row->second->y0 + 1;
    const std::string tag = "straggler +" + formatDuration(st.late_s * 1e9);
    const ImVec2 sz = ImGui::CalcTextSize(tag.c_str());
    dl->AddRectFilled(ImVec2(x, y), ImVec2(x + sz.x + 6, y + sz.y), IM_COL32(200, 50, 50, 220));
    dl->AddText(ImVec2(x + 3, y), IM_COL32(255, 255, 255, 255), tag.c_str());
    if (record) path_drawn.push_back({st.step, st.rank, "straggler", x, x + sz.x + 6, y});
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
      if (record) path_drawn.push_back({p.step, g.rank, g.kind, x0, x1, y});
    }
  }
}

}  // namespace trainscope::viewer
