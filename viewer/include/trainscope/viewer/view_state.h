// trainscope/viewer/view_state.h — the visible time window and the arithmetic of zooming, panning
// and the ruler; and the --script commands that drive a view headlessly. No drawing here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "trainscope/viewer/ruler.h"  // the ruler's ticks and exact time labels

namespace trainscope::viewer {

// Times on screen are doubles relative to `origin` (the trace's start): epoch-scale nanoseconds do
// not fit a double's 53 bits (at 1.7e18 ns a double steps by 256 ns), differences from the start do.
struct TimeView {
  int64_t origin = 0;          // absolute ns that relative time 0 stands for
  double t0 = 0, t1 = 1e6;     // visible window, ns relative to origin
  float x0 = 0, width = 1000;  // where the timeline is on screen, px

  double nsPerPx() const { return (t1 - t0) / double(width > 1 ? width : 1); }
  double rel(int64_t t) const { return double(t - origin); }
  float x(int64_t t) const { return x0 + float((rel(t) - t0) / nsPerPx()); }
  double relAt(float px) const { return t0 + double(px - x0) * nsPerPx(); }
  int64_t timeAt(float px) const { return origin + int64_t(relAt(px)); }
  int64_t begin() const { return origin + int64_t(t0); }
  int64_t end() const { return origin + int64_t(t1) + 1; }
  // Zoom by `factor` (> 1 zooms in) keeping the time under screen x `at` still.
  void zoom(double factor, float at);
  void pan(float dx_px);  // positive: the content moves right (earlier times come into view)
  void fit(int64_t begin, int64_t end, double margin = 0.02);
  // Keeps the window inside [begin - slack, end + slack] (absolute) and at least 100 ns wide.
  void clamp(int64_t begin, int64_t end);
};

// Three or four significant digits, for tables and spans: "1.25 ms", "830 ns", "2.1 s". Times a user
// reads against each other (ruler, tooltips, Details) are printed exactly: formatExact (ruler.h).
std::string formatDuration(double ns);
std::string formatBytes(double bytes);  // "1.5 GiB"
// "250us", "1.5ms", "2s", "1000" (ns) → ns. Throws UserError(field) for anything else.
double parseTime(const std::string& text, const std::string& field);

// A headless script: one command per line, '#' comments. Times are relative to the trace's start.
//   view START END     zoom N [AT]   (AT: fraction of the width, default 0.5)   pan FRACTION
//   step N             (fit step N)  select NAME [K]  (the K-th event named NAME, K from 0)
//   search TEXT        next          prev             range START END   (a selected time range)
//   tab stats|steps|summary|compare|study             frames N  (render N frames as they are)
//   stats range|all|TABLE  (Statistics of the selected range or the whole run; TABLE: kernels, ops, …)
//   open TRIAL         (a study's trial: its run database replaces the open runs)
// Track control (tracks.h; a track is named by its rank and its label, quoted when it has spaces):
//   collapse RANK      expand RANK       hide RANK LABEL   show RANK [LABEL]  (no LABEL: all of the rank)
//   pin RANK LABEL     unpin RANK LABEL  move RANK LABEL DELTA  (places among the rank's tracks)
//   RANK may be a pattern over ranks and LABEL over labels ('*' any run, '?' one character; quote it):
//   hide "*" "stream *" hides every stream of every rank, collapse "1?" ranks 10-19, pin "*" collectives.
//   empty hide|show    (tracks with no events in the window take no rows, or one)
//   compact on|off     (every rank one thin row: how busy its compute and its collectives keep it)
//   flows all|selected|none  (send arrows and collective links: all, the selected event's, none)
//   split FRACTION     (the bottom panel's share of the window's height, 0.1-0.9)
//   [  ]               (the previous / next step from the one in the middle of the view, as the keys:
//                       the view fits it and run B is re-aligned at it)
struct ScriptCommand {
  std::string op;
  std::vector<std::string> args;
  int line = 0;
};
// Throws UserError naming the file and line for an unknown command or bad arguments.
std::vector<ScriptCommand> parseScript(const std::string& text, const std::string& file);

// One part of a script's parser: the lines whose command `ours` takes are parsed here (words, quoted
// arguments) and handed to `check` with their "FILE:LINE" (it throws UserError for bad arguments);
// the other lines go to `rest`, ours blanked so that line numbers hold; the result in line order.
using ScriptParser = std::function<std::vector<ScriptCommand>(const std::string& text, const std::string& file)>;
std::vector<ScriptCommand> parseScriptPart(const std::string& text, const std::string& file,
                                           const std::function<bool(const std::string& op)>& ours,
                                           const std::function<void(const ScriptCommand&, const std::string& where)>& check,
                                           const ScriptParser& rest);

}  // namespace trainscope::viewer
