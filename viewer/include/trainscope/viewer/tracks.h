// trainscope/viewer/tracks.h — track control and the timeline's row layout: which ranks are collapsed,
// which threads are hidden, pinned or moved, and from that (and the visible window) the rows the
// timeline draws, top to bottom, with their heights. Also where two runs line up (alignAtStep).
//
// What it is: plain data and arithmetic, so the app draws and hit-tests through code the tests run.
// What it is not: anything that draws (no ImGui here).
//
// Tracks are named by (rank, label), not by index: the same state applies to run A and run B of a
// comparison (their rank 0 `collectives` are one key) and survives reopening a file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainscope/viewer/model.h"

namespace trainscope::viewer {

struct TrackKey {
  int64_t rank = 0;
  std::string label;
  bool operator<(const TrackKey& o) const { return rank != o.rank ? rank < o.rank : label < o.label; }
  bool operator==(const TrackKey& o) const { return rank == o.rank && label == o.label; }
};

// What the user chose. Every change bumps `version`, so that a cached layout knows it is stale.
struct TrackControl {
  std::set<int64_t> collapsed;                     // ranks shown as their header alone
  std::set<TrackKey> hidden;                       // tracks that take no rows
  std::vector<TrackKey> pinned;                    // drawn above every rank, in pin order, not scrolled
  std::map<int64_t, std::vector<std::string>> order;  // a rank's labels in the user's order (after a move)
  bool hide_empty_in_window = false;               // also drop tracks with no events in the window
  bool compact = false;  // every rank one thin summary row (LayoutRow::compact); pinned tracks still shown
  uint64_t version = 0;

  bool isCollapsed(int64_t rank) const { return collapsed.count(rank) > 0; }
  bool isPinned(const TrackKey& k) const;
  void setCollapsed(int64_t rank, bool on);
  void setHidden(const TrackKey& k, bool on);
  void setPinned(const TrackKey& k, bool on);
  void showAll(int64_t rank);  // every hidden track of the rank again
  // Moves the track by `delta` places among its rank's tracks in `trace` (clamped at the ends).
  // False when the rank has no track of that label.
  bool move(const Trace& trace, const TrackKey& k, int delta);
  // The rank's tracks (indices into trace.tracks) in display order: the user's order, then the rest.
  std::vector<size_t> ordered(const Trace& trace, const RankGroup& g) const;
};

// Heights in pixels; the app's font decides them.
// util_h: the utilisation row under each stream's lanes (busyColumns, lod.h); 0 leaves it out.
// compact_h: a rank's one row in compact mode (TrackControl::compact).
struct LayoutMetrics {
  float header_h = 22, lane_h = 18, counter_h = 36, util_h = 0, compact_h = 14;
};

// One run as the layout sees it: its trace and the window on screen in the trace's own clock
// (the view's window less the run's offset).
struct LayoutRun {
  const Trace* trace = nullptr;
  int64_t begin = 0, end = 0;
};

enum class RowKind { Header, Track };

// One row of the timeline: a rank's header, or a track with the lanes it shows.
struct LayoutRow {
  RowKind kind = RowKind::Header;
  size_t doc = 0;
  size_t group = 0;   // index into trace.ranks
  size_t track = 0;   // index into trace.tracks (Track rows)
  uint32_t lanes = 0; // flame depth fitted to the window (Track rows; counters: 0)
  float y0 = 0, h = 0;
  bool collapsed = false;  // Header rows: the rank is collapsed
  float util_h = 0;        // Stream rows: the utilisation row's height, below the lanes (inside h)
  bool compact = false;    // Header rows in compact mode: the rank's one summary row (compact.h)
  float y1() const { return y0 + h; }
};

// The rows, y from 0 at the top of each section. Pinned rows are drawn in a band above the
// scrolled ones. With two runs, each rank's rows of run B come right under run A's (interleaved),
// so a rank of B is on screen beside its rank of A.
struct TrackLayout {
  std::vector<LayoutRow> pinned, rows;
  float pinned_h = 0, total_h = 0;
  // Each rank group's height (in layout order) and the control version they were laid out under: a
  // group outside the band (see layoutTracks) keeps the height it had when last laid out.
  std::vector<float> group_h;
  std::vector<std::pair<size_t, size_t>> group_of;  // (doc, index into its trace.ranks), parallel to group_h
  uint64_t control_version = 0;
  // The first row of `rows` whose bottom is below y (rows.size() when none): culling by binary search.
  size_t firstBelow(float y) const;
  // The row of `rows` (or of `pinned`, when `in_pinned`) that y falls in.
  const LayoutRow* rowAt(float y, bool in_pinned = false) const;
};

// Where a track is, for a finder that must bring it on screen: in the pinned band, or in the scrolled
// rows at [y0, y1) — exact when its rank group is laid out, else the top of the group (the group is
// laid out once the scroll reaches it, and the place is exact the frame after). nullopt: the run has
// no such track among its rows (hidden, collapsed, or without events).
struct TrackPlace {
  float y0 = 0, y1 = 0;
  bool exact = false, pinned = false;
};
std::optional<TrackPlace> placeOf(const TrackLayout& l, size_t doc, size_t track, int64_t rank, const Trace& trace);
// The scroll that shows [y0, y1) in a view `view_h` high scrolled at `scroll`: `scroll` itself when the
// rows are already in view, else one that puts y0 a third down the view, within [0, total_h - view_h].
float scrollToShow(float scroll, float view_h, float y0, float y1, float total_h);

// Lanes of `t` with an event overlapping [begin, end): the deepest such lane + 1 (0: none). A flame
// deep elsewhere in the trace takes only the rows this window needs.
uint32_t fittedLanes(const Track& t, int64_t begin, int64_t end);
bool hasEventsIn(const Track& t, int64_t begin, int64_t end);

// The layout of `runs` under `control`. Tracks with no events in the whole trace take no rows; with
// hide_empty_in_window, neither do tracks with none in the window. A shown flame keeps one lane
// when the window holds none of its events. O(tracks × lanes × log events).
//
// With `previous` (the last layout, under the same control version and runs) and a band [top, bottom)
// of y, only the rank groups that meet the band are laid out again; the others keep their previous
// heights and emit no rows, as Tracy keeps an off-screen item's last height. So a frame that zooms a
// 20,000-rank trace costs the groups on screen, not every track. Without `previous`, everything.
struct LayoutBand {
  float top = 0, bottom = 0;
};
TrackLayout layoutTracks(const std::vector<LayoutRun>& runs, const TrackControl& control, const LayoutMetrics& m,
                         const TrackLayout* previous = nullptr, LayoutBand band = {});

// Track control by pattern across ranks (many ranks at once): `ranks` is a rank number or a glob over
// its decimal form ("*" every rank, "1?" ranks 10-19), `label` a glob over track labels ("stream *",
// "thread*", "collectives"); '*' matches any run of characters, '?' one. Each returns how many
// tracks (ranks, for collapse) of `trace` it matched; the state changes only where it differs.
bool globMatch(const std::string& pattern, const std::string& text);
size_t setHiddenMatching(TrackControl& c, const Trace& trace, const std::string& ranks, const std::string& label, bool on);
size_t setPinnedMatching(TrackControl& c, const Trace& trace, const std::string& ranks, const std::string& label, bool on);
size_t setCollapsedMatching(TrackControl& c, const Trace& trace, const std::string& ranks, bool on);
// Whether a script or menu argument is a pattern rather than one rank or one label.
inline bool isPattern(const std::string& s) { return s.find_first_of("*?") != std::string::npos; }

// Where run B lines up with run A: the offset to add to B's times so that `step` starts at the same
// time in both (the earliest rank's start in each). When a run lacks the step — an imported trace has
// no steps at all — there is no such offset: ok is false, offset falls back to the runs' starts, and
// `message` says which run lacks what, for the screen.
struct Alignment {
  bool ok = false;
  int64_t step = 0;
  int64_t offset = 0;  // add to B's times
  std::string message;  // when !ok
};
Alignment alignAtStep(const Trace& a, const Trace& b, int64_t step);

// The step whose window holds time t in `trace` (the latest starting at or before t; -1: none), and
// the step `dir` places from it (`[` / `]`), clamped to the steps the trace has; nullopt: no steps.
std::optional<int64_t> neighbourStep(const Trace& trace, int64_t t, int dir);

}  // namespace trainscope::viewer
