// sort_runs.h — a stable sort for what arrives as a few sorted runs (the loader's tracks: one run
// per table in storage order; correlation ids: one run per lane). Internal to the viewer's model.
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace trainscope::viewer {

// Sorts v by less, stably: its sorted runs merged pairwise (O(n log runs), nothing moved when v is
// already sorted); v of more than kMaxRuns runs is sorted whole.
template <class T, class Less>
void sortRuns(std::vector<T>& v, Less less) {
  constexpr size_t kMaxRuns = 64;
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
  while (cuts.size() > 2) {
    std::vector<size_t> next{0};
    for (size_t k = 0; k + 1 < cuts.size(); k += 2) {
      const size_t end = k + 2 < cuts.size() ? cuts[k + 2] : cuts[k + 1];
      if (k + 2 < cuts.size())
        std::inplace_merge(v.begin() + ptrdiff_t(cuts[k]), v.begin() + ptrdiff_t(cuts[k + 1]), v.begin() + ptrdiff_t(end),
                           less);
      next.push_back(end);
    }
    cuts = std::move(next);
  }
}

}  // namespace trainscope::viewer
