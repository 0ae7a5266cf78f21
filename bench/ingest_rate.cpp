// ingest_rate.cpp — how fast the tracer stores events: N range events recorded from one thread as
// fast as it can (intern'd names, the real background writer, WAL, one transaction per batch),
// timed from the first record until every row is in the database (flush), and until close() has
// also built the indexes.
// Usage: trainscope_bench_ingest [N=4000000] [path=/tmp/trainscope-ingest.db]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "trainscope/tracer/trace.h"

int main(int argc, char** argv) {
  namespace tr = trainscope::tracer;
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 4000000;
  const std::string path = argc > 2 ? argv[2] : "/tmp/trainscope-ingest.db";
  tr::Tracer t(path, 0, tr::TraceLevel::All, size_t(1) << 22);
  const uint32_t names[4] = {t.intern("forward"), t.intern("backward"), t.intern("layer"), t.intern("optimizer")};
  const uint32_t domain = t.intern("trainscope");
  const auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) t.record(tr::RangeEvent{i * 10, i * 10 + 5, names[i & 3], domain, 0, int32_t(i & 7), 0});
  const auto t1 = std::chrono::steady_clock::now();
  t.flush();
  const auto tf = std::chrono::steady_clock::now();
  t.close();
  const auto t2 = std::chrono::steady_clock::now();
  const auto s = t.stats()[tr::kRanges];
  const double total = std::chrono::duration<double>(t2 - t0).count();
  const double ingest = std::chrono::duration<double>(tf - t0).count();
  std::printf("{\"events\": %lld, \"stored\": %lld, \"dropped\": %lld, \"record_s\": %.3f, \"ingest_s\": %.3f, "
              "\"total_with_indexes_s\": %.3f, \"ingest_events_per_s\": %.0f, \"events_per_s_with_indexes\": %.0f}\n",
              static_cast<long long>(s.emitted), static_cast<long long>(s.stored), static_cast<long long>(s.dropped),
              std::chrono::duration<double>(t1 - t0).count(), ingest, total, double(s.stored) / ingest,
              double(s.stored) / total);
  std::remove(path.c_str());
  return s.emitted == s.stored + s.dropped ? 0 : 1;
}
