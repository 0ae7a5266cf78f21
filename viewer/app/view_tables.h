// view_tables.h — what the bottom panel's tables keep between frames beyond app.h's: the histogram
// of the statistics row picked, the per-name diff of two runs, the SQL box (its query runs on a
// thread of its own, so a slow query never freezes a frame and closing cancels it), and the script
// commands that reach them (csv, sql, diff). Drawn by view_stats.cpp, view_sql.cpp, view_panels.cpp.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "trainscope/viewer/diff.h"
#include "trainscope/viewer/sql.h"
#include "trainscope/viewer/stats.h"
#include "trainscope/viewer/view_state.h"

namespace trainscope::viewer {

struct TablesState {
  // Statistics: the row whose durations the histogram shows (picked by a click; the top row until then).
  std::optional<std::pair<StatGroup, uint32_t>> picked;
  Histogram hist;
  // What `hist` is of: the trace, the range (or none), the group, name and rank.
  using HistKey = std::tuple<const Trace*, bool, int64_t, int64_t, int, uint32_t, int64_t>;
  HistKey hist_for{nullptr, false, 0, 0, -1, 0, 0};
  // Work a frame must not wait for, each on a thread of its own: the histogram (a pass over the
  // events of the table's ranks) and a range's statistics (a pass over the range's events; cancelled
  // when the range changes). The frame shows "counting" until they are in.
  std::future<Histogram> hist_job;
  HistKey hist_job_for{nullptr, false, 0, 0, -1, 0, 0};
  std::future<std::unique_ptr<Statistics>> range_job;
  std::pair<int64_t, int64_t> range_job_for{};
  const Trace* range_job_trace = nullptr;
  std::atomic<bool> range_cancel{false};
  bool busy() const;   // a job or a query still running (a headless script waits for it)
  void stopJobs();     // cancels and waits (before the traces they read go)
  // Compare: the per-name diff, over the aligned step or the whole runs.
  bool diff_whole = false;
  std::unique_ptr<RunDiff> diff;
  std::tuple<const Trace*, const Trace*, int64_t, bool> diff_for{nullptr, nullptr, 0, false};
  // The SQL box.
  char sql_text[4096] = "SELECT s.value AS name, count(*) AS n, sum(end_ns - start_ns) AS total_ns\n"
                        "FROM host_ops o JOIN strings s ON s.id = o.name_id\nGROUP BY 1 ORDER BY 3 DESC LIMIT 20";
  std::thread sql_thread;
  std::atomic<bool> sql_busy{false}, sql_cancel{false};
  std::mutex sql_mu;
  QueryResult sql_result;  // guarded by sql_mu
  std::string sql_ran;     // the query sql_result is of
  std::string csv_status;  // the last "copied N rows" note
  ~TablesState();
};

// A table's header row as ImGui's TableHeadersRow draws it, but each header cut with "..." to its
// column (fit.h) and given in full on hover: a narrow column never shows a header clipped mid-letter.
// The headers as drawn this frame are kept for --layout (headersShown, cleared by each frame).
// auto_fit: the table sizes its columns to their contents (ImGuiTableFlags_SizingFixedFit), headers
// included — then a header is never cut (cutting it would narrow the column it widens).
struct HeaderShown {
  std::string table, full, shown;
};
void headersRow(const char* table, bool auto_fit = false);
std::vector<HeaderShown>& headersShown();

// Where a click on each row and header of the tables a script can click (search, sql, diff) lands, as
// drawn this frame (view_clicks.cpp): "search 3" (row 3), "search header duration" → a screen point.
struct ClickPoint {
  float x, y;
};
std::map<std::string, ClickPoint>& clickTargets();
void recordClickTarget(const std::string& key);  // the last ImGui item, when a click at it would reach it
// A table's name in a script's `click` ("search_list" → "search", "sql_rows" → "sql", "name_diff" →
// "diff"); nullptr for a table a script does not click.
const char* scriptTableName(const std::string& imgui_table);

// The script's lines with the table commands (csv TABLE FILE, sql QUERY, diff step|whole) taken out
// and checked here, the rest parsed by `rest` (line numbers kept).
std::vector<ScriptCommand> parseTableScript(
    const std::string& text, const std::string& file,
    const std::function<std::vector<ScriptCommand>(const std::string&, const std::string&)>& rest);

}  // namespace trainscope::viewer
