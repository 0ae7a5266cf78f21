// view_panels.cpp — the bottom panel's tabs: details of the selection (and of a selected time range),
// statistics, per-rank step breakdown, the run's config and summary, and the comparison of two runs.
#include <imgui.h>

#include <algorithm>
#include <cstdio>

#include "app.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/step_view.h"
#include "trainscope/viewer/table.h"

namespace trainscope::viewer {

namespace {

void fieldsTable(const char* id, const Fields& f) {
  if (!ImGui::BeginTable(id, 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingStretchProp))
    return;
  ImGui::TableSetupColumn("field", ImGuiTableColumnFlags_WidthFixed, 170);
  ImGui::TableSetupColumn("value");
  for (const auto& [k, v] : f) {
    ImGui::TableNextRow();
    ImGui::TableNextColumn();
    ImGui::TextDisabled("%s", k.c_str());
    ImGui::TableNextColumn();
    ImGui::TextWrapped("%s", v.c_str());
  }
  ImGui::EndTable();
}

std::string pct(double part, double whole) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", whole > 0 ? 100 * part / whole : 0.0);
  return b;
}

}  // namespace

// A selected time range: per kind, per rank (waits and bubble apart) and per name.
void App::drawRangeDetails() {
  const double len = double(range->second - range->first);
  ImGui::Text("Selected range: %s (from %s to %s)", formatExact(range->second - range->first).c_str(),
              formatExact(range->first - origin()).c_str(), formatExact(range->second - origin()).c_str());
  ImGui::SameLine();
  if (ImGui::SmallButton("statistics of this range")) {
    stats_in_range = true;
    tab = Tab::Statistics;
    tab_requested = true;
  }
  // Per kind, shares per rank: each rank's union of the kind's events over its tracks, at most 100%.
  if (ImGui::BeginTable("range", 6, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) {
    ImGui::TableSetupColumn("kind");
    ImGui::TableSetupColumn("events");
    ImGui::TableSetupColumn("ranks");
    ImGui::TableSetupColumn("busy per rank (mean)");
    ImGui::TableSetupColumn("of the range per rank (mean)");
    ImGui::TableSetupColumn("busiest rank");
    headersRow("range", /*auto_fit=*/true);
    for (int k = 0; k < kEventKinds; ++k) {
      const KindTotal& kt = range_totals[size_t(k)];
      if (!kt.count) continue;
      const double mean = double(kt.busy_ns) / double(std::max<int64_t>(1, kt.ranks));
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextColored(ImColor(kindColor(EventKind(k))), "%s", kindName(EventKind(k)));
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)kt.count);
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)kt.ranks);
      ImGui::TableNextColumn();
      ImGui::Text("%s", formatDuration(mean).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%s", pct(mean, len).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("rank %lld: %s", (long long)kt.max_rank, pct(double(kt.max_rank_busy_ns), len).c_str());
    }
    ImGui::EndTable();
  }
  // Per rank: where the range's time went, the waits for peers and the bubble apart (step_view.h).
  if (!range_breakdown.empty() &&
      ImGui::BeginTable("range_breakdown", 8, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) {
    for (const char* h : {"rank", "compute", "exposed comm", "waiting for a peer", "pipeline bubble", "overlap",
                          "memory", "idle"})
      ImGui::TableSetupColumn(h);
    headersRow("range_breakdown", /*auto_fit=*/true);
    for (const auto& r : range_breakdown) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)r.rank);
      for (double v : {r.b.compute_s, r.b.exposedCommS(), r.b.wait_s, r.b.bubble_s, r.b.overlap_s, r.b.memory_s,
                       r.b.idle_s}) {
        ImGui::TableNextColumn();
        ImGui::Text("%s (%s)", formatDuration(v * 1e9).c_str(), pct(v * 1e9, len).c_str());
      }
    }
    ImGui::EndTable();
  }
  // Per name and rank: the range's statistics (view_stats.cpp), half the panel when an event is
  // selected too.
  if (selection) ImGui::BeginChild("range_names_child", ImVec2(0, ImGui::GetContentRegionAvail().y * 0.45f));
  drawRangeNames();
  if (selection) ImGui::EndChild();
  ImGui::Separator();
}

void App::drawDetails() {
  if (range) drawRangeDetails();
  if (!selection || !docs[selection->doc]->ready()) {
    if (!range) ImGui::TextDisabled("Click an event for its details; shift-drag to select a time range. "
                                    "Wheel: zoom, drag: pan, W/S/A/D, F: fit, [ ]: steps, F3: next match.");
    return;
  }
  Document& d = *docs[selection->doc];
  const Trace& t = *d.trace;
  // The row is read once per selection (of this trace: a trial opened from a study is another).
  static Fields cached;
  static std::optional<Selection> cached_for;
  static const Trace* cached_trace = nullptr;
  if (!cached_for || cached_trace != &t || cached_for->doc != selection->doc || cached_for->ref != selection->ref) {
    cached = d.reader ? eventDetails(*d.reader, t, selection->ref) : Fields{};
    cached_for = selection;
    cached_trace = &t;
  }
  // A step: its breakdown on this rank, straggler and critical path, once the summary is there.
  Fields fields = cached;
  if (d.correlation)  // a kernel's launch latency (launch end → start), or an API call's to its work
    for (auto& field : launchFields(t, *d.correlation, selection->ref)) fields.push_back(std::move(field));
  if (selection->doc == 0)
    if (const rundb::RunSummary* sum = summary())
      for (auto& field : stepAnalysisFields(t, *sum, selection->ref)) fields.push_back(std::move(field));
  details_shown = fields;  // for --layout
  ImGui::BeginChild("fields", ImVec2(ImGui::GetContentRegionAvail().x * 0.6f, 0));
  fieldsTable("details", fields);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("context", ImVec2(0, 0));
  const size_t chars = size_t(ImGui::GetContentRegionAvail().x / std::max(1.f, ImGui::CalcTextSize("M").x));
  auto shown = [&](const EventRef& r) { return d.names.fit(t.event(r).name, t.names, chars); };
  drawEnclosing(selection->doc, chars);  // view_finders.cpp: a collective's by its rank's threads
  if (d.correlation) {
    const Event& e = t.event(selection->ref);
    if (e.kind == EventKind::ApiCall) {
      const auto launched = d.correlation->launchedBy(selection->ref);
      ImGui::TextDisabled("launched (%zu)", launched.size());
      for (size_t i = 0; i < launched.size() && i < 50; ++i) {
        ImGui::PushID(int(i) + 1000);
        if (ImGui::Selectable(shown(launched[i]).c_str())) select(selection->doc, launched[i]);
        ImGui::PopID();
      }
    } else if (auto l = d.correlation->launchOf(selection->ref)) {
      ImGui::TextDisabled("launched by");
      if (ImGui::Selectable(shown(*l).c_str())) select(selection->doc, *l);
    }
  }
  ImGui::EndChild();
}

void App::drawSteps() {
  const Trace* t = primary();
  const rundb::RunSummary* sum = summary();
  if (!t || !sum) {
    ImGui::TextDisabled(t && !docs[0]->steps_done.load() ? "Computing the run summary..." : "This file has no steps.");
    return;
  }
  const auto& s = *sum;
  ImGui::Text("Per counted step, each rank over its steps' %s windows (compute from %s):",
              s.breakdown_window == "gpu" ? "GPU" : "CPU", s.breakdown_source.empty() ? "no events" : s.breakdown_source.c_str());
  // Waiting for a peer and the pipeline bubble are parts of the communication, drawn apart from the
  // exposed transfer (rundb step_analysis.h), never as plain communication.
  constexpr int kParts = 7;
  const ImU32 cols[kParts] = {kindColor(EventKind::Kernel), kindColor(EventKind::Collective), IM_COL32(230, 170, 60, 255),
                              IM_COL32(200, 90, 90, 255), IM_COL32(160, 110, 200, 255), kindColor(EventKind::Memcpy),
                              IM_COL32(90, 90, 90, 255)};
  const char* names[kParts] = {"compute only", "exposed communication", "waiting for a peer", "pipeline bubble",
                               "overlap", "memory", "idle"};
  for (int i = 0; i < kParts; ++i) {
    ImGui::SameLine();
    ImGui::TextColored(ImColor(cols[i]), " %s", names[i]);
  }
  for (const auto& n : s.notes) ImGui::TextColored(ImVec4(1, .8f, .4f, 1), "note: %s", n.c_str());
  double longest = 0;
  for (const auto& r : s.ranks)
    if (r.breakdown)
      longest = std::max(longest, r.breakdown->compute_s + r.breakdown->comm_s - r.breakdown->overlap_s +
                                      r.breakdown->memory_s + r.breakdown->idle_s);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  steps_lines.clear();  // the lines as drawn, with the panel's right edge (--layout)
  steps_panel_x1 = ImGui::GetWindowPos().x + ImGui::GetWindowContentRegionMax().x;
  // The bar takes what the text beside it leaves (measured on its widest form), so the idle figure
  // is never cut off at 1920 px; the text wraps at the window's edge when even a 100 px bar is too much.
  const float text_w = ImGui::CalcTextSize("CPU step 000 ms, GPU step 000 ms | 000 ms compute, 000 ms comm, 000 ms "
                                           "wait, 000 ms bubble, 000 ms memory, 000 ms idle").x;
  const float bar_w = std::max(100.f, ImGui::GetContentRegionAvail().x - 150 - text_w - 2 * ImGui::GetStyle().ItemSpacing.x);
  // One row per rank, all of one height, through a clipper: a frame draws the visible ranks only.
  ImGuiListClipper clip;
  clip.Begin(int(s.ranks.size()));
  while (clip.Step()) {
    for (int ri = clip.DisplayStart; ri < clip.DisplayEnd; ++ri) {
      const auto& r = s.ranks[size_t(ri)];
      // Not the straggler (the step's, listed below): a rank whose compute is over 1.1 x the median rank's.
      ImGui::Text("rank %-3lld %s", (long long)r.rank, r.compute_heavy ? "more compute" : "");
      if (r.compute_heavy && ImGui::IsItemHovered())
        ImGui::SetTooltip("compute per step over 1.1 x the median rank's; each step's straggler (the rank last at "
                          "its collectives) is listed below");
      ImGui::SameLine(150);
      const ImVec2 p = ImGui::GetCursorScreenPos();
      if (r.breakdown && longest > 0) {
        const auto& b = *r.breakdown;
        const double parts[kParts] = {b.compute_s - b.overlap_s, b.exposedCommS(), b.wait_s, b.bubble_s,
                                      b.overlap_s, b.memory_s, b.idle_s};
        float x = p.x;
        for (int i = 0; i < kParts; ++i) {
          const float w = float(std::max(0.0, parts[i]) / longest) * bar_w;
          dl->AddRectFilled(ImVec2(x, p.y + 2), ImVec2(x + w, p.y + 14), cols[i]);
          x += w;
        }
        ImGui::Dummy(ImVec2(bar_w, 16));
        ImGui::SameLine();
        char line[320];
        std::snprintf(line, sizeof line, "CPU step %s%s%s | %s compute, %s comm, %s wait, %s bubble, %s memory, %s idle",
                      formatDuration(r.step_s_mean * 1e9).c_str(), r.gpu_step_s ? ", GPU step " : "",
                      r.gpu_step_s ? formatDuration(*r.gpu_step_s * 1e9).c_str() : "",
                      formatDuration(b.compute_s * 1e9).c_str(), formatDuration(b.exposedCommS() * 1e9).c_str(),
                      formatDuration(b.wait_s * 1e9).c_str(), formatDuration(b.bubble_s * 1e9).c_str(),
                      formatDuration(b.memory_s * 1e9).c_str(), formatDuration(b.idle_s * 1e9).c_str());
        steps_lines.push_back({line, ImGui::GetCursorScreenPos().x, ImGui::CalcTextSize(line).x});
        ImGui::PushTextWrapPos(0);
        ImGui::TextUnformatted(line);
        ImGui::PopTextWrapPos();
      } else {
        ImGui::Dummy(ImVec2(bar_w, 16));  // the row's height, as with a bar
        ImGui::SameLine();
        ImGui::Text("step %s (median)", formatDuration(r.step_s_median * 1e9).c_str());
      }
    }
  }
  drawPerStepTable(s);
  drawStepPaths(s);
}

// Per step, per rank: the Steps tab's parts, each step's own (the summary's per_step), through a clipper.
void App::drawPerStepTable(const rundb::RunSummary& s) {
  std::vector<std::pair<int64_t, const rundb::StepBreakdown*>> per_step;  // (rank, its step)
  for (const auto& r : s.ranks)
    for (const auto& p : r.per_step) per_step.emplace_back(r.rank, &p);
  std::stable_sort(per_step.begin(), per_step.end(),
                   [](const auto& a, const auto& b) { return a.second->step < b.second->step; });
  if (!per_step.empty() && ImGui::TreeNode("per_step", "Per step, per rank (%zu rows)", per_step.size())) {
    if (ImGui::BeginTable("per_step_table", 8, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit |
                                                   ImGuiTableFlags_ScrollY, ImVec2(0, 220))) {
      for (const char* h : {"step", "rank", "compute", "exposed comm", "waiting for a peer", "pipeline bubble", "memory",
                            "idle"})
        ImGui::TableSetupColumn(h);
      ImGui::TableSetupScrollFreeze(0, 1);
      headersRow("per_step_table", /*auto_fit=*/true);
      ImGuiListClipper rows_clip;
      rows_clip.Begin(int(per_step.size()));
      while (rows_clip.Step())
        for (int i = rows_clip.DisplayStart; i < rows_clip.DisplayEnd; ++i) {
          const auto& [rank, p] = per_step[size_t(i)];
          ImGui::TableNextRow();
          ImGui::TableNextColumn();
          ImGui::Text("%lld", (long long)p->step);
          ImGui::TableNextColumn();
          ImGui::Text("%lld", (long long)rank);
          for (double v : {p->b.compute_s, p->b.exposedCommS(), p->b.wait_s, p->b.bubble_s, p->b.memory_s, p->b.idle_s}) {
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(formatDuration(v * 1e9).c_str());
          }
        }
      ImGui::EndTable();
    }
    ImGui::TreePop();
  }
}

// Each counted step's straggler and critical path (Steps tab), the lines kept for --layout.
void App::drawStepPaths(const rundb::RunSummary& s) {
  // Each counted step's straggler: who arrived last at its collectives, by how much, doing what.
  if (!s.step_stragglers.empty()) {
    ImGui::Separator();
    ImGui::TextDisabled("Stragglers per step (the rank that arrives last at the step's linked collectives):");
    ImGui::PushTextWrapPos(0);  // wrapped at the panel's edge: the width drawn is at most what is left
    for (const std::string& text : stragglerLines(s)) {
      const float w = std::min(ImGui::CalcTextSize(text.c_str()).x, ImGui::GetContentRegionAvail().x);
      steps_lines.push_back({text, ImGui::GetCursorScreenPos().x, w});
      ImGui::TextUnformatted(text.c_str());
    }
    ImGui::PopTextWrapPos();
  }
  // Each counted step's critical path, with each segment's share; highlighted on the timeline.
  if (!s.critical_paths.empty()) {
    ImGui::Separator();
    ImGui::Checkbox("highlight the critical path on the timeline", &show_critical_path);
    ImGui::PushTextWrapPos(0);
    for (const std::string& text : criticalPathLines(s)) {
      const float w = std::min(ImGui::CalcTextSize(text.c_str()).x, ImGui::GetContentRegionAvail().x);
      steps_lines.push_back({text, ImGui::GetCursorScreenPos().x, w});
      ImGui::TextUnformatted(text.c_str());
    }
    ImGui::PopTextWrapPos();
  }
}

void App::drawSummary() {
  const Trace* t = primary();
  if (!t) return;
  Fields f;
  if (const rundb::RunSummary* sum = summary()) {
    const auto& s = *sum;
    char b[128];
    f.push_back({"workload", s.workload});
    f.push_back({"ranks", std::to_string(s.world)});
    f.push_back({"counted steps", std::to_string(s.steps) + " (" + std::to_string(s.excluded_steps) + " warm-up left out)"});
    f.push_back({"step time", "median " + formatDuration(s.step_s_median * 1e9) + ", mean " + formatDuration(s.step_s_mean * 1e9) +
                                  ", p90 " + formatDuration(s.step_s_p90 * 1e9)});
    std::snprintf(b, sizeof b, "%.0f", s.tokens_per_s);
    f.push_back({"tokens/s", b});
    if (s.mfu) {
      std::snprintf(b, sizeof b, "%.1f%%", *s.mfu * 100);
      f.push_back({"MFU", b});
    }
    f.push_back({"peak memory", formatBytes(double(s.peak_bytes))});
  }
  for (auto& field : checkpointFields(t->checkpoints)) f.push_back(std::move(field));
  f.push_back({"events", std::to_string(t->event_count) + " (" + formatBytes(double(t->bytes())) + " in the viewer, " +
                             std::to_string(t->event_count ? t->bytes() / size_t(t->event_count) : 0) + " B/event)"});
  char b[64];
  std::snprintf(b, sizeof b, "%.2f s", t->load_seconds);
  f.push_back({"loaded in", b});
  for (const auto& dr : t->drops)
    if (dr.dropped) f.push_back({"DROPPED", std::to_string(dr.dropped) + " events of " + dr.source + " on rank " + std::to_string(dr.rank)});
  f.push_back({"schema version", std::to_string(t->schema_version)});
  for (const auto& [k, v] : t->meta)
    if (k != "schema_version") f.push_back({"meta." + k, v});
  fieldsTable("summary", f);
}

void App::drawCompare() {
  if (docs.size() < 2 || !docs[0]->ready() || !docs[1]->ready()) {
    ImGui::TextDisabled("Open two run databases to compare them.");
    return;
  }
  ImGui::SetNextItemWidth(120);
  if (ImGui::InputScalar("align at step", ImGuiDataType_S64, &align_step)) realign();
  ImGui::SameLine();
  ImGui::TextDisabled("B is drawn shifted by %s", formatDuration(double(docs[1]->offset)).c_str());
  const auto diffs = compareSteps(*docs[0]->trace, *docs[1]->trace);
  ImGui::BeginChild("compare_steps", ImVec2(std::min(420.f, ImGui::GetContentRegionAvail().x * 0.35f), 0));
  if (ImGui::SmallButton("copy steps as CSV")) ImGui::SetClipboardText(toCsv(stepsTable(diffs)).c_str());
  if (ImGui::BeginTable("diff", 4, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY)) {
    ImGui::TableSetupScrollFreeze(0, 1);
    ImGui::TableSetupColumn("step");
    ImGui::TableSetupColumn("A");
    ImGui::TableSetupColumn("B");
    ImGui::TableSetupColumn("B - A");
    headersRow("diff");
    for (const auto& s : diffs) {
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)s.step);
      ImGui::TableNextColumn();
      ImGui::Text("%s", s.a_s > 0 ? formatDuration(s.a_s * 1e9).c_str() : "-");
      ImGui::TableNextColumn();
      ImGui::Text("%s", s.b_s > 0 ? formatDuration(s.b_s * 1e9).c_str() : "-");
      ImGui::TableNextColumn();
      if (s.a_s > 0 && s.b_s > 0) {
        const double d = s.b_s - s.a_s;
        ImGui::TextColored(d > 0 ? ImVec4(1, .45f, .45f, 1) : ImVec4(.5f, 1, .5f, 1), "%s%s (%+.1f%%)", d > 0 ? "+" : "",
                           formatDuration(d * 1e9).c_str(), 100 * d / s.a_s);
      }
    }
    ImGui::EndTable();
  }
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("compare_names", ImVec2(0, 0));
  drawNameDiff();
  ImGui::EndChild();
}

}  // namespace trainscope::viewer
