// track_patterns.cpp — track control by pattern across ranks (see tracks.h).
#include <string>

#include "trainscope/viewer/tracks.h"

namespace trainscope::viewer {

bool globMatch(const std::string& p, const std::string& t) {
  // Iterative matching with one backtrack point (the last '*'): O(|p| × |t|) at worst.
  size_t pi = 0, ti = 0, star = std::string::npos, mark = 0;
  while (ti < t.size()) {
    if (pi < p.size() && (p[pi] == '?' || p[pi] == t[ti])) {
      ++pi, ++ti;
    } else if (pi < p.size() && p[pi] == '*') {
      star = pi++, mark = ti;
    } else if (star != std::string::npos) {
      pi = star + 1, ti = ++mark;
    } else {
      return false;
    }
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

namespace {

template <class Fn>
size_t eachMatching(const Trace& trace, const std::string& ranks, const std::string& label, Fn&& fn) {
  size_t n = 0;
  for (const RankGroup& g : trace.ranks) {
    if (!globMatch(ranks, std::to_string(g.rank))) continue;
    for (size_t ti : g.tracks) {
      const Track& t = trace.tracks[ti];
      if (t.events() == 0 || !globMatch(label, t.label)) continue;
      fn(TrackKey{g.rank, t.label});
      ++n;
    }
  }
  return n;
}

}  // namespace

size_t setHiddenMatching(TrackControl& c, const Trace& trace, const std::string& ranks, const std::string& label, bool on) {
  return eachMatching(trace, ranks, label, [&](const TrackKey& k) {
    if (c.hidden.count(k) != size_t(on)) c.setHidden(k, on);
  });
}

size_t setPinnedMatching(TrackControl& c, const Trace& trace, const std::string& ranks, const std::string& label, bool on) {
  return eachMatching(trace, ranks, label, [&](const TrackKey& k) {
    if (c.isPinned(k) != on) c.setPinned(k, on);
  });
}

size_t setCollapsedMatching(TrackControl& c, const Trace& trace, const std::string& ranks, bool on) {
  size_t n = 0;
  for (const RankGroup& g : trace.ranks)
    if (globMatch(ranks, std::to_string(g.rank))) {
      if (c.isCollapsed(g.rank) != on) c.setCollapsed(g.rank, on);
      ++n;
    }
  return n;
}

}  // namespace trainscope::viewer
