// view_timeline.cpp — the main window's frame: the top bar, the timeline of every rank above a
// resizable split, and the bottom panel's tabs; and the timeline's frame as a recipe of its parts
// (Tracy's TimelineContext / TimelineItem split): the ruler (view_ruler.cpp), the rows laid out by the
// model (tracks.h) and drawn in view_tracks.cpp, the overlays (view_overlays.cpp) and the input
// (view_input.cpp). The timeline draws only what lod.h returns for the visible window.
#include <imgui.h>

#include <algorithm>

#include "app.h"
#include "trainscope/viewer/header.h"
#include "timeline.h"
#include "trainscope/viewer/image.h"

namespace trainscope::viewer {

namespace {

// Files, loading progress, search.
void topBar(App& app) {
  for (size_t i = 0; i < app.docs.size(); ++i) {
    const Document& d = *app.docs[i];
    if (i) ImGui::SameLine();
    if (!d.done.load()) {
      ImGui::Text("loading %s", d.path.c_str());
      ImGui::SameLine();
      ImGui::ProgressBar(float(d.progress.fraction.load()), ImVec2(240, 0));
    } else if (d.ready()) {
      ImGui::Text("%s%s  %lld events  %d rank(s)", i ? "| B: " : "A: ", d.path.c_str(),
                  (long long)d.trace->event_count, int(d.trace->ranks.size()));
    }
  }
  // An imported trace says what it is under the files (header.h): source, format, ranks, span, drops.
  app.import_headers.clear();
  for (const auto& d : app.docs)
    if (d->ready())
      for (std::string h : {importHeader(*d->trace), d->unmerged})
        if (!h.empty()) app.import_headers.push_back(std::move(h));
  if (app.study) {
    if (!app.docs.empty()) ImGui::SameLine();
    ImGui::Text("%sstudy %s", app.docs.empty() ? "" : "| ", app.study->path.c_str());  // no stray "| " alone
  }
  if (!app.primary()) return;
  ImGui::SameLine(ImGui::GetWindowWidth() - 520);
  ImGui::SetNextItemWidth(220);
  if (ImGui::InputTextWithHint("##search", "search names", app.search_text, sizeof app.search_text,
                               ImGuiInputTextFlags_EnterReturnsTrue)) {
    app.runSearch(app.search_text);
    app.tab = Tab::Search, app.tab_requested = true;  // the results list (view_finders.cpp)
  }
  ImGui::SameLine();
  if (ImGui::ArrowButton("##prev", ImGuiDir_Left)) app.gotoMatch(-1);
  ImGui::SameLine();
  if (ImGui::ArrowButton("##next", ImGuiDir_Right)) app.gotoMatch(+1);
  ImGui::SameLine();
  if (!app.found.needle.empty())
    ImGui::Text("%lld / %zu%s", (long long)(app.found_index + 1), app.found.matches.size(), app.found.truncated ? "+" : "");
  else
    ImGui::TextDisabled("F3 next");
  for (const std::string& h : app.import_headers) ImGui::TextDisabled("%s", h.c_str());
}

// The split between the timeline and the panel: a bar to drag (the panel's share follows the mouse).
void splitter(App& app, float total_h) {
  const ImVec2 p = ImGui::GetCursorScreenPos();
  const float w = ImGui::GetContentRegionAvail().x;
  ImGui::InvisibleButton("##split", ImVec2(std::max(1.f, w), 6));
  const bool hot = ImGui::IsItemHovered() || ImGui::IsItemActive();
  if (hot) ImGui::SetMouseCursor(ImGuiMouseCursor_ResizeNS);
  if (ImGui::IsItemActive() && total_h > 0)
    app.panel_share = std::clamp(app.panel_share - ImGui::GetIO().MouseDelta.y / total_h, 0.1f, 0.9f);
  ImGui::GetWindowDrawList()->AddRectFilled(ImVec2(p.x, p.y + 2), ImVec2(p.x + w, p.y + 4),
                                            hot ? IM_COL32(120, 140, 180, 255) : IM_COL32(60, 64, 74, 255));
}

void panelTabs(App& app) {
  if (ImGui::BeginTabBar("tabs")) {
    auto item = [&](const char* label, Tab t) {
      const bool force = app.tab_requested && app.tab == t;
      if (ImGui::BeginTabItem(label, nullptr, force ? ImGuiTabItemFlags_SetSelected : 0)) {
        if (!app.tab_requested) app.tab = t;
        switch (t) {
          case Tab::Details: app.drawDetails(); break;
          case Tab::Statistics: app.drawStatistics(); break;
          case Tab::Steps: app.drawSteps(); break;
          case Tab::Summary: app.drawSummary(); break;
          case Tab::Compare: app.drawCompare(); break;
          case Tab::Study: app.drawStudy(); break;
          case Tab::Sql: app.drawSql(); break;
          case Tab::Search: app.drawSearchList(); break;
        }
        ImGui::EndTabItem();
      }
    };
    if (app.primary()) {
      item("Details", Tab::Details);
      item("Statistics", Tab::Statistics);
      item("Steps", Tab::Steps);
      item("Summary", Tab::Summary);
      if (app.docs.size() > 1) item("Compare", Tab::Compare);
      item("SQL", Tab::Sql);
      item("Search", Tab::Search);  // the results list (view_finders.cpp)
    }
    if (app.study) item("Study", Tab::Study);
    ImGui::EndTabBar();
  }
  app.tab_requested = false;
}

}  // namespace

void App::drawFrame() {
  headersShown().clear();
  stats_shown = {}, details_shown.clear();  // filled again if the Statistics or Details tab is drawn
  finders.enclosing_drawn = false;
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->Pos);
  ImGui::SetNextWindowSize(vp->Size);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowRounding, 0);
  ImGui::Begin("trainscope", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoBringToFrontOnFocus |
                   ImGuiWindowFlags_NoSavedSettings);
  ImGui::PopStyleVar();
  topBar(*this);
  if (!fatal.empty()) {
    ImGui::Spacing();
    ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(255, 110, 110, 255));
    ImGui::TextWrapped("%s", fatal.c_str());
    ImGui::PopStyleColor();
    ImGui::End();
    return;
  }
  // Timeline | split | panel: the panel takes its share of what is below the top bar.
  const float total_h = ImGui::GetContentRegionAvail().y;
  float panel_h = std::max(60.f, total_h * panel_share);
  // A panel that would hold only Details' hint line (nothing selected, no range) shrinks to the tab
  // bar and the hint, and the timeline takes the rest; a selection brings the panel's share back.
  panel_hint_only = primary() && tab == Tab::Details && !selection && !range;
  if (panel_hint_only)
    panel_h = std::min(panel_h, ImGui::GetFrameHeightWithSpacing() + 3 * ImGui::GetTextLineHeightWithSpacing() +
                                    2 * ImGui::GetStyle().WindowPadding.y);
  const float timeline_h = std::max(40.f, total_h - panel_h - 6 - ImGui::GetStyle().ItemSpacing.y);
  if (primary()) {
    ImGui::BeginChild("timeline", ImVec2(0, timeline_h), false, ImGuiWindowFlags_NoScrollWithMouse);
    drawTimeline();
    ImGui::EndChild();
    splitter(*this, total_h);
  } else if (!study) {
    ImGui::Dummy(ImVec2(0, timeline_h));
  }
  panel_y0 = ImGui::GetCursorScreenPos().y;
  ImGui::BeginChild("panel", ImVec2(0, 0), true);
  panelTabs(*this);
  ImGui::EndChild();
  ImGui::End();
}

// One frame of the timeline: context → ruler → layout → pinned band → scrolled rows → overlays → input.
void App::drawTimeline() {
  TimelineContext cx;
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  cx.left = p0.x;
  cx.x0 = timeline_x0 = p0.x + kGutter;
  cx.x1 = timeline_x1 = p0.x + avail.x;
  timeline_y0 = p0.y;
  timeline_y1 = p0.y + avail.y;
  view.x0 = timeline_x0;
  view.width = std::max(10.f, timeline_x1 - timeline_x0);
  if (const Trace* t = primary()) view.clamp(t->begin, t->end);
  cx.ns_px = view.nsPerPx();
  cx.threshold = std::max<int64_t>(1, int64_t(cx.ns_px * kMinPx));
  cx.vt0 = view.begin(), cx.vt1 = view.end();
  cx.char_w = std::max(1.f, ImGui::CalcTextSize("M").x);
  cx.record = !opt.layout.empty();  // --layout reports every box drawn
  cx.hovered = ImGui::IsWindowHovered(ImGuiHoveredFlags_ChildWindows);
  ImDrawList* dl = ImGui::GetWindowDrawList();
  drawRuler(dl, cx);
  updateTrackLayout(cx);
  rows.clear(), boxes.clear(), links.clear(), headers.clear(), sends_drawn.clear(), tracks_drawn.clear();
  track_labels_drawn.clear(), compact_drawn.clear();
  path_drawn.clear();
  utils.clear();
  counters_shown.clear();

  // Pinned tracks: a band under the ruler that does not scroll (at most half the timeline).
  float y = p0.y + kRulerH;
  y = drawQueryTrack(dl, cx, y);  // a query shown as a track, under the ruler (view_finders.cpp)
  Hover hover;
  if (!track_layout.pinned.empty()) {
    const float band = std::min(track_layout.pinned_h, (timeline_y1 - y) * 0.5f);
    cx.pinned_y = cx.top = y, cx.bottom = y + band;
    hover = hitTest(cx, true);
    drawRows(dl, cx, true);
    y += band + 2;
    dl->AddLine(ImVec2(p0.x, y - 1), ImVec2(timeline_x1, y - 1), IM_COL32(120, 140, 180, 255), 2);
  }
  // The rank groups, scrolled vertically in a child; the ruler and the pinned band stay.
  ImGui::SetCursorScreenPos(ImVec2(p0.x, y));
  ImGui::BeginChild("rows", ImVec2(0, 0), false, ImGuiWindowFlags_NoScrollWithMouse);
  dl = ImGui::GetWindowDrawList();
  cx.top = ImGui::GetWindowPos().y, cx.bottom = cx.top + ImGui::GetWindowHeight();
  cx.rows_y = ImGui::GetCursorScreenPos().y;
  rows_scroll = ImGui::GetScrollY(), rows_h = ImGui::GetWindowHeight();  // the next frame's layout band
  applyScrollTarget();
  if (!hover) hover = hitTest(cx, false);
  drawRows(dl, cx, false);
  drawTimelineOverlays(dl, cx, hover);
  ImGui::Dummy(ImVec2(1, std::max(1.f, track_layout.total_h)));
  timelineInput(cx, hover);
  ImGui::EndChild();
}

}  // namespace trainscope::viewer
