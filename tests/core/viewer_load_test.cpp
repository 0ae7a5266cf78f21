// viewer_load_test.cpp — the loader's reading path at the scale it is built for: the span reader's
// columns per table (RunReader::spans against forEach), a thread and a stream whose rows span many
// chunks and several tables loaded whole, sorted and with each correlation id on its own event,
// alike on one worker or two; the run summary from the loaded lanes equal to the file's; lanes of
// equal events in input order; the correlation index's first launch and all launched work, per rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "../../viewer/src/sort_runs.h"
#include "../common/cli.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/store.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/query.h"

namespace v = trainscope::viewer;
namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

namespace {

// One rank, thread 5 and stream 7 of device 0. Host ops and API calls: `n` each, in time order,
// more than a chunk of rows (2^18); 40 ranges over the first 40 ms stored newest first (40 runs);
// kernels, then copies, then sets, each in time order (three runs on one stream). A correlation id
// is its event's start / 10 (copies and sets: + 1 million, so no launch of theirs is in the trace),
// none on every 7th kernel. Four steps over the whole.
std::string manyChunks(int64_t n) {
  const std::string path = tempPath("load_chunks_" + std::to_string(n) + ".db");
  db::RunStore s(path, {true});
  s.setMeta("world_size", "1");
  const db::StringId op = s.intern("aten::mm"), api = s.intern("cudaLaunchKernel"), k = s.intern("gemm"),
                     range = s.intern("layer");
  s.begin();
  std::vector<db::HostOp> ops;
  std::vector<db::ApiCall> apis;
  std::vector<db::Kernel> kernels;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = 1'000 * i;
    ops.push_back({t, t + 600, op, 5, -1, db::kNoString, 0});
    apis.push_back({t + 100, t + 200, 5, api, (t + 100) / 10, 0, 0});
    db::Kernel kr{t + 300, t + 900, 0, 7, k, i % 7 == 0 ? -1 : (t + 300) / 10};
    kernels.push_back(kr);
  }
  s.put(ops);
  s.put(apis);
  s.put(kernels);
  std::vector<db::Range> ranges;
  for (int64_t i = 40; i-- > 0;) ranges.push_back({1'000'000 * i, 1'000'000 * i + 999'999, range, range, 5, 0, 0, 0});
  s.put(ranges);
  std::vector<db::Memcpy> copies;
  std::vector<db::Memset> sets;
  for (int64_t i = 0; i < 1000; ++i) {
    const int64_t t = 1'000 * i + 950;
    db::Memcpy m{t, t + 20, 0, 7, t / 10 + 1'000'000, 1, 4096, 0};
    copies.push_back(m);
    db::Memset z{t + 30, t + 40, 0, 7, t / 10 + 2'000'000, 64, 0, 0};
    sets.push_back(z);
  }
  s.put(copies);
  s.put(sets);
  s.commit();
  for (int64_t k = 0; k < 4; ++k) {  // four steps over the run
    db::Step st;
    st.step = k;
    st.tokens = 1024;
    st.start_ns = k * n * 250;
    st.step_time_ns = n * 250;
    st.tokens_per_s = 1024 / (double(st.step_time_ns) * 1e-9);
    s.appendStep(st);
  }
  s.createIndexes();
  s.close();
  return path;
}

// Every lane sorted by start (longest first on ties), each correlation id its event's.
void expectSortedAndCorrelated(const v::Track& t, int64_t& events) {
  for (const v::Lane& l : t.lanes) {
    events += int64_t(l.events.size());
    for (size_t i = 1; i < l.events.size(); ++i) ASSERT_LE(l.events[i - 1].start, l.events[i].start);
    if (l.correlation.empty()) continue;
    ASSERT_EQ(l.correlation.size(), l.events.size());
    for (size_t i = 0; i < l.events.size(); ++i) {
      const v::Event& e = l.events[i];
      const int64_t c = l.correlation[i];
      if (e.kind == v::EventKind::Memcpy) ASSERT_EQ(c, e.start / 10 + 1'000'000);
      else if (e.kind == v::EventKind::Memset) ASSERT_EQ(c, (e.start - 30) / 10 + 2'000'000);
      else if (e.kind == v::EventKind::Kernel) ASSERT_TRUE(c == -1 || c == e.start / 10) << c << " at " << e.start;
      else if (e.kind == v::EventKind::ApiCall) ASSERT_EQ(c, e.start / 10);
      else ASSERT_EQ(c, -1);
    }
  }
}

}  // namespace

TEST(ViewerLoad, SpansReadEachTablesColumns) {
  const std::string path = manyChunks(3000);
  db::RunReader r(path);
  auto spans = [&](const char* table) {
    std::vector<db::SpanRow> rows;
    r.spans(table, 0, r.rowBound(table) + 1, rows);
    return rows;
  };
  const auto kernels = spans("kernels");
  std::vector<db::Kernel> want_k;
  r.forEach<db::Kernel>([&](const db::Kernel& k) { want_k.push_back(k); });
  ASSERT_EQ(kernels.size(), want_k.size());
  for (size_t i = 0; i < kernels.size(); ++i) {
    EXPECT_EQ(kernels[i].start_ns, want_k[i].start_ns);
    EXPECT_EQ(kernels[i].end_ns, want_k[i].end_ns);
    EXPECT_EQ(kernels[i].name, want_k[i].name);
    EXPECT_EQ(kernels[i].a, 0);
    EXPECT_EQ(kernels[i].b, 7);
    EXPECT_EQ(kernels[i].correlation, want_k[i].correlation);  // -1 for the NULLs
  }
  const auto apis = spans("api_calls");
  ASSERT_EQ(apis.size(), 3000u);
  EXPECT_EQ(apis[2].a, 5);
  EXPECT_EQ(apis[2].correlation, (2'000 + 100) / 10);
  EXPECT_EQ(apis[2].name, *r.find("cudaLaunchKernel"));
  const auto copies = spans("memcpy");
  ASSERT_EQ(copies.size(), 1000u);
  EXPECT_EQ(copies[1].kind, 1);  // MemcpyKind HtoD
  EXPECT_EQ(copies[1].name, db::kNoString);
  EXPECT_EQ(copies[1].correlation, 1'950 / 10 + 1'000'000);
  const auto sets = spans("memset");
  ASSERT_EQ(sets.size(), 1000u);
  EXPECT_EQ(sets[0].b, 7);
  EXPECT_EQ(sets[0].kind, 0);
  const auto ops = spans("host_ops");
  ASSERT_EQ(ops.size(), 3000u);
  EXPECT_EQ(ops[0].a, 5);
  EXPECT_EQ(ops[0].b, 0);
  EXPECT_EQ(ops[0].correlation, -1);
  EXPECT_EQ(ops[0].name, *r.find("aten::mm"));
}

// 300,000 host ops and API calls: two chunks each, so that two workers take turns on them.
TEST(ViewerLoad, ATrackOfManyChunksAndTablesLoadsWholeSortedAndCorrelated) {
  const int64_t n = 300'000;
  const std::string path = manyChunks(n);
  const v::Trace one = v::loadTrace(path, nullptr, 1, false);
  const v::Trace two = v::loadTrace(path, nullptr, 2, false);
  for (const v::Trace* t : {&one, &two}) {
    int64_t thread_events = 0, stream_events = 0;
    for (const v::Track& tr : t->tracks) {
      if (tr.kind == v::TrackKind::Thread) expectSortedAndCorrelated(tr, thread_events);
      if (tr.kind == v::TrackKind::Stream) expectSortedAndCorrelated(tr, stream_events);
    }
    EXPECT_EQ(thread_events, 2 * n + 40);
    EXPECT_EQ(stream_events, n + 2000);
  }
  // The same lanes, event for event, whichever worker read which chunk.
  ASSERT_EQ(one.tracks.size(), two.tracks.size());
  for (size_t i = 0; i < one.tracks.size(); ++i) {
    ASSERT_EQ(one.tracks[i].lanes.size(), two.tracks[i].lanes.size());
    for (size_t l = 0; l < one.tracks[i].lanes.size(); ++l) {
      const v::Lane &a = one.tracks[i].lanes[l], &b = two.tracks[i].lanes[l];
      ASSERT_EQ(a.events.size(), b.events.size());
      for (size_t k = 0; k < a.events.size(); ++k) {
        ASSERT_EQ(a.events[k].start, b.events[k].start);
        ASSERT_EQ(a.events[k].end, b.events[k].end);
        ASSERT_EQ(a.events[k].name, b.events[k].name);
      }
      EXPECT_EQ(a.correlation, b.correlation);
    }
  }
  // A range encloses its ops: one lane above them.
  const v::Track* thread = nullptr;
  for (const v::Track& tr : one.tracks)
    if (tr.kind == v::TrackKind::Thread) thread = &tr;
  ASSERT_NE(thread, nullptr);
  ASSERT_EQ(thread->lanes.size(), 3u);
  int64_t layers = 0;
  for (const v::Event& e : thread->lanes[0].events) layers += one.names[e.name] == "layer";
  EXPECT_EQ(layers, 40);
  EXPECT_EQ(one.names[thread->lanes[0].events[0].name], "layer");
  EXPECT_EQ(one.names[thread->lanes[1].events[0].name], "aten::mm");
}

// The Steps tab's summary from the lanes already loaded is the file's, number for number: device
// work in lanes and on two workers, unattributed copies, sets and kernels without a launch.
TEST(ViewerLoad, TheSummaryFromTheLoadedLanesIsTheFilesSummary) {
  const std::string chunks = manyChunks(3000), generated = tempPath("load_summary_gen.db");
  v::writeSyntheticTrace(generated, {2, 6'000, 3});
  for (const std::string& path : {chunks, generated}) {
    const v::Trace t = v::loadTrace(path, nullptr, 2, false);
    const auto from_file = v::loadSummary(path);
    const auto from_lanes = v::loadSummary(path, nullptr, &t);
    ASSERT_TRUE(from_file && from_lanes) << path;
    ASSERT_FALSE(from_file->ranks.empty());
    EXPECT_TRUE(from_file->ranks[0].breakdown) << path;
    EXPECT_EQ(db::summaryJson(*from_lanes), db::summaryJson(*from_file)) << path;
  }
  EXPECT_GT(v::loadSummary(chunks)->ranks[0].unattributed_events, 2000);
}

// sortRuns against std::stable_sort: runs of every size (one, a few, many tiny ones beside large
// ones, more than the merge takes), keys with many ties (stability: the payload says the input order).
TEST(ViewerLoad, SortRunsIsAStableSort) {
  std::mt19937_64 rng(35);
  for (int runs : {1, 2, 3, 7, 63, 64, 65, 300, 2000}) {
    std::vector<std::pair<int, int>> items;  // (key, input position)
    for (int r = 0; r < runs; ++r) {
      const int len = r % 5 == 0 ? 2000 : 1 + int(rng() % 20);
      int key = int(rng() % 1000);
      for (int i = 0; i < len; ++i, key += int(rng() % 3)) items.emplace_back(key, int(items.size()));
    }
    auto want = items;
    auto byKey = [](const std::pair<int, int>& a, const std::pair<int, int>& b) { return a.first < b.first; };
    std::stable_sort(want.begin(), want.end(), byKey);
    v::sortRuns(items, byKey);
    EXPECT_EQ(items, want) << runs << " runs";
  }
}

// Equal events (same start and end) keep their order in the input: the first encloses the second.
TEST(ViewerLoad, EqualEventsKeepTheirInputOrder) {
  v::Track t;
  const v::Event late{500, 600, 0, v::EventKind::Range}, first{0, 1000, 1, v::EventKind::Range},
      second{0, 1000, 2, v::EventKind::Range};
  v::buildLanes(t, {late, first, second, {2000, 3000, 3, v::EventKind::Range}});
  ASSERT_EQ(t.lanes.size(), 3u);
  EXPECT_EQ(t.lanes[0].events[0].name, 1u);
  EXPECT_EQ(t.lanes[1].events[0].name, 2u);
  EXPECT_EQ(t.lanes[2].events[0].name, 0u);
  EXPECT_EQ(t.lanes[0].events[1].name, 3u);
}

// Launches and launched work per rank: a correlation id launched twice is the first call's (in
// track order); every kernel or copy of an id is listed, in track order; ids of another rank never
// join; ids that fall within a lane (not one sorted run) are found all the same.
TEST(ViewerLoad, CorrelationIndexFindsTheFirstLaunchAndAllItsWork) {
  v::Trace trace;
  auto track = [&](int64_t rank, v::TrackKind kind, std::vector<v::Event> ev, std::vector<int64_t> corr) {
    v::Track t;
    t.kind = kind;
    t.rank = rank;
    v::Lane lane;
    lane.events = std::move(ev);
    lane.correlation = std::move(corr);
    t.lanes.push_back(std::move(lane));
    trace.tracks.push_back(std::move(t));
  };
  const auto api = v::EventKind::ApiCall, kernel = v::EventKind::Kernel;
  track(0, v::TrackKind::Thread, {{0, 10, 0, api}, {20, 30, 0, api}, {40, 50, 0, api}, {60, 70, 0, api}}, {9, 3, 9, 5});
  track(0, v::TrackKind::Stream, {{100, 110, 1, kernel}, {120, 130, 1, kernel}, {140, 150, 1, kernel}}, {5, 9, 3});
  track(0, v::TrackKind::Stream, {{200, 210, 2, v::EventKind::Memcpy}}, {9});
  track(1, v::TrackKind::Thread, {{0, 10, 0, api}}, {3});
  track(1, v::TrackKind::Stream, {{300, 310, 1, kernel}}, {3});
  const v::CorrelationIndex idx(trace);
  // Rank 0's id 9: launched at 0 and again at 40 — the first; its work on both streams.
  const auto l9 = idx.launchOf({1, 0, 1});
  ASSERT_TRUE(l9);
  EXPECT_EQ(*l9, (v::EventRef{0, 0, 0}));
  EXPECT_EQ(idx.launchedBy({0, 0, 0}), (std::vector<v::EventRef>{{1, 0, 1}, {2, 0, 0}}));
  EXPECT_EQ(idx.launchedBy({0, 0, 2}), (std::vector<v::EventRef>{{1, 0, 1}, {2, 0, 0}}));
  EXPECT_EQ(*idx.launchOf({1, 0, 2}), (v::EventRef{0, 0, 1}));
  EXPECT_EQ(*idx.launchOf({1, 0, 0}), (v::EventRef{0, 0, 3}));
  // Rank 1's id 3 is its own.
  EXPECT_EQ(*idx.launchOf({4, 0, 0}), (v::EventRef{3, 0, 0}));
  EXPECT_EQ(idx.launchedBy({3, 0, 0}), (std::vector<v::EventRef>{{4, 0, 0}}));
  EXPECT_EQ(idx.launchedBy({0, 0, 1}), (std::vector<v::EventRef>{{1, 0, 2}}));
}
