// view_state.cpp — see view_state.h.
#include "trainscope/viewer/view_state.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <sstream>

#include "trainscope/common/error.h"

namespace trainscope::viewer {

void TimeView::zoom(double factor, float at) {
  if (!(factor > 0) || !std::isfinite(factor)) return;
  const double pivot = relAt(at);
  t0 = pivot - (pivot - t0) / factor;
  t1 = pivot + (t1 - pivot) / factor;
}

void TimeView::pan(float dx_px) {
  const double dt = double(dx_px) * nsPerPx();
  t0 -= dt;
  t1 -= dt;
}

void TimeView::fit(int64_t begin_abs, int64_t end_abs, double margin) {
  const double begin = rel(begin_abs), span = std::max(double(end_abs - begin_abs), 100.0);
  t0 = begin - span * margin;
  t1 = begin + span * (1 + margin);
}

void TimeView::clamp(int64_t begin_abs, int64_t end_abs) {
  const double begin = rel(begin_abs), end = rel(end_abs);
  const double span = std::max(end - begin, 100.0);
  double w = std::clamp(t1 - t0, 100.0, span * 1.5);
  const double c = std::clamp((t0 + t1) / 2, begin - span * 0.25, end + span * 0.25);
  t0 = c - w / 2;
  t1 = c + w / 2;
}

std::string formatDuration(double ns) {
  const double a = std::fabs(ns);
  char buf[64];
  if (a < 1e3) std::snprintf(buf, sizeof buf, "%.0f ns", ns);
  else if (a < 1e6) std::snprintf(buf, sizeof buf, "%.3g us", ns / 1e3);
  else if (a < 1e9) std::snprintf(buf, sizeof buf, "%.3g ms", ns / 1e6);
  else std::snprintf(buf, sizeof buf, "%.4g s", ns / 1e9);
  return buf;
}

std::string formatBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) b /= 1024, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.3g %s", b, units[u]);
  return buf;
}

double parseTime(const std::string& text, const std::string& field) {
  static const std::map<std::string, double> units = {{"", 1}, {"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  auto u = used ? units.find(text.substr(used)) : units.end();
  if (!used || u == units.end() || !std::isfinite(v))
    throw UserError(field, "\"" + text + "\" is not a time", "write a number with a unit: 250us, 1.5ms, 2s");
  return v * u->second;
}

namespace {

// The track-control commands' arguments: a rank number first, a move's places, the split's share.
template <class Number>
void checkTrackCommand(const ScriptCommand& c, const std::string& where, Number&& number) {
  static const char* kRanked[] = {"collapse", "expand", "hide", "show", "pin", "unpin", "move"};
  // A rank, or a pattern over ranks ("*", "1?": tracks.h, setHiddenMatching and its kind).
  if (std::find(std::begin(kRanked), std::end(kRanked), c.op) != std::end(kRanked) &&
      c.args[0].find_first_of("*?") == std::string::npos)
    number(c.args[0]);
  if (c.op == "move" && c.args[0].find_first_of("*?") != std::string::npos)
    throw UserError("--script", where + ": move takes one rank, not a pattern", "name the rank: move 3 \"stream 7\" -1");
  if (c.op == "compact" && c.args[0] != "on" && c.args[0] != "off")
    throw UserError("--script", where + ": compact takes on or off", "see docs/viewer.md");
  if (c.op == "flows" && c.args[0] != "all" && c.args[0] != "selected" && c.args[0] != "none")
    throw UserError("--script", where + ": flows takes all, selected or none", "see docs/viewer.md");
  if (c.op == "move") number(c.args[2]);
  if (c.op == "empty" && c.args[0] != "hide" && c.args[0] != "show")
    throw UserError("--script", where + ": empty takes hide or show", "see docs/viewer.md");
  if (c.op == "split") {
    number(c.args[0]);
    const double f = std::stod(c.args[0]);
    if (f < 0.1 || f > 0.9)
      throw UserError("--script", where + ": split " + c.args[0] + " is outside 0.1-0.9",
                      "give the bottom panel's share of the window, e.g. split 0.25");
  }
}

}  // namespace

std::vector<ScriptCommand> parseScriptPart(const std::string& text, const std::string& file,
                                           const std::function<bool(const std::string& op)>& ours,
                                           const std::function<void(const ScriptCommand&, const std::string& where)>& check,
                                           const ScriptParser& rest) {
  std::vector<ScriptCommand> mine;
  std::string others;  // the other lines, ours blanked so that line numbers still hold
  std::istringstream in(text);
  int n = 0;
  for (std::string line; std::getline(in, line);) {
    ++n;
    std::istringstream words(line.substr(0, line.find('#')));
    ScriptCommand c;
    c.line = n;
    words >> c.op;
    const bool taken = ours(c.op);
    others += (taken ? std::string() : line) + "\n";
    if (!taken) continue;
    for (std::string w; words >> std::quoted(w);) c.args.push_back(w);
    check(c, file + ":" + std::to_string(n));
    mine.push_back(c);
  }
  std::vector<ScriptCommand> out = rest(others, file);
  out.insert(out.end(), mine.begin(), mine.end());
  std::stable_sort(out.begin(), out.end(), [](const ScriptCommand& a, const ScriptCommand& b) { return a.line < b.line; });
  return out;
}

std::vector<ScriptCommand> parseScript(const std::string& text, const std::string& file) {
  // op → (min args, max args)
  static const std::map<std::string, std::pair<int, int>> arity = {
      {"view", {2, 2}}, {"zoom", {1, 2}}, {"pan", {1, 1}},   {"step", {1, 1}},   {"select", {1, 2}}, {"search", {1, 1}},
      {"next", {0, 0}}, {"prev", {0, 0}}, {"range", {2, 2}}, {"tab", {1, 1}},    {"frames", {1, 1}}, {"clear", {0, 0}},
      {"open", {1, 1}},  {"stats", {1, 1}},  {"collapse", {1, 1}}, {"expand", {1, 1}}, {"hide", {2, 2}},
      {"show", {1, 2}},  {"pin", {2, 2}},    {"unpin", {2, 2}},    {"move", {3, 3}},   {"empty", {1, 1}},
      {"split", {1, 1}}, {"[", {0, 0}},      {"]", {0, 0}},     {"compact", {1, 1}}, {"flows", {1, 1}}};
  std::vector<ScriptCommand> out;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (auto h = line.find('#'); h != std::string::npos) line.resize(h);
    std::istringstream words(line);
    ScriptCommand c;
    c.line = n;
    if (!(words >> c.op)) continue;
    for (std::string w; words >> std::quoted(w);) c.args.push_back(w);  // "a name with spaces" is one
    const std::string where = file + ":" + std::to_string(n);
    auto a = arity.find(c.op);
    if (a == arity.end())
      // Every command a script may hold, those parsed before this one included (notes.cpp: bookmark,
      // note, drop, overlay; view_tables.cpp: csv, sql, diff), so the hint never hides one.
      throw UserError("--script", where + ": unknown command \"" + c.op + "\"",
                      "use view, zoom, pan, step, select, search, next, prev, range, tab, stats, frames, clear, open, "
                      "bookmark, note, drop, overlay, csv, sql, diff, matches, match, sqlrow, sqltrack, diffrow, click, "
                      "collapse, expand, hide, show, pin, unpin, move, empty, split, compact, flows, [ or ]");
    if (int(c.args.size()) < a->second.first || int(c.args.size()) > a->second.second)
      throw UserError("--script", where + ": " + c.op + " takes " + std::to_string(a->second.first) +
                                      (a->second.first == a->second.second ? "" : "-" + std::to_string(a->second.second)) +
                                      " argument(s)", "see docs/viewer.md");
    // Check numbers now, not halfway through a replay.
    auto number = [&](const std::string& s) {
      try {
        size_t used = 0;
        const double v = std::stod(s, &used);
        if (used == s.size() && std::isfinite(v)) return;
      } catch (const std::exception&) {
      }
      throw UserError("--script", where + ": \"" + s + "\" is not a number", "");
    };
    if (c.op == "view" || c.op == "range")
      for (auto& s : c.args) parseTime(s, "--script " + where);
    if (c.op == "zoom" || c.op == "pan" || c.op == "step" || c.op == "frames" || c.op == "open")
      for (auto& s : c.args) number(s);
    if (c.op == "select" && c.args.size() == 2) number(c.args[1]);
    checkTrackCommand(c, where, number);
    static const char* kStatsArgs[] = {"range", "all", "kernels", "ops", "ranges", "collectives", "memory", "api"};
    if (c.op == "stats" && std::find(std::begin(kStatsArgs), std::end(kStatsArgs), c.args[0]) == std::end(kStatsArgs))
      throw UserError("--script", where + ": stats takes range, all, or a table: kernels, ops, ranges, collectives, memory, api",
                      "see docs/viewer.md");
    out.push_back(c);
  }
  return out;
}

}  // namespace trainscope::viewer
