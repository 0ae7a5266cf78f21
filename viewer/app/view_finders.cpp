// view_finders.cpp — go-to for every finder: the Search tab's results list (sortable; a click, Enter,
// next and prev select the match, scroll its row into view and pan to it), SQL rows that name an event
// (a click jumps there) and a query shown as a track under the ruler (removable), per-name diff rows
// to their slowest instance, and Details' enclosing ranges. What is found is model code (finders.h);
// this file draws, clicks, and records for --layout.
#include <imgui.h>
#include <imgui_internal.h>  // TableSetColumnSortDirection: the header's arrow on a sort set elsewhere

#include <algorithm>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app.h"
#include "timeline.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/lod.h"

namespace trainscope::viewer {

namespace {

constexpr size_t kQueryTrackLanes = 8;

size_t docOf(const App& app, const Trace* t) {
  for (size_t i = 0; i < app.docs.size(); ++i)
    if (app.docs[i]->trace.get() == t) return i;
  return 0;
}

// What of `s` fits in `room` px (a prefix), "" when not a character does.
std::string fitLabel(const std::string& s, float room, float char_w) {
  const size_t chars = room > 0 ? size_t(room / char_w) : 0;
  if (chars < 2) return {};
  return s.size() <= chars ? s : s.substr(0, chars - 1) + "~";
}

}  // namespace

void App::bringIntoView(size_t doc, const EventRef& r) {
  const Document& d = *docs[doc];
  const Tab keep = tab;
  select(doc, r);
  tab = keep, tab_requested = true;  // the list clicked stays in front; Details follow the selection
  reveal(doc, r);
  const Event& e = d.trace->event(r);
  const int64_t a = e.start + d.offset, b = e.end + d.offset;
  // Out of view, or too narrow to see: bring it in at a fifth of the width.
  if (a < view.begin() || b > view.end() || double(b - a) < 10 * view.nsPerPx()) view.fit(a, b, 2.0);
}

void App::gotoListed(int64_t pos) {
  const Trace* t = primary();
  if (!t || pos < 0 || size_t(pos) >= finders.list.order.size()) return;
  found_index = pos;
  finders.list_scroll = true;
  const size_t doc = docOf(*this, t);
  const EventRef& r = found.matches[finders.list.order[size_t(pos)]];
  const Tab keep = tab;
  select(doc, r);
  tab = keep, tab_requested = true;
  reveal(doc, r);
  // Centred, the zoom kept (at least three times the match wide).
  const Event& e = t->event(r);
  const double w = std::max(view.t1 - view.t0, double(e.duration()) * 3);
  view.t0 = view.rel(e.start) + double(e.duration()) / 2 - w / 2;
  view.t1 = view.t0 + w;
}

bool App::rowButton(const char* table, int id, bool selected) {
  ImGui::PushID(id);
  const bool clicked =
      ImGui::Selectable("##row", selected, ImGuiSelectableFlags_SpanAllColumns | ImGuiSelectableFlags_AllowItemOverlap);
  recordClickTarget(std::string(table) + " " + std::to_string(id));  // a script's click (view_clicks.cpp)
  ImGui::PopID();
  ImGui::SameLine(0, 0);
  return clicked;
}

// The Search tab: every match of the search, sortable by any column; the picked one highlighted and
// kept in view as next / prev walk the list in its order.
void App::drawSearchList() {
  const Trace* t = primary();
  if (!t || found.needle.empty()) {
    ImGui::TextDisabled("Type a name in the search box and press Enter: every match is listed here.");
    return;
  }
  ImGui::Text("%zu match%s of \"%s\"%s; click a row, or F3 / Shift+F3 for the next / previous in this order",
              found.matches.size(), found.matches.size() == 1 ? "" : "es", found.needle.c_str(),
              found.truncated ? " (the first; more not listed)" : "");
  if (found.matches.empty()) return;
  const ImGuiTableFlags flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable |
                                ImGuiTableFlags_Sortable | ImGuiTableFlags_BordersInnerV;
  if (!ImGui::BeginTable("search_list", 5, flags)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch, 0, ImGuiID(MatchColumn::Name));
  ImGui::TableSetupColumn("rank", ImGuiTableColumnFlags_WidthFixed, 50, ImGuiID(MatchColumn::Rank));
  ImGui::TableSetupColumn("track", ImGuiTableColumnFlags_WidthFixed, 200, ImGuiID(MatchColumn::Track));
  ImGui::TableSetupColumn("start", ImGuiTableColumnFlags_WidthFixed | ImGuiTableColumnFlags_DefaultSort, 150,
                          ImGuiID(MatchColumn::Start));
  ImGui::TableSetupColumn("duration", ImGuiTableColumnFlags_WidthFixed, 120, ImGuiID(MatchColumn::Duration));
  // The arrow marks the list's sort, whoever set it last: a sort set elsewhere (`matches`, or a header
  // click before it) is given to the table, which would otherwise keep marking its own last one.
  if (std::make_pair(finders.list.by, finders.list.descending) != finders.table_sort)
    ImGui::TableSetColumnSortDirection(int(finders.list.by),  // the columns are set up in MatchColumn's order
                                       finders.list.descending ? ImGuiSortDirection_Descending : ImGuiSortDirection_Ascending,
                                       false);
  headersRow("search_list");
  // A click on a header: the specs change from what the table last asked for (the list's own sort
  // may have been set elsewhere, by `matches`; the table's first, default specs do not undo it).
  if (ImGuiTableSortSpecs* specs = ImGui::TableGetSortSpecs(); specs && specs->SpecsDirty && specs->SpecsCount > 0) {
    const auto by = MatchColumn(specs->Specs[0].ColumnUserID);
    const bool desc = specs->Specs[0].SortDirection == ImGuiSortDirection_Descending;
    const bool clicked = std::make_pair(by, desc) != finders.table_sort;
    finders.table_sort = {by, desc};
    if (clicked && (by != finders.list.by || desc != finders.list.descending)) {
      const int64_t m = found_index >= 0 ? int64_t(finders.list.order[size_t(found_index)]) : -1;
      finders.list = sortMatches(*t, found, by, desc);
      if (m >= 0) found_index = positionOf(finders.list, m), finders.list_scroll = true;
    }
    specs->SpecsDirty = false;
  }
  if (const ImGuiTableSortSpecs* specs = ImGui::TableGetSortSpecs(); specs && specs->SpecsCount > 0)
    finders.header_sort = {MatchColumn(specs->Specs[0].ColumnUserID),
                           specs->Specs[0].SortDirection == ImGuiSortDirection_Descending};
  const float row_h = ImGui::GetTextLineHeight() + 2 * ImGui::GetStyle().CellPadding.y;
  if (finders.list_scroll && found_index >= 0) {
    const float y = float(found_index) * row_h, h = ImGui::GetWindowHeight() - row_h;
    if (y < ImGui::GetScrollY() || y + row_h > ImGui::GetScrollY() + h) ImGui::SetScrollY(std::max(0.f, y - h / 3));
    finders.list_scroll = false;
  }
  const size_t doc = docOf(*this, t);
  const float char_w = std::max(1.f, ImGui::CalcTextSize("M").x);
  ImGuiListClipper clip;
  clip.Begin(int(finders.list.order.size()), row_h);
  finders.list_drawn = {INT64_MAX, 0};
  while (clip.Step())
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      finders.list_drawn = {std::min<int64_t>(finders.list_drawn.first, i), std::max<int64_t>(finders.list_drawn.second, i + 1)};
      const EventRef& r = found.matches[finders.list.order[size_t(i)]];
      const MatchRow m = matchRow(*t, r);
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      if (rowButton("search", i, i == found_index)) gotoListed(i);
      const size_t chars = size_t(std::max(0.f, ImGui::GetContentRegionAvail().x) / char_w);
      ImGui::TextUnformatted(docs[doc]->names.fit(t->event(r).name, t->names, chars).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)m.rank);
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(m.track.c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(formatExact(m.start_ns).c_str());
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(formatExact(m.duration_ns).c_str());
    }
  if (finders.list_drawn.first == INT64_MAX) finders.list_drawn = {0, 0};
  ImGui::EndTable();
}

bool App::jumpToSqlRow(size_t row) {
  Document* d = statsDocument();
  if (!d) return false;
  std::string why;
  std::optional<EventRef> r;
  {
    std::lock_guard<std::mutex> lock(tables.sql_mu);
    r = sqlRowEvent(*d->trace, tables.sql_result.table, row, &why);
  }
  if (!r) {
    finders.status = "row " + std::to_string(row) + ": " + why;
    return false;
  }
  bringIntoView(docOf(*this, d->trace.get()), *r);
  finders.status = "row " + std::to_string(row) + ": " + d->trace->name(*r) + " on rank " +
                   std::to_string(d->trace->tracks[r->track].rank) + ", " + d->trace->tracks[r->track].label;
  return true;
}

// A diff row's name at its slowest: in the run where the name took longer (B when B - A >= 0 and B
// has it), over the step compared (each run's own window) or the whole run.
bool App::jumpToDiffRow(size_t row) {
  const RunDiff* rd = tables.diff.get();
  if (!rd || row >= rd->rows.size() || docs.size() < 2 || !docs[0]->ready() || !docs[1]->ready()) {
    finders.status = "no diff row " + std::to_string(row);
    return false;
  }
  const DiffRow& dr = rd->rows[row];
  const size_t doc = (dr.delta_ns() >= 0 && dr.b_count > 0) || dr.a_count == 0 ? 1 : 0;
  std::optional<std::pair<int64_t, int64_t>> window;
  if (rd->step) window = doc ? rd->b_window : rd->a_window;
  const Trace& t = *docs[doc]->trace;
  const auto r = slowestInstance(t, dr.group, dr.name, window);
  if (!r) {
    finders.status = dr.name + ": no instance in run " + (doc ? "B" : "A");
    return false;
  }
  bringIntoView(doc, *r);
  finders.status = dr.name + ": the slowest in run " + (doc ? "B" : "A") + ", " + formatExact(t.event(*r).duration()) +
                   " on rank " + std::to_string(t.tracks[r->track].rank);
  return true;
}

void App::showQueryTrack() {
  std::lock_guard<std::mutex> lock(tables.sql_mu);
  if (tables.sql_ran.empty() || !tables.sql_result.error.empty()) {
    finders.status = "run a query first: its rows with start_ns and end_ns (or dur_ns) become a track";
    return;
  }
  auto q = std::make_unique<QueryTrack>(queryTrack(tables.sql_result.table, tables.sql_ran));
  if (!q->ok()) {
    finders.status = "not shown as a track: " + q->error;
    return;
  }
  finders.status = "shown as a track: " + std::to_string(q->track.events()) + " intervals" +
                   (q->skipped ? ", " + std::to_string(q->skipped) + " rows without a start and an end skipped" : "");
  finders.track = std::move(q);
}

// The query track: a band under the ruler, its label and a remove button in the gutter, its intervals
// folded as any lane's (lod.h). On the first run's clock.
float App::drawQueryTrack(ImDrawList* dl, const TimelineContext& cx, float y) {
  finders.track_boxes.clear();
  finders.track_y0 = finders.track_y1 = 0;
  if (!finders.track) return y;
  const QueryTrack& q = *finders.track;
  // At most 8 lanes, so that a query of many nested rows leaves the ranks their room.
  const uint32_t lanes = uint32_t(std::clamp<size_t>(q.track.lanes.size(), 1, kQueryTrackLanes));
  const float h = kLaneH * float(lanes);
  finders.track_y0 = y, finders.track_y1 = y + h;
  dl->AddRectFilled(ImVec2(cx.left, y), ImVec2(cx.x1, y + h), IM_COL32(40, 36, 52, 255));
  const std::string label = fitLabel("query: " + q.query, kGutter - 34, cx.char_w);
  if (q.track.lanes.size() > lanes)
    dl->AddText(ImVec2(cx.left + 4, y + h - 16), IM_COL32(160, 150, 190, 255),
                ("+" + std::to_string(q.track.lanes.size() - lanes) + " lanes not shown").c_str());
  dl->AddText(ImVec2(cx.left + 4, y + 2), IM_COL32(220, 200, 255, 255), label.c_str());
  ImGui::SetCursorScreenPos(ImVec2(cx.left + kGutter - 26, y));
  if (ImGui::SmallButton("x##query_track")) {
    finders.track.reset();
    return y;
  }
  if (ImGui::IsItemHovered()) ImGui::SetTooltip("remove the query track");
  dl->PushClipRect(ImVec2(cx.x0, y), ImVec2(cx.x1, y + h), true);
  const ImU32 fill = IM_COL32(200, 150, 255, 255);
  for (uint32_t li = 0; li < lanes && li < q.track.lanes.size(); ++li) {
    scratch.clear();
    visibleItems(q.track.lanes[li], cx.vt0, cx.vt1, cx.threshold, scratch);
    const float ly = y + kLaneH * float(li);
    for (const DrawItem& it : scratch) {
      const float x0 = std::max(view.x(it.start), cx.x0 - 2), x1 = std::min(std::max(view.x(it.end), x0 + 1), cx.x1 + 2);
      dl->AddRectFilled(ImVec2(x0, ly + 1), ImVec2(x1, ly + kLaneH - 1), it.count > 1 ? IM_COL32(150, 110, 200, 255) : fill);
      const std::string text = it.count > 1 ? std::to_string(it.count)
                                            : fitLabel(q.names[q.track.lanes[li].events[it.index].name], x1 - x0 - 6, cx.char_w);
      if (!text.empty()) dl->AddText(ImVec2(x0 + 3, ly + 2), IM_COL32(20, 10, 30, 255), text.c_str());
      if (cx.record) finders.track_boxes.push_back({x0, x1, it.count, text});
    }
  }
  dl->PopClipRect();
  return y + h + 2;
}

// Details' context column: what encloses the selection. A collective has no flame of its own: the
// ranges of its rank's threads where it was issued and where it ended (finders.h, enclosingOf).
void App::drawEnclosing(size_t doc, size_t chars) {
  Document& d = *docs[doc];
  const Trace& t = *d.trace;
  finders.enclosing = enclosingOf(t, selection->ref);
  finders.enclosing_drawn = true;
  auto list = [&](const std::vector<EventRef>& refs, int id0) {
    if (refs.empty()) ImGui::TextDisabled("  (none)");
    for (size_t i = 0; i < refs.size(); ++i) {
      ImGui::PushID(id0 + int(i));
      if (ImGui::Selectable(d.names.fit(t.event(refs[i]).name, t.names, chars).c_str())) select(doc, refs[i]);
      ImGui::PopID();
    }
  };
  const Enclosing& e = finders.enclosing;
  if (!e.by_time) {
    ImGui::TextDisabled("enclosing");
    return list(e.at_start, 0);
  }
  ImGui::TextDisabled("issued in (rank %lld's ranges at its start)", (long long)t.tracks[selection->ref.track].rank);
  list(e.at_start, 0);
  ImGui::TextDisabled("ended in (at its end)");
  list(e.at_end, 500);
}

bool App::applyFinderCommand(const ScriptCommand& c) {
  if (applyClickCommand(c)) return true;  // click (view_clicks.cpp)
  auto index = [&] { return size_t(std::stoll(c.args[0])); };
  if (c.op == "tab" && c.args[0] == "search") {
    tab = Tab::Search, tab_requested = true;
  } else if (c.op == "matches") {
    const Trace* t = primary();
    if (!t) return true;
    const int64_t m = found_index >= 0 && size_t(found_index) < finders.list.order.size()
                          ? int64_t(finders.list.order[size_t(found_index)]) : -1;
    finders.list = sortMatches(*t, found, *parseMatchColumn(c.args[0]), c.args.size() > 1 && c.args[1] == "desc");
    if (m >= 0) found_index = positionOf(finders.list, m);
    finders.list_scroll = true;
    tab = Tab::Search, tab_requested = true;
  } else if (c.op == "match") {
    tab = Tab::Search, tab_requested = true;
    if (index() >= finders.list.order.size())
      std::cerr << "trainscope-viewer: --script line " << c.line << ": the results list has no row " << c.args[0] << "\n";
    else
      gotoListed(int64_t(index()));
  } else if (c.op == "sqlrow") {
    tab = Tab::Sql, tab_requested = true;
    if (!jumpToSqlRow(index())) std::cerr << "trainscope-viewer: --script line " << c.line << ": " << finders.status << "\n";
  } else if (c.op == "sqltrack") {
    if (c.args[0] == "remove") finders.track.reset();
    else showQueryTrack();
  } else if (c.op == "diffrow") {
    tab = Tab::Compare, tab_requested = true;
    nameDiff();  // computed if it is not yet
    if (!jumpToDiffRow(index())) std::cerr << "trainscope-viewer: --script line " << c.line << ": " << finders.status << "\n";
  } else {
    return false;
  }
  return true;
}

// --layout: the results list (its order, the picked position and the rows drawn), the selection, the
// query track as drawn, the last jump's status, what encloses the selection, and Details in order.
void App::findersLayout(nlohmann::json& j) const {
  if (const Trace* t = primary(); t && !found.needle.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (size_t i = 0; i < finders.list.order.size() && i < 1000; ++i) {
      const MatchRow m = matchRow(*t, found.matches[finders.list.order[i]]);
      rows.push_back({{"name", m.name}, {"rank", m.rank}, {"track", m.track}, {"start_ns", m.start_ns},
                      {"duration_ns", m.duration_ns}});
    }
    j["search"] = {{"needle", found.needle}, {"count", found.matches.size()}, {"index", found_index},
                   {"sort", matchColumnName(finders.list.by)}, {"descending", finders.list.descending},
                   {"drawn", {finders.list_drawn.first, finders.list_drawn.second}}, {"rows", rows},
                   {"header", {{"sort", matchColumnName(finders.header_sort.first)},
                               {"descending", finders.header_sort.second}}}};
  }
  if (selection && selection->doc < docs.size() && docs[selection->doc]->ready()) {
    const Trace& t = *docs[selection->doc]->trace;
    const Event& e = t.event(selection->ref);
    j["selected"] = {{"doc", selection->doc}, {"rank", t.tracks[selection->ref.track].rank},
                     {"track", t.tracks[selection->ref.track].label}, {"name", t.names[e.name]},
                     {"start_ns", e.start}, {"end_ns", e.end}};
  }
  if (finders.track) {
    nlohmann::json boxes = nlohmann::json::array();
    for (const auto& b : finders.track_boxes)
      boxes.push_back({{"x0", b.x0}, {"x1", b.x1}, {"count", b.count}, {"label", b.label}});
    j["query_track"] = {{"query", finders.track->query}, {"lanes", finders.track->track.lanes.size()},
                        {"drawn_lanes", std::min(finders.track->track.lanes.size(), kQueryTrackLanes)},
                        {"events", finders.track->track.events()}, {"skipped", finders.track->skipped},
                        {"y0", finders.track_y0}, {"y1", finders.track_y1}, {"boxes", boxes}};
  }
  j["finder_status"] = finders.status;
  if (finders.enclosing_drawn && selection && docs[selection->doc]->ready()) {
    const Trace& t = *docs[selection->doc]->trace;
    auto names = [&](const std::vector<EventRef>& v) {
      nlohmann::json a = nlohmann::json::array();
      for (const auto& r : v) a.push_back(t.name(r));
      return a;
    };
    j["enclosing"] = {{"by_time", finders.enclosing.by_time}, {"at_start", names(finders.enclosing.at_start)},
                      {"at_end", names(finders.enclosing.at_end)}};
  }
  j["details_order"] = nlohmann::json::array();
  for (const auto& [k, v] : details_shown) j["details_order"].push_back(k);
}

}  // namespace trainscope::viewer
