// habits.h — the app's state for what daily profiler users reach for: bookmarks and notes (saved
// beside the run), the shortcut overlay, the open-file prompt and dropped files; and the study
// view as last drawn (for --layout). Drawn by view_habits.cpp and view_study.cpp; part of App.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainscope/viewer/notes.h"
#include "trainscope/viewer/study_plot.h"

namespace trainscope::viewer {

struct Habits {
  Notes notes;
  std::string notes_path;   // <run>.notes.json of the first run open; "" when none
  std::string notes_error;  // the notes file could not be read: shown, and it is never overwritten
  bool show_help = false, show_bookmarks = false, show_open = false;
  bool edit_note = false;   // the note editor is open on the selection
  bool focus_input = false; // give the next text input the keyboard
  char open_path[1024] = {};
  char note_text[1024] = {};
  std::string open_error;
  float font_size = 0;      // the font's size in the last frame, window pixels (for --layout)
  float scale = 1;          // window pixels per layout pixel (--scale, the monitor's content scale)
  // Bookmarks as drawn in the last frame (for --layout): index into notes.bookmarks and x.
  std::vector<std::pair<size_t, float>> bookmarks_drawn;
  struct NoteMark {
    size_t note;
    float x, y;
  };
  std::vector<NoteMark> notes_drawn;  // the notes marked on the timeline last frame (--layout)
};

// The study view as last drawn (for --layout): what the headline, the table and the plots showed.
struct StudyShown {
  bool drawn = false;
  int64_t headline_candidate = -1;  // the recommendation's candidate id as the headline prints it
  std::string headline, argument;   // the two lines as drawn
  StudyArgument arg;
  struct Row {
    int64_t trial, candidate;
    std::string plan;
  };
  std::vector<Row> table;  // the trials table, in order
  struct Axis {
    std::string title;
    float title_w = 0, frame_w = 0, plot_w = 0;  // the title's widest line, the plot's whole width and its axes' (px)
    std::vector<std::pair<float, std::string>> x_ticks, y_ticks;  // pixel position and label
  };
  std::vector<Axis> plots;
  struct Point {
    size_t plot;
    int64_t trial, candidate;
    float x, y;
    std::string label;
    bool drawn = true;  // false: the same label is already written beside an earlier repeat here, or
                        // it would overprint another label (fit.h: placeLabels; on hover instead)
    float label_x0 = 0, label_y0 = 0, label_w = 0, label_h = 0;  // where it was written, when drawn
  };
  std::vector<Point> points;
  std::string memory_limit_note;  // "limit 4.0 GiB: off this scale" when the limit is far above every trial
};

}  // namespace trainscope::viewer
