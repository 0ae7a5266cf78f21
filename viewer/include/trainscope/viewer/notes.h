// trainscope/viewer/notes.h — a user's bookmarks and notes on a run, kept beside it in
// <run>.notes.json and never in the run database (the viewer opens runs read-only; a note is the
// reader's, not the run's). No drawing here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/viewer/view_state.h"  // ScriptCommand, parseScript

namespace trainscope::viewer {

struct Bookmark {
  int64_t at_ns = 0;  // absolute, on the run's clock (rank 0's), as the database stores times
  std::string label;
};

// A note on one event. Events are named by what the database says of them (rank, track, name,
// start), not by the viewer's indices, so a note survives a viewer that orders tracks differently.
struct EventNote {
  int64_t rank = 0;
  std::string track, name;
  int64_t start_ns = 0;
  std::string text;
};

struct Notes {
  std::vector<Bookmark> bookmarks;  // kept sorted by time
  std::vector<EventNote> notes;
  bool empty() const { return bookmarks.empty() && notes.empty(); }
  void addBookmark(int64_t at_ns, std::string label);
  // Sets the note of that event (replacing its earlier one); an empty text removes it.
  void setNote(const EventNote& n);
  const EventNote* noteOn(int64_t rank, const std::string& track, const std::string& name, int64_t start_ns) const;
};

// "<run>.notes.json".
std::string notesPath(const std::string& run_path);
std::string toJson(const Notes& n);
// Throws UserError naming `file` when the text is not a notes file.
Notes notesFromJson(const std::string& text, const std::string& file);
// A missing file is no notes. A file that cannot be read or parsed: UserError naming it.
Notes loadNotes(const std::string& path);
// Written atomically (files::writeAtomically): a crash leaves the old notes or the new ones. Under
// files::OutputRule: an existing file is replaced only when it is a notes file (an earlier output,
// "trainscope_notes": 1); a link, a FIFO or anyone else's file at the path is refused.
void saveNotes(const std::string& path, const Notes& n);

// A --script with the app's own commands besides view_state.h's:
//   bookmark AT [LABEL]   (a bookmark at AT, relative to the trace start)
//   note TEXT             (a note on the selected event; "" removes it)
//   drop FILE [FILE2]     (as if the files were dropped onto the window: they replace what is open)
//   overlay help|bookmarks|open|none   (show the shortcut overlay, the bookmark list, the open prompt)
// Lines of these commands are parsed here, the others by parseScript (the line numbers kept), and
// the two merged in line order. Throws UserError naming the file and line, as parseScript does.
std::vector<ScriptCommand> parseAppScript(const std::string& text, const std::string& file);

}  // namespace trainscope::viewer
