// sort_runs.h — a stable sort for what arrives as a few sorted runs (the loader's tracks: one run
// per table in storage order; correlation ids: one run per lane). Internal to the viewer's model.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace trainscope::viewer {

// Sorts v by less, stably: its sorted runs merged two neighbours at a time, the pair of least
// combined length first (as TimSort does), so that many small runs (a ranges table stored by end)
// cost little and each large run is passed over about once per large neighbour, not once per level
// of a pairwise merge (at 100 M events every pass over a track is hundreds of MB). Nothing moves
// when v is already sorted; v of more than kMaxRuns runs is sorted whole.
template <class T, class Less>
void sortRuns(std::vector<T>& v, Less less) {
  constexpr size_t kMaxRuns = 1024;  // the pair search is O(runs²)
  std::vector<size_t> cuts{0};
  for (size_t i = 1; i < v.size(); ++i) {
    if (!less(v[i], v[i - 1])) continue;
    cuts.push_back(i);
    if (cuts.size() > kMaxRuns) {
      std::stable_sort(v.begin(), v.end(), less);
      return;
    }
  }
  cuts.push_back(v.size());
  // Runs [cuts[k], cuts[k + 1]); merge the neighbours k, k + 1 whose sum is least until one is left.
  while (cuts.size() > 2) {
    size_t best = 0;
    for (size_t k = 1; k + 2 < cuts.size(); ++k)
      if (cuts[k + 2] - cuts[k] < cuts[best + 2] - cuts[best]) best = k;
    std::inplace_merge(v.begin() + ptrdiff_t(cuts[best]), v.begin() + ptrdiff_t(cuts[best + 1]),
                       v.begin() + ptrdiff_t(cuts[best + 2]), less);
    cuts.erase(cuts.begin() + ptrdiff_t(best + 1));
  }
}

}  // namespace trainscope::viewer
