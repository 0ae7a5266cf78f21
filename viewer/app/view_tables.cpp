// view_tables.cpp — the Compare tab's per-name diff, the SQL box, CSV of every table, and the script
// commands and --layout entries that reach them (csv, sql, diff). The numbers are model code
// (diff.h, sql.h, table.h); this file draws them and keeps the SQL box's thread.
#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "app.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/viewer/fit.h"
#include "trainscope/viewer/table.h"

namespace trainscope::viewer {

TablesState::~TablesState() {
  sql_cancel.store(true);  // a query still running stops at SQLite's next check
  if (sql_thread.joinable()) sql_thread.join();
  stopJobs();
}

bool TablesState::busy() const {
  auto running = [](const auto& f) { return f.valid() && f.wait_for(std::chrono::seconds(0)) != std::future_status::ready; };
  return sql_busy.load() || running(hist_job) || running(range_job);
}

void TablesState::stopJobs() {
  range_cancel.store(true);
  try {
    if (range_job.valid()) range_job.get();
  } catch (const Cancelled&) {
  }
  if (hist_job.valid()) hist_job.get();  // one pass over the events: not cancellable, and short
  hist_for = hist_job_for = HistKey{nullptr, false, 0, 0, -1, 0, 0};
}

std::vector<ScriptCommand> parseTableScript(
    const std::string& text, const std::string& file,
    const std::function<std::vector<ScriptCommand>(const std::string&, const std::string&)>& rest) {
  static const char* kTables[] = {"stats", "range", "diff", "steps", "sql"};
  const auto ours = [](const std::string& op) { return op == "csv" || op == "sql" || op == "diff"; };
  const auto check = [](const ScriptCommand& c, const std::string& where) {
    if (c.op == "csv" && (c.args.size() != 2 || std::find(std::begin(kTables), std::end(kTables), c.args[0]) == std::end(kTables)))
      throw UserError("--script", where + ": csv takes a table (stats, range, diff, steps or sql) and a file",
                      "e.g. csv stats /tmp/stats.csv");
    if (c.op == "sql" && c.args.size() != 1)
      throw UserError("--script", where + ": sql takes one quoted query", "e.g. sql \"SELECT count(*) FROM kernels\"");
    if (c.op == "diff" && (c.args.size() != 1 || (c.args[0] != "step" && c.args[0] != "whole")))
      throw UserError("--script", where + ": diff takes step or whole", "see docs/viewer.md");
  };
  return parseScriptPart(text, file, ours, check, rest);
}

// The SQL box's query, on a thread of its own; `wait`: until it is done (a script's `sql`).
void App::startSql(const std::string& query, bool wait) {
  if (tables.sql_thread.joinable()) {
    tables.sql_cancel.store(true);
    tables.sql_thread.join();
  }
  const Document* d = statsDocument();
  if (!d) return;
  tables.sql_cancel.store(false);
  tables.sql_busy.store(true);
  tables.sql_thread = std::thread([this, path = d->path, query] {
    QueryResult r = runQuery(path, query, 10000, &tables.sql_cancel);
    std::lock_guard<std::mutex> lock(tables.sql_mu);
    tables.sql_result = std::move(r);
    tables.sql_ran = query;
    tables.sql_busy.store(false);
  });
  if (wait) tables.sql_thread.join();
}

void App::drawSql() {
  const Document* d = statsDocument();
  if (!d) return;
  // A row clicked or "show as a track" in the last frame (view_finders.cpp; they read the result).
  if (auto row = std::exchange(finders.sql_jump, std::nullopt)) jumpToSqlRow(*row);
  if (std::exchange(finders.sql_track, false)) showQueryTrack();
  ImGui::TextDisabled("SQL over %s, read-only (tables: docs/trace-schema.md). Ctrl+Enter runs.", d->path.c_str());
  const bool run = ImGui::InputTextMultiline("##sql", tables.sql_text, sizeof tables.sql_text,
                                             ImVec2(-1, ImGui::GetTextLineHeight() * 4),
                                             ImGuiInputTextFlags_EnterReturnsTrue);  // multiline: Ctrl+Enter
  const bool busy = tables.sql_busy.load();
  if ((ImGui::Button(busy ? "running..." : "run") || run) && !busy) startSql(tables.sql_text, false);
  ImGui::SameLine();
  if (busy && ImGui::Button("cancel")) tables.sql_cancel.store(true);
  std::lock_guard<std::mutex> lock(tables.sql_mu);
  const QueryResult& r = tables.sql_result;
  if (!busy && tables.sql_ran.empty()) return;

  if (!busy) {
    ImGui::SameLine();
    if (ImGui::SmallButton("copy as CSV")) ImGui::SetClipboardText(toCsv(r.table).c_str());
    ImGui::SameLine();
    ImGui::TextDisabled("%zu rows%s in %.3f s", r.table.rows.size(), r.truncated ? " (the first; more not shown)" : "",
                        r.seconds);
    ImGui::SameLine();  // view_finders.cpp: the rows' intervals as a track; a row with rank and start_ns jumps
    if (r.error.empty() && ImGui::SmallButton("show as a track")) finders.sql_track = true;
    ImGui::SameLine();
    ImGui::TextDisabled("%s", finders.status.empty() ? "click a row with rank and start_ns to go to its event"
                                                     : finders.status.c_str());
  }
  if (!r.error.empty()) {
    ImGui::TextColored(ImVec4(1, .45f, .45f, 1), "%s", r.error.c_str());
    return;
  }
  const int cols = int(std::min<size_t>(r.table.columns.size(), 64));  // ImGui tables hold 64 columns
  if (cols == 0 || !ImGui::BeginTable("sql_rows", cols, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY |
                                                           ImGuiTableFlags_ScrollX | ImGuiTableFlags_Resizable |
                                                           ImGuiTableFlags_BordersInnerV))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  for (int c = 0; c < cols; ++c) ImGui::TableSetupColumn(r.table.columns[size_t(c)].c_str());
  headersRow("sql_rows", /*auto_fit=*/true);
  ImGuiListClipper clip;
  clip.Begin(int(r.table.rows.size()));
  while (clip.Step())
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      ImGui::TableNextRow();
      for (int c = 0; c < cols; ++c) {
        ImGui::TableNextColumn();
        if (c == 0 && rowButton("sql", i, false)) finders.sql_jump = size_t(i);
        ImGui::TextUnformatted(r.table.rows[size_t(i)][size_t(c)].c_str());
      }
    }
  ImGui::EndTable();
}

// The per-name diff, computed when what it is of changes: over the aligned step (a pass over the
// step's events in both runs), or the whole runs from their statistics passes once both are done.
const RunDiff* App::nameDiff() {
  if (docs.size() < 2 || !docs[0]->ready() || !docs[1]->ready()) return nullptr;
  const Trace *a = docs[0]->trace.get(), *b = docs[1]->trace.get();
  const auto key = std::make_tuple(a, b, align_step, tables.diff_whole);
  if (tables.diff && tables.diff_for == key) return tables.diff.get();
  auto d = std::make_unique<RunDiff>();
  if (tables.diff_whole) {
    const Statistics *sa = docs[0]->stats.get(), *sb = docs[1]->stats.get();
    if (!sa || !sb || !sa->complete || !sb->complete) return nullptr;  // the passes are still counting
    d->a_window = {a->begin, a->end}, d->b_window = {b->begin, b->end};
    d->rows = diffStatistics(*sa, *a, *sb, *b);
  } else {
    *d = diffRuns(*a, *b, align_step);
  }
  tables.diff = std::move(d);
  tables.diff_for = key;
  return tables.diff.get();
}

namespace {

// The figure columns of the per-name diff, each as wide as its header or widest cell (the first 4,000
// rows: the largest |B - A| come first), as drawNameDiff prints them.
std::vector<float> diffColumnWidths(const RunDiff& d) {
  const auto width = [](const std::string& t) { return ImGui::CalcTextSize(t.c_str(), t.c_str() + t.size()).x; };
  std::vector<std::vector<std::string>> cells(7);
  for (size_t i = 0; i < d.rows.size() && i < 4000; ++i) {
    const DiffRow& r = d.rows[i];
    const int64_t dt = r.delta_ns(), dc = r.delta_count();
    cells[0].push_back(groupName(r.group));
    cells[1].push_back(std::to_string(r.a_count));
    cells[2].push_back(std::to_string(r.b_count));
    cells[3].push_back(r.a_count ? formatDuration(double(r.a_ns)) : "-");
    cells[4].push_back(r.b_count ? formatDuration(double(r.b_ns)) : "-");
    cells[5].push_back((dt > 0 ? "+" : "") + formatDuration(double(dt)));
    cells[6].push_back((dc > 0 ? "+" : "") + std::to_string(dc));
  }
  const char* heads[] = {"table", "A count", "B count", "A time", "B time", "B - A", "B - A count"};
  std::vector<float> w;
  for (size_t c = 0; c < 7; ++c) w.push_back(columnWidth(heads[c], cells[c], width, 2 * ImGui::GetStyle().CellPadding.x + 4));
  return w;
}

}  // namespace

void App::drawNameDiff() {
  const bool record_diff = !opt.layout.empty();
  if (record_diff) diff_names_shown.clear(), diff_deltas_shown.clear();
  ImGui::Checkbox("whole runs", &tables.diff_whole);
  ImGui::SameLine();
  const RunDiff* d = nameDiff();
  if (!d) {
    ImGui::TextDisabled("Waiting for both runs' statistics...");
    return;
  }
  if (ImGui::SmallButton("copy as CSV")) ImGui::SetClipboardText(toCsv(diffTable(*d)).c_str());
  ImGui::SameLine();
  ImGui::TextDisabled("per name, %s, summed over ranks, largest |B - A| first",
                      d->step ? ("step " + std::to_string(*d->step) + " in each run").c_str() : "the whole runs");
  if (!d->error.empty()) {
    ImGui::TextColored(ImVec4(1, .8f, .4f, 1), "%s", d->error.c_str());
    return;
  }
  ImGui::TextDisabled("%s", finders.status.empty() ? "click a row for its slowest instance" : finders.status.c_str());
  std::optional<size_t> jump;  // a row clicked: its slowest instance (view_finders.cpp), after the table
  if (!ImGui::BeginTable("name_diff", 8, ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_Resizable))
    return;
  ImGui::TableSetupScrollFreeze(0, 1);
  ImGui::TableSetupColumn("name", ImGuiTableColumnFlags_WidthStretch);
  // Each figure column as wide as its widest figure (fit.h): "+468.123 ms" is never cut.
  const std::vector<float> widths = diffColumnWidths(*d);
  const char* heads[] = {"table", "A count", "B count", "A time", "B time", "B - A", "B - A count"};
  for (size_t c = 0; c < 7; ++c) ImGui::TableSetupColumn(heads[c], ImGuiTableColumnFlags_WidthFixed, widths[c]);
  headersRow("name_diff");
  const float char_w = std::max(1.f, ImGui::CalcTextSize("M").x);
  ImGuiListClipper clip;
  clip.Begin(int(d->rows.size()));
  while (clip.Step())
    for (int i = clip.DisplayStart; i < clip.DisplayEnd; ++i) {
      const DiffRow& r = d->rows[size_t(i)];
      ImGui::TableNextRow();
      ImGui::TableNextColumn();
      if (rowButton("diff", i, false)) jump = size_t(i);
      // The name shortened as the timeline shortens it (names.h: `CppNode<BlockCheckpoint>` reads
      // `BlockCheckpoint`), the full name on hover.
      const size_t chars = size_t(std::max(0.f, ImGui::GetContentRegionAvail().x) / char_w);
      const std::string shown = fitName(nameForms(r.name), chars);
      ImGui::TextUnformatted(shown.c_str());
      if (ImGui::IsItemHovered()) ImGui::SetTooltip("%s", demangle(r.name).c_str());
      if (record_diff) diff_names_shown.push_back(shown);
      ImGui::TableNextColumn();
      ImGui::TextDisabled("%s", groupName(r.group));
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)r.a_count);
      ImGui::TableNextColumn();
      ImGui::Text("%lld", (long long)r.b_count);
      ImGui::TableNextColumn();
      ImGui::Text("%s", r.a_count ? formatDuration(double(r.a_ns)).c_str() : "-");
      ImGui::TableNextColumn();
      ImGui::Text("%s", r.b_count ? formatDuration(double(r.b_ns)).c_str() : "-");
      ImGui::TableNextColumn();
      const int64_t dt = r.delta_ns();
      const std::string delta = (dt > 0 ? "+" : "") + formatDuration(double(dt));
      const float room = ImGui::GetContentRegionAvail().x;
      ImGui::TextColored(dt > 0 ? ImVec4(1, .45f, .45f, 1) : dt < 0 ? ImVec4(.5f, 1, .5f, 1) : ImVec4(.6f, .6f, .6f, 1),
                         "%s", delta.c_str());
      if (record_diff) diff_deltas_shown.push_back({delta, ImGui::CalcTextSize(delta.c_str()).x, room});
      ImGui::TableNextColumn();
      ImGui::Text("%+lld", (long long)r.delta_count());

    }
  ImGui::EndTable();
  if (jump) jumpToDiffRow(*jump);
}

std::vector<HeaderShown>& headersShown() {
  static std::vector<HeaderShown> shown;  // the UI thread's
  return shown;
}

void headersRow(const char* table, bool auto_fit) {
  const int n = ImGui::TableGetColumnCount();
  // A sortable column keeps room for its arrow, as TableHeader does (ImGui 1.86: 0.65 font + padding).
  const bool sortable = ImGui::TableGetSortSpecs() != nullptr;
  const float arrow = sortable ? ImGui::GetFontSize() * 0.65f + ImGui::GetStyle().FramePadding.x : 0;
  const auto width = [](const std::string& t) { return ImGui::CalcTextSize(t.c_str(), t.c_str() + t.size()).x; };
  ImGui::TableNextRow(ImGuiTableRowFlags_Headers);
  for (int c = 0; c < n; ++c) {
    if (!ImGui::TableSetColumnIndex(c)) continue;
    const std::string full = ImGui::TableGetColumnName(c);
    bool cut = false;
    const std::string shown = auto_fit ? full : ellipsize(full, ImGui::GetContentRegionAvail().x - arrow, width, &cut);
    ImGui::PushID(c);
    ImGui::TableHeader((shown + "##" + full).c_str());
    if (const char* name = scriptTableName(table)) recordClickTarget(std::string(name) + " header " + full);
    if (cut && ImGui::IsItemHovered()) ImGui::SetTooltip("%s", full.c_str());
    ImGui::PopID();
    headersShown().push_back({table, full, shown});
  }
}

// The CSV of a table as it is set up now (the Statistics table's table, ranks and range; the diff's
// step or whole runs; the last query's rows).
Table App::tableFor(const std::string& which) {
  Document* d = statsDocument();
  if (!d) return {};
  const Trace& t = *d->trace;
  if (which == "stats") {
    const Statistics* st = shownStatistics(stats_in_range && range, /*wait=*/true);
    if (!st) return {};
    const StatGroup g = stats_group >= 0 ? StatGroup(stats_group) : defaultGroup(*st);
    return statsTable(*st, t, g, stats_rank, stats_sort.first, stats_sort.second);  // as the table shows it
  }
  if (which == "range") {
    const Statistics* st = range ? shownStatistics(true, /*wait=*/true) : nullptr;
    return st ? rangeNamesTable(*st, t, stats_rank) : Table{};
  }
  if (which == "diff") {
    const RunDiff* rd = nameDiff();
    return rd ? diffTable(*rd) : Table{};
  }
  if (which == "steps")
    return docs.size() > 1 && docs[1]->ready() ? stepsTable(compareSteps(t, *docs[1]->trace)) : Table{};
  std::lock_guard<std::mutex> lock(tables.sql_mu);
  return tables.sql_result.table;
}

bool App::applyTableCommand(const ScriptCommand& c) {
  if (c.op == "csv") {
    const Table tab = tableFor(c.args[0]);
    if (tab.columns.empty())
      std::cerr << "trainscope-viewer: --script line " << c.line << ": no " << c.args[0] << " table to write\n";
    // An earlier output of the same kind: a CSV of this table, by its header line (ours).
    const std::string text = toCsv(tab);
    files::OutputRule rule = outputRule("csv");
    rule.earlier = files::startsWith(text.substr(0, text.find('\n') + 1));
    rule.kind = "CSV of the " + c.args[0] + " table";
    for (const std::string& other : {opt.screenshot, opt.layout})
      if (!other.empty() && files::sameEntry(c.args[1], other))
        throw UserError("csv", c.args[1] + " is also the file of --screenshot or --layout", "name another file");
    files::writeAtomically(c.args[1], text, rule);
  } else if (c.op == "sql") {
    std::snprintf(tables.sql_text, sizeof tables.sql_text, "%s", c.args[0].c_str());
    startSql(c.args[0], /*wait=*/true);
    tab = Tab::Sql, tab_requested = true;
  } else if (c.op == "diff") {
    tables.diff_whole = c.args[0] == "whole";
    tab = Tab::Compare, tab_requested = true;
  } else {
    return false;
  }
  return true;
}

// --layout: the diff, the last query and the histogram shown, so that tests read them without OCR.
void App::tablesLayout(nlohmann::json& j) const {
  if (tables.diff) {
    nlohmann::json rows = nlohmann::json::array();
    for (const DiffRow& r : tables.diff->rows)
      rows.push_back({{"group", groupName(r.group)}, {"name", r.name}, {"a_count", r.a_count}, {"b_count", r.b_count},
                      {"a_ns", r.a_ns}, {"b_ns", r.b_ns}, {"delta_ns", r.delta_ns()}});
    j["diff"] = {{"step", tables.diff->step ? nlohmann::json(*tables.diff->step) : nlohmann::json()},
                 {"error", tables.diff->error}, {"rows", rows}};
    // The rows drawn: names as shown, and each B - A cell's text width against its column's room.
    j["diff"]["names_shown"] = diff_names_shown;
    j["diff"]["deltas_shown"] = nlohmann::json::array();
    for (const auto& [text, w, room] : diff_deltas_shown)
      j["diff"]["deltas_shown"].push_back({{"text", text}, {"w", w}, {"room", room}});
  }
  if (!tables.sql_ran.empty() && !tables.sql_busy.load()) {
    const QueryResult& r = tables.sql_result;
    j["sql"] = {{"query", tables.sql_ran}, {"error", r.error}, {"columns", r.table.columns}, {"rows", r.table.rows},
                {"truncated", r.truncated}};
  }
  j["table_headers"] = nlohmann::json::array();  // every table's headers as drawn: cut with "..." to their column
  for (const HeaderShown& h : headersShown())
    j["table_headers"].push_back({{"table", h.table}, {"full", h.full}, {"shown", h.shown}});
  j["stats"]["complete"] = stats_shown.complete;
  if (!stats_shown.hist_name.empty()) {
    j["stats"]["histogram"] = {{"name", stats_shown.hist_name}, {"edges", stats_shown.hist.edges},
                               {"counts", stats_shown.hist.counts}};
    const App::HistAxesShown& a = stats_shown.hist_axes;
    nlohmann::json xs = nlohmann::json::array();
    for (const AxisLabel& l : a.x) xs.push_back({{"x", l.x}, {"label_x0", l.label_x0}, {"label_w", l.label_w}, {"text", l.text}});
    j["stats"]["histogram"]["axes"] = {{"x", xs}, {"y_lo", a.y_lo}, {"y_hi", a.y_hi}, {"w", a.w}};
  }
}

}  // namespace trainscope::viewer
