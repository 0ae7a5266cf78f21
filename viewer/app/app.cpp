// app.cpp — the frame loop, loading, actions, the headless mode (--screenshot, --script, --layout).
#include "app.h"

#include <imgui.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/viewer/header.h"
#include "trainscope/viewer/image.h"
#include "window.h"

namespace trainscope::viewer {

Document::~Document() {
  progress.cancel.store(true);
  if (loader.joinable()) loader.join();
}

App::App(Options o) : opt(std::move(o)) {}
App::~App() = default;

void App::openDocument(const std::string& path) {
  // Before anything opens it: a FIFO (or a device) at the path, given or recorded in a study as a
  // trial's run database, would block the open forever.
  try {
    files::requireRegularFile(path, "file", "pass a run database or a study");
  } catch (const UserError& e) {
    fatal = e.what();
    return;
  }
  if (tuner::isStudy(path)) {
    try {
      study = std::make_unique<tuner::StudySnapshot>(tuner::readStudy(path));
      tab = Tab::Study;
      tab_requested = true;
    } catch (const std::exception& e) {
      fatal = e.what();
    }
    return;
  }
  auto d = std::make_unique<Document>();
  d->path = path;
  Document* raw = d.get();
  d->loader = std::thread([raw] {
    try {
      auto t = std::make_unique<Trace>(loadTrace(raw->path, &raw->progress, 0, /*summary=*/false));
      raw->unmerged = unmergedTraceHeader(raw->path, *t);  // before the trace is published
      if (t->event_count == 0 && t->steps.empty())
        throw UserError("database",
                        raw->path + " holds no events and no steps (an empty trace)" +
                            (raw->unmerged.empty() ? "" : ": " + raw->unmerged),
                        "trace a run with `trainscope run --trace`, or import a profiler trace");
      raw->load_s = t->load_seconds;
      raw->trace = std::move(t);  // published by `done`
      raw->done.store(true);
      // Then, with the timeline already up: the statistics, published piece by piece, and the run
      // summary beside them (view_stats.cpp). Both stop when the document is closed (progress.cancel),
      // so closing never waits for them.
      raw->afterTimeline();
      raw->summary_done.store(true);
      return;
    } catch (const Cancelled&) {
      raw->error = "cancelled";
    } catch (const std::exception& e) {
      raw->error = e.what();
    }
    raw->done.store(true);
    raw->summary_done.store(true);
  });
  docs.push_back(std::move(d));
  if (docs.size() == 1) loadNotesFor(path);  // bookmarks and notes kept beside the run
}

std::string App::mixedFilesError(const std::vector<std::string>& paths) {
  if (paths.size() < 2) return {};
  for (const std::string& p : paths) {
    std::error_code ec;  // only a regular file is looked into (a FIFO would block); openDocument says the rest
    if (!std::filesystem::is_regular_file(p, ec) || !tuner::isStudy(p)) continue;
    return UserError("files", p + " is a tuner study, which opens alone (its trials' traces open from its Study tab)",
                     "pass the study alone, or two run databases to compare")
        .what();
  }
  return {};
}

const rundb::RunSummary* App::summary() const {
  for (const auto& d : docs)
    if (d->ready()) return d->steps_done.load() ? d->summary.get() : nullptr;
  return nullptr;
}

void App::closeDocuments() {
  tables.stopJobs();    // they read the traces that go
  range_stats.reset();  // of a trace that goes
  range_stats_trace = nullptr;
  stats_group = -1;     // the next run picks its own default table
  tables.diff.reset();  // of the traces that go (view_tables.h)
  tables.hist_for = {};
  tables.picked.reset();
  for (auto& d : docs) {
    d->progress.cancel.store(true);
    retired.push_back(std::move(d));
  }
  docs.clear();
}

bool App::openTrial(int64_t trial_id) {
  if (!study) return false;
  for (const auto& t : study->trials) {
    if (t.id != trial_id || t.db_path.empty()) continue;
    closeDocuments();
    selection.reset();
    range.reset();
    found = {};
    fitted = false;
    fatal.clear();
    openDocument(t.db_path);
    return true;
  }
  return false;
}

const Trace* App::primary() const {
  for (const auto& d : docs)
    if (d->ready()) return d->trace.get();
  return nullptr;
}

int64_t App::origin() const {
  const Trace* t = primary();
  return t ? t->begin : 0;
}

void App::fitAll() {
  const Trace* t = primary();
  if (!t) return;
  int64_t b = t->begin, e = t->end;
  for (const auto& d : docs)
    if (d->ready()) {
      b = std::min(b, d->trace->begin + d->offset);
      e = std::max(e, d->trace->end + d->offset);
    }
  view.fit(b, e);
}

void App::fitStep(int64_t step) {
  const Trace* t = primary();
  if (!t) return;
  align_step = step;  // every step move re-aligns run B at the new step (tracks.h, alignAtStep)
  realign();
  if (auto w = t->stepWindow(step)) view.fit(w->first, w->second);
}

void App::select(size_t doc, const EventRef& r) {
  selection = Selection{doc, r};
  if (!tab_requested) tab = Tab::Details;
  tab_requested = true;
}

void App::reveal(size_t doc, const EventRef& r) {
  const Track& t = docs[doc]->trace->tracks[r.track];
  if (track_control.isCollapsed(t.rank)) track_control.setCollapsed(t.rank, false);
  if (const TrackKey k{t.rank, t.label}; track_control.hidden.count(k)) track_control.setHidden(k, false);
  scroll_to = ScrollTarget{doc, r.track, t.rank, 0};
}

bool App::selectByName(const std::string& name, int64_t k) {
  for (size_t di = 0; di < docs.size(); ++di) {
    if (!docs[di]->ready()) continue;
    const Trace& t = *docs[di]->trace;
    SearchResult r = search(t, name);
    int64_t seen = 0;
    for (const auto& m : r.matches)
      if (t.name(m) == name && seen++ == k) {
        select(di, m);
        reveal(di, m);
        const Event& e = t.event(m);
        // Out of view, or too narrow to see: bring it in at a fifth of the width.
        if (e.start < view.begin() || e.end > view.end() || double(e.duration()) < 10 * view.nsPerPx())
          view.fit(e.start, e.end, 2.0);
        return true;
      }
  }
  return false;
}

// The matches listed in the Search tab (in its sort), the first one after the view's middle picked;
// the tab shown stays (the search box and the script's `search` show the list, a Statistics row does not).
void App::runSearch(const std::string& needle) {
  const Trace* t = primary();
  if (!t) return;
  std::snprintf(search_text, sizeof search_text, "%s", needle.c_str());
  found = search(*t, needle);
  finders.list = sortMatches(*t, found, finders.list.by, finders.list.descending);
  found_index = -1;
  if (!found.matches.empty()) gotoMatch(+1);
}

// Next / previous walk the results list in its order; the first step in start order goes to the
// match after (before) the view's middle.
void App::gotoMatch(int dir) {
  const Trace* t = primary();
  if (!t || found.matches.empty()) return;
  if (finders.list.order.size() != found.matches.size()) finders.list = sortMatches(*t, found, MatchColumn::Start, false);
  const bool by_time = finders.list.by == MatchColumn::Start && !finders.list.descending;
  const int64_t center = view.origin + int64_t((view.t0 + view.t1) / 2);
  gotoListed(found_index < 0 && by_time ? nextMatch(*t, found, center, dir) : stepInList(finders.list, found_index, dir));
}

void App::setRange(int64_t a, int64_t b) {
  if (b < a) std::swap(a, b);
  range = std::make_pair(a, b);
  range_totals = {};
  range_breakdown.clear();
  for (const auto& d : docs)
    if (d->ready() && d.get() == docs.front().get()) {
      range_totals = rangeTotals(*d->trace, a, b);
      range_breakdown = rangeBreakdown(*d->trace, a, b);
    }
}

void App::realign() {
  if (docs.size() < 2 || !docs[0]->ready() || !docs[1]->ready()) return;
  alignment = alignAtStep(*docs[0]->trace, *docs[1]->trace, align_step);  // !ok: a message on screen says why
  docs[1]->offset = alignment.offset;
}

void App::applyCommand(const ScriptCommand& c) {
  auto num = [](const std::string& s) { return std::stod(s); };
  if (applyHabitCommand(c)) return;  // bookmark, note, drop, overlay (view_habits.cpp)
  if (applyTableCommand(c)) return;  // csv, sql, diff (view_tables.cpp)
  if (applyTrackCommand(c)) return;  // collapse, hide, pin, move, empty, split (view_input.cpp)
  if (applyFinderCommand(c)) return;  // matches, match, sqlrow, sqltrack, diffrow, tab search (view_finders.cpp)
  if (c.op == "view") {
    view.t0 = parseTime(c.args[0], "--script");
    view.t1 = parseTime(c.args[1], "--script");
  } else if (c.op == "zoom") {
    const double at = c.args.size() > 1 ? num(c.args[1]) : 0.5;
    view.zoom(num(c.args[0]), view.x0 + float(at) * view.width);
  } else if (c.op == "pan") {
    view.pan(-float(num(c.args[0])) * view.width);
  } else if (c.op == "step") {
    fitStep(int64_t(num(c.args[0])));
  } else if (c.op == "select") {
    if (!selectByName(c.args[0], c.args.size() > 1 ? int64_t(num(c.args[1])) : 0))
      std::cerr << "trainscope-viewer: --script line " << c.line << ": no event named \"" << c.args[0] << "\"\n";
  } else if (c.op == "search") {
    runSearch(c.args[0]);
    tab = Tab::Search, tab_requested = true;  // the results list (view_finders.cpp)
  } else if (c.op == "next" || c.op == "prev") {
    gotoMatch(c.op == "next" ? 1 : -1);
  } else if (c.op == "range") {
    setRange(origin() + int64_t(parseTime(c.args[0], "--script")), origin() + int64_t(parseTime(c.args[1], "--script")));
  } else if (c.op == "clear") {
    selection.reset();
    range.reset();
  } else if (c.op == "open") {
    if (!openTrial(int64_t(num(c.args[0]))))
      std::cerr << "trainscope-viewer: --script line " << c.line << ": no trial " << c.args[0] << " with a run database\n";
  } else if (c.op == "stats") {
    if (c.args[0] == "range" || c.args[0] == "all") stats_in_range = c.args[0] == "range";
    for (int g = 0; g < kStatGroups; ++g)
      if (c.args[0] == groupName(StatGroup(g))) stats_group = g;
  } else if (c.op == "tab") {
    static const std::pair<const char*, Tab> tabs[] = {{"details", Tab::Details}, {"stats", Tab::Statistics},
                                                       {"steps", Tab::Steps},     {"summary", Tab::Summary},
                                                       {"compare", Tab::Compare}, {"study", Tab::Study},
                                                       {"sql", Tab::Sql}};
    for (auto& [n, t] : tabs)
      if (c.args[0] == n) tab = t, tab_requested = true;
  }
}

void App::poll() {
  retired.erase(std::remove_if(retired.begin(), retired.end(), [](const auto& d) { return d->summary_done.load(); }),
                retired.end());  // their loaders have finished: the destructor's join is immediate
  for (auto& d : docs) {
    if (d->summary_done.load() && d->loader.joinable()) d->loader.join();
    if (std::lock_guard<std::mutex> lock(d->stats_mu); d->stats_next || d->correlation_next) {
      if (d->stats_next) d->stats = std::move(d->stats_next);
      if (d->correlation_next) d->correlation = std::move(d->correlation_next);
    }
    if (d->ready() && !d->reader) {
      try {
        d->reader = std::make_unique<rundb::RunReader>(d->path);
      } catch (const std::exception& e) {
        d->error = e.what();
      }
      realign();
      if (!fitted) {
        view.origin = origin();
        fitAll();
        if (opt.view) {
          view.t0 = opt.view->first;
          view.t1 = opt.view->second;
        }
        fitted = true;
      }
    }
    if (!d->error.empty() && fatal.empty()) fatal = d->error;
  }
}

// The first key of every layout (keys are written sorted; "_" sorts before the lowercase ones): what
// makes an existing file an earlier layout, replaced without --overwrite.
constexpr const char* kLayoutFormat = "trainscope-viewer layout";

files::OutputRule App::outputRule(const std::string& field) const {
  files::OutputRule rule;
  rule.field = field;
  rule.inputs = opt.files;
  if (!opt.script.empty()) rule.inputs.push_back(opt.script);
  rule.overwrite = opt.overwrite;
  return rule;
}

files::OutputRule App::layoutRule() const {
  files::OutputRule rule = outputRule("--layout");
  rule.earlier = files::startsWith("{\n \"_format\": \"" + std::string(kLayoutFormat) + "\"");
  rule.kind = "trainscope-viewer layout";
  return rule;
}

void App::writeLayout(const std::string& path) const {
  nlohmann::json j;
  j["_format"] = kLayoutFormat;
  j["timeline"] = {{"x0", timeline_x0}, {"x1", timeline_x1}, {"y0", timeline_y0}, {"y1", timeline_y1}};
  j["view"] = {{"t0", view.t0}, {"t1", view.t1}, {"origin", view.origin}};
  j["panel_y0"] = panel_y0;
  j["panel_hint_only"] = panel_hint_only;
  j["import_headers"] = import_headers;
  j["selection"] = bool(selection);
  j["rows"] = nlohmann::json::array();
  for (const auto& r : rows) {
    const Track& t = docs[r.doc]->trace->tracks[r.track];
    j["rows"].push_back({{"doc", r.doc}, {"track", r.track}, {"lane", r.lane}, {"rank", t.rank},
                         {"label", t.label}, {"y0", r.y0}, {"y1", r.y1}});
  }
  // The ruler and the boxes as drawn, so that tests read the screen without OCR.
  nlohmann::json ticks = nlohmann::json::array();
  for (size_t i = 0; i < ruler.ticks.size(); ++i) {
    const Tick& tk = ruler.ticks[i];
    ticks.push_back({{"x", view.x0 + (tk.t - view.t0) / view.nsPerPx()}, {"ns", tk.ns}, {"major", tk.major},
                     {"label", tk.label}});
    if (tk.major && i < ruler_label_x.size())
      ticks.back()["label_x0"] = ruler_label_x[i].first, ticks.back()["label_x1"] = ruler_label_x[i].second;
  }
  j["ruler"] = {{"step", ruler.step}, {"relative", ruler.relative}, {"base", ruler.base},
                {"base_label", ruler.base_label}, {"ticks", ticks}};
  j["boxes"] = nlohmann::json::array();
  for (const auto& b : boxes) {
    j["boxes"].push_back({{"row", b.row}, {"x0", b.x0}, {"x1", b.x1}, {"kind", b.count > 1 ? "folded" : kindName(b.kind)},
                          {"count", b.count}, {"coverage", b.coverage}, {"label", b.label}});
    if (b.wait_x1 >= 0) j["boxes"].back()["wait_x1"] = b.wait_x1;
  }
  j["counters"] = nlohmann::json::array();
  for (const auto& c : counters_shown)
    j["counters"].push_back({{"rank", c.rank}, {"label", c.label}, {"y0", c.y0}, {"y1", c.y1}, {"lo", c.lo}, {"hi", c.hi},
                             {"min", c.min}, {"max", c.max}, {"colour", c.colour}, {"lo_text", c.lo_text},
                             {"hi_text", c.hi_text}, {"note", c.note}, {"hover", c.hover}, {"caption", c.caption},
                             {"caption_shown", c.caption_shown}, {"caption_x1", c.caption_x1}});
  // Each stream's utilisation row as drawn: its busy fraction per pixel column, and their mean.
  j["utilisation"] = nlohmann::json::array();
  for (const auto& u : utils) {
    double sum = 0;
    for (float f : u.columns) sum += f;
    j["utilisation"].push_back({{"rank", u.rank}, {"label", u.label}, {"x0", u.x0}, {"y0", u.y0}, {"y1", u.y1},
                                {"mean", u.columns.empty() ? 0.0 : sum / double(u.columns.size())},
                                {"columns", u.columns}});
  }
  // The Steps tab's text lines as last drawn, with the panel's right edge.
  j["steps_text"] = {{"panel_x1", steps_panel_x1}, {"lines", nlohmann::json::array()}};
  for (const auto& l : steps_lines) j["steps_text"]["lines"].push_back({{"text", l.text}, {"x0", l.x0}, {"w", l.w}});
  // How the ranks relate, as drawn: the rank headers (with their layout coordinates) and the links.
  j["headers"] = nlohmann::json::array();
  for (const auto& h : headers) j["headers"].push_back({{"doc", h.doc}, {"rank", h.rank}, {"y", h.y}, {"text", h.text}});
  j["links"] = nlohmann::json::array();
  for (const auto& l : links)
    j["links"].push_back({{"doc", l.doc}, {"kind", l.p2p ? "p2p" : "collective"}, {"source", l.source},
                          {"from_rank", l.from_rank}, {"to_rank", l.to_rank}, {"from_start_ns", l.from_start_ns},
                          {"to_start_ns", l.to_start_ns}, {"x0", l.x0}, {"y0", l.y0}, {"x1", l.x1}, {"y1", l.y1},
                          {"skew_ns", l.skew_ns}, {"wait_ns", l.wait_ns}, {"transfer_ns", l.transfer_ns}});
  j["critical_path"] = nlohmann::json::array();  // the segments drawn this frame
  for (const auto& g : path_drawn)
    j["critical_path"].push_back(
        {{"step", g.step}, {"rank", g.rank}, {"kind", g.kind}, {"x0", g.x0}, {"x1", g.x1}, {"y", g.y}, {"label", g.label}});
  j["range_breakdown"] = nlohmann::json::array();  // the selected range's per-rank breakdown, as Details shows it
  for (const auto& r : range_breakdown)
    j["range_breakdown"].push_back({{"rank", r.rank}, {"compute_s", r.b.compute_s}, {"exposed_comm_s", r.b.exposedCommS()},
                                    {"wait_s", r.b.wait_s}, {"bubble_s", r.b.bubble_s}, {"overlap_s", r.b.overlap_s},
                                    {"memory_s", r.b.memory_s}, {"idle_s", r.b.idle_s}});
  j["details"] = nlohmann::json::object();
  for (const auto& [k, v] : details_shown) j["details"][k] = v;
  // The statistics table as last drawn: its rows in order, names as shown.
  nlohmann::json stats_rows = nlohmann::json::array();
  for (size_t i = 0; i < stats_shown.rows.size(); ++i) {
    const StatRow& r = stats_shown.rows[i];
    const Trace* t = primary();
    stats_rows.push_back({{"label", stats_shown.labels[i]}, {"name", t && r.name < t->names.size() ? t->names[r.name] : ""},
                          {"rank", r.rank}, {"count", r.count}, {"total_ns", r.total_ns}, {"self_ns", r.self_ns},
                          {"min_ns", r.min_ns}, {"median_ns", r.median_ns}, {"p99_ns", r.p99_ns}, {"max_ns", r.max_ns}});
  }
  j["stats"] = {{"drawn", stats_shown.drawn}, {"group", stats_shown.group}, {"in_range", stats_shown.in_range},
                {"hint", stats_shown.hint}, {"rows", stats_rows}};
  if (const Trace* t = primary()) {
    j["events"] = t->event_count;
    j["bytes"] = t->bytes();
  }
  habitsLayout(j);  // scale, bookmarks, notes, the study view
  tablesLayout(j);  // the diff, the SQL box's rows, the histogram
  findersLayout(j);  // the search list, the selection, the query track, enclosing, Details in order
  clicksLayout(j);   // the clicks a script made
  writeTimelineLayout(j);  // tracks drawn, collapsed ranks, the split, run B's alignment
  files::writeAtomically(path, jsonText(j, 1) + "\n", layoutRule());
}

// --frame-stats: the loaded trace's frame times, the launch latency, and how soon the tabs filled.
void App::printFrameStats(std::vector<double> v) const {
  std::sort(v.begin(), v.end());
  const Trace* t = primary();
  std::printf("frames %zu | frame CPU ms: median %.2f, p99 %.2f, max %.2f | load %.2f s | %lld events, %.1f MiB, %.1f B/event\n",
              v.size(), v[v.size() / 2], v[std::min(v.size() - 1, v.size() * 99 / 100)], v.back(),
              docs.empty() ? 0.0 : docs[0]->load_s, (long long)(t ? t->event_count : 0),
              t ? double(t->bytes()) / 1048576.0 : 0.0,
              t && t->event_count ? double(t->bytes()) / double(t->event_count) : 0.0);
  std::printf("launch: first frame %.2f s after the start, first frame with the timeline %.2f s\n", first_frame_s,
              timeline_frame_s);
  if (!docs.empty())  // how soon the tabs filled (view_stats.cpp, afterTimeline)
    std::printf("after the timeline: statistics first shown %.2f s, complete %.2f s; steps %.2f s\n",
                docs[0]->stats_first_s.load(), docs[0]->stats_all_s.load(), docs[0]->steps_s.load());
}

int App::run() {
  const bool headless = !opt.screenshot.empty();
  // The outputs checked before anything is loaded: a refusal comes at once, not after the frames.
  const files::OutputRule shot_rule = screenshotRule(outputRule("--screenshot").inputs, opt.overwrite);
  if (headless) files::checkOutput(opt.screenshot, shot_rule);
  if (!opt.layout.empty()) {
    if (headless && files::sameEntry(opt.layout, opt.screenshot))
      throw UserError("--layout", opt.layout + " is also --screenshot's file", "name another file for the layout");
    files::checkOutput(opt.layout, layoutRule());
  }
  std::vector<ScriptCommand> script;
  if (!opt.script.empty()) {
    const std::string text = files::readTextFile(opt.script, "--script", "name a script file (see docs/viewer.md)");
    // csv, sql, diff (view_tables.cpp); then view_state.h's commands and the app's (notes.h)
    script = parseTableScript(text, opt.script, [](const std::string& t, const std::string& f) {
      return parseFinderScript(t, f, parseAppScript);  // matches, match, sqlrow, sqltrack, diffrow (finders.h)
    });
  }
  Window window("trainscope-viewer", opt.width, opt.height, !headless, opt.scale);
  if (fatal = mixedFilesError(opt.files); fatal.empty())
    for (const auto& f : opt.files) openDocument(f);

  std::vector<double> frame_ms;
  size_t next_command = 0;
  int hold = 0;
  int settle = opt.frames;
  const auto started = std::chrono::steady_clock::now();
  while (!window.shouldClose()) {
    // Loading: the files, their passes after the timeline, and the tables' threads (a range's
    // statistics, a histogram, a query) — a headless script waits for them all.
    const bool loading = std::any_of(docs.begin(), docs.end(), [](const auto& d) { return !d->summary_done.load(); }) ||
                         tables.busy();
    // Idle: wait for input. Loading: about ten frames a second for the progress bar, leaving the
    // cores to the loader (a frame under a software OpenGL costs a core for milliseconds).
    window.poll(loading ? 0.1 : headless ? 0 : 0.25);
    if (!headless && window.minimized()) continue;
    poll();
    if (auto dropped = window.takeDropped(); !dropped.empty()) openFiles(dropped);  // files dropped on the window
    if (headless && loading) {
      if (std::chrono::steady_clock::now() - started > std::chrono::minutes(10)) {
        fatal = "loading took longer than 10 minutes";
      } else {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // leave the cores to the loader
      }
    }
    // Headless waits for the summaries too, so that a script sees every tab filled. `loading` was
    // read before poll(): a document that finished in between is fitted by poll() in the next frame,
    // which would undo a script command applied in this one.
    const bool all_loaded = !loading;
    if (headless && all_loaded && fatal.empty() && next_command < script.size()) {
      if (hold > 0) {
        --hold;  // `frames N`: N frames as they are
      } else if (clicking()) {
        // a `click` under way: its frames (view_clicks.cpp) before the next command
      } else {
        const ScriptCommand& c = script[next_command++];
        if (c.op == "frames") hold = std::max(0, std::stoi(c.args[0]) - 1);
        else applyCommand(c);
      }
    }

    const auto f0 = std::chrono::steady_clock::now();
    window.newFrame();
    injectClick();  // a script's click: the mouse where the backend left it otherwise
    ImGui::NewFrame();
    drawFrame();
    drawOverlays();
    ImGui::Render();
    this->frame_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - f0).count();
    // Launch latency (--frame-stats): from the start to the first frame, and to the first frame with a timeline.
    const double since_start = std::chrono::duration<double>(std::chrono::steady_clock::now() - launched).count();
    if (first_frame_s < 0) first_frame_s = since_start;
    if (timeline_frame_s < 0 && primary()) timeline_frame_s = since_start;
    if (all_loaded && fatal.empty()) frame_ms.push_back(this->frame_ms);  // frames of the loaded trace
    window.render();

    // A message instead of the timeline ends a headless run however much of the script is left
    // (its commands wait for a loaded file, which will not come).
    if (headless && (!fatal.empty() || (all_loaded && next_command >= script.size() && !clicking())) && --settle <= 0) {
      writePng(opt.screenshot, window.readPixels(), shot_rule);
      if (!opt.layout.empty()) writeLayout(opt.layout);
      break;
    }
    window.swap();
  }
  if (opt.frame_stats && !frame_ms.empty()) printFrameStats(frame_ms);
  if (!fatal.empty()) {
    std::cerr << "trainscope-viewer: " << fatal << "\n";
    return 2;
  }
  return 0;
}

}  // namespace trainscope::viewer
