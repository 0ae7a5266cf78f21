// view_study.cpp — a tuner study: the trials, predicted against measured step time, and step time
// against peak memory with the memory limit drawn and the recommendation marked. A trial's trace
// opens in one click.
#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "app.h"
#include "trainscope/viewer/image.h"

namespace trainscope::viewer {

namespace {

struct Plot {
  ImVec2 p0, p1;
  double x0, x1, y0, y1;
  ImVec2 at(double x, double y) const {
    return ImVec2(p0.x + float((x - x0) / (x1 - x0)) * (p1.x - p0.x), p1.y - float((y - y0) / (y1 - y0)) * (p1.y - p0.y));
  }
};

Plot frame(const char* title, const char* xlabel, const char* ylabel, float w, float h, double x0, double x1, double y0,
           double y1, const std::string& xmax, const std::string& ymax) {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 c = ImGui::GetCursorScreenPos();
  Plot p{ImVec2(c.x + 50, c.y + 20), ImVec2(c.x + w - 10, c.y + h - 30), x0, x1, y0, y1};
  dl->AddRectFilled(p.p0, p.p1, IM_COL32(30, 32, 37, 255));
  dl->AddRect(p.p0, p.p1, IM_COL32(90, 90, 100, 255));
  dl->AddText(ImVec2(c.x + 50, c.y + 2), palette::kText, title);
  dl->AddText(ImVec2(p.p0.x, p.p1.y + 6), IM_COL32(160, 160, 170, 255), xlabel);
  dl->AddText(ImVec2(c.x, p.p0.y), IM_COL32(160, 160, 170, 255), ylabel);
  dl->AddText(ImVec2(p.p1.x - ImGui::CalcTextSize(xmax.c_str()).x, p.p1.y + 6), IM_COL32(160, 160, 170, 255), xmax.c_str());
  dl->AddText(ImVec2(c.x, p.p0.y + 16), IM_COL32(160, 160, 170, 255), ymax.c_str());
  dl->AddText(ImVec2(p.p0.x - 12, p.p1.y + 2), IM_COL32(160, 160, 170, 255), "0");
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

}  // namespace

void App::drawStudy() {
  if (!study) return;
  const auto& st = *study;
  ImGui::Text("%s on %s: %zu candidates, %zu trials; memory limit %s per device", st.workload.c_str(), st.cluster.c_str(),
              st.candidates.size(), st.trials.size(), formatBytes(double(st.memory_bytes)).c_str());
  if (const auto* rec = st.candidate(st.recommended)) {
    int64_t n = 0;  // the figure the pick was made on, as the terminal report gives it
    const double pooled = tuner::pooledStepTime(st.trials, rec->id, &n);
    ImGui::Text("recommended: #%lld %s: %s/step over its %lld trials", (long long)rec->id, rec->plan.c_str(),
                formatDuration(pooled * 1e9).c_str(), (long long)n);
  } else {
    ImGui::TextDisabled("no recommendation yet");
  }

  const float w = ImGui::GetContentRegionAvail().x;
  ImGui::BeginChild("trials", ImVec2(w * 0.5f, 0));
  const float costs_h = st.costs.empty() ? 0.0f : ImGui::GetTextLineHeightWithSpacing() * float(st.costs.size() + 3);
  if (ImGui::BeginTable("trials", 8, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable |
                                         ImGuiTableFlags_SizingFixedFit,
                        ImVec2(0, ImGui::GetContentRegionAvail().y - costs_h))) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* c : {"trial", "plan", "status", "steps", "measured", "predicted", "peak", ""})
      ImGui::TableSetupColumn(c, std::string(c) == "plan" ? ImGuiTableColumnFlags_WidthStretch : 0);
    ImGui::TableHeadersRow();
    for (const auto& t : st.trials) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%s%lld", t.candidate == st.recommended ? "* " : "", (long long)t.id);
      ImGui::TableNextColumn();
      const auto* c = st.candidate(t.candidate);
      ImGui::TextUnformatted(c ? c->plan.c_str() : "?");
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
        if (ImGui::SmallButton("open")) openTrial(t.id);
        ImGui::PopID();
      }
    }
    ImGui::EndTable();
  }
  // What the time model measured: per layer shape, the costs read from the trials' layer ranges.
  if (!st.costs.empty() && ImGui::BeginTable("costs", 8, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit |
                                                         ImGuiTableFlags_ScrollY)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    for (const char* c : {"layer shape (measured)", "runs", "layer fwd", "layer bwd", "recompute", "head", "DP sync", "DP hidden"})
      ImGui::TableSetupColumn(c, std::string(c).rfind("layer shape", 0) == 0 ? ImGuiTableColumnFlags_WidthStretch : 0);
    ImGui::TableHeadersRow();
    auto dur = [](double s) { return s > 0 ? formatDuration(s * 1e9) : std::string("-"); };
    for (const auto& [shape, k] : st.costs) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(tuner::costsLabel(shape, k).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)k.runs);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(dur(k.layer_fwd_s).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(dur(k.layer_bwd_s).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(dur(k.recompute_full_s > 0 ? k.recompute_full_s : k.recompute_selective_s).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(dur(k.head_s).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(dur(k.dp_sync_s).c_str());
      ImGui::TableNextColumn();
      if (k.dp_hidden_share >= 0) ImGui::Text("%.0f%%", 100 * k.dp_hidden_share);
      else ImGui::TextUnformatted("-");
    }
    ImGui::EndTable();
  }
  ImGui::EndChild();
  ImGui::SameLine();

  // Scales over the measured trials.
  double smax = 0, pmax = double(st.memory_bytes);
  for (const auto& t : st.trials) {
    smax = std::max({smax, t.step_s, t.predicted_step_s});
    pmax = std::max({pmax, double(t.peak_bytes), double(t.predicted_peak)});
  }
  for (const auto& c : st.candidates)  // show the pruned ones too, up to twice the limit
    if (!c.rejected.empty() && c.predicted_peak > 0 && st.memory_bytes > 0)
      pmax = std::max(pmax, std::min(double(c.predicted_peak), 2.0 * double(st.memory_bytes)));
  if (smax <= 0) smax = 1;
  if (pmax <= 0) pmax = 1;
  ImGui::BeginChild("plots", ImVec2(0, 0));
  const float pw = ImGui::GetContentRegionAvail().x * 0.5f - 4, ph = ImGui::GetContentRegionAvail().y - 4;
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const std::string smax_s = formatDuration(smax * 1.1e9), pmax_s = formatBytes(pmax * 1.1);
  Plot a = frame("predicted vs measured step time", "predicted", "measured", pw, ph, 0, smax * 1.1, 0, smax * 1.1,
                 smax_s, smax_s);
  dl->AddLine(a.at(0, 0), a.at(smax * 1.1, smax * 1.1), IM_COL32(100, 100, 110, 255));
  for (const auto& t : st.trials)
    if (t.step_s > 0) dl->AddCircleFilled(a.at(t.predicted_step_s, t.step_s), 4, statusColor(t.status));
  ImGui::SameLine();
  Plot b = frame("step time vs peak memory (hollow: ruled out by the memory model)", "peak memory", "step", pw, ph, 0,
                 pmax * 1.1, 0, smax * 1.1, pmax_s, smax_s);
  for (const auto& c : st.candidates)  // what the model pruned: its predicted point, never measured
    if (!c.rejected.empty() && c.predicted_peak > 0 && c.predicted_step_s > 0 && double(c.predicted_peak) <= pmax * 1.1 &&
        c.predicted_step_s <= smax * 1.1)
      dl->AddCircle(b.at(double(c.predicted_peak), c.predicted_step_s), 4, IM_COL32(150, 150, 160, 255));
  if (st.memory_bytes > 0) {
    dl->AddLine(b.at(double(st.memory_bytes), 0), b.at(double(st.memory_bytes), smax * 1.1), IM_COL32(240, 80, 80, 255), 2);
    dl->AddText(ImVec2(b.at(double(st.memory_bytes), smax * 1.1).x + 3, b.p0.y + 2), IM_COL32(240, 80, 80, 255), "limit");
  }
  for (const auto& t : st.trials) {
    const double peak = t.peak_bytes > 0 ? double(t.peak_bytes) : double(t.predicted_peak);
    const double step = t.step_s > 0 ? t.step_s : t.predicted_step_s;
    const ImVec2 p = b.at(peak, step);
    dl->AddCircleFilled(p, 4, statusColor(t.status));
    if (t.candidate == st.recommended && t.status == tuner::TrialStatus::Ok) dl->AddCircle(p, 9, IM_COL32(255, 230, 0, 255), 0, 2);
  }
  ImGui::EndChild();
}

}  // namespace trainscope::viewer
