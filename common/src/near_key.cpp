// near_key.cpp — see near_key.h.
#include "trainscope/common/near_key.h"

#include <algorithm>
#include <cstdint>

namespace trainscope::keys {

size_t editDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i)
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[a.size()][b.size()];
}

std::pair<std::string, size_t> nearestKey(const std::string& key, const std::vector<std::string>& known) {
  std::pair<std::string, size_t> best{"", SIZE_MAX};
  for (const auto& k : known) {
    const size_t d = editDistance(key, k);
    if (d < best.second) best = {k, d};
  }
  return best;
}

bool closeTo(const std::string& key, const std::pair<std::string, size_t>& near) {
  return near.second <= 2 && 3 * near.second < std::max(key.size(), near.first.size());
}

}  // namespace trainscope::keys
