// viewer_gen — writes a synthetic training trace for the viewer benchmark (bench/viewer_bench.sh):
//   trainscope_bench_viewer_gen OUT.db EVENTS RANKS [STEPS]
#include <cstdio>
#include <algorithm>
#include <cstdlib>
#include <string>

#include "trainscope/viewer/details.h"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s OUT.db EVENTS RANKS [STEPS]\n", argv[0]);
    return 2;
  }
  trainscope::viewer::SyntheticOptions o;
  o.ranks = std::atoi(argv[3]);
  o.events_per_rank = std::atoll(argv[2]) / std::max(1, o.ranks);
  o.steps = argc > 4 ? std::atoi(argv[4]) : 10;
  trainscope::viewer::writeSyntheticTrace(argv[1], o);
  return 0;
}
