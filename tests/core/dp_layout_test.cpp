// dp_layout_test.cpp — the data-parallel layout's rules (models/dp_layout.h) on hand-sized slots:
// the stage split, DDP and ZeRO-2 buckets (backward order, padding, each rank's slice of a tensor),
// ZeRO-1's whole-tensor partition and ZeRO-3's units.
#include <gtest/gtest.h>

#include <vector>

#include "trainscope/models/dp_layout.h"
#include "trainscope/models/memory_model.h"
#include "trainscope/tuner/space.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::models;
using trainscope::runconfig::ZeroStage;

namespace {

std::vector<tn::Slot> slotsOf(const std::vector<int64_t>& sizes, const std::vector<int64_t>& layers = {}) {
  std::vector<tn::Slot> s;
  for (size_t i = 0; i < sizes.size(); ++i) s.push_back({"t" + std::to_string(i), {sizes[i]}, layers.empty() ? -1 : layers[i]});
  return s;
}

}  // namespace

TEST(DpLayoutRules, StageSplitGivesTheRemainderToTheFirstChunksAndInterleaves) {
  EXPECT_EQ(tn::stageLayout(5, 2, 0), (std::vector<tn::Range>{{0, 3}}));
  EXPECT_EQ(tn::stageLayout(5, 2, 1), (std::vector<tn::Range>{{3, 5}}));
  EXPECT_EQ(tn::stageLayout(8, 2, 0, 2), (std::vector<tn::Range>{{0, 2}, {4, 6}}));
  EXPECT_EQ(tn::stageLayout(8, 2, 1, 2), (std::vector<tn::Range>{{2, 4}, {6, 8}}));
}

TEST(DpLayoutRules, BucketsRunBackwardAndZeroTwoPadsAndSplitsThem) {
  // 35 elements of fp32 per bucket: t2 (30) alone, then t1 (20) and t0 (10).
  const auto slots = slotsOf({10, 20, 30});
  const tn::DpLayout ddp = tn::dpLayout(slots, ZeroStage::None, 4, 4 * 35);
  ASSERT_EQ(ddp.groups.size(), 2u);
  EXPECT_EQ(ddp.groups[0].tensors, (std::vector<size_t>{2}));
  EXPECT_EQ(ddp.groups[1].tensors, (std::vector<size_t>{1, 0}));
  EXPECT_EQ(ddp.groups[1].padded, 30);  // not sharded: no padding
  const tn::DpLayout z2 = tn::dpLayout(slots, ZeroStage::Gradients, 4, 4 * 35);
  const tn::ShardGroup& b = z2.groups[0];
  EXPECT_EQ(b.padded, 32);
  EXPECT_EQ(b.shard, 8);
  EXPECT_EQ(b.local(0, 3), (tn::Range{24, 30}));  // the last rank's 8 hold 6 real elements
  EXPECT_EQ(z2.groups[1].ranges[1], (tn::Range{20, 30}));
  EXPECT_EQ(z2.groups[1].local(1, 2), (tn::Range{0, 4}));   // t0, [20, 30), starts in rank 2's [16, 24)
  EXPECT_EQ(z2.groups[1].local(1, 3), (tn::Range{4, 10}));
  EXPECT_TRUE(z2.groups[1].local(1, 0).empty());
  EXPECT_EQ(z2.padded(), 32 + 32);
  // An unmanaged tensor stays outside.
  auto some = slots;
  some[2].managed = false;
  const tn::DpLayout z2b = tn::dpLayout(some, ZeroStage::Gradients, 4, 4 * 35);
  EXPECT_EQ(z2b.group_of[2], -1);
  EXPECT_EQ(z2b.groups.size(), 1u);
}

TEST(DpLayoutRules, ZeroOneGivesWholeTensorsLargestFirstToTheLeastLoadedRank) {
  // 9 → rank 0, 5 → rank 1, 4 → rank 1, 3 → rank 0 (tie: the lower rank); loads 12 and 9.
  const tn::DpLayout l = tn::dpLayout(slotsOf({5, 9, 3, 4}), ZeroStage::OptimizerStates, 2, 0);
  const tn::ShardGroup& g = l.groups[0];
  EXPECT_EQ(g.shard, 12);
  EXPECT_EQ(g.padded, 24);
  EXPECT_EQ(g.ranges, (std::vector<tn::Range>{{12, 17}, {0, 9}, {9, 12}, {17, 21}}));
  EXPECT_EQ(g.local(0, 1), (tn::Range{0, 5}));
  EXPECT_TRUE(g.local(0, 0).empty());
}

TEST(DpLayoutRules, ZeroThreeUnitsAreTheLayersAndTheRest) {
  const tn::DpLayout l = tn::dpLayout(slotsOf({7, 3, 4, 4, 6, 2}, {-1, -1, 0, 0, 1, -1}), ZeroStage::Parameters, 4, 0);
  ASSERT_EQ(l.groups.size(), 3u);
  EXPECT_EQ(l.groups[0].tensors, (std::vector<size_t>{0, 1, 5}));
  EXPECT_EQ(l.groups[0].numel, 12);
  EXPECT_EQ(l.groups[0].shard, 3);
  EXPECT_EQ(l.groups[1].tensors, (std::vector<size_t>{2, 3}));
  EXPECT_EQ(l.groups[2].padded, 8);
  EXPECT_EQ(l.groups[0].local(0, 2), (tn::Range{6, 7}));  // wte-like tensor 0 is [0, 7): rank 2 holds its last
}

// The bucket size is the plan's: planOf and runConfigOf carry it, and ZeRO-2's priced buckets follow it
// (a second constant priced 25 MiB whatever --bucket-mb said).
TEST(DpLayoutRules, ThePlanCarriesTheBucketSizeAndZeroTwoIsPricedByIt) {
  trainscope::runconfig::TrainConfig c;
  c.bucket_mb = 1.5;
  tn::Plan p = tn::planOf(c);
  EXPECT_EQ(p.bucket_mb, 1.5);
  const auto w = trainscope::workloads::load("small-cpu");
  EXPECT_EQ(trainscope::tuner::runConfigOf(w, p).bucket_mb, 1.5);
  p.dp = 2, p.mbs = 2, p.gbs = 8, p.seq = 64, p.cpu = true;
  p.precision = trainscope::runconfig::Precision::FP32;
  p.zero = ZeroStage::Gradients;
  p.bucket_mb = 25;
  const int64_t whole = tn::predictMemory(w, p).peak();
  p.bucket_mb = 1;
  EXPECT_LT(tn::predictMemory(w, p).peak(), whole - (8 << 20));
  p.zero = ZeroStage::OptimizerStates;  // no buckets priced under ZeRO-1
  const int64_t one = tn::predictMemory(w, p).peak();
  p.bucket_mb = 25;
  EXPECT_EQ(tn::predictMemory(w, p).peak(), one);
}
