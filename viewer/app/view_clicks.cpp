// view_clicks.cpp — a script's `click`: a real mouse click on a table row or header, where it was last
// drawn. The tables record where a click on each row and header lands (clickTargets); `click search 3`
// moves the mouse there, presses and releases the left button over the next frames through ImGui's IO
// (ImGui 1.86 reads io.MousePos and io.MouseDown each frame: set after the backend's, before ImGui's
// NewFrame), so the click goes through the same widgets, hit tests and handlers as a user's.
#include <imgui.h>

#include <algorithm>
#include <cfloat>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "app.h"

namespace trainscope::viewer {

namespace {
// A row or header not yet drawn after this many frames is not on screen: said, and the script goes on.
constexpr int kClickWaitFrames = 10;
}  // namespace

std::map<std::string, ClickPoint>& clickTargets() {
  static std::map<std::string, ClickPoint> targets;  // the UI thread's, this frame's
  return targets;
}

const char* scriptTableName(const std::string& imgui_table) {
  if (imgui_table == "search_list") return "search";
  if (imgui_table == "sql_rows") return "sql";
  if (imgui_table == "name_diff") return "diff";
  if (imgui_table == "stats") return "stats";  // its headers (the sort)
  return nullptr;
}

void recordClickTarget(const std::string& key) {
  const ImVec2 a = ImGui::GetItemRectMin(), b = ImGui::GetItemRectMax();
  // Inside the item, near its left (a row's first cell), at mid-height; only where a click there
  // would reach it (not scrolled away, not under the table's frozen header).
  const ImVec2 p(a.x + std::min(8.f, (b.x - a.x) / 2), (a.y + b.y) / 2);
  if (ImGui::IsRectVisible(p, ImVec2(p.x + 1, p.y + 1))) clickTargets()[key] = {p.x, p.y};
}

bool App::applyClickCommand(const ScriptCommand& c) {
  if (c.op != "click") return false;
  static const std::map<std::string, Tab> tabs = {
      {"search", Tab::Search}, {"sql", Tab::Sql}, {"diff", Tab::Compare}, {"stats", Tab::Statistics}};
  tab = tabs.at(c.args[0]), tab_requested = true;  // parseFinderScript checked the table
  if (c.args[0] == "diff") nameDiff();             // computed if it is not yet
  clicks.target = c.args.size() == 3 ? c.args[0] + " header " + c.args[2] : c.args[0] + " " + c.args[1];
  clicks.line = c.line, clicks.stage = 0, clicks.waited = 0;
  return true;
}

void App::injectClick() {
  std::map<std::string, ClickPoint> last;  // what the last frame drew
  last.swap(clickTargets());
  if (clicks.target.empty()) return;
  ImGuiIO& io = ImGui::GetIO();
  auto where = last.find(clicks.target);
  const bool still = where != last.end() && where->second.x == clicks.x && where->second.y == clicks.y;
  switch (clicks.stage) {
    case 0:  // found where it stays for two frames (a list may still be scrolling to a row), then over it
      if (where == last.end() || !still) {
        if (where != last.end()) clicks.x = where->second.x, clicks.y = where->second.y;
        if (++clicks.waited > kClickWaitFrames) {
          std::cerr << "trainscope-viewer: --script line " << clicks.line << ": click " << clicks.target
                    << ": not on screen (scroll it into view first, e.g. with match N)\n";
          clicks.target.clear();
        }
        return;
      }
      io.MousePos = ImVec2(clicks.x, clicks.y);
      clicks.stage = 1;
      return;
    case 1:  // the frame under the mouse drew it there: press (else look again)
      if (!still) {
        clicks.stage = 0;
        return;
      }
      io.MousePos = ImVec2(clicks.x, clicks.y);
      io.MouseDown[0] = true;
      clicks.stage = 2;
      return;
    case 2:
      io.MousePos = ImVec2(clicks.x, clicks.y);
      io.MouseDown[0] = false;
      clicks.made.push_back({clicks.target, clicks.x, clicks.y});
      clicks.stage = 3;
      return;
    default:  // the mouse leaves: no hover left behind in the screenshot
      io.MousePos = ImVec2(-FLT_MAX, -FLT_MAX);
      clicks.target.clear();
  }
}

// --layout: the clicks made, where.
void App::clicksLayout(nlohmann::json& j) const {
  j["clicks"] = nlohmann::json::array();
  for (const auto& m : clicks.made) j["clicks"].push_back({{"target", m.target}, {"x", m.x}, {"y", m.y}});
}

}  // namespace trainscope::viewer
