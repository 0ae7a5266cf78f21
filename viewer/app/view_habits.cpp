// view_habits.cpp — what a Perfetto, Tracy or Nsight user reaches for without thinking: bookmarks
// and notes (kept beside the run in <run>.notes.json, never in the run database), the shortcut
// overlay, an open-file prompt and files dropped onto the window. Drawn over the frame after
// drawFrame; the notes themselves are model code (notes.h).
#include <imgui.h>

#include <algorithm>
#include <iostream>

#include <nlohmann/json.hpp>

#include "app.h"
#include "timeline.h"
#include "trainscope/common/error.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/ruler.h"

namespace trainscope::viewer {

namespace {

constexpr ImU32 kBookmarkColor = IM_COL32(120, 220, 255, 255);
constexpr ImU32 kNoteColor = IM_COL32(255, 215, 90, 255);

// Every key the viewer answers to, for the overlay (docs/viewer.md lists the same).
const std::pair<const char*, const char*> kShortcuts[] = {
    {"wheel", "zoom around the cursor"},
    {"drag", "pan (also vertically)"},
    {"Ctrl+wheel", "scroll the rows"},
    {"Shift+drag", "select a time range"},
    {"W / S", "zoom in / out"},
    {"A / D", "pan left / right"},
    {"F", "fit the selection (or everything)"},
    {"[ / ]", "previous / next step"},
    {"click", "select an event (Details); a step fits it; a folded block zooms in"},
    {"click a rank header", "collapse / expand the rank"},
    {"right-click a row", "hide, pin, move the track; collapse the rank; empty tracks"},
    {"drag the split bar", "resize the bottom panel"},
    {"Ctrl+Enter (SQL tab)", "run the query"},
    {"Enter (search box)", "search names"},
    {"F3 / Shift+F3", "next / previous match"},
    {"Esc", "clear the selection and range; close these windows"},
    {"B", "bookmark at the cursor (the view's middle when the cursor is off the timeline)"},
    {"N", "note on the selected event"},
    {"L", "the bookmarks and notes list (click one to go to it)"},
    {"Ctrl+O", "open a file (or drop a .db onto the window)"},
    {"? / F1", "this overlay"},
};

}  // namespace

void App::openFiles(const std::vector<std::string>& paths) {
  if (paths.empty()) return;
  if (paths.size() > 2) {
    habits.open_error = "drop one run database, two to compare, or one study (" + std::to_string(paths.size()) +
                        " files were dropped)";
    return;
  }
  if (std::string mixed = mixedFilesError(paths); !mixed.empty()) {
    habits.open_error = std::move(mixed);
    return;
  }
  closeDocuments();
  study.reset();
  selection.reset();
  range.reset();
  found = {};
  fitted = false;
  fatal.clear();
  habits.notes = {};
  habits.notes_path.clear();
  habits.notes_error.clear();
  habits.open_error.clear();
  tab = Tab::Details;
  tab_requested = true;
  for (const auto& p : paths) openDocument(p);
}

void App::loadNotesFor(const std::string& run_path) {
  habits.notes_path = notesPath(run_path);
  habits.notes_error.clear();
  try {
    habits.notes = loadNotes(habits.notes_path);
  } catch (const UserError& e) {
    // Shown, and the file is then never overwritten: it may hold notes worth repairing by hand.
    habits.notes = {};
    habits.notes_error = e.what();
    std::cerr << "trainscope-viewer: " << e.what() << "\n";
  }
}

namespace {
void save(Habits& h) {
  if (h.notes_path.empty() || !h.notes_error.empty()) return;
  try {
    saveNotes(h.notes_path, h.notes);
  } catch (const UserError& e) {
    h.notes_error = e.what();
    std::cerr << "trainscope-viewer: " << e.what() << "\n";
  }
}
}  // namespace

void App::addBookmark(int64_t at_ns, std::string label) {
  if (habits.notes_path.empty()) return;
  if (label.empty()) label = "bookmark " + std::to_string(habits.notes.bookmarks.size() + 1);
  habits.notes.addBookmark(at_ns, std::move(label));
  save(habits);
}

bool App::noteOnSelection(const std::string& text) {
  // Notes live beside run A (the first file): an event of run B has no notes file of its own here.
  if (!selection || selection->doc != 0 || !docs[0]->ready()) return false;
  const Trace& t = *docs[0]->trace;
  const Track& tr = t.tracks[selection->ref.track];
  habits.notes.setNote({tr.rank, tr.label, t.name(selection->ref), t.event(selection->ref).start, text});
  save(habits);
  return true;
}

bool App::applyHabitCommand(const ScriptCommand& c) {
  if (c.op == "bookmark") {
    addBookmark(origin() + int64_t(parseTime(c.args[0], "--script")), c.args.size() > 1 ? c.args[1] : "");
  } else if (c.op == "note") {
    if (!noteOnSelection(c.args[0]))
      std::cerr << "trainscope-viewer: --script line " << c.line << ": note needs a selected event of the first run\n";
  } else if (c.op == "drop") {
    openFiles(c.args);
  } else if (c.op == "overlay") {
    habits.show_help = c.args[0] == "help";
    habits.show_bookmarks = c.args[0] == "bookmarks";
    habits.show_open = c.args[0] == "open";
  } else {
    return false;
  }
  return true;
}

namespace {

// The keys of this file; the timeline's own are read in view_timeline.cpp.
void habitKeys(App& a) {
  const ImGuiIO& io = ImGui::GetIO();
  if (io.WantTextInput) return;
  if (ImGui::IsKeyPressed(keys::kF1) || (io.KeyShift && ImGui::IsKeyPressed(keys::kSlash)))
    a.habits.show_help = !a.habits.show_help;
  if (ImGui::IsKeyPressed(keys::kL)) a.habits.show_bookmarks = !a.habits.show_bookmarks;
  if (io.KeyCtrl && ImGui::IsKeyPressed(keys::kO)) a.habits.show_open = a.habits.focus_input = true;
  if (ImGui::IsKeyPressed(keys::kEscape)) a.habits.show_help = a.habits.show_open = a.habits.edit_note = false;
  if (!a.primary() || io.KeyCtrl) return;
  if (ImGui::IsKeyPressed(keys::kB)) {
    const ImVec2 m = io.MousePos;
    const bool on = m.x >= a.view.x0 && m.x <= a.view.x0 + a.view.width && m.y >= a.timeline_y0 && m.y <= a.timeline_y1;
    a.addBookmark(on ? a.view.timeAt(m.x) : a.view.origin + int64_t((a.view.t0 + a.view.t1) / 2), "");
  }
  if (ImGui::IsKeyPressed(keys::kN) && a.selection && a.selection->doc == 0 && a.docs[0]->ready()) {
    const Trace& t = *a.docs[0]->trace;
    const Track& tr = t.tracks[a.selection->ref.track];
    const EventNote* n = a.habits.notes.noteOn(tr.rank, tr.label, t.name(a.selection->ref), t.event(a.selection->ref).start);
    std::snprintf(a.habits.note_text, sizeof a.habits.note_text, "%s", n ? n->text.c_str() : "");
    a.habits.edit_note = a.habits.focus_input = true;
  }
}

// A dashed line down the timeline and a flag with the label just under the ruler (not over its
// labels), for each bookmark in view; a mark and its text at each noted event on screen.
void drawBookmarks(App& a) {
  a.habits.bookmarks_drawn.clear();
  if (!a.primary() || a.timeline_x1 <= a.timeline_x0) return;
  ImDrawList* dl = ImGui::GetForegroundDrawList();
  const float y1 = a.panel_y0 > a.timeline_y0 ? std::min(a.panel_y0, a.timeline_y1) : a.timeline_y1;
  dl->PushClipRect(ImVec2(a.timeline_x0, a.timeline_y0), ImVec2(a.timeline_x1, y1), true);
  const auto& bms = a.habits.notes.bookmarks;
  for (size_t i = 0; i < bms.size(); ++i) {
    if (bms[i].at_ns < a.view.begin() || bms[i].at_ns > a.view.end()) continue;
    const float x = a.view.x(bms[i].at_ns);
    for (float y = a.timeline_y0; y < y1; y += 8) dl->AddLine(ImVec2(x, y), ImVec2(x, std::min(y + 4, y1)), kBookmarkColor);
    // The flag stops short of the next bookmark's line, so that close bookmarks stay readable.
    const float next = i + 1 < bms.size() ? a.view.x(bms[i + 1].at_ns) - 2 : a.timeline_x1;
    const ImVec2 sz = ImGui::CalcTextSize(bms[i].label.c_str());
    const float fy = a.timeline_y0 + kRulerH;
    dl->PushClipRect(ImVec2(x, fy), ImVec2(std::max(x, next), y1), true);
    dl->AddRectFilled(ImVec2(x, fy), ImVec2(x + sz.x + 6, fy + sz.y + 2), IM_COL32(20, 60, 80, 230));
    dl->AddText(ImVec2(x + 3, fy + 1), kBookmarkColor, bms[i].label.c_str());
    dl->PopClipRect();
    a.habits.bookmarks_drawn.emplace_back(i, x);
  }
  // Notes: on the noted event's row (the first run's), a marker at its start and the text beside it.
  a.habits.notes_drawn.clear();
  const Document* d = a.docs.empty() || !a.docs[0]->ready() ? nullptr : a.docs[0].get();
  const auto& notes = a.habits.notes.notes;
  for (size_t i = 0; d && i < notes.size(); ++i) {
    const EventNote& n = notes[i];
    const int64_t at = n.start_ns + d->offset;
    if (at < a.view.begin() || at > a.view.end()) continue;
    for (const RowRect& r : a.rows) {
      const Track& t = d->trace->tracks[r.track];
      if (r.doc != 0 || r.lane != 0 || t.rank != n.rank || t.label != n.track) continue;
      const float x = a.view.x(at), y = r.y0;
      if (y < a.timeline_y0 + kRulerH || y > y1) break;
      dl->AddTriangleFilled(ImVec2(x, y), ImVec2(x + 9, y), ImVec2(x, y + 9), kNoteColor);
      const ImVec2 sz = ImGui::CalcTextSize(n.text.c_str());
      const float tx = x + 11, w = std::min(sz.x, 220.f);
      dl->AddRectFilled(ImVec2(tx - 2, y), ImVec2(tx + w + 2, y + sz.y), IM_COL32(60, 52, 20, 230));
      dl->PushClipRect(ImVec2(tx - 2, y), ImVec2(tx + w + 2, y + sz.y), true);
      dl->AddText(ImVec2(tx, y), kNoteColor, n.text.c_str());
      dl->PopClipRect();
      a.habits.notes_drawn.push_back({i, x, y});
      break;
    }
  }
  dl->PopClipRect();
}

void drawHelp(App& a) {
  if (!a.habits.show_help) return;
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(ImVec2(vp->Pos.x + vp->Size.x / 2, vp->Pos.y + vp->Size.y / 2), ImGuiCond_Always, ImVec2(0.5f, 0.5f));
  ImGui::SetNextWindowBgAlpha(0.95f);
  if (ImGui::Begin("Keys (? or F1 to close)", &a.habits.show_help,
                   ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoCollapse)) {
    if (ImGui::BeginTable("keys", 2, ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit)) {
      for (const auto& [k, what] : kShortcuts) {
        ImGui::TableNextRow();
        ImGui::TableNextColumn();
        ImGui::TextColored(ImVec4(1, .85f, .4f, 1), "%s", k);
        ImGui::TableNextColumn();
        ImGui::TextUnformatted(what);
      }
      ImGui::EndTable();
    }
    ImGui::TextDisabled("Scripts and flags: docs/viewer.md");
  }
  ImGui::End();
}

// Jumps to a note's event: found by its name, then its start, rank and track (notes.h).
void gotoNote(App& a, const EventNote& n) {
  if (a.docs.empty() || !a.docs[0]->ready()) return;
  const Trace& t = *a.docs[0]->trace;
  for (const EventRef& m : search(t, n.name).matches) {
    const Track& tr = t.tracks[m.track];
    if (t.event(m).start != n.start_ns || tr.rank != n.rank || tr.label != n.track || t.name(m) != n.name) continue;
    a.select(0, m);
    a.view.fit(t.event(m).start, t.event(m).end, 2.0);
    return;
  }
}

void drawBookmarkList(App& a) {
  if (!a.habits.show_bookmarks) return;
  ImGui::SetNextWindowSize(ImVec2(ImGui::GetFontSize() * 36, ImGui::GetFontSize() * 22), ImGuiCond_FirstUseEver);
  if (ImGui::Begin("Bookmarks and notes (L)", &a.habits.show_bookmarks, ImGuiWindowFlags_NoSavedSettings)) {
    if (!a.habits.notes_error.empty()) ImGui::TextColored(ImVec4(1, .4f, .4f, 1), "%s", a.habits.notes_error.c_str());
    ImGui::TextDisabled("%s", a.habits.notes_path.empty() ? "no run open" : a.habits.notes_path.c_str());
    auto& bms = a.habits.notes.bookmarks;
    std::optional<size_t> drop;
    for (size_t i = 0; i < bms.size(); ++i) {
      ImGui::PushID(int(i));
      const std::string line = formatExact(bms[i].at_ns - a.origin()) + "  " + bms[i].label;
      if (ImGui::Selectable(line.c_str(), false, ImGuiSelectableFlags_AllowItemOverlap)) {
        const double w = a.view.t1 - a.view.t0, c = a.view.rel(bms[i].at_ns);  // keep the zoom, centre it
        a.view.t0 = c - w / 2;
        a.view.t1 = c + w / 2;
      }
      ImGui::SameLine(ImGui::GetWindowContentRegionMax().x - ImGui::GetFontSize() * 1.5f);
      if (ImGui::SmallButton("x")) drop = i;
      ImGui::PopID();
    }
    if (drop) {
      bms.erase(bms.begin() + std::ptrdiff_t(*drop));
      save(a.habits);
    }
    if (bms.empty()) ImGui::TextDisabled("no bookmarks: B adds one at the cursor");
    ImGui::Separator();
    for (size_t i = 0; i < a.habits.notes.notes.size(); ++i) {
      const EventNote& n = a.habits.notes.notes[i];
      ImGui::PushID(int(1000000 + i));
      const std::string line = n.name + " (rank " + std::to_string(n.rank) + ", " + formatExact(n.start_ns - a.origin()) + "): " + n.text;
      if (ImGui::Selectable(line.c_str())) gotoNote(a, n);
      ImGui::PopID();
    }
    if (a.habits.notes.notes.empty()) ImGui::TextDisabled("no notes: select an event and press N");
  }
  ImGui::End();
}

// A small window with one text input, focused when opened; Enter commits.
bool promptWindow(const char* title, const char* hint, char* buf, size_t size, bool& open, bool& focus) {
  if (!open) return false;
  const ImGuiViewport* vp = ImGui::GetMainViewport();
  ImGui::SetNextWindowPos(ImVec2(vp->Pos.x + vp->Size.x / 2, vp->Pos.y + vp->Size.y / 3), ImGuiCond_Always, ImVec2(0.5f, 0.5f));
  bool done = false;
  if (ImGui::Begin(title, &open, ImGuiWindowFlags_AlwaysAutoResize | ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoCollapse)) {
    if (focus) ImGui::SetKeyboardFocusHere(), focus = false;
    ImGui::SetNextItemWidth(ImGui::GetFontSize() * 40);
    done = ImGui::InputTextWithHint("##in", hint, buf, size, ImGuiInputTextFlags_EnterReturnsTrue);
    ImGui::SameLine();
    done = ImGui::Button("OK") || done;
  }
  ImGui::End();
  return done;
}

}  // namespace

void App::drawOverlays() {
  // In the window's pixels: the UI is laid out in logical ones, magnified by the scale (window.cpp).
  habits.scale = ImGui::GetIO().DisplayFramebufferScale.x;
  habits.font_size = ImGui::GetFontSize() * habits.scale;
  habitKeys(*this);
  drawBookmarks(*this);
  drawHelp(*this);
  drawBookmarkList(*this);
  if (promptWindow("Note on the selected event (Enter saves; empty removes)", "a note", habits.note_text,
                   sizeof habits.note_text, habits.edit_note, habits.focus_input)) {
    noteOnSelection(habits.note_text);
    habits.edit_note = false;
  }
  if (promptWindow("Open a run database or a study (or drop one onto the window)", "path/to/run.db", habits.open_path,
                   sizeof habits.open_path, habits.show_open, habits.focus_input) &&
      habits.open_path[0]) {
    habits.show_open = false;
    openFiles({habits.open_path});
  }
  if (!habits.open_error.empty()) {
    ImGui::SetNextWindowPos(ImVec2(20, 60), ImGuiCond_Always);
    ImGui::BeginTooltip();
    ImGui::TextColored(ImVec4(1, .4f, .4f, 1), "%s", habits.open_error.c_str());
    ImGui::EndTooltip();
  }
}

void App::habitsLayout(nlohmann::json& j) const {
  j["font_size"] = habits.font_size;
  j["scale"] = habits.scale;  // layout coordinates are logical pixels: window pixels / scale
  j["overlays"] = {{"help", habits.show_help}, {"bookmarks", habits.show_bookmarks}, {"open", habits.show_open}};
  j["notes_path"] = habits.notes_path;
  j["notes_error"] = habits.notes_error;
  j["open_error"] = habits.open_error;  // why the files dropped or typed were not opened ("" when they were)
  j["bookmarks"] = nlohmann::json::array();
  for (size_t i = 0; i < habits.notes.bookmarks.size(); ++i) {
    const Bookmark& b = habits.notes.bookmarks[i];
    nlohmann::json o = {{"at_ns", b.at_ns}, {"label", b.label}};
    for (const auto& [k, x] : habits.bookmarks_drawn)
      if (k == i) o["x"] = x;
    j["bookmarks"].push_back(o);
  }
  j["notes"] = nlohmann::json::array();
  for (const auto& n : habits.notes.notes)
    j["notes"].push_back({{"rank", n.rank}, {"track", n.track}, {"name", n.name}, {"start_ns", n.start_ns}, {"text", n.text}});
  for (const auto& m : habits.notes_drawn)
    if (m.note < j["notes"].size()) j["notes"][m.note]["x"] = m.x, j["notes"][m.note]["y"] = m.y;
  if (!study_shown.drawn) return;
  const StudyShown& s = study_shown;
  nlohmann::json st = {{"headline_candidate", s.headline_candidate}, {"headline", s.headline}, {"argument", s.argument},
                       {"winner", s.arg.winner.candidate}, {"runner_up", s.arg.runner_up.candidate},
                       {"margin", s.arg.margin}, {"noise", s.arg.noise}, {"noise_known", s.arg.noise_known},
                       {"threshold", s.arg.threshold}, {"within_noise", s.arg.within_noise}};
  st["table"] = nlohmann::json::array();
  for (const auto& r : s.table) st["table"].push_back({{"trial", r.trial}, {"candidate", r.candidate}, {"plan", r.plan}});
  st["plots"] = nlohmann::json::array();
  for (const auto& p : s.plots) {
    nlohmann::json xt = nlohmann::json::array(), yt = nlohmann::json::array();
    for (const auto& [x, l] : p.x_ticks) xt.push_back({{"x", x}, {"label", l}});
    for (const auto& [y, l] : p.y_ticks) yt.push_back({{"y", y}, {"label", l}});
    st["plots"].push_back({{"title", p.title}, {"title_w", p.title_w}, {"frame_w", p.frame_w}, {"plot_w", p.plot_w}, {"x_ticks", xt}, {"y_ticks", yt}});
  }
  st["memory_limit_note"] = study_shown.memory_limit_note;
  st["points"] = nlohmann::json::array();
  for (const auto& p : s.points)
    st["points"].push_back({{"plot", p.plot}, {"trial", p.trial}, {"candidate", p.candidate}, {"x", p.x}, {"y", p.y},
                            {"label", p.label}, {"drawn", p.drawn}, {"label_x0", p.label_x0}, {"label_y0", p.label_y0},
                            {"label_w", p.label_w}, {"label_h", p.label_h}});
  j["study"] = st;
}

}  // namespace trainscope::viewer
