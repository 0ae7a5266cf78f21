// profile_test.cpp — the measured time model's arithmetic (tuner/profile.h): which plans share a
// layer shape, per-field medians over runs, and a step composed as a pipeline over its stages.
#include <gtest/gtest.h>

#include <functional>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/store.h"
#include "trainscope/tracer/trace.h"
#include "trainscope/tuner/cost_model.h"
#include "trainscope/workloads/workload.h"

namespace tn = trainscope::tuner;
namespace db = trainscope::rundb;
namespace tr = trainscope::tracer;
using trainscope::runconfig::Checkpointing;

namespace {

tn::Plan plan(int64_t dp, int64_t tp, int64_t pp, int64_t mbs, int64_t gbs) {
  tn::Plan p;
  p.dp = dp, p.tp = tp, p.pp = pp, p.mbs = mbs, p.gbs = gbs, p.seq = 64;
  p.precision = trainscope::runconfig::Precision::FP32;
  p.cpu = true;
  return p;
}

tn::Cluster fastCpu() {
  tn::Cluster c = tn::loadCluster("cpu-local");
  c.intra_node.latency = 0;  // point-to-point sends cost nothing: the composition is then exact arithmetic
  c.intra_node.bandwidth = 1e30;
  return c;
}

}  // namespace

TEST(MeasuredCosts, LayerShapeIgnoresDpPpAndZeroButNotMicroBatchTpOrRanksPerNode) {
  const tn::Cluster c = tn::loadCluster("cpu-local");  // 2 CPU ranks per node
  EXPECT_EQ(tn::shapeKey(plan(2, 1, 1, 4, 8), c), tn::shapeKey(plan(1, 1, 2, 4, 8), c));
  tn::Plan z = plan(2, 1, 1, 4, 8);
  z.zero = trainscope::runconfig::ZeroStage::OptimizerStates;
  z.ckpt = Checkpointing::Full;
  EXPECT_EQ(tn::shapeKey(z, c), tn::shapeKey(plan(2, 1, 1, 4, 16), c));
  EXPECT_NE(tn::shapeKey(plan(2, 1, 1, 4, 8), c), tn::shapeKey(plan(2, 1, 1, 2, 8), c));  // micro-batch
  EXPECT_NE(tn::shapeKey(plan(2, 1, 1, 4, 8), c), tn::shapeKey(plan(1, 2, 1, 4, 8), c));  // TP
  EXPECT_NE(tn::shapeKey(plan(2, 1, 1, 4, 8), c), tn::shapeKey(plan(1, 1, 1, 4, 8), c));  // one rank has the cores
}

TEST(MeasuredCosts, EachFieldIsTheMedianOverTheRunsThatMeasuredIt) {
  tn::MeasuredCosts m;
  tn::LayerCosts a, b, d;
  a.layer_fwd_s = 1, b.layer_fwd_s = 3, d.layer_fwd_s = 2;
  a.recompute_full_s = 5;  // only one run was checkpointed
  a.dp_sync_bytes = 100, a.dp_sync_s = 0.5, b.dp_sync_bytes = 200, b.dp_sync_s = 0.75;
  m.add("k", a), m.add("k", b), m.add("k", d);
  const auto k = m.find("k");
  ASSERT_TRUE(k);
  EXPECT_DOUBLE_EQ(k->layer_fwd_s, 2);
  EXPECT_DOUBLE_EQ(k->recompute_full_s, 5);
  EXPECT_DOUBLE_EQ(k->dp_sync_bytes, 200);  // one run's pair, not medians of halves
  EXPECT_DOUBLE_EQ(k->dp_sync_s, 0.75);
  EXPECT_EQ(k->runs, 3);
  EXPECT_FALSE(m.find("other"));
}

TEST(MeasuredCosts, StepLevelCostsAreKeptPerZeroStageAndLayerCostsAreShared) {
  // ZeRO-1's optimizer range holds its all-gather and its DP sync is a reduce-scatter: a ZeRO-1
  // run's step-level costs must not price a ZeRO-0 candidate, nor the reverse. Layer costs do not
  // depend on ZeRO, so every run of the shape counts for them.
  tn::MeasuredCosts m;
  tn::LayerCosts z0, z1;
  z0.layer_fwd_s = 1, z1.layer_fwd_s = 3;
  z0.optimizer_s_per_param = 1e-9, z1.optimizer_s_per_param = 4e-9;
  z0.dp_sync_bytes = 800, z0.dp_sync_s = 0.5, z1.dp_sync_bytes = 800, z1.dp_sync_s = 0.25;
  z0.other_s = 0.125, z1.other_s = 0.0625;
  z1.zero = 1;
  m.add("k", z0), m.add("k", z1);
  EXPECT_EQ(m.zeroStages("k"), (std::vector<int64_t>{0, 1}));
  const auto a = m.find("k", 0), b = m.find("k", 1);
  ASSERT_TRUE(a && b);
  EXPECT_DOUBLE_EQ(a->layer_fwd_s, 2);  // the median over both
  EXPECT_DOUBLE_EQ(b->layer_fwd_s, 2);
  EXPECT_DOUBLE_EQ(a->optimizer_s_per_param, 1e-9);
  EXPECT_DOUBLE_EQ(b->optimizer_s_per_param, 4e-9);
  EXPECT_DOUBLE_EQ(a->dp_sync_s, 0.5);
  EXPECT_DOUBLE_EQ(b->dp_sync_s, 0.25);
  EXPECT_DOUBLE_EQ(a->other_s, 0.125);
  EXPECT_DOUBLE_EQ(b->other_s, 0.0625);
  EXPECT_EQ(a->runs, 1);
  EXPECT_EQ(b->zero, 1);
  EXPECT_EQ(m.anyDpSync(1)->second, 0.25);
  EXPECT_EQ(m.anyOther(1), 0.0625);
  EXPECT_EQ(tn::costsLabel("k", *b), "k zero1");
  // A stage no run used falls back to every run; the JSON keeps one row per shape and stage.
  tn::MeasuredCosts only0;
  only0.add("k", z0);
  EXPECT_DOUBLE_EQ(only0.find("k", 1)->optimizer_s_per_param, 1e-9);
  // Per field: a stage whose runs did not measure one (a pp > 1 run has no "other") borrows it
  // from the runs that did, rather than losing it.
  tn::MeasuredCosts pp_only;
  tn::LayerCosts pp0 = z0;
  pp0.other_s = -1, pp0.dp_sync_bytes = 0, pp0.dp_sync_s = 0;
  pp_only.add("k", pp0), pp_only.add("k", z1);
  EXPECT_DOUBLE_EQ(pp_only.find("k", 0)->other_s, 0.0625);
  EXPECT_DOUBLE_EQ(pp_only.find("k", 0)->dp_sync_s, 0.25);
  EXPECT_DOUBLE_EQ(pp_only.find("k", 0)->optimizer_s_per_param, 1e-9);  // its own stage's, measured
  EXPECT_EQ(pp_only.anyOther(0), 0.0625);
  const auto back = tn::costsFromJson(tn::costsJson(m));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].second.zero, 1);
  EXPECT_DOUBLE_EQ(back[1].second.dp_sync_s, 0.25);
}

TEST(MeasuredCosts, AStepIsComposedAsAPipelineOverItsStages) {
  const auto w = trainscope::workloads::load("small-cpu");  // 4 layers
  ASSERT_EQ(w.n_layer, 4);
  const tn::Cluster c = fastCpu();
  tn::LayerCosts k;
  k.layer_fwd_s = 1.0, k.layer_bwd_s = 2.0, k.recompute_full_s = 0.75, k.head_s = 0.5, k.embed_s = 0.25;
  k.optimizer_s_per_param = 0, k.other_s = 0.125;
  tn::Plan p = plan(1, 1, 2, 2, 8);  // pp 2, M = 4: 2 layers per stage
  tn::MeasuredCosts m;
  m.add(tn::shapeKey(p, c), k);
  auto t = tn::composeTime(w, p, c, m);
  ASSERT_TRUE(t);
  EXPECT_TRUE(t->measured);
  // t0 = 2·(1 + 2) + 0.25 = 6.25, t1 = 2·(1 + 2) + 0.5 = 6.5; step = Σ t_s + (M − 1)·max t_s + ….
  const double stages = 6.25 + 6.5 + 3 * 6.5;
  EXPECT_NEAR(t->step_s - t->optimizer_s - t->pp_comm_s, stages + 0.125, 1e-9);
  EXPECT_NEAR(t->compute_s, 4 * 6.5, 1e-9);
  EXPECT_NEAR(t->bubble_s, 6.25, 1e-9);
  // Full checkpointing adds the measured recompute per layer on every stage.
  p.ckpt = Checkpointing::Full;
  auto f = tn::composeTime(w, p, c, m);
  ASSERT_TRUE(f);
  EXPECT_NEAR(f->step_s - t->step_s, 4 * 2 * 0.75 + 2 * 0.75, 1e-9);  // M·2·rc on the slowest + the other stage's
  // No pipeline: M·(L·(f + b) + embedding + head).
  tn::Plan one = plan(2, 1, 1, 2, 8);  // dp 2: same shape (2 ranks on the node), M = 2
  ASSERT_EQ(tn::shapeKey(one, c), tn::shapeKey(plan(1, 1, 2, 2, 8), c));
  auto o = tn::composeTime(w, one, c, m);
  ASSERT_TRUE(o);
  EXPECT_NEAR(o->compute_s, 2 * (4 * 3.0 + 0.25 + 0.5), 1e-9);
  EXPECT_EQ(o->bubble_s, 0);
  // A shape no run measured has no composed time.
  EXPECT_FALSE(tn::composeTime(w, plan(1, 2, 1, 2, 8), c, m));
}

TEST(MeasuredCosts, UnmeasuredShapesAreRankedByTheAnalyticModelScaledToTheMeasuredOnes) {
  const auto w = trainscope::workloads::load("small-cpu");
  const tn::Cluster c = tn::loadCluster("cpu-local");
  tn::SpaceOptions so;
  so.gbs = 8, so.seq = 64, so.mbs = {2, 4}, so.ckpt = {Checkpointing::None};
  so.zero = {trainscope::runconfig::ZeroStage::None};
  so.sequence_parallel = {false};
  so.schedules = {trainscope::runconfig::PipelineSchedule::OneFOneB};
  auto all = tn::enumerateSpace(w, c, so);
  std::vector<double> analytic;
  for (const auto& cand : all) analytic.push_back(cand.predicted_step_s);
  // Measure one shape as twice the analytic model's layer: its candidates are composed, the rest scaled.
  const tn::Candidate* measured = nullptr;
  for (const auto& cand : all)
    if (cand.rejected.empty() && cand.plan.dp == 2) measured = &cand;
  ASSERT_TRUE(measured);
  const tn::TimePrediction a = tn::predictTime(w, measured->plan, c);
  tn::LayerCosts k;
  k.layer_fwd_s = 2 * a.compute_s / 3 / double(measured->plan.ga()) / double(w.n_layer);
  k.layer_bwd_s = 2 * k.layer_fwd_s;
  tn::MeasuredCosts m;
  m.add(tn::shapeKey(measured->plan, c), k);
  tn::rerank(w, c, m, all);
  double scale = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (!all[i].rejected.empty()) continue;
    if (all[i].time_measured) {
      EXPECT_EQ(tn::shapeKey(all[i].plan, c), tn::shapeKey(measured->plan, c));
      if (all[i].id == measured->id) scale = all[i].predicted_step_s / analytic[i];
    }
  }
  ASSERT_GT(scale, 0);
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].rejected.empty() && !all[i].time_measured) {
      EXPECT_NE(tn::shapeKey(all[i].plan, c), tn::shapeKey(measured->plan, c));
      EXPECT_GT(all[i].predicted_step_s, analytic[i]);  // scaled up with the measured shape
    }
}

TEST(MeasuredCosts, RoundTripThroughTheStudysJsonAndToleratesNulls) {
  tn::MeasuredCosts m;
  tn::LayerCosts k;
  k.layer_fwd_s = 0.25, k.layer_bwd_s = 0.5, k.dp_hidden_share = 0.125, k.other_s = -1;
  m.add("mbs4 seq64 tp1 fp32 x2/node lanes1", k);
  const auto back = tn::costsFromJson(tn::costsJson(m));
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].first, "mbs4 seq64 tp1 fp32 x2/node lanes1");
  EXPECT_DOUBLE_EQ(back[0].second.layer_fwd_s, 0.25);
  EXPECT_DOUBLE_EQ(back[0].second.dp_hidden_share, 0.125);
  EXPECT_DOUBLE_EQ(back[0].second.other_s, -1);
  // A NaN written as null keeps the field's default rather than making the study unreadable.
  const auto nulls = tn::costsFromJson(R"([{"shape":"k","layer_fwd_s":null,"runs":null,"head_s":0.5}])");
  ASSERT_EQ(nulls.size(), 1u);
  EXPECT_EQ(nulls[0].second.layer_fwd_s, 0);
  EXPECT_EQ(nulls[0].second.runs, 1);
  EXPECT_DOUBLE_EQ(nulls[0].second.head_s, 0.5);
}

namespace {

// One GPU rank, three steps of 10 µs; `events` records each step's host ranges and device work.
void gpuRun(const std::string& path, bool with_kernels) {
  const std::string shard = db::shardPath(path, 0);
  {
    tr::Tracer t(shard, 0, tr::TraceLevel::All);
    const auto d = t.intern("trainscope");
    int64_t corr = 1;
    for (int64_t k = 0; k < 3; ++k) {
      const int64_t s = k * 10000;
      auto range = [&](int64_t b, int64_t e, const char* n, int depth) {
        t.record(tr::RangeEvent{s + b, s + e, t.intern(n), d, 0, depth, 0});
      };
      // The host launches in microseconds what the device runs for much longer.
      auto launch = [&](int64_t at, int64_t dev_begin, int64_t dev_end) {
        if (!with_kernels) return;
        t.record(tr::ApiEvent{s + at, s + at + 5, 0, t.intern("cudaLaunchKernel"), corr, 0});
        t.record(tr::KernelEvent{s + dev_begin, s + dev_end, 0, 7, t.intern("k"), corr, {1, 1, 1}, {32, 1, 1}, 16, 0});
        ++corr;
      };
      range(100, 8000, "micro_batch", 1);
      range(100, 2000, "forward", 2);
      for (int64_t i = 0; i < 4; ++i) {  // small-cpu's 4 layers: 1 µs of device time each
        range(100 + i * 100, 200 + i * 100, "layer", 3);
        launch(150 + i * 100, 1000 + i * 1000, 2000 + i * 1000);
      }
      range(500, 600, "lm_head", 3);
      launch(550, 5000, 5500);
      range(2000, 2500, "backward", 2);
      launch(2100, 5500, 7500);  // 2 µs: 0.5 µs per layer
      range(8500, 8600, "optimizer", 1);
      launch(8550, 8600, 8800);
    }
  }
  db::RunStore store(path, db::RunStore::Options{true});
  store.setMeta("world_size", "1");
  store.setMeta("device", "cuda");
  for (int64_t k = 0; k < 3; ++k) {
    db::Step r;
    r.step = k;
    r.start_ns = k * 10000;
    r.step_time_ns = 10000;
    store.appendStep(r);
  }
  db::mergeShards(store, {{shard, 0, "h", "cuda", 1, 0, 0}});
}

}  // namespace

TEST(MeasuredCosts, OnAGpuEachRangeIsTimedByTheDeviceWorkItLaunched) {
  const auto w = trainscope::workloads::load("small-cpu");
  tn::Plan p = plan(1, 1, 1, 8, 8);
  p.cpu = false;
  const std::string path = trainscope::testing::tempPath("gpu-profile.db");
  gpuRun(path, true);
  db::RunReader reader(path);
  const tn::LayerCosts k = tn::costsFromRun(reader, w, p);
  EXPECT_NEAR(k.layer_fwd_s, 1000e-9, 1e-12);  // the kernel's 1 µs, not the host range's 0.1 µs
  EXPECT_NEAR(k.head_s, 500e-9, 1e-12);
  EXPECT_NEAR(k.layer_bwd_s, 500e-9, 1e-12);  // 2 µs of backward kernels over 4 layers
  EXPECT_GT(k.optimizer_s_per_param, 0);
  // other = step − the micro-batch's device span (1 µs … 7.5 µs) − the optimizer's (0.2 µs)
  EXPECT_NEAR(k.other_s, (10000 - 6500 - 200) * 1e-9, 1e-12);
  // A GPU run traced without its kernels cannot be measured: the error names the level to use.
  const std::string bare = trainscope::testing::tempPath("gpu-profile-bare.db");
  gpuRun(bare, false);
  db::RunReader bare_reader(bare);
  try {
    tn::costsFromRun(bare_reader, w, p);
    FAIL() << "a GPU run without kernels was measured";
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("--trace-level all"), std::string::npos) << e.what();
  }
}
