// view_input.cpp — the timeline's input: what is under the mouse (through the model's hit test:
// tracks.h finds the row, lod.h's hitItem the box as drawn), wheel and drag, clicks (select, zoom into
// a folded block, collapse a rank at its header), a track's context menu (hide, pin, move), keys, the
// tooltip; the track-control script commands; and what --layout adds about tracks and alignment.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app.h"
#include "timeline.h"

namespace trainscope::viewer {

namespace {

// The layout row under screen y (the pinned band first), or nullptr.
const LayoutRow* rowUnder(const App& app, const TimelineContext& cx, float y) {
  if (!app.track_layout.pinned.empty() && y >= cx.pinned_y && y < cx.pinned_y + app.track_layout.pinned_h &&
      y < cx.rows_y + ImGui::GetScrollY())
    return app.track_layout.rowAt(y - cx.pinned_y, true);
  return y >= cx.top ? app.track_layout.rowAt(y - cx.rows_y) : nullptr;
}

void tooltip(App& app, const App::Hover& hover) {
  const Document& d = *app.docs[hover->first.doc];
  const DrawItem& it = hover->second;
  ImGui::BeginTooltip();
  if (it.count > 1) {
    ImGui::Text("%u events folded", it.count);
    ImGui::Text("%s, %.1f%% busy", formatExact(it.end - it.start).c_str(), 100 * it.coverage());
    ImGui::TextDisabled("click to zoom in");
  } else {
    const Event& e = d.trace->event(hover->first.ref);
    const std::string& full = app.docs[hover->first.doc]->names.full(e.name, d.trace->names);
    ImGui::PushTextWrapPos(ImGui::GetFontSize() * 60);
    ImGui::TextUnformatted(full.c_str());
    if (full != d.trace->names[e.name]) ImGui::TextDisabled("%s", d.trace->names[e.name].c_str());  // as recorded
    ImGui::PopTextWrapPos();
    ImGui::Text("%s  %s", kindName(e.kind), formatExact(e.duration()).c_str());
    ImGui::TextDisabled("at %s", formatExact(e.start + d.offset - app.origin()).c_str());
  }
  ImGui::EndTooltip();
}

// A released click: on an event, select it (a step or a folded block: fit it); on a header, collapse
// or expand the rank; elsewhere, clear the selection.
void click(App& app, const TimelineContext& cx, const App::Hover& hover, float y) {
  if (hover) {
    const Document& d = *app.docs[hover->first.doc];
    const DrawItem& it = hover->second;
    const bool step = d.trace->tracks[hover->first.ref.track].kind == TrackKind::Steps;
    if (it.count == 1) app.select(hover->first.doc, hover->first.ref);
    if (it.count > 1 || step) app.view.fit(it.start + d.offset, it.end + d.offset);
    return;
  }
  if (const LayoutRow* r = rowUnder(app, cx, y); r && r->kind == RowKind::Header) {
    const int64_t rank = app.docs[r->doc]->trace->ranks[r->group].rank;
    app.track_control.setCollapsed(rank, !app.track_control.isCollapsed(rank));
    return;
  }
  app.selection.reset();
  app.range.reset();
}

// Wheel zooms around the cursor, drag pans, shift-drag selects a range; clicks as above.
void mouseInput(App& app, const TimelineContext& cx, const App::Hover& hover) {
  ImGuiIO& io = ImGui::GetIO();
  const ImVec2 m = ImGui::GetMousePos();
  if (m.x >= cx.x0) {
    if (io.MouseWheel != 0 && !io.KeyCtrl) app.view.zoom(std::pow(1.25, double(io.MouseWheel)), m.x);
    if (io.KeyCtrl && io.MouseWheel != 0) ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * 40);
    if (ImGui::IsMouseDragging(ImGuiMouseButton_Left, 3)) {
      if (io.KeyShift) {
        app.setRange(app.view.timeAt(io.MouseClickedPos[0].x), app.view.timeAt(m.x));
      } else {
        app.view.pan(io.MouseDelta.x);
        ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseDelta.y);
      }
    }
  } else if (io.MouseWheel != 0) {
    ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * 40);  // over the labels the wheel scrolls
  }
  if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) && io.MouseDragMaxDistanceSqr[0] < 9.f) click(app, cx, hover, m.y);
  if (ImGui::IsMouseClicked(ImGuiMouseButton_Right))
    if (const LayoutRow* r = rowUnder(app, cx, m.y)) {
      const Trace& t = *app.docs[r->doc]->trace;
      app.track_menu = {r->doc, TrackKey{t.ranks[r->group].rank, r->kind == RowKind::Track ? t.tracks[r->track].label : ""}};
      ImGui::OpenPopup("track_menu");
    }
  if (hover) tooltip(app, hover);
}

// A track's menu (hide, pin, move) or a rank header's (collapse, show its hidden tracks).
void trackMenu(App& app) {
  if (!app.track_menu || !ImGui::BeginPopup("track_menu")) return;
  TrackControl& c = app.track_control;
  const TrackKey& k = app.track_menu->second;
  const Trace* t = app.docs.size() > app.track_menu->first ? app.docs[app.track_menu->first]->trace.get() : nullptr;
  if (!k.label.empty()) {
    ImGui::TextDisabled("rank %lld  %s", (long long)k.rank, k.label.c_str());
    if (ImGui::MenuItem("Hide")) c.setHidden(k, true);
    if (ImGui::MenuItem(c.isPinned(k) ? "Unpin" : "Pin to the top")) c.setPinned(k, !c.isPinned(k));
    if (t && ImGui::MenuItem("Move up")) c.move(*t, k, -1);
    if (t && ImGui::MenuItem("Move down")) c.move(*t, k, +1);
  }
  if (ImGui::MenuItem(c.isCollapsed(k.rank) ? "Expand rank" : "Collapse rank")) c.setCollapsed(k.rank, !c.isCollapsed(k.rank));
  if (ImGui::MenuItem("Show hidden tracks of the rank")) c.showAll(k.rank);
  // Many ranks at once (tracks.h: by pattern across ranks), the compact rows and the flows switch.
  if (t && !k.label.empty()) {
    if (ImGui::MenuItem(("Hide \"" + k.label + "\" on every rank").c_str())) setHiddenMatching(c, *t, "*", k.label, true);
    if (ImGui::MenuItem(("Pin \"" + k.label + "\" of every rank").c_str())) setPinnedMatching(c, *t, "*", k.label, true);
  }
  if (t && ImGui::MenuItem("Collapse every rank")) setCollapsedMatching(c, *t, "*", true);
  if (t && ImGui::MenuItem("Expand every rank")) setCollapsedMatching(c, *t, "*", false);
  if (ImGui::MenuItem("Compact: one row per rank", nullptr, c.compact)) c.compact = !c.compact, ++c.version;
  if (ImGui::BeginMenu("Flows")) {
    if (ImGui::MenuItem("All", nullptr, app.flow_mode == App::FlowMode::All)) app.flow_mode = App::FlowMode::All;
    if (ImGui::MenuItem("Selected only", nullptr, app.flow_mode == App::FlowMode::Selected))
      app.flow_mode = App::FlowMode::Selected;
    if (ImGui::MenuItem("None", nullptr, app.flow_mode == App::FlowMode::None)) app.flow_mode = App::FlowMode::None;
    ImGui::EndMenu();
  }
  if (ImGui::MenuItem("Tracks empty in the window take no rows", nullptr, c.hide_empty_in_window))
    c.hide_empty_in_window = !c.hide_empty_in_window, ++c.version;
  ImGui::EndPopup();
}

// `[` / `]` and their script commands: the step before / after the one in the middle of the view.
void stepMove(App& app, int dir) {
  const TimeView& view = app.view;
  if (const Trace* t = app.primary())
    if (auto s = neighbourStep(*t, view.origin + int64_t((view.t0 + view.t1) / 2), dir)) app.fitStep(*s);
}

// W/S zoom, A/D pan, F fits the selection (or everything), [ and ] the previous / next step (run B
// re-aligned at it: fitStep), F3 the next match, Esc clears.
void keyInput(App& app) {
  TimeView& view = app.view;
  const double pan_step = (view.t1 - view.t0) * 0.05;
  if (ImGui::IsKeyDown(keys::kW)) view.zoom(1.06, view.x0 + view.width / 2);
  if (ImGui::IsKeyDown(keys::kS)) view.zoom(1 / 1.06, view.x0 + view.width / 2);
  if (ImGui::IsKeyDown(keys::kA)) view.t0 -= pan_step, view.t1 -= pan_step;
  if (ImGui::IsKeyDown(keys::kD)) view.t0 += pan_step, view.t1 += pan_step;
  if (ImGui::IsKeyPressed(keys::kF)) {
    if (app.selection && app.docs[app.selection->doc]->ready()) {
      const Document& d = *app.docs[app.selection->doc];
      const Event& e = d.trace->event(app.selection->ref);
      view.fit(e.start + d.offset, e.end + d.offset, 0.2);
    } else {
      app.fitAll();
    }
  }
  if (ImGui::IsKeyPressed(keys::kLeftBracket)) stepMove(app, -1);
  if (ImGui::IsKeyPressed(keys::kRightBracket)) stepMove(app, +1);
  if (ImGui::IsKeyPressed(keys::kF3)) app.gotoMatch(ImGui::GetIO().KeyShift ? -1 : 1);
  if (ImGui::IsKeyPressed(keys::kEscape)) app.selection.reset(), app.range.reset();
}

}  // namespace

App::Hover App::hitTest(const TimelineContext& cx, bool pinned) {
  const ImVec2 m = ImGui::GetMousePos();
  if (!cx.hovered || m.x < cx.x0 || m.x > cx.x1 || m.y < cx.top || m.y >= cx.bottom) return {};
  const float base = pinned ? cx.pinned_y : cx.rows_y;
  const LayoutRow* r = track_layout.rowAt(m.y - base, pinned);
  if (!r || r->kind != RowKind::Track || r->lanes == 0) return {};
  const uint32_t li = uint32_t((m.y - base - r->y0) / kLaneH);
  const Track& t = docs[r->doc]->trace->tracks[r->track];
  if (li >= r->lanes || li >= t.lanes.size()) return {};
  // The boxes of that lane as drawn, and the model's hit test over them (tolerance: the fold width).
  const int64_t off = docs[r->doc]->offset;
  scratch.clear();
  visibleItems(t.lanes[li], cx.vt0 - off, cx.vt1 - off, cx.threshold, scratch);
  const auto k = hitItem(t.lanes[li], scratch, view.timeAt(m.x) - off, cx.threshold);
  if (!k) return {};
  return std::make_pair(Selection{r->doc, {uint32_t(r->track), li, scratch[*k].index}}, scratch[*k]);
}

void App::timelineInput(const TimelineContext& cx, const Hover& hover) {
  const ImVec2 m = ImGui::GetMousePos();
  if (cx.hovered && m.y >= timeline_y0 + kRulerH && m.y < timeline_y1) mouseInput(*this, cx, hover);
  trackMenu(*this);
  if (!ImGui::GetIO().WantTextInput) keyInput(*this);
}

// Track control from a script (view_state.h lists them). A track that no open run has is reported,
// as `select` reports a name it cannot find, and the script goes on.
bool App::applyTrackCommand(const ScriptCommand& c) {
  static const char* kOps[] = {"collapse", "expand", "hide", "show", "pin", "unpin", "move", "empty", "split",
                               "compact", "flows", "[", "]"};
  if (std::find(std::begin(kOps), std::end(kOps), c.op) == std::end(kOps)) return false;
  if (c.op == "[" || c.op == "]") return stepMove(*this, c.op == "]" ? 1 : -1), true;
  if (c.op == "split") return panel_share = std::stof(c.args[0]), true;
  TrackControl& tc = track_control;
  if (c.op == "empty") return tc.hide_empty_in_window = c.args[0] == "hide", ++tc.version, true;
  if (c.op == "compact") return tc.compact = c.args[0] == "on", ++tc.version, true;
  if (c.op == "flows")
    return flow_mode = c.args[0] == "none" ? FlowMode::None : c.args[0] == "selected" ? FlowMode::Selected : FlowMode::All,
           true;
  if (isPattern(c.args[0]) || (c.args.size() > 1 && isPattern(c.args[1]))) return applyTrackPattern(c), true;
  const int64_t rank = int64_t(std::stod(c.args[0]));
  if (c.op == "collapse" || c.op == "expand") return tc.setCollapsed(rank, c.op == "collapse"), true;
  if (c.op == "show" && c.args.size() == 1) return tc.showAll(rank), true;
  const TrackKey key{rank, c.args[1]};
  bool known = false;
  for (const auto& d : docs)
    if (d->ready())
      for (const Track& t : d->trace->tracks) known |= t.rank == rank && t.label == key.label;
  if (!known) {
    std::cerr << "trainscope-viewer: --script line " << c.line << ": rank " << rank << " has no track \"" << key.label
              << "\"\n";
    return true;
  }
  if (c.op == "hide" || c.op == "show") tc.setHidden(key, c.op == "hide");
  if (c.op == "pin" || c.op == "unpin") tc.setPinned(key, c.op == "pin");
  if (c.op == "move")
    for (const auto& d : docs)  // the first run that has it decides the order; the key applies to both
      if (d->ready() && tc.move(*d->trace, key, int(std::stod(c.args[2])))) break;
  return true;
}

// A track command over patterns (tracks.h: setHiddenMatching …): every rank and track of every open
// run that matches; none matching is reported as a missing track is, and the script goes on.
void App::applyTrackPattern(const ScriptCommand& c) {
  size_t n = 0;
  const std::string label = c.args.size() > 1 ? c.args[1] : "*";
  for (const auto& d : docs) {
    if (!d->ready()) continue;
    const Trace& t = *d->trace;
    if (c.op == "collapse" || c.op == "expand") n += setCollapsedMatching(track_control, t, c.args[0], c.op == "collapse");
    if (c.op == "hide" || c.op == "show") n += setHiddenMatching(track_control, t, c.args[0], label, c.op == "hide");
    if (c.op == "pin" || c.op == "unpin") n += setPinnedMatching(track_control, t, c.args[0], label, c.op == "pin");
  }
  if (n == 0)
    std::cerr << "trainscope-viewer: --script line " << c.line << ": no track matches rank \"" << c.args[0]
              << "\" label \"" << label << "\"\n";
}

// --layout: every row drawn (headers and tracks, with the lanes a flame shows and whether it is
// pinned), which ranks are collapsed, the split, and run B's alignment with its message.
void App::writeTimelineLayout(nlohmann::json& j) const {
  nlohmann::json tracks = nlohmann::json::array();
  for (const auto& [r, y] : tracks_drawn) {
    const Trace& t = *docs[r.doc]->trace;
    tracks.push_back({{"doc", r.doc}, {"rank", t.ranks[r.group].rank}, {"kind", r.kind == RowKind::Header ? "header" : "track"},
                      {"label", r.kind == RowKind::Header ? "" : t.tracks[r.track].label}, {"lanes", r.lanes},
                      {"y0", y}, {"y1", y + r.h}, {"collapsed", r.collapsed},
                      {"pinned", r.kind == RowKind::Track && track_control.isPinned({t.ranks[r.group].rank, t.tracks[r.track].label})}});
  }
  j["tracks"] = tracks;
  j["track_labels"] = nlohmann::json::array();  // the label column as drawn: cut with "..." where it would not fit
  for (const auto& l : track_labels_drawn)
    j["track_labels"].push_back({{"doc", l.doc}, {"rank", l.rank}, {"label", l.label}, {"shown", l.shown}});
  if (j.contains("headers"))
    for (size_t i = 0; i < headers.size() && i < j["headers"].size(); ++i) j["headers"][i]["collapsed"] = headers[i].collapsed;
  j["split"] = {{"panel_share", panel_share}};
  j["empty_in_window_hidden"] = track_control.hide_empty_in_window;
  j["compact"] = track_control.compact;
  j["flows"] = flow_mode == FlowMode::None ? "none" : flow_mode == FlowMode::Selected ? "selected" : "all";
  j["compact_rows"] = nlohmann::json::array();
  for (const auto& r : compact_drawn)
    j["compact_rows"].push_back({{"doc", r.doc}, {"rank", r.rank}, {"y0", r.y0}, {"y1", r.y1}, {"busy", r.busy}, {"wait", r.wait},
                                 {"drawn_compute", r.drawn_compute}, {"drawn_wait", r.drawn_wait},
                                 {"drawn_pipeline_wait", r.drawn_pipeline_wait}});
  j["compact_legend"] = nlohmann::json::array();  // bottom up, colours as 0xAABBGGRR (ImU32)
  for (const auto& p : compactParts()) j["compact_legend"].push_back({{"name", p.name}, {"colour", p.colour}});
  if (docs.size() > 1)
    j["alignment"] = {{"ok", alignment.ok}, {"step", alignment.step}, {"offset_ns", alignment.offset},
                      {"message", alignment.message}, {"drawn", alignment_drawn}};
}

}  // namespace trainscope::viewer
