// view_stats.cpp — the Statistics tab (per name and rank: count, total, self, min, median, p99, max,
// mean; of the whole run or of the selected range; filled piece by piece while the statistics pass
// runs), the histogram of the picked name's durations, and the range's per-name table in Details.
// The numbers are model code (stats.h); this file only draws them.
#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <stdexcept>

#include "app.h"
#include "trainscope/viewer/fit.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/table.h"

namespace trainscope::viewer {

namespace {

std::string pct(double part, double whole) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", whole > 0 ? 100 * part / whole : 0.0);
  return b;
}

// Count and shares of a histogram, drawn as bars over log-spaced bins with both axes: counts on the
// left (0 and the tallest bin, a line at each), durations below at every 8th edge, labels whole and
// apart (fit.h: histogramAxis); hover names a bin. Returns the axes as drawn (--layout).
App::HistAxesShown drawHistogram(const Histogram& h, const std::string& title, ImVec2 size) {
  App::HistAxesShown shown;
  ImGui::TextUnformatted(title.c_str());
  if (h.counts.empty()) {
    ImGui::TextDisabled("no durations");
    return shown;
  }
  const int64_t most = *std::max_element(h.counts.begin(), h.counts.end());
  const auto width = [](const std::string& t) { return ImGui::CalcTextSize(t.c_str(), t.c_str() + t.size()).x; };
  shown.y_lo = "0", shown.y_hi = std::to_string(most);
  const float y_w = width(shown.y_hi) + 6, line = ImGui::GetTextLineHeight();
  ImDrawList* dl = ImGui::GetWindowDrawList();
  const ImVec2 o = ImGui::GetCursorScreenPos();
  const ImVec2 p(o.x + y_w, o.y + line / 2);  // the plot's top left (the top count's label centred on it)
  const float axis_h = 2 * ImGui::GetTextLineHeightWithSpacing() + 4;
  const float w = std::max(60.f, size.x - y_w - 2), plot_h = std::max(30.f, size.y - axis_h - line / 2);
  ImGui::InvisibleButton("##hist", ImVec2(w + y_w, plot_h + line / 2));
  const float bw = w / float(h.counts.size());
  const bool hovered = ImGui::IsItemHovered();
  const int hot = hovered ? std::clamp(int((ImGui::GetIO().MousePos.x - p.x) / bw), 0, int(h.counts.size()) - 1) : -1;
  const ImU32 axis = IM_COL32(150, 150, 160, 255), text = IM_COL32(170, 170, 180, 255);
  dl->AddRectFilled(p, ImVec2(p.x + w, p.y + plot_h), IM_COL32(30, 32, 38, 255));
  dl->AddLine(ImVec2(p.x, p.y), ImVec2(p.x + w, p.y), IM_COL32(70, 72, 80, 255));  // the tallest bin's line
  for (size_t k = 0; k < h.counts.size(); ++k) {
    if (!h.counts[k]) continue;
    const float bh = std::max(1.f, plot_h * float(h.counts[k]) / float(std::max<int64_t>(1, most)));
    const float x0 = p.x + bw * float(k);
    dl->AddRectFilled(ImVec2(x0 + 1, p.y + plot_h - bh), ImVec2(x0 + bw - 1, p.y + plot_h),
                      int(k) == hot ? IM_COL32(255, 200, 90, 255) : IM_COL32(90, 150, 230, 255));
  }
  // The y axis: its line, 0 at the bottom and the tallest bin's count at the top, right-aligned.
  dl->AddLine(ImVec2(p.x, p.y), ImVec2(p.x, p.y + plot_h), axis);
  dl->AddText(ImVec2(p.x - 4 - width(shown.y_hi), p.y - line / 2), text, shown.y_hi.c_str());
  dl->AddText(ImVec2(p.x - 4 - width(shown.y_lo), p.y + plot_h - line), text, shown.y_lo.c_str());
  // The x axis: its line, a tick at each labelled edge, the labels under them, then its title.
  dl->AddLine(ImVec2(p.x, p.y + plot_h), ImVec2(p.x + w, p.y + plot_h), axis);
  shown.x = histogramAxis(h.edges, w, width, [](double ns) { return formatDuration(ns); });
  shown.w = w;
  for (const AxisLabel& a : shown.x) {
    dl->AddLine(ImVec2(p.x + a.x, p.y + plot_h), ImVec2(p.x + a.x, p.y + plot_h + 4), axis);
    dl->AddText(ImVec2(p.x + a.label_x0, p.y + plot_h + 4), text, a.text.c_str());
  }
  ImGui::SetCursorScreenPos(ImVec2(p.x, p.y + plot_h + 4 + ImGui::GetTextLineHeightWithSpacing()));
  ImGui::TextDisabled("duration (log scale); bars: count of events");
  if (hot >= 0) {
    const size_t k = size_t(hot);
    ImGui::SetTooltip("%s to %s%s: %lld (%s)", formatDuration(h.edges[k]).c_str(), formatDuration(h.edges[k + 1]).c_str(),
                      k + 1 == h.counts.size() ? " (inclusive)" : "", (long long)h.counts[k],
                      pct(double(h.counts[k]), double(h.total())).c_str());
  }
  return shown;
}

}  // namespace

Document* App::statsDocument() {
  for (auto& x : docs)
    if (x->ready()) return x.get();
  return nullptr;
}

// The statistics the tab shows: the run's (as far as the pass has got) or the selected range's,
// computed on a thread of its own once the range is final (not while it is being dragged): nullptr
// until then. wait: until it is in (a script's csv).
const Statistics* App::shownStatistics(bool in_range, bool wait) {
  Document* d = statsDocument();
  if (!d) return nullptr;
  const Trace& t = *d->trace;
  if (!in_range) return d->stats.get();
  if (range_stats && range_stats_trace == &t && range_stats_for == *range) return range_stats.get();
  const bool started = tables.range_job.valid() && tables.range_job_for == *range && tables.range_job_trace == &t;
  if (!started && (wait || !ImGui::IsMouseDown(ImGuiMouseButton_Left))) {
    tables.stopJobs();  // the previous range's, if any
    tables.range_cancel.store(false);
    tables.range_job = std::async(std::launch::async, [&t, r = *range, cancel = &tables.range_cancel] {
      return std::make_unique<Statistics>(computeRangeStatistics(t, r.first, r.second, cancel));
    });
    tables.range_job_for = *range;
    tables.range_job_trace = &t;
  }
  if (!tables.range_job.valid() || tables.range_job_for != *range || tables.range_job_trace != &t) return nullptr;
  if (!wait && tables.range_job.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return nullptr;
  range_stats = tables.range_job.get();
  range_stats_for = *range;
  range_stats_trace = &t;
  return range_stats.get();
}

// The table header: which table, which ranks, the whole run or the range, and CSV.
void App::statisticsControls(const Statistics* st, const Trace& t, bool in_range) {
  for (int g = 0; g < kStatGroups; ++g) {
    if (g) ImGui::SameLine();
    const std::string label = std::string(groupName(StatGroup(g))) + " (" +
                              std::to_string(st ? st->events[size_t(g)] : 0) + ")###g" + std::to_string(g);
    ImGui::RadioButton(label.c_str(), &stats_group, g);
  }
  ImGui::SameLine(0, 30);
  ImGui::SetNextItemWidth(140);
  const std::string cur = stats_rank == kAllRanks ? "all ranks" : stats_rank == kEachRank ? "each rank"
                                                                : "rank " + std::to_string(stats_rank);
  if (ImGui::BeginCombo("##rank", cur.c_str())) {
    if (ImGui::Selectable("all ranks", stats_rank == kAllRanks)) stats_rank = kAllRanks;
    if (ImGui::Selectable("each rank", stats_rank == kEachRank)) stats_rank = kEachRank;
    ImGuiListClipper clip;  // tens of thousands of ranks: only the visible entries
    clip.Begin(int(t.ranks.size()));
    while (clip.Step())
      for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
        const RankGroup& g = t.ranks[size_t(i)];
        const std::string n = "rank " + std::to_string(g.rank);
        if (ImGui::Selectable(n.c_str(), stats_rank == g.rank)) stats_rank = g.rank;
      }
    ImGui::EndCombo();
  }
  ImGui::SameLine(0, 30);
  if (!range) ImGui::BeginDisabled();
  ImGui::Checkbox("selected range only", &stats_in_range);
  if (!range) ImGui::EndDisabled();
  ImGui::SameLine(0, 30);
  if (!st) ImGui::BeginDisabled();
  if (ImGui::SmallButton("copy as CSV") && st) {
    const Table tab = statsTable(*st, t, StatGroup(stats_group), stats_rank);
    ImGui::SetClipboardText(toCsv(tab).c_str());
    tables.csv_status = "copied " + std::to_string(tab.rows.size()) + " rows";
  }
  if (!st) ImGui::EndDisabled();
  if (!tables.csv_status.empty()) {
    ImGui::SameLine();
    ImGui::TextDisabled("%s", tables.csv_status.c_str());
  }
  if (in_range) {
    ImGui::SameLine();
    ImGui::TextDisabled("%s from %s, times clipped to it", formatExact(range->second - range->first).c_str(),
                        formatExact(range->first - origin()).c_str());
  }
}

void App::drawStatistics() {
  Document* d = statsDocument();
  if (!d) return;
  if (!d->stats) {  // the pass publishes its first piece within a fraction of a second of the timeline
    ImGui::TextDisabled("Computing the statistics...");
    return;
  }
  const Trace& t = *d->trace;
  // The table to open on: kernels, or ops for a CPU run — once the pass knows (its kernels are counted).
  if (stats_group < 0 && (d->stats->complete || d->stats->events[size_t(defaultGroup(*d->stats))] > 0))
    stats_group = int(defaultGroup(*d->stats));
  const bool in_range = stats_in_range && range;
  const Statistics* st = shownStatistics(in_range);
  if (stats_group < 0) {
    ImGui::TextDisabled("Computing the statistics... %.0f%%", 100 * d->stats->fraction);
    return;
  }
  statisticsControls(st, t, in_range);
  if (!st) {
    ImGui::TextDisabled(ImGui::IsMouseDown(ImGuiMouseButton_Left) ? "Release the mouse to count the range."
                                                                  : "Counting the range...");
    return;
  }
  stats_shown = {};
  stats_shown.drawn = true;
  stats_shown.in_range = in_range;
  stats_shown.group = groupName(StatGroup(stats_group));
  stats_shown.complete = st->complete;
  if (!st->complete) {
    ImGui::ProgressBar(float(st->fraction), ImVec2(160, 0));
    ImGui::SameLine();
    ImGui::TextDisabled("counting: the rows so far (%s counted in full)",
                        st->groups_done ? groupName(StatGroup(st->groups_done - 1)) : "no table yet");
    if (stats_group >= st->groups_done && st->events[size_t(stats_group)] == 0) return;  // not reached yet
  }
  if (const std::string hint = emptyHint(*st, StatGroup(stats_group)); !hint.empty()) {
    ImGui::TextDisabled("%s", hint.c_str());
    stats_shown.hint = hint;
    return;
  }
  // The histogram takes 30% of the width, less where the table's name column would drop under 48
  // characters beside the ten fixed columns (780 px, statisticsTable; ~100 px of cell padding): at
  // 1400 px it read `vectoriz...`.
  const float avail = ImGui::GetContentRegionAvail().x, char_w = std::max(1.f, ImGui::CalcTextSize("M").x);
  const float hist_w = std::clamp(std::min(avail * 0.3f, avail - 880 - 48 * char_w), 200.f, 480.f);
  ImGui::BeginChild("stats_table", ImVec2(ImGui::GetContentRegionAvail().x - hist_w - 8, 0));
  statisticsTable(*st, *d, in_range);
  ImGui::EndChild();
  ImGui::SameLine();
  ImGui::BeginChild("stats_hist", ImVec2(0, 0));
  statisticsHistogram(*st, *d);
  ImGui::EndChild();
}

// The histogram of the picked row (the top row until one is clicked), for the rank the table shows.
void App::statisticsHistogram(const Statistics& st, Document& d) {
  const Trace& t = *d.trace;
  const StatGroup g = StatGroup(stats_group);
  std::optional<uint32_t> name;
  if (tables.picked && tables.picked->first == g) name = tables.picked->second;
  if (!name) {
    const auto top = statRows(st, t, g, kAllRanks, StatSort::Total, true);
    if (!top.empty()) name = top.front()->name;
  }
  if (!name) return;
  const int64_t rank = stats_rank >= 0 ? stats_rank : kAllRanks;
  // Once per row picked, on a thread (a pass over the events of the table's ranks).
  const TablesState::HistKey key{&t, st.in_range, st.begin, st.end, int(g), *name, rank};
  if (tables.hist_for != key) {
    if (!tables.hist_job.valid() || tables.hist_job_for != key) {
      if (tables.hist_job.valid()) tables.hist_job.get();
      Statistics scope;  // what durationHistogram reads of it: the range
      scope.in_range = st.in_range, scope.begin = st.begin, scope.end = st.end;
      tables.hist_job = std::async(std::launch::async, [&t, scope, g, n = *name, rank] {
        return durationHistogram(t, scope, g, n, rank);
      });
      tables.hist_job_for = key;
    }
    if (tables.hist_job.wait_for(std::chrono::seconds(0)) != std::future_status::ready) {
      ImGui::TextDisabled("Counting the durations...");
      return;
    }
    tables.hist = tables.hist_job.get();
    tables.hist_for = key;
  }
  const size_t chars = size_t(ImGui::GetContentRegionAvail().x / std::max(1.f, ImGui::CalcTextSize("M").x));
  stats_shown.hist_axes = drawHistogram(tables.hist, d.names.fit(*name, t.names, chars), ImGui::GetContentRegionAvail());
  stats_shown.hist_name = t.names[*name];
  stats_shown.hist = tables.hist;
}

void App::statisticsTable(const Statistics& st, Document& d, bool in_range) {
  const Trace& t = *d.trace;
  const ImGuiTableFlags flags = ImGuiTableFlags_Sortable | ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                ImGuiTableFlags_Resizable | ImGuiTableFlags_BordersInnerV;
  if (!ImGui::BeginTable("stats", 11, flags)) return;
  ImGui::TableSetupScrollFreeze(0, 1);
  const ImGuiTableColumnFlags num = ImGuiTableColumnFlags_WidthFixed | ImGuiTableColumnFlags_PreferSortDescending;
  ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch, 0, int(StatSort::Name));
  ImGui::TableSetupColumn("rank", ImGuiTableColumnFlags_WidthFixed, 50, int(StatSort::Rank));
  ImGui::TableSetupColumn("count", ImGuiTableColumnFlags_WidthFixed, 70, int(StatSort::Count));
  ImGui::TableSetupColumn("total", num | ImGuiTableColumnFlags_DefaultSort, 80, int(StatSort::Total));
  ImGui::TableSetupColumn("self", num, 80, int(StatSort::Self));
  ImGui::TableSetupColumn("min", num, 80, int(StatSort::Min));
  ImGui::TableSetupColumn("median", num, 80, int(StatSort::Median));
  ImGui::TableSetupColumn("p99", num, 80, int(StatSort::P99));
  ImGui::TableSetupColumn("max", num, 80, int(StatSort::Max));
  ImGui::TableSetupColumn("mean", num, 80, int(StatSort::Mean));
  // Whole run: the share of the table's total. A range: the share of the range per rank (a row over
  // all ranks divides by the range times the ranks, never summing ranks into "200%").
  ImGui::TableSetupColumn(in_range ? "% of range/rank" : "% of total", ImGuiTableColumnFlags_WidthFixed | ImGuiTableColumnFlags_NoSort, 100);
  headersRow("stats");
  StatSort by = StatSort::Total;
  bool desc = true;
  if (ImGuiTableSortSpecs* sp = ImGui::TableGetSortSpecs(); sp && sp->SpecsCount > 0) {
    by = StatSort(sp->Specs[0].ColumnUserID);
    desc = sp->Specs[0].SortDirection == ImGuiSortDirection_Descending;
  }
  stats_sort = {by, desc};  // the table's CSV in the order shown
  const auto rowsOf = statRows(st, t, StatGroup(stats_group), stats_rank, by, desc);
  double sum = 0;
  for (const auto* r : rowsOf) sum += double(r->total_ns);
  const bool record = !opt.layout.empty();
  const float char_w = std::max(1.f, ImGui::CalcTextSize("M").x);
  ImGuiListClipper clip;
  clip.Begin(int(rowsOf.size()));
  while (clip.Step())
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      const StatRow& r = *rowsOf[size_t(i)];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::PushID(i);
      // The name as on the timeline: demangled, shortened to the column (names.h); in full on hover.
      // A click picks the row for the histogram and finds the name on the timeline.
      const std::string shown = d.names.fit(r.name, t.names, size_t(ImGui::GetContentRegionAvail().x / char_w));
      const bool picked = tables.picked && tables.picked->first == r.group && tables.picked->second == r.name;
      if (ImGui::Selectable(shown.c_str(), picked, ImGuiSelectableFlags_SpanAllColumns)) {
        tables.picked = std::make_pair(r.group, r.name);
        runSearch(t.names[r.name]);
      }
      if (ImGui::IsItemHovered()) {
        const std::string& full = d.names.full(r.name, t.names);
        ImGui::BeginTooltip();
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 60);
        ImGui::TextUnformatted(full.c_str());
        if (full != t.names[r.name]) ImGui::TextDisabled("%s", t.names[r.name].c_str());
        ImGui::PopTextWrapPos();
        ImGui::EndTooltip();
      }
      ImGui::PopID();
      ImGui::TableNextColumn();
      if (r.rank >= 0) ImGui::Text("%lld", (long long)r.rank);
      else ImGui::TextDisabled("all");
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)r.count);
      for (int64_t v : {r.total_ns, r.self_ns, r.min_ns, r.median_ns, r.p99_ns, r.max_ns}) {
        ImGui::TableNextColumn();
        ImGui::Text("%s", formatDuration(double(v)).c_str());
      }
      ImGui::TableNextColumn();
      ImGui::Text("%s", formatDuration(r.mean_ns()).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%s", in_range ? pct(st.shareOfRangePerRank(r), 1).c_str() : pct(double(r.total_ns), sum).c_str());
      if (record) {
        stats_shown.rows.push_back(r);
        stats_shown.labels.push_back(shown);
      }
    }
  ImGui::EndTable();
}

// Details of a selected range: per name (every table), per rank or over all ranks as Statistics is
// set, the count, the time inside the range and its share of the range per rank — the rows of the
// range's statistics, largest first.
void App::drawRangeNames() {
  Document* d = statsDocument();
  if (!d || !range) return;
  const Statistics* st = shownStatistics(true);
  if (!st) {
    ImGui::TextDisabled(ImGui::IsMouseDown(ImGuiMouseButton_Left) ? "Release the mouse for the range's names."
                                                                  : "Counting the range's names...");
    return;
  }
  const Trace& t = *d->trace;
  const std::vector<const StatRow*> rows = rangeNameRows(*st, stats_rank);
  ImGui::TextDisabled("By name in the range (%s; the rank choice is Statistics'):",
                      stats_rank == kAllRanks ? "all ranks" : stats_rank == kEachRank ? "each rank" : "one rank");
  if (!ImGui::BeginTable("range_names", 6, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable,
                         ImVec2(0, std::max(80.f, ImGui::GetContentRegionAvail().y))))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch);
  ImGui::TableSetupColumn("table", ImGuiTableColumnFlags_WidthFixed, 80);
  ImGui::TableSetupColumn("rank", ImGuiTableColumnFlags_WidthFixed, 50);
  ImGui::TableSetupColumn("count", ImGuiTableColumnFlags_WidthFixed, 70);
  ImGui::TableSetupColumn("in the range", ImGuiTableColumnFlags_WidthFixed, 90);
  ImGui::TableSetupColumn("of the range per rank", ImGuiTableColumnFlags_WidthFixed, 140);
  headersRow("range_names");
  const float char_w = std::max(1.f, ImGui::CalcTextSize("M").x);
  ImGuiListClipper clip;
  clip.Begin(int(rows.size()));
  while (clip.Step())
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      const StatRow& r = *rows[size_t(i)];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      ImGui::TextUnformatted(d->names.fit(r.name, t.names, size_t(ImGui::GetContentRegionAvail().x / char_w)).c_str());
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", d->names.full(r.name, t.names).c_str());
      ImGui::TableNextColumn();
      ImGui::TextDisabled("%s", groupName(r.group));
      ImGui::TableNextColumn();
      if (r.rank >= 0) ImGui::Text("%lld", (long long)r.rank);
      else ImGui::TextDisabled("all");
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)r.count);
      ImGui::TableNextColumn();
      ImGui::Text("%s", formatDuration(double(r.total_ns)).c_str());
      ImGui::TableNextColumn();
      ImGui::Text("%s", pct(st->shareOfRangePerRank(r), 1).c_str());
    }
  ImGui::EndTable();
}


// The statistics in pieces of about a million lanes' events (a few milliseconds each), the latest
// snapshot handed to the UI at most every 250 ms (a snapshot re-sorts the group under way), the first
// at once, then the correlation index; the run summary on a thread beside them (its device work from
// the loaded lanes). 10 M events: docs/viewer.md's figures.
void Document::afterTimeline() {
  using clock = std::chrono::steady_clock;
  const auto up = clock::now();
  auto since = [&] { return std::chrono::duration<double>(clock::now() - up).count(); };
  std::string steps_error;
  std::thread steps([&] {
    try {
      // The device work from the lanes already loaded: no second pass over the file's largest tables.
      if (auto sum = loadSummary(path, &progress.cancel, trace.get())) summary = std::make_unique<rundb::RunSummary>(*sum);
    } catch (const Cancelled&) {
    } catch (const std::exception& e) {
      steps_error = e.what();
    }
    steps_s.store(since());
    steps_done.store(true);
  });
  try {
    StatisticsPass pass(*trace);
    auto published = clock::now();
    for (bool first = true, done = false; !done; first = false) {
      done = pass.run(int64_t(1) << 20, &progress.cancel);
      if (!first && !done && clock::now() - published < std::chrono::milliseconds(250)) continue;
      auto snap = std::make_unique<Statistics>(pass.snapshot());
      std::lock_guard<std::mutex> lock(stats_mu);
      stats_next = std::move(snap);
      published = clock::now();
      if (first) stats_first_s.store(since());
    }
    stats_all_s.store(since());
    // Launches and the work they launched (flows, launch latency in Details): built here, not on the
    // UI thread, where 100 M events held the first frame with the timeline for seconds.
    if (!progress.cancel.load()) {
      auto index = std::make_unique<CorrelationIndex>(*trace);
      std::lock_guard<std::mutex> lock(stats_mu);
      correlation_next = std::move(index);
    }
  } catch (...) {
    steps.join();  // it stops too: the same cancel flag
    throw;
  }
  steps.join();
  if (progress.cancel.load()) throw Cancelled();
  if (!steps_error.empty()) throw std::runtime_error(steps_error);
}

}  // namespace trainscope::viewer
