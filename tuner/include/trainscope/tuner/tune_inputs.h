// trainscope/tuner/tune_inputs.h — a tune's inputs as the command line takes them (comma-separated
// lists of the knobs to try, counts, a duration, the fault injection), checked and parsed before
// anything is created or run: each refusal is a UserError naming the flag (`--mbs`, `--budget`, …)
// and the fix. `trainscope tune` binds its flags to a TuneInputs and calls these; the study itself
// runs in tune.h.
#pragma once

#include <cstdint>
#include <string>

#include "trainscope/tuner/job.h"
#include "trainscope/tuner/tune.h"

namespace trainscope::tuner {

// --max-trials left out (no cap): a value nobody passes, so an explicit negative count is still refused.
inline constexpr int64_t kMaxTrialsUnset = INT64_MIN;

struct TuneInputs {
  std::string workload = "small-cpu", cluster = "cpu-local", study, budget, launcher = "local", mem_limit, inject;
  std::string mbs = "1,2,4,8,16,32", ckpt = "none,selective,full", precision, schedules = "1f1b,gpipe", ranks;
  std::string zero = "0,1,2,3", cp = "1,2,4", virtual_stages = "1,2,4";
  int64_t gbs = 0, seq = 0, max_trials = kMaxTrialsUnset, first_round = 8, steps = 3, nodes = 0;
  // max_trials: kMaxTrialsUnset (the flag left out) no cap; 0 no trial: the study holds the ranked space alone.
  int64_t finalists = 3, final_rounds = 2;
  double trial_timeout = 300;
  std::string search = "halving";
  // The job trials run (job.h): trainscope's own runtime, or the user's --entry under a framework's
  // launcher, with --python (its interpreter) and --probe (the folder holding trainscope_probe).
  std::string runner = "trainscope", entry, python, probe;
  bool resume = false, predict_only = false, exhaustive = false, no_zero = false, no_sp = false;
};

// Every input checked (the study's path, the counts' bounds, --launcher, --inject, --search, each
// list's values): the space they describe.
SpaceOptions checkedSpace(const TuneInputs& in);
// --budget: "90s", "20m", "2h" (or a bare number of seconds; "" is none: 0), at most 10^7 s.
double parseDuration(const std::string& text);
// A global batch whose memory figures the models cannot count (figuresCountable), refused naming --gbs.
void checkFigures(const workloads::Workload& w, const Cluster& c, int64_t gbs, int64_t seq_flag);
// The tuner's options from checked inputs, on cluster `c`: trials run `trainscope` (the front end's
// path), under `lock` (null: tune() takes it), within `budget_s` (0: none).
// --runner hf|…: the job's options (the entry split and its script found, the probe located through
// --python when --probe is not given). Throws UserError naming --entry, --python or --probe.
JobOptions jobOptions(const TuneInputs& in, const Cluster& c, const workloads::Workload& w);

TuneOptions tuneOptions(const TuneInputs& in, const Cluster& c, const StudyLock* lock, const std::string& trainscope,
                        double budget_s);

}  // namespace trainscope::tuner
