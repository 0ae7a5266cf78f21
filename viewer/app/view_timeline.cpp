// view_timeline.cpp — the main window's frame: the top bar, the timeline of every rank, and the
// bottom panel's tabs. The timeline draws only what lod.h returns for the visible window.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <unordered_map>

#include "app.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/image.h"

namespace trainscope::viewer {

namespace {

constexpr float kGutter = 190;     // track labels
constexpr float kLaneH = 18;
constexpr float kCounterH = 36;
constexpr float kGroupH = 22;
constexpr float kMinPx = 3;        // events narrower than this fold

ImU32 dim(ImU32 c, float f) {
  const auto ch = [&](int s) { return ImU32(std::min(255.f, float((c >> s) & 0xff) * f)) << s; };
  return ch(0) | ch(8) | ch(16) | (c & 0xff000000u);
}

// What of `s` fits between x0 and x1 (with 3 px of padding each side): all of it, or a prefix. Empty
// when the box is too narrow for any text.
std::string fitText(float x0, float x1, const std::string& s) {
  if (x1 - x0 < 24 || s.empty()) return {};
  const float w = ImGui::CalcTextSize(s.c_str(), s.c_str() + s.size()).x;
  const float room = x1 - x0 - 6;
  if (w <= room) return s;
  const float per = w / float(s.size());
  return s.substr(0, std::max<size_t>(1, size_t(room / per) - 1));
}

}  // namespace

void App::drawFrame() {
  stats_shown = {}, details_shown.clear();  // filled again if the Statistics or Details tab is drawn
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(vp->Pos);
  ImGui::SetNextWindowSize(vp->Size);
  ImGui::PushStyleVar(ImGuiStyleVar_WindowRounding, 0);
  ImGui::Begin("trainscope", nullptr,
               ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoBringToFrontOnFocus |
                   ImGuiWindowFlags_NoSavedSettings);
  ImGui::PopStyleVar();

  // Top bar: files, loading, search.
  for (size_t i = 0; i < docs.size(); ++i) {
    const Document& d = *docs[i];
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
  if (study) {
    if (!docs.empty()) ImGui::SameLine();
    ImGui::Text("| study %s", study->path.c_str());
  }
  if (primary()) {
    ImGui::SameLine(ImGui::GetWindowWidth() - 520);
    ImGui::SetNextItemWidth(220);
    if (ImGui::InputTextWithHint("##search", "search names", search_text, sizeof search_text,
                                 ImGuiInputTextFlags_EnterReturnsTrue))
      runSearch(search_text);
    ImGui::SameLine();
    if (ImGui::ArrowButton("##prev", ImGuiDir_Left)) gotoMatch(-1);
    ImGui::SameLine();
    if (ImGui::ArrowButton("##next", ImGuiDir_Right)) gotoMatch(+1);
    ImGui::SameLine();
    if (!found.needle.empty())
      ImGui::Text("%lld / %zu%s", (long long)(found_index + 1), found.matches.size(), found.truncated ? "+" : "");
    else
      ImGui::TextDisabled("F3 next");
  }

  if (!fatal.empty()) {
    ImGui::Spacing();
    ImGui::PushStyleColor(ImGuiCol_Text, IM_COL32(255, 110, 110, 255));
    ImGui::TextWrapped("%s", fatal.c_str());
    ImGui::PopStyleColor();
    ImGui::End();
    return;
  }

  const float panel_h = std::max(200.f, ImGui::GetContentRegionAvail().y * 0.34f);
  if (primary()) {
    ImGui::BeginChild("timeline", ImVec2(0, ImGui::GetContentRegionAvail().y - panel_h), false,
                      ImGuiWindowFlags_NoScrollWithMouse);
    drawTimeline();
    ImGui::EndChild();
  } else if (!study) {
    ImGui::Dummy(ImVec2(0, ImGui::GetContentRegionAvail().y - panel_h));
  }

  panel_y0 = ImGui::GetCursorScreenPos().y;
  ImGui::BeginChild("panel", ImVec2(0, 0), true);
  if (ImGui::BeginTabBar("tabs")) {
    auto item = [&](const char* label, Tab t) {
      const bool force = tab_requested && tab == t;
      if (ImGui::BeginTabItem(label, nullptr, force ? ImGuiTabItemFlags_SetSelected : 0)) {
        if (!tab_requested) tab = t;
        switch (t) {
          case Tab::Details: drawDetails(); break;
          case Tab::Statistics: drawStatistics(); break;
          case Tab::Steps: drawSteps(); break;
          case Tab::Summary: drawSummary(); break;
          case Tab::Compare: drawCompare(); break;
          case Tab::Study: drawStudy(); break;
          case Tab::Sql: drawSql(); break;
        }
        ImGui::EndTabItem();
      }
    };
    if (primary()) {
      item("Details", Tab::Details);
      item("Statistics", Tab::Statistics);
      item("Steps", Tab::Steps);
      item("Summary", Tab::Summary);
      if (docs.size() > 1) item("Compare", Tab::Compare);
      item("SQL", Tab::Sql);
    }
    if (study) item("Study", Tab::Study);
    ImGui::EndTabBar();
  }
  tab_requested = false;
  ImGui::EndChild();
  ImGui::End();
}

void App::drawTimeline() {
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 p0 = ImGui::GetCursorScreenPos();
  const ImVec2 avail = ImGui::GetContentRegionAvail();
  timeline_x0 = p0.x + kGutter;
  timeline_x1 = p0.x + avail.x;
  timeline_y0 = p0.y;
  timeline_y1 = p0.y + avail.y;
  view.x0 = timeline_x0;
  view.width = std::max(10.f, timeline_x1 - timeline_x0);
  if (const Trace* t = primary()) view.clamp(t->begin, t->end);
  const double ns_px = view.nsPerPx();
  const int64_t threshold = std::max<int64_t>(1, int64_t(ns_px * kMinPx));
  const int64_t vt0 = view.begin(), vt1 = view.end();

  // Ruler: exact labels (ruler.h); zoomed in far from the start, offsets from a base shown in the gutter.
  const float ruler_h = 20;
  dl->AddRectFilled(ImVec2(p0.x, p0.y), ImVec2(timeline_x1, p0.y + ruler_h), IM_COL32(36, 38, 44, 255));
  ruler = makeRuler(view);
  dl->PushClipRect(ImVec2(timeline_x0, p0.y), ImVec2(timeline_x1, p0.y + ruler_h), true);
  for (const Tick& tk : ruler.ticks) {
    const float x = view.x0 + float((tk.t - view.t0) / ns_px);
    dl->AddLine(ImVec2(x, p0.y + (tk.major ? 4 : 13)), ImVec2(x, p0.y + ruler_h), IM_COL32(150, 150, 160, 255));
    if (tk.major) dl->AddText(ImVec2(x + 3, p0.y + 2), palette::kText, tk.label.c_str());
  }
  dl->PopClipRect();
  const std::string gutter = ruler.relative ? "+0 = " + ruler.base_label : "view " + formatDuration(view.t1 - view.t0);
  dl->AddText(ImVec2(p0.x + 4, p0.y + 2), palette::kText, gutter.c_str());

  // Rows, scrolled vertically in a child; the ruler stays.
  ImGui::SetCursorScreenPos(ImVec2(p0.x, p0.y + ruler_h));
  ImGui::BeginChild("rows", ImVec2(0, 0), false, ImGuiWindowFlags_NoScrollWithMouse);
  dl = ImGui::GetWindowDrawList();
  const float top = ImGui::GetWindowPos().y, bottom = top + ImGui::GetWindowHeight();
  float y = ImGui::GetCursorScreenPos().y;
  rows.clear();
  boxes.clear();
  links.clear(), headers.clear(), sends_drawn.clear();
  const bool record = !opt.layout.empty();  // --layout reports every box drawn
  const float char_w = std::max(1.f, ImGui::CalcTextSize("M").x);  // the font is monospaced
  const ImVec2 mouse = ImGui::GetMousePos();
  const bool hovered_window = ImGui::IsWindowHovered();
  std::optional<std::pair<Selection, DrawItem>> hover;
  const ImU32 kGroup = IM_COL32(44, 48, 58, 255);

  for (size_t di = 0; di < docs.size(); ++di) {
    Document& d = *docs[di];
    if (!d.ready()) continue;
    const Trace& tr = *d.trace;
    const int64_t off = d.offset;
    // Ranks outside the visible rows are skipped before anything is built for them: the groups'
    // offsets (prefix sums of their heights, computed once per trace) give the first visible one by
    // binary search, so a frame costs the rows on screen, not the ranks in the file.
    if (d.group_top.size() != tr.ranks.size() + 1) {
      d.group_top.assign(1, 0.0);
      for (const RankGroup& g : tr.ranks) {
        double h = kGroupH;
        for (size_t ti : g.tracks) {
          const Track& t = tr.tracks[ti];
          h += t.kind == TrackKind::Counter ? kCounterH : kLaneH * double(std::max<size_t>(1, t.lanes.size()));
        }
        d.group_top.push_back(d.group_top.back() + h);
      }
    }
    const float base = y;
    const size_t n_groups = tr.ranks.size();
    // The first group whose bottom edge is below the top of the view.
    const size_t first = size_t(std::upper_bound(d.group_top.begin() + 1, d.group_top.end(), double(top - base)) -
                                (d.group_top.begin() + 1));
    for (size_t gi = first; gi < n_groups; ++gi) {
      y = base + float(d.group_top[gi]);
      if (y > bottom) break;
      const RankGroup& g = tr.ranks[gi];
      // Group header.
      dl->AddRectFilled(ImVec2(p0.x, y), ImVec2(timeline_x1, y + kGroupH), kGroup);
      char head[256];  // with its coordinates in the run's layout (dp, tp, pp ranks)
      const std::string coords = rankCoordinates(tr, g.rank);
      std::snprintf(head, sizeof head, "%srank %lld  %s%s%s %s", docs.size() > 1 ? (di ? "B · " : "A · ") : "",
                    (long long)g.rank, coords.c_str(), coords.empty() ? "" : "  ", g.host.c_str(), g.device.c_str());
      dl->AddText(ImVec2(p0.x + 4, y + 4), palette::kText, head);
      if (record) headers.push_back({di, g.rank, y, head});
      y += kGroupH;
      for (size_t ti : g.tracks) {
        const Track& t = tr.tracks[ti];
        const float h = t.kind == TrackKind::Counter ? kCounterH : kLaneH * float(std::max<size_t>(1, t.lanes.size()));
        const bool visible = y + h >= top && y <= bottom;
        if (visible) {
          dl->AddRectFilled(ImVec2(p0.x, y), ImVec2(timeline_x1, y + h), (ti & 1) ? palette::kRowAlt : palette::kBackground);
          dl->AddText(ImVec2(p0.x + 12, y + 2), IM_COL32(170, 175, 185, 255), t.label.c_str());
        }
        if (t.kind == TrackKind::Counter) {
          if (visible && !t.counter.ts.empty() && t.counter.max_value > 0) {
            const auto& c = t.counter;
            dl->PushClipRect(ImVec2(timeline_x0, y), ImVec2(timeline_x1, y + h), true);
            // One bar per pixel column: the largest value held in it.
            for (float x = timeline_x0; x < timeline_x1; x += 1) {
              const int64_t c0 = view.timeAt(x) - off, c1 = view.timeAt(x + 1) - off;
              const size_t a = size_t(std::upper_bound(c.ts.begin(), c.ts.end(), c0) - c.ts.begin());
              const size_t b = size_t(std::upper_bound(c.ts.begin() + ptrdiff_t(a), c.ts.end(), c1) - c.ts.begin());
              if (b == 0) continue;  // before the first sample
              if (c0 > tr.end) break;  // the trace ended: the counter is not held past it
              const double v = std::max(a > 0 ? c.values[a - 1] : 0.0, counterMax(c, a, b));
              const float bar = float(v / c.max_value) * (h - 4);
              dl->AddRectFilled(ImVec2(x, y + h - 2 - bar), ImVec2(x + 1, y + h - 2), palette::kMemoryCounter);
            }
            dl->PopClipRect();
            char mx[64];
            std::snprintf(mx, sizeof mx, "max %s", formatBytes(c.max_value).c_str());
            dl->AddText(ImVec2(p0.x + 12, y + 18), IM_COL32(140, 145, 155, 255), mx);
          }
          y += h;
          continue;
        }
        for (uint32_t li = 0; li < t.lanes.size(); ++li) {
          const float ly = y + kLaneH * float(li);
          rows.push_back({di, uint32_t(ti), li, ly, ly + kLaneH});
          if (ly + kLaneH < top || ly > bottom) continue;
          scratch.clear();
          visibleItems(t.lanes[li], vt0 - off, vt1 - off, threshold, scratch);
          dl->PushClipRect(ImVec2(timeline_x0, ly), ImVec2(timeline_x1, ly + kLaneH), true);
          for (const DrawItem& it : scratch) {
            const float x0 = std::max(view.x(it.start + off), timeline_x0 - 2);
            const float x1 = std::min(std::max(view.x(it.end + off), x0 + 1), timeline_x1 + 2);
            const bool single = it.count == 1;
            const Event& e = t.lanes[li].events[it.index];
            const float gap = x1 - x0 > 4 ? 1.f : 0.f;  // neighbours of one colour stay apart
            const double coverage = it.coverage();
            float wait_x1 = -1;  // a linked collective's wait, hatched (view_comm.cpp)
            if (single) {
              dl->AddRectFilled(ImVec2(x0, ly + 1), ImVec2(x1 - gap, ly + kLaneH - 1), nameColor(e.kind, tr.names[e.name]));
              if (e.kind == EventKind::Collective)
                wait_x1 = drawCollectiveWait(dl, di, {uint32_t(ti), li, it.index}, x0, x1 - gap, ly + 1, ly + kLaneH - 1);
            } else {
              // A folded block: faint over its span, solid from its bottom up to the fraction of the span
              // its events keep busy — a stream 17% busy reads as 17% full, not as a solid bar.
              const float bar = std::max(1.f, float(coverage) * (kLaneH - 2));
              dl->AddRectFilled(ImVec2(x0, ly + 1), ImVec2(x1 - gap, ly + kLaneH - 1), (palette::kFolded & 0x00ffffffu) | 0x40000000u);
              dl->AddRectFilled(ImVec2(x0, ly + kLaneH - 1 - bar), ImVec2(x1 - gap, ly + kLaneH - 1), palette::kFolded);
            }
            // Names demangled and shortened to fit (names.h); the full name is in the tooltip.
            const std::string label = single ? d.names.fit(e.name, tr.names, size_t(std::max(0.f, x1 - x0 - 6) / char_w))
                                             : x1 - x0 > 40 ? fitText(x0, x1, std::to_string(it.count)) : std::string();
            if (!label.empty())
              dl->AddText(ImVec2(x0 + 3, ly + 2), single || coverage < 0.6 ? IM_COL32(250, 250, 250, 255) : IM_COL32(20, 20, 20, 255),
                          label.c_str(), label.c_str() + label.size());
            if (record) boxes.push_back({rows.size() - 1, x0, x1, e.kind, it.count, coverage, label, wait_x1});
            if (hovered_window && mouse.y >= ly && mouse.y < ly + kLaneH && mouse.x >= x0 - 1 && mouse.x <= x1 + 1 &&
                mouse.x >= timeline_x0)
              hover = std::make_pair(Selection{di, {uint32_t(ti), li, it.index}}, it);
          }
          dl->PopClipRect();
        }
        y += h;
      }
    }
    y = base + float(d.group_top[n_groups]);
  }

  // Selection outline and its flow arrow (the launch → the kernel), clipped to the timeline.
  dl->PushClipRect(ImVec2(timeline_x0, top), ImVec2(timeline_x1, bottom), true);
  if (selection && selection->doc < docs.size() && docs[selection->doc]->ready()) {
    const Document& d = *docs[selection->doc];
    auto rowOf = [&](size_t doc, const EventRef& r) -> const RowRect* {
      for (const auto& rr : rows)
        if (rr.doc == doc && rr.track == r.track && rr.lane == r.lane) return &rr;
      return nullptr;
    };
    auto box = [&](const EventRef& r, ImU32 col) {
      const RowRect* rr = rowOf(selection->doc, r);
      if (!rr) return;
      const Event& e = d.trace->event(r);
      const float x0 = view.x(e.start + d.offset), x1 = std::max(view.x(e.end + d.offset), x0 + 2);
      dl->AddRect(ImVec2(x0 - 1, rr->y0), ImVec2(x1 + 1, rr->y1), col, 0, 0, 2);
    };
    box(selection->ref, palette::kSelection);
    if (d.correlation) {
      const Event& e = d.trace->event(selection->ref);
      std::vector<std::pair<EventRef, EventRef>> flows;  // launch → device work
      if (e.kind == EventKind::ApiCall)
        for (const auto& k : d.correlation->launchedBy(selection->ref)) flows.push_back({selection->ref, k});
      else if (auto l = d.correlation->launchOf(selection->ref)) flows.push_back({*l, selection->ref});
      for (const auto& [from, to] : flows) {
        const RowRect* a = rowOf(selection->doc, from);
        const RowRect* b = rowOf(selection->doc, to);
        if (!a || !b) continue;
        const ImVec2 pa(view.x(d.trace->event(from).start + d.offset), a->y1);
        const ImVec2 pb(view.x(d.trace->event(to).start + d.offset), b->y0);
        dl->AddBezierCubic(pa, ImVec2(pa.x, (pa.y + pb.y) / 2), ImVec2(pb.x, (pa.y + pb.y) / 2), pb, palette::kFlow, 2);
        dl->AddTriangleFilled(ImVec2(pb.x - 4, pb.y - 7), ImVec2(pb.x + 4, pb.y - 7), pb, palette::kFlow);
        box(from, palette::kFlow);
      }
    }
  }
  drawCommLinks(dl, hover ? std::optional<Selection>(hover->first) : std::nullopt);  // ranks related
  // Search matches in view: a tick under each (matches are sorted by start; at most 4000 drawn).
  if (!found.matches.empty() && docs[0]->ready()) {
    const Trace& tr = *docs[0]->trace;
    std::unordered_map<uint64_t, const RowRect*> row_of;
    for (const auto& rr : rows)
      if (rr.doc == 0) row_of[uint64_t(rr.track) << 32 | rr.lane] = &rr;
    auto it = std::partition_point(found.matches.begin(), found.matches.end(),
                                   [&](const EventRef& m) { return tr.event(m).start < view.begin(); });
    for (size_t drawn = 0; it != found.matches.end() && drawn < 4000; ++it, ++drawn) {
      const Event& e = tr.event(*it);
      if (e.start > view.end()) break;
      auto r = row_of.find(uint64_t(it->track) << 32 | it->lane);
      if (r == row_of.end()) continue;
      const float x = view.x(e.start);
      dl->AddRectFilled(ImVec2(x, r->second->y1 - 3), ImVec2(std::max(x + 2, view.x(e.end)), r->second->y1),
                        IM_COL32(255, 230, 0, 255));
    }
  }
  // Selected range.
  if (range) {
    const float a = view.x(range->first), b = view.x(range->second);
    dl->AddRectFilled(ImVec2(a, top), ImVec2(b, bottom), IM_COL32(70, 110, 170, 60));
    dl->AddLine(ImVec2(a, top), ImVec2(a, bottom), palette::kRangeSelect);
    dl->AddLine(ImVec2(b, top), ImVec2(b, bottom), palette::kRangeSelect);
  }

  dl->PopClipRect();
  ImGui::Dummy(ImVec2(1, y - ImGui::GetCursorScreenPos().y));

  // Input: wheel zooms around the cursor, drag pans, shift-drag selects a range, click selects.
  ImGuiIO& io = ImGui::GetIO();
  if (hovered_window && mouse.x >= timeline_x0) {
    if (io.MouseWheel != 0 && !io.KeyCtrl) view.zoom(std::pow(1.25, double(io.MouseWheel)), mouse.x);
    if (io.KeyCtrl && io.MouseWheel != 0) ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseWheel * 40);
    if (ImGui::IsMouseDragging(ImGuiMouseButton_Left, 3)) {
      if (io.KeyShift) {
        const ImVec2 start = io.MouseClickedPos[0];
        setRange(view.timeAt(start.x), view.timeAt(mouse.x));
      } else {
        view.pan(io.MouseDelta.x);
        ImGui::SetScrollY(ImGui::GetScrollY() - io.MouseDelta.y);
      }
    }
    if (ImGui::IsMouseReleased(ImGuiMouseButton_Left) && io.MouseDragMaxDistanceSqr[0] < 9.f) {
      if (hover) {
        const Track& t = docs[hover->first.doc]->trace->tracks[hover->first.ref.track];
        const DrawItem& it = hover->second;
        if (it.count > 1) view.fit(it.start + docs[hover->first.doc]->offset, it.end + docs[hover->first.doc]->offset);
        else {
          select(hover->first.doc, hover->first.ref);
          if (t.kind == TrackKind::Steps) view.fit(it.start + docs[hover->first.doc]->offset, it.end + docs[hover->first.doc]->offset);
        }
      } else {
        selection.reset();
        range.reset();
      }
    }
    if (hover) {
      const Document& d = *docs[hover->first.doc];
      const DrawItem& it = hover->second;
      ImGui::BeginTooltip();
      if (it.count > 1) {
        ImGui::Text("%u events folded", it.count);
        ImGui::Text("%s, %.1f%% busy", formatExact(it.end - it.start).c_str(), 100 * it.coverage());
        ImGui::TextDisabled("click to zoom in");
      } else {
        const Event& e = d.trace->event(hover->first.ref);
        Document& hd = *docs[hover->first.doc];
        const std::string& full = hd.names.full(e.name, d.trace->names);
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 60);
        ImGui::TextUnformatted(full.c_str());
        if (full != d.trace->names[e.name]) ImGui::TextDisabled("%s", d.trace->names[e.name].c_str());  // as recorded
        ImGui::PopTextWrapPos();
        ImGui::Text("%s  %s", kindName(e.kind), formatExact(e.duration()).c_str());
        ImGui::TextDisabled("at %s", formatExact(e.start + d.offset - origin()).c_str());
      }
      ImGui::EndTooltip();
    }
  }
  if (!io.WantTextInput) {
    const double pan_step = (view.t1 - view.t0) * 0.05;
    if (ImGui::IsKeyDown(keys::kW)) view.zoom(1.06, view.x0 + view.width / 2);
    if (ImGui::IsKeyDown(keys::kS)) view.zoom(1 / 1.06, view.x0 + view.width / 2);
    if (ImGui::IsKeyDown(keys::kA)) view.t0 -= pan_step, view.t1 -= pan_step;
    if (ImGui::IsKeyDown(keys::kD)) view.t0 += pan_step, view.t1 += pan_step;
    if (ImGui::IsKeyPressed(keys::kF)) {
      if (selection && docs[selection->doc]->ready()) {
        const Event& e = docs[selection->doc]->trace->event(selection->ref);
        view.fit(e.start + docs[selection->doc]->offset, e.end + docs[selection->doc]->offset, 0.2);
      } else {
        fitAll();
      }
    }
    if (ImGui::IsKeyPressed(keys::kLeftBracket) || ImGui::IsKeyPressed(keys::kRightBracket)) {
      // Previous / next step from the one in the middle of the view.
      const Trace* t = primary();
      const int64_t mid = view.origin + int64_t((view.t0 + view.t1) / 2);
      int64_t cur = -1;
      for (const auto& s : t->steps)
        if (s.start_ns <= mid) cur = std::max(cur, s.step);
      fitStep(std::max<int64_t>(0, cur + (ImGui::IsKeyPressed(keys::kRightBracket) ? 1 : -1)));
    }
    if (ImGui::IsKeyPressed(keys::kF3)) gotoMatch(io.KeyShift ? -1 : 1);
    if (ImGui::IsKeyPressed(keys::kEscape)) selection.reset(), range.reset();
  }
  ImGui::EndChild();
}

}  // namespace trainscope::viewer
