// view_tracks.cpp — the timeline's rows: each rank's header (click to collapse) and its tracks as the
// model laid them out (tracks.h: collapsed ranks, hidden, pinned and moved tracks, flames as deep as
// the window needs, runs A and B interleaved), each lane's boxes as lod.h folds them, and counters.
// Nothing here decides what is under the mouse: view_input.cpp asks the model (hitTest).
#include <imgui.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "app.h"
#include "timeline.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/compact.h"
#include "trainscope/viewer/counter_plot.h"
#include "trainscope/viewer/fit.h"
#include "trainscope/viewer/image.h"

namespace trainscope::viewer {

namespace {

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

float textWidth(const std::string& s) { return ImGui::CalcTextSize(s.c_str(), s.c_str() + s.size()).x; }

// The utilisation row under each stream's lanes (tracks.h, LayoutMetrics::util_h): thin, as
// Perfetto's and Nsight's per-stream utilisation rows are.
constexpr float kUtilH = 5;

struct LaneCtx {
  size_t doc;
  uint32_t track, lane;
  float y;
};

}  // namespace

// The layout is the model's (layoutTracks); it is redone only when the window, the runs, their offsets,
// the band of rows around the screen or the track control changed, so a still frame costs nothing for
// it; and while only the window or the band moves, only the rank groups in the band are laid out again.
void App::updateTrackLayout(const TimelineContext& cx) {
  // The band: a screen above and below the rows' last scroll position, moved in half screens.
  const float h = std::max(100.f, rows_h), half = h / 2;
  const LayoutBand band{std::floor(rows_scroll / half) * half - h, std::floor(rows_scroll / half) * half + 2 * h};
  std::vector<int64_t> runs_key;
  std::vector<LayoutRun> runs;
  std::vector<size_t> doc_of;  // runs → docs
  for (size_t di = 0; di < docs.size(); ++di) {
    if (!docs[di]->ready()) continue;
    const int64_t off = docs[di]->offset;
    runs.push_back({docs[di]->trace.get(), cx.vt0 - off, cx.vt1 - off});
    doc_of.push_back(di);
    runs_key.insert(runs_key.end(), {int64_t(di), int64_t(reinterpret_cast<intptr_t>(docs[di]->trace.get()))});
  }
  std::vector<int64_t> key = runs_key;
  key.insert(key.end(), {cx.vt0, cx.vt1, int64_t(track_control.version), int64_t(band.top)});
  for (size_t i = 0; i < runs.size(); ++i) key.push_back(docs[doc_of[i]]->offset);
  if (key == track_layout_key) return;
  // The previous layout's heights hold for the same runs (the key starts with them).
  const bool same_runs = track_layout_key.size() >= runs_key.size() &&
                         std::equal(runs_key.begin(), runs_key.end(), track_layout_key.begin());
  track_layout_key = key;
  track_layout = layoutTracks(runs, track_control, LayoutMetrics{kGroupH, kLaneH, kCounterH, kUtilH},
                              same_runs ? &track_layout : nullptr, band);
  for (auto* v : {&track_layout.pinned, &track_layout.rows})
    for (LayoutRow& r : *v) r.doc = doc_of[r.doc];
  for (auto& g : track_layout.group_of) g.first = doc_of[g.first];
}

// A finder's target brought on screen (reveal): the scroll set to its row, once its rank group is laid
// out; until then to the group's top, which lays it out in a frame or two.
void App::applyScrollTarget() {
  if (!scroll_to || scroll_to->doc >= docs.size() || !docs[scroll_to->doc]->ready()) return scroll_to.reset();
  const auto place = placeOf(track_layout, scroll_to->doc, scroll_to->track, scroll_to->rank, *docs[scroll_to->doc]->trace);
  if (!place || place->pinned) return scroll_to.reset();  // in the band: always on screen
  const float to = place->exact ? scrollToShow(rows_scroll, rows_h, place->y0, place->y1, track_layout.total_h)
                                : place->y0;
  if (to != rows_scroll) ImGui::SetScrollY(to);
  if (place->exact || ++scroll_to->tries > 8) scroll_to.reset();
}

void App::drawRows(ImDrawList* dl, const TimelineContext& cx, bool pinned) {
  const auto& v = pinned ? track_layout.pinned : track_layout.rows;
  const float base = pinned ? cx.pinned_y : cx.rows_y;
  const size_t first = pinned ? 0 : track_layout.firstBelow(cx.top - base);
  if (pinned) dl->PushClipRect(ImVec2(cx.left, cx.top), ImVec2(cx.x1, cx.bottom), true);
  for (size_t i = first; i < v.size(); ++i) {
    const LayoutRow& r = v[i];
    const float y = base + r.y0;
    if (y > cx.bottom) break;
    const Document& d = *docs[r.doc];
    const Trace& tr = *d.trace;
    const RankGroup& g = tr.ranks[r.group];
    if (cx.record && y + r.h >= cx.top) tracks_drawn.push_back({r, y});
    if (r.kind == RowKind::Header && r.compact) {
      if (y + r.h >= cx.top) drawCompactRow(dl, cx, r, y);
      continue;
    }
    if (r.kind == RowKind::Header) {
      char head[320];  // with its coordinates in the run's layout (dp, tp, pp ranks)
      const std::string coords = rankCoordinates(tr, g.rank);
      std::snprintf(head, sizeof head, "%s %srank %lld  %s%s%s %s", r.collapsed ? "+" : "-",
                    docs.size() > 1 ? (r.doc ? "B · " : "A · ") : "", (long long)g.rank, coords.c_str(),
                    coords.empty() ? "" : "  ", g.host.c_str(), g.device.c_str());
      dl->AddRectFilled(ImVec2(cx.left, y), ImVec2(cx.x1, y + r.h),
                        r.doc ? IM_COL32(58, 48, 44, 255) : IM_COL32(44, 48, 58, 255));  // B's headers warmer
      dl->AddText(ImVec2(cx.left + 4, y + 4), palette::kText, head);
      if (cx.record) headers.push_back({r.doc, g.rank, y, head, r.collapsed});
      continue;
    }
    const Track& t = tr.tracks[r.track];
    if (y + r.h >= cx.top) {
      dl->AddRectFilled(ImVec2(cx.left, y), ImVec2(cx.x1, y + r.h), (r.track & 1) ? palette::kRowAlt : palette::kBackground);
      const std::string label = pinned ? std::string(docs.size() > 1 ? (r.doc ? "B " : "A ") : "") + "r" +
                                             std::to_string(g.rank) + " " + t.label
                                       : t.label;
      // Cut with "..." to the label column, the full label on hover (fit.h).
      bool cut = false;
      const std::string shown = ellipsize(label, cx.x0 - cx.left - 16, textWidth, &cut);
      dl->AddText(ImVec2(cx.left + 12, y + 2), IM_COL32(170, 175, 185, 255), shown.c_str());
      const ImVec2 m = ImGui::GetMousePos();
      if (cut && cx.hovered && m.x >= cx.left && m.x < cx.x0 && m.y >= y && m.y < y + kLaneH && m.y >= cx.top)
        ImGui::SetTooltip("%s", label.c_str());
      if (cx.record) track_labels_drawn.push_back({r.doc, t.rank, t.label, shown});
    }
    if (t.kind == TrackKind::Counter) {
      if (y + r.h >= cx.top) drawCounter(dl, cx, r, y);
      continue;
    }
    for (uint32_t li = 0; li < r.lanes; ++li) {
      const float ly = y + kLaneH * float(li);
      rows.push_back({r.doc, uint32_t(r.track), li, ly, ly + kLaneH});
      if (ly + kLaneH >= cx.top && ly <= cx.bottom) drawLane(dl, cx, r.doc, uint32_t(r.track), li, ly);
    }
    const float uy = y + kLaneH * float(r.lanes);
    if (r.util_h > 0 && uy + r.util_h >= cx.top && uy <= cx.bottom) drawUtilisation(dl, cx, r, uy);
  }
  if (pinned) dl->PopClipRect();
}

// The compact row's parts, bottom up, with their colours: the legend (the row's tooltip, --layout).
const std::array<App::CompactPart, 4>& App::compactParts() {
  static const std::array<CompactPart, 4> parts = {{{"compute", IM_COL32(80, 140, 230, 255)},
                                                    {"waiting at collectives", IM_COL32(240, 160, 60, 255)},
                                                    {"waiting at pipeline sends/receives", IM_COL32(190, 110, 235, 255)},
                                                    {"communication", IM_COL32(230, 90, 80, 255)}}};
  return parts;
}

// A rank in compact mode: one thin row, its label in the gutter and per pixel column (in pairs) how
// busy its compute (blue), its collectives' waiting for their last member (orange), its pipeline sends'
// and receives' waiting for their partner (violet: the Steps tab's bubble apart from waiting) and the
// rest of its communication (red) keep it, stacked in that order (compact.h); hovered, the legend
// with the column's shares.
void App::drawCompactRow(ImDrawList* dl, const TimelineContext& cx, const LayoutRow& r, float y) {
  const Document& d = *docs[r.doc];
  const RankGroup& g = d.trace->ranks[r.group];
  const std::string label = std::string(docs.size() > 1 ? (r.doc ? "B " : "A ") : "") + "rank " + std::to_string(g.rank);
  dl->AddRectFilled(ImVec2(cx.left, y), ImVec2(cx.x1, y + r.h - 1), (g.rank & 1) ? palette::kRowAlt : palette::kBackground);
  dl->AddText(ImGui::GetFont(), ImGui::GetFontSize() * 0.85f, ImVec2(cx.left + 4, y), IM_COL32(170, 175, 185, 255),
              label.c_str());
  const size_t n = size_t(std::max(0.f, std::floor((cx.x1 - cx.x0) / 2)));  // a column every 2 px
  const int64_t t0 = view.timeAt(cx.x0) - d.offset, t1 = view.timeAt(cx.x0 + 2 * float(n)) - d.offset;
  const CompactColumns c = compactColumns(*d.trace, g, t0, t1, n);
  const float h = r.h - 2;
  const auto& parts = compactParts();
  double busy = 0, waiting = 0, drawn_compute = 0, drawn_wait = 0, drawn_pipeline = 0;
  for (size_t i = 0; i < n; ++i) {
    // Stacked from the bottom: compute, waiting at collectives, waiting at pipeline sends/receives, the
    // rest of comm. Waiting goes first: a host range (forward, backward) that encloses a blocking
    // receive counts as compute too, and a rank blocked on its peer is not computing.
    const float x = cx.x0 + 2 * float(i), wait = std::min(c.wait[i], 1.f), pipe = std::min(c.pipeline[i], wait);
    const float ch = h * std::min(c.compute[i], 1.f - wait), ph = h * pipe, wh = h * (wait - pipe);
    const float mh = h * std::min(c.comm[i] - c.wait[i], std::max(0.f, 1.f - ch / h - wait));
    drawn_compute += ch / h, drawn_wait += (wh + ph) / h, drawn_pipeline += ph / h;
    const float heights[4] = {ch, wh, ph, mh};
    float top = y + h;
    for (size_t k = 0; k < 4; ++k) {
      if (heights[k] > 0.5f) dl->AddRectFilled(ImVec2(x, top - heights[k]), ImVec2(x + 2, top), parts[k].colour);
      top -= heights[k];
    }
    busy += std::min(1.f, c.compute[i] + c.comm[i]);
    waiting += c.wait[i];
  }
  const ImVec2 m = ImGui::GetMousePos();
  if (cx.hovered && n && m.x >= cx.x0 && m.x < cx.x0 + 2 * float(n) && m.y >= y && m.y < y + r.h && m.y >= cx.top) {
    const size_t i = std::min(n - 1, size_t((m.x - cx.x0) / 2));
    const float shares[4] = {c.compute[i], c.wait[i] - c.pipeline[i], c.pipeline[i], std::max(0.f, c.comm[i] - c.wait[i])};
    ImGui::BeginTooltip();
    ImGui::TextUnformatted(label.c_str());
    for (size_t k = 0; k < parts.size(); ++k)
      ImGui::TextColored(ImColor(parts[k].colour), "%s %.0f%%", parts[k].name, 100.0 * double(shares[k]));
    ImGui::EndTooltip();
  }
  if (cx.record)
    compact_drawn.push_back({r.doc, g.rank, y, y + r.h, n ? busy / double(n) : 0.0, n ? waiting / double(n) : 0.0,
                             n ? drawn_compute / double(n) : 0.0, n ? drawn_wait / double(n) : 0.0,
                             n ? drawn_pipeline / double(n) : 0.0});
}

// One lane's boxes: single events in their name's colour, folded blocks shaded by how busy they are.
void App::drawLane(ImDrawList* dl, const TimelineContext& cx, size_t di, uint32_t ti, uint32_t li, float ly) {
  Document& d = *docs[di];
  const Trace& tr = *d.trace;
  const int64_t off = d.offset;
  const Lane& lane = tr.tracks[ti].lanes[li];
  scratch.clear();
  visibleItems(lane, cx.vt0 - off, cx.vt1 - off, cx.threshold, scratch);
  dl->PushClipRect(ImVec2(cx.x0, ly), ImVec2(cx.x1, ly + kLaneH), true);
  for (const DrawItem& it : scratch) {
    const float x0 = std::max(view.x(it.start + off), cx.x0 - 2);
    const float x1 = std::min(std::max(view.x(it.end + off), x0 + 1), cx.x1 + 2);
    const bool single = it.count == 1;
    const Event& e = lane.events[it.index];
    const float gap = x1 - x0 > 4 ? 1.f : 0.f;  // neighbours of one colour stay apart
    const double coverage = it.coverage();
    float wait_x1 = -1;  // a linked collective's wait, hatched (view_comm.cpp)
    if (single) {
      dl->AddRectFilled(ImVec2(x0, ly + 1), ImVec2(x1 - gap, ly + kLaneH - 1), nameColor(e.kind, tr.names[e.name]));
      if (e.kind == EventKind::Collective)
        wait_x1 = drawCollectiveWait(dl, di, {ti, li, it.index}, x0, x1 - gap, ly + 1, ly + kLaneH - 1);
    } else {
      // A folded block: faint over its span, solid from its bottom up to the fraction of the span
      // its events keep busy — a stream 17% busy reads as 17% full, not as a solid bar.
      const float bar = std::max(1.f, float(coverage) * (kLaneH - 2));
      dl->AddRectFilled(ImVec2(x0, ly + 1), ImVec2(x1 - gap, ly + kLaneH - 1), (palette::kFolded & 0x00ffffffu) | 0x40000000u);
      dl->AddRectFilled(ImVec2(x0, ly + kLaneH - 1 - bar), ImVec2(x1 - gap, ly + kLaneH - 1), palette::kFolded);
    }
    // Names demangled and shortened to fit (names.h); the full name is in the tooltip.
    const std::string label = single ? d.names.fit(e.name, tr.names, size_t(std::max(0.f, x1 - x0 - 6) / cx.char_w))
                                     : x1 - x0 > 40 ? fitText(x0, x1, std::to_string(it.count)) : std::string();
    if (!label.empty())
      dl->AddText(ImVec2(x0 + 3, ly + 2), single || coverage < 0.6 ? IM_COL32(250, 250, 250, 255) : IM_COL32(20, 20, 20, 255),
                  label.c_str(), label.c_str() + label.size());
    if (cx.record) boxes.push_back({rows.size() - 1, x0, x1, e.kind, it.count, coverage, label, wait_x1});
  }
  dl->PopClipRect();
}

// A stream's utilisation row: per pixel column, a bar as tall as the share of the column its
// kernels, copies and sets keep busy (busyColumns, lod.h), so a stream 17% busy is a low band
// however it folds above.
void App::drawUtilisation(ImDrawList* dl, const TimelineContext& cx, const LayoutRow& r, float y) {
  const Document& d = *docs[r.doc];
  const Track& t = d.trace->tracks[r.track];
  const size_t n = size_t(std::max(0.f, std::floor(cx.x1 - cx.x0)));
  const int64_t t0 = view.timeAt(cx.x0) - d.offset, t1 = view.timeAt(cx.x0 + float(n)) - d.offset;
  std::vector<float> cols = busyColumns(t, t0, t1, n);
  dl->AddRectFilled(ImVec2(cx.x0, y), ImVec2(cx.x1, y + r.util_h), IM_COL32(30, 32, 38, 255));
  for (size_t i = 0; i < n; ++i) {
    if (cols[i] <= 0) continue;
    const float x = cx.x0 + float(i), h = std::max(1.f, cols[i] * r.util_h);
    dl->AddRectFilled(ImVec2(x, y + r.util_h - h), ImVec2(x + 1, y + r.util_h), palette::kFolded);
  }
  if (cx.record) utils.push_back({t.rank, t.label, cx.x0, y, y + r.util_h, std::move(cols)});
}

// A counter as a plot: one bar per pixel column, the largest value held in it, from the axis's
// baseline (counter_plot.h: a ratio from just below its min, not from 0) in the counter's colour; the
// axis's bottom and top values at the left edge; the value under the cursor; "0 throughout" for a
// counter that never moves from 0.
void App::drawCounter(ImDrawList* dl, const TimelineContext& cx, const LayoutRow& r, float y) {
  const Document& d = *docs[r.doc];
  const Trace& tr = *d.trace;
  const auto& c = tr.tracks[r.track].counter;
  const std::string& label = tr.tracks[r.track].label;
  const CounterAxis axis = counterAxis(c, label);
  if (axis.empty) return;
  const ImU32 colour = counterColor(label);
  const ImU32 dim = IM_COL32(140, 145, 155, 255);
  const float fh = ImGui::GetFontSize();
  CounterShown shown{tr.tracks[r.track].rank, label, y, y + r.h, axis.lo, axis.hi, axis.min, axis.max, colour, "", "", "", "",
                     "", "", 0};
  if (axis.all_zero) {
    shown.note = "0 throughout";
    dl->AddLine(ImVec2(cx.x0, y + r.h - 2), ImVec2(cx.x1, y + r.h - 2), colour);
    dl->AddText(ImVec2(cx.x0 + 4, y + (r.h - fh) / 2), dim, shown.note.c_str());
  } else {
    const int64_t off = d.offset;
    dl->PushClipRect(ImVec2(cx.x0, y), ImVec2(cx.x1, y + r.h), true);
    const float plot_h = r.h - 4;
    for (float x = cx.x0; x < cx.x1; x += 1) {
      const int64_t c0 = view.timeAt(x) - off, c1 = view.timeAt(x + 1) - off;
      const size_t a = size_t(std::upper_bound(c.ts.begin(), c.ts.end(), c0) - c.ts.begin());
      const size_t b = size_t(std::upper_bound(c.ts.begin() + ptrdiff_t(a), c.ts.end(), c1) - c.ts.begin());
      if (b == 0) continue;     // before the first sample
      if (c0 > tr.end) break;   // the trace ended: the counter is not held past it
      const double v = a < b ? std::max(a > 0 ? c.values[a - 1] : axis.lo, counterMax(c, a, b)) : c.values[a - 1];
      const float bar = std::max(1.f, float(axis.frac(v)) * plot_h);
      dl->AddRectFilled(ImVec2(x, y + r.h - 2 - bar), ImVec2(x + 1, y + r.h - 2), colour);
    }
    // The axis: its top and bottom values at the plot's left edge, on a dark ground.
    shown.hi_text = counterText(axis, axis.hi);
    shown.lo_text = counterText(axis, axis.lo);
    auto tag = [&](float ty, const std::string& text) {
      const ImVec2 sz = ImGui::CalcTextSize(text.c_str());
      dl->AddRectFilled(ImVec2(cx.x0, ty), ImVec2(cx.x0 + sz.x + 6, ty + sz.y), IM_COL32(24, 26, 30, 200));
      dl->AddText(ImVec2(cx.x0 + 3, ty), dim, text.c_str());
    };
    dl->AddLine(ImVec2(cx.x0, y + 1), ImVec2(cx.x0 + 4, y + 1), dim);
    dl->AddLine(ImVec2(cx.x0, y + r.h - 2), ImVec2(cx.x0 + 4, y + r.h - 2), dim);
    tag(y + 1, shown.hi_text);
    if (r.h >= 2 * fh + 2) tag(y + r.h - 2 - fh, shown.lo_text);
    // The value under the cursor, with a line where it is read.
    const ImVec2 m = ImGui::GetIO().MousePos;
    if (cx.hovered && m.x >= cx.x0 && m.x < cx.x1 && m.y >= y && m.y < y + r.h) {
      if (const auto v = counterValueAt(c, view.timeAt(m.x) - off)) {
        shown.hover = counterText(axis, *v);
        dl->AddLine(ImVec2(m.x, y), ImVec2(m.x, y + r.h), IM_COL32(255, 255, 255, 160));
        const ImVec2 sz = ImGui::CalcTextSize(shown.hover.c_str());
        const float tx = std::min(m.x + 6, cx.x1 - sz.x - 4), ty = y + (r.h - sz.y) / 2;
        dl->AddRectFilled(ImVec2(tx - 2, ty), ImVec2(tx + sz.x + 2, ty + sz.y), IM_COL32(24, 26, 30, 230));
        dl->AddText(ImVec2(tx, ty), palette::kText, shown.hover.c_str());
      }
    }
    dl->PopClipRect();
  }
  // Under the row's label: the memory row's peak as Summary gives it (counterLabel), any other
  // counter's max. Cut to the label column as the label is (fit.h), a "peak X (…)" line first to its
  // figure, the whole line on hover: drawn whole, it ran over the plot and its axis's "0 B".
  shown.caption = counterLabel(tr, tr.tracks[r.track]);
  const float room = cx.x0 - cx.left - 16;
  bool cut = false;
  shown.caption_shown = ellipsize(shown.caption, room, textWidth, &cut);
  if (const size_t paren = shown.caption.find(" ("); cut && paren != std::string::npos &&
                                                     textWidth(shown.caption.substr(0, paren)) <= room)
    shown.caption_shown = shown.caption.substr(0, paren);
  const ImVec2 at(cx.left + 12, y + fh + 5);
  dl->AddText(at, dim, shown.caption_shown.c_str());
  shown.caption_x1 = at.x + textWidth(shown.caption_shown);
  const ImVec2 mouse = ImGui::GetMousePos();
  if (shown.caption_shown != shown.caption && cx.hovered && mouse.x >= cx.left && mouse.x < cx.x0 && mouse.y >= at.y &&
      mouse.y < at.y + fh)
    ImGui::SetTooltip("%s", shown.caption.c_str());
  if (cx.record) counters_shown.push_back(std::move(shown));
}

}  // namespace trainscope::viewer
