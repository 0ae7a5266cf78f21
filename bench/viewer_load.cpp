// viewer_load — the viewer's two passes over a run database without a window, for profiling the
// loader (perf record) and comparing its phases (bench/viewer_bench.sh measures the whole app):
//   trainscope_bench_viewer_load DB [THREADS]
// prints the open (loadTrace: read, lanes, levels, links), the model's bytes per event, the
// correlation index, and the run summary the Steps tab waits for (loadSummary from the loaded lanes),
// then the same summary read from the file as `report` does (left out with
// TRAINSCOPE_BENCH_LANES_ONLY=1), each in seconds. TRAINSCOPE_VIEWER_TIMING=1 adds the open's phases.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>

#include "trainscope/viewer/model.h"
#include "trainscope/viewer/query.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DB [THREADS]\n", argv[0]);
    return 2;
  }
  namespace v = trainscope::viewer;
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point t0) { return std::chrono::duration<double>(clock::now() - t0).count(); };
  try {
    const int threads = argc > 2 ? std::atoi(argv[2]) : 0;
    auto t0 = clock::now();
    const v::Trace t = v::loadTrace(argv[1], nullptr, threads, /*summary=*/false);
    const double open = seconds(t0);
    const double events = double(std::max<int64_t>(1, t.event_count));
    std::printf("open %.3f s | %lld events, %.1f MiB, %.1f B/event\n", open, (long long)t.event_count,
                double(t.bytes()) / (1 << 20), double(t.bytes()) / events);
    t0 = clock::now();
    const v::CorrelationIndex index(t);
    std::printf("correlation index %.3f s\n", seconds(t0));
    t0 = clock::now();
    const auto from_lanes = v::loadSummary(argv[1], nullptr, &t);
    std::printf("summary from the lanes (the Steps tab) %.3f s | %zu ranks\n", seconds(t0),
                from_lanes ? from_lanes->ranks.size() : size_t(0));
    if (!std::getenv("TRAINSCOPE_BENCH_LANES_ONLY")) {
      t0 = clock::now();
      const auto from_file = v::loadSummary(argv[1]);
      std::printf("summary from the file (report's) %.3f s | %zu ranks\n", seconds(t0),
                  from_file ? from_file->ranks.size() : size_t(0));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
