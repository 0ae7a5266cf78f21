// timeline.h — what the timeline's parts share within one frame (Tracy's TimelineContext): where the
// timeline is on screen, the visible window and the fold threshold. view_timeline.cpp fills it once per
// frame; the ruler (view_ruler.cpp), the tracks (view_tracks.cpp), the overlays (view_overlays.cpp) and
// the input (view_input.cpp) read it. App-private: the model (tracks.h, lod.h) knows nothing of it.
#pragma once

#include <cstdint>

namespace trainscope::viewer {

inline constexpr float kGutter = 190;  // track labels, left of the timeline
inline constexpr float kRulerH = 20;
inline constexpr float kLaneH = 18;
inline constexpr float kCounterH = 36;
inline constexpr float kGroupH = 22;
inline constexpr float kMinPx = 3;  // events narrower than this fold (lod.h)

struct TimelineContext {
  float left = 0;          // the gutter's left edge
  float x0 = 0, x1 = 0;    // the timeline's span after the gutter
  float top = 0, bottom = 0;  // the visible y span of the area being drawn
  float pinned_y = 0;      // where the pinned band's row 0 is (screen)
  float rows_y = 0;        // where the scrolled rows' row 0 is (screen, scrolled)
  double ns_px = 1;
  int64_t threshold = 1;   // ns: the fold threshold, kMinPx pixels
  int64_t vt0 = 0, vt1 = 0;  // the visible window, absolute ns
  float char_w = 7;        // the font is monospaced
  bool record = false;     // --layout: record what is drawn
  bool hovered = false;    // the mouse is over the timeline window (or its children)
};

}  // namespace trainscope::viewer
