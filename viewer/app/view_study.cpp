// view_study.cpp — a tuner study: the recommendation and its argument (the runner-up, the margin,
// the run-to-run noise), the trials, predicted against measured step time, and step time against
// peak memory with the memory limit drawn and the recommendation marked. A trial's trace opens in
// one click. Candidates are "#id" everywhere (headline, table, point labels, tooltips), the ids of
// `trainscope tune`'s table; trials are "trial N". The arithmetic is study_plot.h's.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "app.h"
#include "trainscope/viewer/fit.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/study_plot.h"

namespace trainscope::viewer {

namespace {

constexpr ImU32 kAxisText = IM_COL32(160, 160, 170, 255), kGrid = IM_COL32(52, 54, 62, 255);

struct Plot {
  ImVec2 p0, p1;
  double x0, x1, y0, y1;
  ImVec2 at(double x, double y) const {
    return ImVec2(p0.x + float((x - x0) / (x1 - x0)) * (p1.x - p0.x), p1.y - float((y - y0) / (y1 - y0)) * (p1.y - p0.y));
  }
};

// A plot's frame: the title wrapped to the plot's width (never clipped), the y axis's name above its
// tick labels, ticks with labels and grid lines on both axes, the x axis's name under its labels.
Plot frame(StudyShown::Axis& ax, const char* title, const char* xlabel, const char* ylabel, float w, float h,
           const std::vector<AxisTick>& xt, const std::vector<AxisTick>& yt, double x1, double y1) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 c = ImGui::GetCursorScreenPos();
  const float lh = ImGui::GetTextLineHeight();
  float lw = 0;
  for (const auto& t : yt) lw = std::max(lw, ImGui::CalcTextSize(t.label.c_str()).x);
  const ImVec2 title_sz = ImGui::CalcTextSize(title, nullptr, false, w - 8);
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize(), ImVec2(c.x + 4, c.y + 2), palette::kText, title, nullptr, w - 8);
  const float top = c.y + title_sz.y + 6;
  dl->AddText(ImVec2(c.x + 4, top), kAxisText, ylabel);
  Plot p{ImVec2(c.x + lw + 12, top + lh + 4), ImVec2(c.x + w - 14, c.y + h - 2 * lh - 10), 0, x1, 0, y1};
  ax = {title, title_sz.x, w, p.p1.x - p.p0.x, {}, {}};
  dl->AddRectFilled(p.p0, p.p1, IM_COL32(30, 32, 37, 255));
  for (const auto& t : xt) {
    const float x = p.at(t.value, 0).x, tw = ImGui::CalcTextSize(t.label.c_str()).x;
    dl->AddLine(ImVec2(x, p.p0.y), ImVec2(x, p.p1.y), kGrid);
    dl->AddLine(ImVec2(x, p.p1.y), ImVec2(x, p.p1.y + 4), kAxisText);
    dl->AddText(ImVec2(std::min(x - tw / 2, c.x + w - tw), p.p1.y + 5), kAxisText, t.label.c_str());
    ax.x_ticks.emplace_back(x, t.label);
  }
  for (const auto& t : yt) {
    const float y = p.at(0, t.value).y;
    dl->AddLine(ImVec2(p.p0.x, y), ImVec2(p.p1.x, y), kGrid);
    dl->AddLine(ImVec2(p.p0.x - 4, y), ImVec2(p.p0.x, y), kAxisText);
    dl->AddText(ImVec2(p.p0.x - 6 - ImGui::CalcTextSize(t.label.c_str()).x, y - lh / 2), kAxisText, t.label.c_str());
    ax.y_ticks.emplace_back(y, t.label);
  }
  dl->AddRect(p.p0, p.p1, IM_COL32(90, 90, 100, 255));
  const float xw = ImGui::CalcTextSize(xlabel).x;
  dl->AddText(ImVec2((p.p0.x + p.p1.x - xw) / 2, p.p1.y + lh + 7), kAxisText, xlabel);
  ImGui::Dummy(ImVec2(w, h));
  return p;
}

ImU32 statusColor(tuner::TrialStatus s) {
  switch (s) {
    case tuner::TrialStatus::Ok: return IM_COL32(90, 170, 240, 255);
    case tuner::TrialStatus::OutOfMemory: return IM_COL32(240, 150, 40, 255);
    default: return IM_COL32(220, 70, 70, 255);
  }
}

std::vector<MeasuredTrial> measured(const tuner::StudySnapshot& st) {
  std::vector<MeasuredTrial> out;
  for (const auto& t : st.trials) {
    const bool ok = t.status == tuner::TrialStatus::Ok;
    // As the tuner's pick rules a candidate out (tuner/src/search.cpp): a failed trial, or one over the limit.
    const bool unfit = (!ok && t.status != tuner::TrialStatus::Running) || (ok && t.peak_bytes > st.memory_bytes);
    out.push_back({t.id, t.candidate, t.round, t.steps, t.step_s, ok, unfit});
  }
  return out;
}

std::string planOf(const tuner::StudySnapshot& st, int64_t id) {
  const auto* c = st.candidate(id);
  return c ? c->plan : "?";
}

// The tooltip of a point: the trial and its candidate, predicted and measured time and memory.
void pointTooltip(const tuner::StudySnapshot& st, const tuner::TrialRecord& t) {
  ImGui::BeginTooltip();
  ImGui::Text("trial %lld of candidate #%lld%s", (long long)t.id, (long long)t.candidate,
              t.candidate == st.recommended ? " (recommended)" : "");
  ImGui::TextUnformatted(planOf(st, t.candidate).c_str());
  ImGui::TextColored(ImColor(statusColor(t.status)), "%s, round %lld, %lld steps", tuner::toString(t.status),
                     (long long)t.round, (long long)t.steps);
  // The prediction when the trial started; `trainscope tune`'s table prints the candidate's, refitted
  // to every trial measured by the end.
  ImGui::Text("step time: predicted %s when the trial started, measured %s", formatDuration(t.predicted_step_s * 1e9).c_str(),
              t.step_s > 0 ? formatDuration(t.step_s * 1e9).c_str() : "-");
  ImGui::Text("peak memory: predicted %s, measured %s", formatBytes(double(t.predicted_peak)).c_str(),
              t.peak_bytes > 0 ? formatBytes(double(t.peak_bytes)).c_str() : "-");
  if (!t.message.empty()) ImGui::TextDisabled("%s", t.message.c_str());
  ImGui::EndTooltip();
}

}  // namespace

namespace {

void trialsTable(App& app, const tuner::StudySnapshot& st, float height) {
  if (!ImGui::BeginTable("trials", 9, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable |
                                          ImGuiTableFlags_SizingFixedFit,
                         ImVec2(0, height)))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* c : {"trial", "cand", "plan", "status", "steps", "measured", "predicted at start", "peak", ""})
    ImGui::TableSetupColumn(c, std::string(c) == "plan" ? ImGuiTableColumnFlags_WidthStretch : 0);
  headersRow("trials", /*auto_fit=*/true);
  for (const auto& t : st.trials) {
    app.study_shown.table.push_back({t.id, t.candidate, planOf(st, t.candidate)});
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::Text("%lld", (long long)t.id);
    ImGui::TableNextColumn();  // the candidate, as the headline and `trainscope tune`'s table name it
    if (t.candidate == st.recommended) ImGui::TextColored(ImVec4(1, .9f, 0, 1), "#%lld *", (long long)t.candidate);
    else ImGui::Text("#%lld", (long long)t.candidate);
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(planOf(st, t.candidate).c_str());
    if (st.isProfile(t)) {  // its traced layer ranges gave its shape's measured costs
      ImGui::SameLine();
      ImGui::TextDisabled("profile");
    }
    ImGui::TableNextColumn();
    ImGui::TextColored(ImColor(statusColor(t.status)), "%s", tuner::toString(t.status));
    ImGui::TableNextColumn();
    ImGui::Text("%lld", (long long)t.steps);
    ImGui::TableNextColumn();
    ImGui::Text("%s", t.step_s > 0 ? formatDuration(t.step_s * 1e9).c_str() : "-");
    ImGui::TableNextColumn();
    ImGui::Text("%s", formatDuration(t.predicted_step_s * 1e9).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%s", t.peak_bytes > 0 ? formatBytes(double(t.peak_bytes)).c_str() : "-");
    ImGui::TableNextColumn();
    if (!t.db_path.empty()) {
      ImGui::PushID(int(t.id));
      if (ImGui::SmallButton("open")) app.openTrial(t.id);
      ImGui::PopID();
    }
  }
  ImGui::EndTable();
}

// What the time model measured: per layer shape, the costs read from the trials' layer ranges.
void costsTable(const tuner::StudySnapshot& st) {
  if (st.costs.empty() ||
      !ImGui::BeginTable("costs", 8, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit | ImGuiTableFlags_ScrollY))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (const char* c : {"layer shape (measured)", "runs", "layer fwd", "layer bwd", "recompute", "head", "DP sync", "DP hidden"})
    ImGui::TableSetupColumn(c, std::string(c).rfind("layer shape", 0) == 0 ? ImGuiTableColumnFlags_WidthStretch : 0);
  headersRow("costs", /*auto_fit=*/true);
  auto dur = [](double s) { return s > 0 ? formatDuration(s * 1e9) : std::string("-"); };
  for (const auto& [shape, k] : st.costs) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextUnformatted(tuner::costsLabel(shape, k).c_str());
    ImGui::TableNextColumn();
    ImGui::Text("%lld", (long long)k.runs);
    for (double s : {k.layer_fwd_s, k.layer_bwd_s, k.recompute_full_s > 0 ? k.recompute_full_s : k.recompute_selective_s,
                     k.head_s, k.dp_sync_s}) {
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(dur(s).c_str());
    }
    ImGui::TableNextColumn();
    if (k.dp_hidden_share >= 0) ImGui::Text("%.0f%%", 100 * k.dp_hidden_share);
    else ImGui::TextUnformatted("-");
  }
  ImGui::EndTable();
}

// A point, its "#candidate" label recorded to be placed with the plot's others (pointLabels); the
// hovered one is remembered.
void point(App& app, ImDrawList* dl, size_t plot, const tuner::TrialRecord& t, ImVec2 p, ImU32 col, bool filled,
           const tuner::TrialRecord** hovered, float* best) {
  if (filled) dl->AddCircleFilled(p, 4, col);
  else dl->AddCircle(p, 4, col);
  app.study_shown.points.push_back({plot, t.id, t.candidate, p.x, p.y, "#" + std::to_string(t.candidate), false});
  const ImVec2 m = ImGui::GetIO().MousePos;
  const float d2 = (m.x - p.x) * (m.x - p.x) + (m.y - p.y) * (m.y - p.y);
  if (d2 < *best) *best = d2, *hovered = &t;
}

// The plot's point labels, none over another (fit.h: placeLabels): each tries above right of its point,
// then below right, above left, below left, and is left out (its tooltip names it) when all four meet
// a label already written. A candidate's repeats landing on one spot share one label.
void pointLabels(App& app, ImDrawList* dl, size_t plot) {
  auto& pts = app.study_shown.points;
  const float lh = ImGui::GetTextLineHeight();
  std::vector<size_t> idx;
  std::vector<std::vector<LabelBox>> places;
  for (size_t i = 0; i < pts.size(); ++i) {
    auto& q = pts[i];
    if (q.plot != plot) continue;
    bool repeat = false;
    for (size_t j : idx)
      repeat = repeat || (pts[j].candidate == q.candidate && std::fabs(pts[j].x - q.x) < 8 && std::fabs(pts[j].y - q.y) < lh);
    if (repeat) continue;
    q.label_w = ImGui::CalcTextSize(q.label.c_str()).x, q.label_h = lh;
    const float w = q.label_w;
    idx.push_back(i);
    places.push_back({{q.x + 6, q.y - lh - 1, q.x + 6 + w, q.y - 1},
                      {q.x + 6, q.y + 1, q.x + 6 + w, q.y + 1 + lh},
                      {q.x - 6 - w, q.y - lh - 1, q.x - 6, q.y - 1},
                      {q.x - 6 - w, q.y + 1, q.x - 6, q.y + 1 + lh}});
  }
  const std::vector<int> used = placeLabels(places);
  for (size_t k = 0; k < idx.size(); ++k) {
    if (used[k] < 0) continue;
    auto& q = pts[idx[k]];
    const LabelBox& b = places[k][size_t(used[k])];
    q.drawn = true, q.label_x0 = b.x0, q.label_y0 = b.y0;
    dl->AddText(ImVec2(b.x0, b.y0), IM_COL32(200, 200, 210, 255), q.label.c_str());
  }
}

}  // namespace

namespace {

// The two plots side by side, every trial a labelled point; hovering one gives its tooltip.
void plots(App& app, const tuner::StudySnapshot& st) {
  // The memory axis spans the trials (fit.h: memoryAxis): a limit far above every peak is said in words,
  // not drawn at the end of an axis that squeezes every point against 0.
  double smax = 0, data_peak = 0;
  for (const auto& t : st.trials) {
    smax = std::max({smax, t.step_s, t.predicted_step_s});
    data_peak = std::max({data_peak, double(t.peak_bytes), double(t.predicted_peak)});
  }
  const MemoryAxis mem = memoryAxis(data_peak, double(st.memory_bytes));
  double pmax = mem.hi;
  if (mem.limit_shown)
    for (const auto& c : st.candidates)  // show the pruned ones too, up to twice the limit
      if (!c.rejected.empty() && c.predicted_peak > 0 && st.memory_bytes > 0)
        pmax = std::max(pmax, std::min(double(c.predicted_peak), 2.0 * double(st.memory_bytes)) * 1.1);
  app.study_shown.memory_limit_note =
      st.memory_bytes > 0 && !mem.limit_shown ? "limit " + formatBytes(double(st.memory_bytes)) + ": off this scale" : "";
  smax = (smax > 0 ? smax : 1) * 1.1;
  const auto st_ticks = durationTicks(0, smax, 5), mem_ticks = byteTicks(0, pmax, 5);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const float pw = ImGui::GetContentRegionAvail().x * 0.5f - 4, ph = ImGui::GetContentRegionAvail().y - 4;
  const tuner::TrialRecord* hovered = nullptr;
  float best = 64;  // within 8 px
  app.study_shown.plots.resize(2);
  Plot a = frame(app.study_shown.plots[0], "predicted (when each trial started) vs measured step time (the diagonal: exact)",
                 "predicted step time", "measured step time", pw, ph, st_ticks, st_ticks, smax, smax);
  dl->AddLine(a.at(0, 0), a.at(smax, smax), IM_COL32(100, 100, 110, 255));
  for (const auto& t : st.trials)
    if (t.step_s > 0) point(app, dl, 0, t, a.at(t.predicted_step_s, t.step_s), statusColor(t.status), true, &hovered, &best);
  pointLabels(app, dl, 0);
  ImGui::SameLine();
  Plot b = frame(app.study_shown.plots[1], "step time vs peak memory (hollow: ruled out by the memory model)",
                 "peak memory per rank", "step time", pw, ph, mem_ticks, st_ticks, pmax, smax);
  for (const auto& c : st.candidates)  // what the model pruned: its predicted point, never measured
    if (!c.rejected.empty() && c.predicted_peak > 0 && c.predicted_step_s > 0 && double(c.predicted_peak) <= pmax &&
        c.predicted_step_s <= smax)
      dl->AddCircle(b.at(double(c.predicted_peak), c.predicted_step_s), 4, IM_COL32(150, 150, 160, 255));
  if (!app.study_shown.memory_limit_note.empty()) {
    const char* note = app.study_shown.memory_limit_note.c_str();
    dl->AddText(ImVec2(b.p1.x - ImGui::CalcTextSize(note).x - 4, b.p0.y + 2), IM_COL32(240, 80, 80, 255), note);
  } else if (st.memory_bytes > 0) {
    dl->AddLine(b.at(double(st.memory_bytes), 0), b.at(double(st.memory_bytes), smax), IM_COL32(240, 80, 80, 255), 2);
    dl->AddText(ImVec2(b.at(double(st.memory_bytes), smax).x + 3, b.p0.y + 2), IM_COL32(240, 80, 80, 255), "limit");
  }
  for (const auto& t : st.trials) {
    const double peak = t.peak_bytes > 0 ? double(t.peak_bytes) : double(t.predicted_peak);
    const double step = t.step_s > 0 ? t.step_s : t.predicted_step_s;
    const ImVec2 p = b.at(peak, step);
    point(app, dl, 1, t, p, statusColor(t.status), true, &hovered, &best);
    if (t.candidate == st.recommended && t.status == tuner::TrialStatus::Ok) dl->AddCircle(p, 9, IM_COL32(255, 230, 0, 255), 0, 2);
  }
  pointLabels(app, dl, 1);
  if (hovered && ImGui::IsWindowHovered()) pointTooltip(st, *hovered);
}

}  // namespace

void App::drawStudy() {
  study_shown = {};
  if (!study) return;
  const auto& st = *study;
  study_shown.drawn = true;
  ImGui::Text("%s on %s: %zu candidates, %zu trials; memory limit %s per device", st.workload.c_str(), st.cluster.c_str(),
              st.candidates.size(), st.trials.size(), formatBytes(double(st.memory_bytes)).c_str());
  study_shown.arg = studyArgument(measured(st), st.recommended);
  const StudyArgument& arg = study_shown.arg;
  if (const auto* rec = st.candidate(st.recommended)) {
    // The figure the pick was made on, as the terminal report gives it (tuner::pooledStepTime).
    char line[512];
    std::snprintf(line, sizeof line, "recommended: #%lld %s: %s/step over its %lld trial%s", (long long)rec->id,
                  rec->plan.c_str(), formatDuration(arg.winner.step_s * 1e9).c_str(), (long long)arg.winner.trials,
                  arg.winner.trials == 1 ? "" : "s");
    study_shown.headline = line;
    study_shown.headline_candidate = rec->id;
    ImGui::TextColored(ImVec4(1, .9f, 0, 1), "%s", line);
    study_shown.argument = argumentText(
        arg, [&](int64_t id) { return planOf(st, id); }, [](double s) { return formatDuration(s * 1e9); });
    ImGui::PushTextWrapPos(0);  // wraps at the window's edge: the whole argument at any width
    ImGui::TextColored(arg.within_noise ? ImVec4(1, .65f, .3f, 1) : ImVec4(.8f, .85f, .9f, 1), "%s",
                       study_shown.argument.c_str());
    ImGui::PopTextWrapPos();
  } else {
    ImGui::TextDisabled("no recommendation yet");
  }

  const float w = ImGui::GetContentRegionAvail().x;
  ImGui::BeginChild("trials", ImVec2(w * 0.5f, 0));
  const float costs_h = st.costs.empty() ? 0.0f : ImGui::GetTextLineHeightWithSpacing() * float(st.costs.size() + 3);
  trialsTable(*this, st, ImGui::GetContentRegionAvail().y - costs_h);
  costsTable(st);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("plots", ImVec2(0, 0));
  plots(*this, st);
  ImGui::EndChild();
}

}  // namespace trainscope::viewer
