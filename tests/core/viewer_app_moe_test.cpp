// viewer_app_moe_test.cpp — trainscope-viewer on a traced mixture-of-experts run (issue 23): a real
// 2-rank EP 2 run of tiny-moe through `trainscope run --trace`, its all-to-alls on each rank's
// collectives track, the "moe:" counter tracks the model makes of expert_load, and the app drawing
// both. The counters' arithmetic on hand-made rows is in moe_load_test.cpp; the runtime's routing
// facts in tests/runtime/moe_train_test.cpp.
#include <algorithm>
#include <string>
#include <vector>

#include "viewer_app_support.h"

namespace {

constexpr int64_t kSteps = 3, kLayers = 2, kMicroBatches = 2, kExperts = 4;

// Every event of a rank's tracks of one kind whose name is `name`.
int64_t countNamed(const v::Trace& t, int64_t rank, v::TrackKind kind, const std::string& name) {
  int64_t n = 0;
  for (const v::Track& tr : t.tracks)
    if (tr.rank == rank && tr.kind == kind)
      for (const v::Lane& l : tr.lanes)
        for (const v::Event& e : l.events) n += t.names[e.name] == name;
  return n;
}

const v::Track* counter(const v::Trace& t, int64_t rank, const std::string& label) {
  for (const v::Track& tr : t.tracks)
    if (tr.rank == rank && tr.kind == v::TrackKind::Counter && tr.label == label) return &tr;
  return nullptr;
}

}  // namespace

TEST(ViewerAppMoe, OpensATracedExpertParallelRunWithItsAllToAllsAndExpertLoadTracks) {
  const std::string run = tempPath("moe_ep2_traced.db");
  auto r = trainscope::testing::cli(
      "run --workload tiny-moe --seq 16 --mbs 2 --ga 2 --steps 3 --nproc 2 --ep 2"
      " --device cpu --trace " +
      run + " --overwrite -q");
  ASSERT_EQ(r.status, 0) << r.output;
  const v::Trace t = v::loadTrace(run);
  ASSERT_EQ(t.ranks.size(), 2u);
  for (int64_t rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    // Per MoE layer and micro-batch: dispatch and combine forward, their reverses in backward.
    EXPECT_EQ(countNamed(t, rank, v::TrackKind::Collectives, "all_to_all (ep)"), kSteps * kLayers * kMicroBatches * 4);
    // One sample per step at the step's start. Drop-less: nothing dropped; the busiest expert takes
    // between the mean (1) and every assignment of top-2 routing (E / k = 2).
    const v::Track* imbalance = counter(t, rank, "moe: imbalance (max/mean)");
    const v::Track* dropped = counter(t, rank, "moe: dropped %");
    ASSERT_NE(imbalance, nullptr);
    ASSERT_NE(dropped, nullptr);
    ASSERT_EQ(imbalance->counter.values.size(), size_t(kSteps));
    ASSERT_EQ(dropped->counter.values.size(), size_t(kSteps));
    for (int64_t k = 0; k < kSteps; ++k) {
      EXPECT_GE(imbalance->counter.values[size_t(k)], 1.0) << "step " << k;
      EXPECT_LE(imbalance->counter.values[size_t(k)], double(kExperts) / 2) << "step " << k;
      EXPECT_EQ(dropped->counter.values[size_t(k)], 0.0) << "step " << k;
      EXPECT_EQ(imbalance->counter.ts[size_t(k)], *t.stepStart(k, rank)) << "step " << k;
    }
  }
  // Drawn: each rank's collectives row and both MoE counters are tracks of the app's layout.
  Shot s = shoot(run, "", "moe_ep2");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  for (int64_t rank = 0; rank < 2; ++rank)
    for (const char* label : {"collectives", "moe: imbalance (max/mean)", "moe: dropped %"}) {
      bool drawn = false;
      for (const auto& tr : s.layout["tracks"])
        drawn = drawn || (tr["rank"] == rank && tr["label"] == label && float(tr["y1"]) > float(tr["y0"]));
      EXPECT_TRUE(drawn) << "rank " << rank << " " << label << "\n" << s.layout["tracks"].dump();
    }
}
