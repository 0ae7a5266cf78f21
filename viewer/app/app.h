// app.h — the viewer application: documents being loaded or shown, the view state, and the frame.
// One file per window draws it (view_timeline.cpp, view_panels.cpp, view_study.cpp); this header is
// their shared state. Only window.cpp touches GLFW and OpenGL.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "trainscope/common/files.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/tuner/study.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/fit.h"
#include "trainscope/viewer/finders.h"
#include "trainscope/viewer/lod.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/names.h"
#include "trainscope/viewer/query.h"
#include "trainscope/viewer/stats.h"
#include "trainscope/viewer/step_view.h"
#include "trainscope/viewer/tracks.h"
#include "trainscope/viewer/view_state.h"
#include "habits.h"
#include "view_tables.h"

struct ImDrawList;

namespace trainscope::viewer {
struct TimelineContext;  // timeline.h
}

namespace trainscope::viewer {

// GLFW key codes the views use (GLFW's values; ImGui 1.86 indexes KeysDown with them).
namespace keys {
inline constexpr int kA = 65, kD = 68, kF = 70, kS = 83, kW = 87, kLeftBracket = 91, kRightBracket = 93,
                     kEscape = 256, kF3 = 292;
inline constexpr int kB = 66, kL = 76, kN = 78, kO = 79, kSlash = 47, kF1 = 290, kEnter = 257;  // view_habits.cpp
}

struct Options {
  std::vector<std::string> files;
  std::string screenshot, script, layout;
  bool overwrite = false;  // --overwrite: the outputs may replace any regular file (never an input)
  int width = 1600, height = 900;
  std::optional<std::pair<double, double>> view;  // relative to the trace start, ns
  int frames = 3;
  bool frame_stats = false;
  float scale = 0;  // --scale: fonts and sizes; 0: the monitor's content scale
};

// One run database: loaded on a background thread, then shown.
struct Document {
  std::string path;
  LoadProgress progress;
  std::thread loader;
  std::atomic<bool> done{false};
  std::string error;                    // set when loading failed
  std::unique_ptr<Trace> trace;
  std::unique_ptr<Statistics> stats;
  std::unique_ptr<CorrelationIndex> correlation;
  std::unique_ptr<rundb::RunReader> reader;  // details on selection (UI thread only)
  std::unique_ptr<rundb::RunSummary> summary;  // computed after the timeline is up
  std::atomic<bool> summary_done{false};       // every pass after the timeline has ended
  // The statistics pass publishes snapshots as it goes (StatisticsPass), the run summary runs beside
  // it: poll() moves the latest snapshot into `stats`; Steps shows once steps_done.
  std::mutex stats_mu;
  std::unique_ptr<Statistics> stats_next;  // guarded by stats_mu
  std::unique_ptr<CorrelationIndex> correlation_next;  // guarded by stats_mu; poll() moves it into `correlation`
  std::atomic<bool> steps_done{false};
  // Seconds after the timeline was up: the first statistics, all of them, the run summary (--frame-stats).
  std::atomic<double> stats_first_s{-1}, stats_all_s{-1}, steps_s{-1};
  int64_t offset = 0;                   // added to this run's times when drawn (run comparison)
  NameForms names;                      // demangled and shortened names (UI thread only)
  double load_s = 0;
  std::string unmerged;  // a killed traced run: where its events are (header.h, unmergedTraceHeader)
  ~Document();
  bool ready() const { return trace != nullptr; }
  void afterTimeline();  // on the loader thread: statistics, correlation and summary (view_stats.cpp)
};

struct Selection {
  size_t doc = 0;
  EventRef ref;
};

// Where each drawn row went in the last frame (for --layout, flows and scrolling to a selection).
struct RowRect {
  size_t doc;
  uint32_t track, lane;
  float y0, y1;
};

// A box drawn on the timeline in the last frame (recorded for --layout only): where, what, and the
// label as drawn (elided as on screen).
struct BoxRect {
  size_t row;        // index into App::rows
  float x0, x1;
  EventKind kind;
  uint32_t count;    // events in it (more than 1: a folded block)
  double coverage;   // busy time of its events / its width in time (1 for a single event)
  std::string label;
  float wait_x1 = -1;  // a linked collective: where its wait (drawn hatched, from x0) ends; -1: none
};

// A link drawn between ranks in the last frame (for --layout): a selected or hovered collective to
// its copy on another rank, or a pipeline send to its receive.
struct LinkRect {
  size_t doc;
  bool p2p;
  std::string source;  // "selection", "hover" or "send" (every send on screen)
  int64_t from_rank, to_rank;
  int64_t from_start_ns, to_start_ns;  // the two rows' starts, as recorded
  float x0, y0, x1, y1;
  int64_t skew_ns, wait_ns, transfer_ns;  // the call's skew; the `to` copy's wait and transfer
};

// A rank group's header as drawn in the last frame (for --layout).
struct HeaderRect {
  size_t doc;
  int64_t rank;
  float y;
  std::string text;
  bool collapsed = false;
};

enum class Tab { Details, Statistics, Steps, Summary, Compare, Study, Sql, Search };

class App {
 public:
  explicit App(Options o);
  ~App();
  int run();  // the exit status
  void printFrameStats(std::vector<double> frame_ms) const;  // --frame-stats (run)

  // --- state the views share ---
  Options opt;
  std::vector<std::unique_ptr<Document>> docs;
  std::vector<std::unique_ptr<Document>> retired;  // closed while still loading: joined once done
  std::unique_ptr<tuner::StudySnapshot> study;
  std::string fatal;  // a message shown instead of the timeline (bad input)
  TimeView view;
  std::optional<Selection> selection;
  std::optional<std::pair<int64_t, int64_t>> range;  // selected time range (absolute ns)
  std::array<KindTotal, kEventKinds> range_totals{};
  std::vector<RankRangeBreakdown> range_breakdown;  // per rank: compute, comm, wait, bubble … (step_view.h)
  SearchResult found;
  int64_t found_index = -1;
  char search_text[256] = {};
  Tab tab = Tab::Details;
  bool tab_requested = false;
  int stats_group = -1;           // -1: the default table for the run (defaultGroup), once known
  int64_t stats_rank = kAllRanks;  // a rank, kAllRanks or kEachRank
  std::pair<StatSort, bool> stats_sort{StatSort::Total, true};  // the Statistics table's sort as last drawn (column, descending)
  bool stats_in_range = false;     // Statistics limited to the selected range
  std::unique_ptr<Statistics> range_stats;  // computed for range_stats_for of range_stats_trace
  std::pair<int64_t, int64_t> range_stats_for{};
  const Trace* range_stats_trace = nullptr;
  // The histogram's axes as last drawn: the x labels placed (fit.h), the y axis's bottom and top counts,
  // the plot's width.
  struct HistAxesShown {
    std::vector<AxisLabel> x;
    std::string y_lo, y_hi;
    float w = 0;
  };
  // The statistics table as last drawn (recorded for --layout only).
  struct StatsShown {
    bool drawn = false, in_range = false, complete = true;
    std::string group, hint;
    std::vector<StatRow> rows;
    std::vector<std::string> labels;
    std::string hist_name;  // the histogram beside the table
    Histogram hist;
    HistAxesShown hist_axes;
  } stats_shown;
  int64_t align_step = 1;
  bool fitted = false;
  std::vector<RowRect> rows;  // last frame's
  Ruler ruler;                // last frame's
  std::vector<std::pair<float, float>> ruler_label_x;  // last frame's: each tick's label, x0 and x1 as drawn
  std::vector<BoxRect> boxes; // last frame's, when --layout asks for them
  std::vector<LinkRect> links;       // last frame's, when --layout asks for them
  // The critical path's segments as last drawn (view_path.cpp; --layout): rank, kind, where.
  struct PathShown {
    int64_t step, rank;
    std::string kind;
    float x0, x1, y;
    std::string label;  // a straggler's tag as drawn (cut to its step's box); "" for a segment
  };
  std::vector<PathShown> path_drawn;
  bool show_critical_path = true;  // the Steps tab's switch
  std::vector<HeaderRect> headers;   // last frame's, when --layout asks for them
  // A stream's utilisation row as last drawn (--layout): where, and each pixel column's busy fraction.
  struct UtilShown {
    int64_t rank;
    std::string label;
    float x0, y0, y1;
    std::vector<float> columns;
  };
  std::vector<UtilShown> utils;
  // A counter row as last drawn (--layout): its axis (bottom and top values, the data's min and max),
  // colour, the axis labels, its note ("0 throughout") and the value under the cursor ("" when none).
  struct CounterShown {
    int64_t rank;
    std::string label;
    float y0, y1;
    double lo, hi, min, max;
    uint32_t colour;
    std::string lo_text, hi_text, note, hover;
    std::string caption, caption_shown;  // the line under the label (peak / max) and as drawn, cut to the column
    float caption_x1;                    // where the drawn caption ends (≤ the timeline's x0)
  };
  std::vector<CounterShown> counters_shown;
  // The Steps tab's text lines as last drawn (--layout): where each starts, its unwrapped width, and
  // the panel's right edge, so a test sees whether a line (its idle figure last) would be cut off.
  struct StepsLine {
    std::string text;
    float x0, w;
  };
  std::vector<StepsLine> steps_lines;
  float steps_panel_x1 = 0;
  std::vector<std::pair<size_t, const CommCall*>> sends_drawn;  // pipeline sends drawn this frame
  Fields details_shown;              // the Details table as last drawn
  float timeline_x0 = 0, timeline_x1 = 0, timeline_y0 = 0, timeline_y1 = 0;
  float panel_y0 = 0;
  bool panel_hint_only = false;  // the panel shrunk to Details' hint line (view_timeline.cpp)
  std::vector<DrawItem> scratch;
  double frame_ms = 0;
  double first_frame_s = -1, timeline_frame_s = -1;  // launch latency: seconds from the start (--frame-stats)
  std::chrono::steady_clock::time_point launched = std::chrono::steady_clock::now();  // the App's construction
  // The timeline's tracks (tracks.h): what the user collapsed, hid, pinned or moved, the rows laid out
  // from it for the window on screen (kept while neither changes), the split, run B's alignment.
  TrackControl track_control;
  TrackLayout track_layout;
  std::vector<int64_t> track_layout_key;
  float rows_scroll = 0, rows_h = 0;  // the scrolled rows' last scroll and height: the layout's band
  float panel_share = 0.34f;  // the bottom panel's share of the window's height (dragged, or `split`)
  Alignment alignment;        // run B against run A, at align_step (two runs)
  bool alignment_drawn = false;  // its message was on screen in the last frame
  std::optional<std::pair<size_t, TrackKey>> track_menu;  // the row a context menu is open for
  std::vector<std::pair<LayoutRow, float>> tracks_drawn;  // last frame's rows and their screen y (--layout)
  struct TrackLabelShown {  // a track's label in the label column as drawn (--layout): cut with "..." to fit
    size_t doc;
    int64_t rank;
    std::string label, shown;
  };
  std::vector<TrackLabelShown> track_labels_drawn;
  std::vector<std::string> import_headers;  // the imported runs' header lines as last drawn (header.h)
  Habits habits;           // bookmarks, notes, overlays (view_habits.cpp)
  StudyShown study_shown;  // the study view as last drawn (for --layout)

  // --- actions (the UI and --script call these) ---
  void openDocument(const std::string& path);
  // "" when these files open together; else why not: a study opens alone (two files compare runs).
  static std::string mixedFilesError(const std::vector<std::string>& paths);
  void closeDocuments();  // without waiting for a loader still at work
  bool openTrial(int64_t trial_id);  // a study's trial: its run database replaces the open runs
  void fitAll();
  void fitStep(int64_t step);
  void select(size_t doc, const EventRef& r);
  // A finder's selection brought on screen: its rank expanded, its track shown, its row scrolled to.
  void reveal(size_t doc, const EventRef& r);
  void applyScrollTarget();
  struct ScrollTarget {
    size_t doc, track;
    int64_t rank;
    int tries;
  };
  std::optional<ScrollTarget> scroll_to;
  bool selectByName(const std::string& name, int64_t k);
  void runSearch(const std::string& needle);
  void gotoMatch(int dir);
  void setRange(int64_t a, int64_t b);
  void applyCommand(const ScriptCommand& c);
  void realign();
  // view_habits.cpp: bookmarks, notes, overlays, files opened by prompt or drop.
  void openFiles(const std::vector<std::string>& paths);  // replaces what is open
  void loadNotesFor(const std::string& run_path);
  void addBookmark(int64_t at_ns, std::string label);
  bool noteOnSelection(const std::string& text);
  bool applyHabitCommand(const ScriptCommand& c);  // false: not one of its commands
  void drawOverlays();                              // after drawFrame, same ImGui frame
  void habitsLayout(nlohmann::json& j) const;
  const Trace* primary() const;
  const rundb::RunSummary* summary() const;  // the first run's, once computed
  int64_t origin() const;  // the time the ruler counts from (the first run's start)

  // --- views ---
  void drawFrame();
  void drawTimeline();
  void drawDetails();
  void drawRangeDetails();
  void drawStatistics();
  void drawSteps();
  void drawPerStepTable(const rundb::RunSummary& s);
  void drawStepPaths(const rundb::RunSummary& s);
  void drawSummary();
  void drawCompare();
  void drawStudy();
  // view_stats.cpp, view_tables.cpp: statistics, the range's names, the runs' diff, the SQL box, CSV.
  TablesState tables;
  std::vector<std::string> diff_names_shown;  // the per-name diff's rows drawn: names as shown (--layout)
  std::vector<std::tuple<std::string, float, float>> diff_deltas_shown;  // their B - A: text, its width, the room
  Document* statsDocument();                         // the run Statistics is of (the first loaded)
  const Statistics* shownStatistics(bool in_range, bool wait = false);  // nullptr: a range still counting
  void statisticsControls(const Statistics* st, const Trace& t, bool in_range);
  void statisticsTable(const Statistics& st, Document& d, bool in_range);
  void statisticsHistogram(const Statistics& st, Document& d);
  void drawRangeNames();
  const RunDiff* nameDiff();
  void drawNameDiff();
  void drawSql();
  void startSql(const std::string& query, bool wait);
  Table tableFor(const std::string& which);          // stats, range, diff, steps, sql
  bool applyTableCommand(const ScriptCommand& c);    // csv, sql, diff; false: not one of them
  void tablesLayout(nlohmann::json& j) const;
  // view_finders.cpp: go-to for every finder — the search results list (next / prev walk it), SQL rows
  // that name an event, a query shown as a track, diff rows to their slowest instance, what encloses
  // the selection.
  struct FindersState {
    MatchList list;                     // found's matches in the list's order; found_index is a position in it
    bool list_scroll = false;           // scroll the list to found_index's row in the next frame
    std::pair<int64_t, int64_t> list_drawn{0, 0};  // the list's rows drawn in the last frame (--layout)
    std::pair<MatchColumn, bool> table_sort{MatchColumn::Start, false};  // the table's sort specs last seen
    std::unique_ptr<QueryTrack> track;  // a query shown as a track under the ruler (nullptr: none)
    struct Box {
      float x0, x1;
      uint32_t count;
      std::string label;
    };
    std::vector<Box> track_boxes;       // the query track's boxes as last drawn (--layout)
    float track_y0 = 0, track_y1 = 0;
    std::string status;                 // the last jump's outcome, or why it could not jump
    Enclosing enclosing;                // the selection's, as Details last drew it (--layout)
    bool enclosing_drawn = false;
    std::pair<MatchColumn, bool> header_sort{MatchColumn::Start, false};  // where the header's arrow was drawn (--layout)
    std::optional<size_t> sql_jump;     // a SQL row clicked, acted on in the next frame (outside the result's lock)
    bool sql_track = false;             // "show as a track" clicked, likewise
  } finders;
  void drawSearchList();
  void gotoListed(int64_t pos);                     // the list's row `pos`: select, scroll to its row, pan
  void bringIntoView(size_t doc, const EventRef& r);  // select, reveal, and pan or zoom to it
  bool jumpToSqlRow(size_t row);
  bool jumpToDiffRow(size_t row);
  void showQueryTrack();                            // the last query's rows as a track
  float drawQueryTrack(ImDrawList* dl, const TimelineContext& cx, float y);  // returns the y below it
  void drawEnclosing(size_t doc, size_t chars);     // Details' "enclosing" column
  // A table row made clickable (before its first cell); `table`: its name for a script's click.
  bool rowButton(const char* table, int id, bool selected);
  bool applyFinderCommand(const ScriptCommand& c);  // matches, match, sqlrow, sqltrack, diffrow, tab search
  void findersLayout(nlohmann::json& j) const;
  // view_clicks.cpp: a script's `click TABLE ROW` or `click TABLE header COLUMN` (search, sql, diff): a
  // real click — the mouse moved over where that row or header was last drawn, pressed and released
  // over the next frames through ImGui's IO — so the table's own click handling is what is tested.
  struct ClickState {
    std::string target;  // "search 3", "search header name"; "" when no click is under way
    int line = 0, stage = 0, waited = 0;
    float x = 0, y = 0;
    struct Made {
      std::string target;
      float x, y;
    };
    std::vector<Made> made;  // --layout
  } clicks;
  bool applyClickCommand(const ScriptCommand& c);  // click; false: not it
  void injectClick();  // each frame, after the backend's new frame and before ImGui's (app.cpp)
  bool clicking() const { return !clicks.target.empty(); }
  void clicksLayout(nlohmann::json& j) const;
  // view_comm.cpp: ranks related.
  float drawCollectiveWait(ImDrawList* dl, size_t doc, const EventRef& r, float x0, float x1, float y0, float y1);
  // band_top: the pinned band's top (links to pinned rows are drawn over it); 0: no band.
  void drawCommLinks(ImDrawList* dl, const std::optional<Selection>& hovered, float band_top = 0);
  void drawCriticalPath(ImDrawList* dl);  // view_path.cpp: each step's critical path over the steps rows
  // The timeline's parts (view_timeline.cpp, view_ruler.cpp, view_tracks.cpp, view_overlays.cpp,
  // view_input.cpp); an event under the mouse is a Hover, found by the model's hit test.
  using Hover = std::optional<std::pair<Selection, DrawItem>>;
  void drawRuler(ImDrawList* dl, const TimelineContext& cx);
  void updateTrackLayout(const TimelineContext& cx);
  void drawRows(ImDrawList* dl, const TimelineContext& cx, bool pinned);
  void drawLane(ImDrawList* dl, const TimelineContext& cx, size_t doc, uint32_t track, uint32_t lane, float y);
  void drawCounter(ImDrawList* dl, const TimelineContext& cx, const LayoutRow& r, float y);
  void drawUtilisation(ImDrawList* dl, const TimelineContext& cx, const LayoutRow& r, float y);
  void drawCompactRow(ImDrawList* dl, const TimelineContext& cx, const LayoutRow& r, float y);
  // Compact rows as last drawn (--layout): the rank, where, and its mean busy share over the window.
  struct CompactShown {
    size_t doc;
    int64_t rank;
    float y0, y1;
    double busy, wait;  // mean shares over the window: busy (compute or comm), waiting for a peer
    double drawn_compute, drawn_wait;  // mean shares of the row's height drawn as compute and as waiting
    double drawn_pipeline_wait;        // of drawn_wait, the share drawn as waiting at pipeline sends/receives
  };
  // The compact row's parts bottom up, each with its colour (the legend; --layout's compact_legend).
  struct CompactPart {
    const char* name;
    uint32_t colour;  // ImU32
  };
  static const std::array<CompactPart, 4>& compactParts();
  std::vector<CompactShown> compact_drawn;
  // Flow arrows and links (the flows switch): every send's arrow and the selected or hovered event's
  // links (all), the selected event's only (selected), or none.
  enum class FlowMode { All, Selected, None };
  FlowMode flow_mode = FlowMode::All;
  void drawTimelineOverlays(ImDrawList* dl, const TimelineContext& cx, const Hover& hover);
  Hover hitTest(const TimelineContext& cx, bool pinned);
  void timelineInput(const TimelineContext& cx, const Hover& hover);
  bool applyTrackCommand(const ScriptCommand& c);  // collapse, hide, pin, move, empty, split; false: not one
  void applyTrackPattern(const ScriptCommand& c);  // collapse / hide / pin … over patterns of ranks and labels
  void writeTimelineLayout(nlohmann::json& j) const;  // --layout: tracks, collapsed headers, alignment

 private:
  void poll();
  void writeLayout(const std::string& path) const;
  // The rule of an output named by `field` (files::OutputRule): never the files opened nor --script,
  // an existing file with --overwrite or when it is an earlier output of the same kind.
  files::OutputRule outputRule(const std::string& field) const;
  files::OutputRule layoutRule() const;  // outputRule, and an earlier layout: our "_format" first
};

}  // namespace trainscope::viewer
