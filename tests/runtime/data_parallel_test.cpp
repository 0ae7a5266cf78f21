// data_parallel_test.cpp — makeDataParallel, the one place that picks the class for a ZeRO stage
// (parallel/data_parallel.h). On one rank every stage runs on GradSync, whole tensors, no layer
// hooks and no group to sum the norm over (ZeRO-3 over a shard group of one runs ZeRO-1); the leaves
// forward uses are the compute weights, and the shards what the optimizer steps. The many-rank
// classes are checked against one process by zero_test.cpp, zero3_test.cpp and parallel_test.cpp.
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include "parallel/data_parallel.h"
#include "util.h"

namespace rt = trainscope::runtime;

namespace {

TEST(DataParallel, EveryZeroStageOnOneRankHoldsWholeTensorsWithoutHooksOrNormGroup) {
  for (rt::ZeroStage zero : {rt::ZeroStage::None, rt::ZeroStage::OptimizerStates, rt::ZeroStage::Gradients,
                             rt::ZeroStage::Parameters}) {
    SCOPED_TRACE(static_cast<int>(zero));
    rt::TrainConfig cfg = trainscope::testing::tinyConfig();
    cfg.zero = zero;
    rt::resolve(cfg);
    auto comm = rt::Comm::single();
    const rt::StageSpec stage = rt::StageSpec::of(cfg.model.n_layer, 1, 0).withModel(cfg.model);
    std::vector<at::Tensor> master = rt::initGpt(cfg.model, cfg.seed, at::kCPU).flat();
    std::vector<at::Tensor> compute = master;
    const std::vector<at::Tensor> before = master;
    auto dp = rt::makeDataParallel(cfg, *comm, stage, master, compute, std::vector<bool>(master.size(), true),
                                   at::kFloat, at::Device(at::kCPU));
    ASSERT_NE(dp, nullptr);
    EXPECT_EQ(dp->layerHooks(), nullptr);
    EXPECT_EQ(dp->normGroup(), nullptr);
    ASSERT_EQ(dp->leaves().size(), master.size());
    ASSERT_EQ(dp->shards().size(), master.size());
    for (size_t i = 0; i < master.size(); ++i) {
      EXPECT_TRUE(dp->leaves()[i].is_same(compute[i])) << i;
      EXPECT_TRUE(at::equal(master[i], before[i])) << i;  // re-seated (ZeRO-1/2) with the same values
      const rt::DataParallel::Shard& sh = dp->shards()[i];
      EXPECT_TRUE(sh.master.is_same(master[sh.param])) << i;
      EXPECT_EQ(sh.grad.sizes(), master[sh.param].sizes()) << i;
      EXPECT_EQ(dp->pieceOffset(sh.param), 0) << i;
    }
    EXPECT_TRUE(dp->handsInDigest(true));
    EXPECT_FALSE(dp->handsInDigest(false));
  }
}

}  // namespace
