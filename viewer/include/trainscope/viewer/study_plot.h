// trainscope/viewer/study_plot.h — the arithmetic of the study view, no drawing: axis ticks for
// its plots, and the argument its headline makes (the winner, the runner-up, the margin between
// them against the run-to-run noise the trials measured). The view (viewer/app/view_study.cpp)
// draws what these return; tests check the numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trainscope::viewer {

// One labelled tick of a plot axis.
struct AxisTick {
  double value = 0;
  std::string label;
};

// A "nice" tick step (1, 2 or 5 × 10^k) giving about `target` intervals over `span` (> 0).
double niceStep(double span, int target);
// Ticks at every multiple of niceStep(hi - lo, target) inside [lo, hi] (0 included when in range),
// each labelled by `format`. Empty when the range is empty or not finite.
std::vector<AxisTick> axisTicks(double lo, double hi, int target, const std::function<std::string(double)>& format);

// Ticks for an axis of seconds or of bytes: nice steps in the one unit the axis's top reads best in
// (ns, us, ms, s; B, KiB, MiB, GiB, TiB), labelled in it: "0 ms", "20 ms", "40 ms"; "0 MiB",
// "50 MiB", "100 MiB". Values stay in seconds / bytes.
std::vector<AxisTick> durationTicks(double lo_s, double hi_s, int target);
std::vector<AxisTick> byteTicks(double lo, double hi, int target);

// One trial as the headline's argument reads it (the view fills these from tuner::TrialRecord).
struct MeasuredTrial {
  int64_t id = 0, candidate = 0, round = 0, steps = 0;
  double step_s = 0;   // the trial's median step time; 0 when it has none
  bool ok = false;     // the trial ended ok
  bool unfit = false;  // failed, or peaked over the memory per rank: never the winner or the runner-up
};

// A candidate's step time pooled over its ok trials, as tuner::pooledStepTime pools it (each trial
// weighted by its counted steps, steps − 1).
struct PooledTime {
  int64_t candidate = -1;
  double step_s = 0;
  int64_t trials = 0;  // ok trials pooled
};
PooledTime pooledTime(const std::vector<MeasuredTrial>& trials, int64_t candidate);

// The recommendation's argument: is the winner faster than the runner-up by more than the noise?
struct StudyArgument {
  PooledTime winner, runner_up;  // runner_up.candidate is -1 when no other candidate qualifies
  double margin = 0;             // (runner-up − winner) / winner, pooled times
  // The latest round each reached (-1: none). A runner-up faster than the winner (margin < 0) lost
  // because its trials stopped at an earlier round: the tuner picks among the furthest round.
  int64_t winner_round = -1, runner_up_round = -1;
  // Run-to-run noise: one trial's relative standard deviation around the mean of its repeats (the
  // same candidate, the same steps), pooled over every such group of two or more ok trials (sum of
  // squares over N − G degrees of freedom). 0 with noise_known false when nothing was repeated.
  double noise = 0;
  bool noise_known = false;
  int64_t noise_trials = 0, noise_groups = 0, noise_candidates = 0;
  // The margin the noise alone could make: two standard errors of the difference of the two pooled
  // means, noise × sqrt(1/n_winner + 1/n_runner_up).
  double threshold = 0;
  bool within_noise = false;  // margin <= threshold (and the noise is known)
};
// `recommended`: the study's pick (candidate id, -1 none). The runner-up is chosen as the tuner
// picks the winner (tuner/src/search.cpp): among the other candidates with an ok trial and no unfit
// one, those that reached the latest round, and of them the fastest pooled.
StudyArgument studyArgument(const std::vector<MeasuredTrial>& trials, int64_t recommended);
// "runner-up #7 …: +3.1% slower; noise ±4.0% per trial (12 trials of 4 candidates): within noise";
// a faster runner-up says why it lost: "-35.4% against the winner (faster, but measured up to round 0
// only; the winner reached round 1, and the tuner picks among the furthest round)".
// `plan` names a candidate's plan; `duration` formats seconds.
std::string argumentText(const StudyArgument& a, const std::function<std::string(int64_t)>& plan,
                         const std::function<std::string(double)>& duration);

}  // namespace trainscope::viewer
