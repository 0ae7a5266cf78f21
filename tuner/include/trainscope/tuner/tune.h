// trainscope/tuner/tune.h — a tuning study: prune and rank with the models, then measure.
//
//   space → drop what cannot be valid or cannot fit (reasons kept) → rank by predicted step time →
//   the search strategy's batches of short trials (search.h: successive halving with profile trials
//   first and a final stage, or exhaustive), each run by a trial runner (trial.h: its own process
//   tree by default), each trial's run database read once by the learner (learner.h: step time with
//   the warm-up dropped, layer costs, collectives), the candidates re-priced by the cost models
//   (cost_model.h) after each batch → the strategy's pick among what was measured and stayed within
//   memory.
//
// tune() is the driver and keeps the study (study.h): every trial is recorded as running before it
// starts and finished after, so that a study killed at any point resumes without losing or
// repeating a trial. Progress is a typed TuneEvent per trial; the terminal text is the caller's.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "trainscope/tuner/calibrate.h"
#include "trainscope/tuner/learner.h"
#include "trainscope/tuner/prediction_check.h"
#include "trainscope/tuner/profile.h"
#include "trainscope/tuner/search.h"
#include "trainscope/tuner/space.h"
#include "trainscope/tuner/study.h"
#include "trainscope/tuner/trial.h"

namespace trainscope::tuner {

struct TuneOptions {
  std::string study_path;
  bool resume = false;
  // The study's lock, when the caller took it first (the command line does, before --cluster local
  // measures into files beside the study); null: tune() takes it.
  const StudyLock* lock = nullptr;
  bool predict_only = false;
  std::string search = "halving"; // the search strategy (search.h): halving | exhaustive
  int64_t max_trials = -1;        // trial processes in all (-1: no cap; 0: none, the space ranked alone)
  double budget_s = 0;            // wall time (0: none); no trial starts after it
  int64_t first_round = 8;        // candidates measured in the first round
  int64_t base_steps = 3;         // steps of a first-round trial (step 0 is warm-up)
  int64_t finalists = 3;          // the halving's best that run the final stage (at least 2)
  int64_t final_rounds = 2;       // final-stage trials of each finalist, alternately (0: plain halving)
  double trial_timeout_s = 300;
  runconfig::Launcher launcher = runconfig::Launcher::Local;
  std::string trainscope;         // the front end to run trials with
  std::string work_dir;           // trial configs, databases and logs
  int64_t mem_limit = 0;          // CPU trials: --mem-limit (the cluster's memory per rank)
  std::string inject;             // testing: "CANDIDATE:crash|hang|oom[,…]"
  TrialRunner* runner = nullptr;  // who runs the trials (null: each its own process, trial.h)
  // An external runner (job.h, `--runner hf|…`): its name, kept with the study's inputs (a study is
  // resumed only with the runner it began with), and what it cannot run, rejected with that reason.
  std::string runner_name;        // "" or "trainscope": trainscope's own runtime
  std::vector<std::string> entry; // its --entry, the script made absolute: kept with the inputs likewise
  std::function<std::string(const Plan&)> refuse;
};

struct TuneEvent {                // progress: one trial ended (or was taken from a resumed study)
  int64_t done = 0, planned = 0;  // trials so far, and expected in all
  double elapsed_s = 0, eta_s = 0;
  SearchStage stage = SearchStage::Halving;
  std::string plan;               // the trial's configuration, described
  TrialRecord trial;              // how it ended: round, status, step time, message
  double best_step_s = 0;         // the best so far by pooled step time (0: none yet)
  std::string best_plan;
};

struct TuneResult {
  std::vector<Candidate> candidates;
  std::vector<TrialRecord> trials;
  int64_t recommended = -1;       // candidate id (-1: nothing measured ok)
  double time_scale = 1;          // measured / predicted at launch (median over ok trials)
  std::map<int64_t, double> estimate;  // candidate → step time over all its ok trials (steps-weighted)
  std::vector<int64_t> profiles;  // candidates run first, one per layer shape: their costs (profile.h)
  MeasuredCosts costs;            // every ok trial's layer costs, per shape
  CollectiveFit network_fit;      // α–β of the trials' DP and TP collectives (samples 0: none)
  std::map<std::string, double> fitted_constants;  // cluster constants refitted from the trials (fit.h; empty: none)
  RefitCrossValidation refit_cv;  // the refit's held-out error (learner.h; folds 0: not cross-validated)
  PredictionCheck prediction_check;  // the models' predictions against what the trials measured
  int64_t trials_run = 0;         // processes started by this invocation
  bool interrupted = false;
  bool cut_short = false;  // --max-trials or --budget left trials of the search unrun
  int signal = 0;  // what interrupted it (SIGINT, SIGTERM): the exit status is 128 + signal
  std::vector<std::string> notes;  // what the user should know and nothing stopped for (a copied study: slurm.h)
};

// With no valid candidate the result holds the rejected space and no study is made (the caller says
// why). A damaged study (study.h: Study::checkTrials) is refused before any trial runs.
TuneResult tune(const workloads::Workload& w, const Cluster& c, const SpaceOptions& space, const TuneOptions& o,
                const std::function<void(const TuneEvent&)>& progress);

// The TrainConfig of a candidate's trials (the run's steps set by the round).
runconfig::TrainConfig trialConfig(const workloads::Workload& w, const Plan& p, const TuneOptions& o,
                                 const std::string& workload_spec);

}  // namespace trainscope::tuner
