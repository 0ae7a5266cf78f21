// trainscope/tuner/cost_model.h — what a candidate costs (step time, peak memory per rank), behind
// one interface, so that the tuner's ranking asks "what does this plan cost?" without knowing which
// model answers.
//
//   AnalyticCost   the models' formulas (models/time_model.h, models/memory_model.h): every plan
//   ComposedCost   the step time composed from measured layer costs (profile.h); only the shapes
//                  a trial has measured — nullopt for the others
//
// rankCandidates() is the re-rank between a study's batches: each valid candidate takes the first
// model that prices it; the analytic figures of the unmeasured shapes are scaled by the median
// composed / analytic ratio of the measured ones, so that the two kinds of figure compare.
// A new model (a learned one, a GPU kernel database) is one more CostModel; docs/architecture.md,
// "Where things plug in".
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "trainscope/tuner/models.h"
#include "trainscope/tuner/profile.h"
#include "trainscope/tuner/space.h"

namespace trainscope::tuner {

// The step time of `p` composed from its shape's measured costs (profile.h's header says how);
// nullopt when its shape has none.
std::optional<TimePrediction> composeTime(const workloads::Workload& w, const Plan& p, const Cluster& c,
                                          const MeasuredCosts& m);

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual const char* name() const = 0;
  // The plan's step time; nullopt when this model cannot price it.
  virtual std::optional<TimePrediction> time(const Plan& p) const = 0;
  // Bytes the busiest rank holds at its peak (the analytic memory model unless a model knows better).
  virtual int64_t peakBytes(const Plan& p) const;

 protected:
  explicit CostModel(const workloads::Workload& w) : w_(w) {}
  const workloads::Workload& w_;
};

class AnalyticCost : public CostModel {
 public:
  AnalyticCost(const workloads::Workload& w, const Cluster& c, TimeOptions o = {}) : CostModel(w), c_(c), o_(o) {}
  const char* name() const override { return "analytic"; }
  std::optional<TimePrediction> time(const Plan& p) const override { return predictTime(w_, p, c_, o_); }

 private:
  const Cluster& c_;
  TimeOptions o_;
};

class ComposedCost : public CostModel {
 public:
  ComposedCost(const workloads::Workload& w, const Cluster& c, const MeasuredCosts& m) : CostModel(w), c_(c), m_(m) {}
  const char* name() const override { return "measured"; }
  std::optional<TimePrediction> time(const Plan& p) const override { return composeTime(w_, p, c_, m_); }

 private:
  const Cluster& c_;
  const MeasuredCosts& m_;
};

// The analytic model's options with the DP overlap the trials measured (a share hidden behind
// backward), where any measured one.
TimeOptions measuredOverlap(const MeasuredCosts& m);

// Sets every valid candidate's predicted step time (and tokens/s, and whether it was measured):
// `measured`'s where it answers, else `analytic`'s × the median measured / analytic ratio over the
// candidates both priced (`fallback_scale` when none: a GPU study's trials' measured / analytic).
void rankCandidates(std::vector<Candidate>& all, const CostModel& measured, const CostModel& analytic,
                    double fallback_scale = 1.0);

// rankCandidates with ComposedCost(m) and AnalyticCost at measuredOverlap(m).
void rerank(const workloads::Workload& w, const Cluster& c, const MeasuredCosts& m, std::vector<Candidate>& all,
            double fallback_scale = 1.0);

}  // namespace trainscope::tuner
