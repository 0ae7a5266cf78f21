// tune.cpp — the study's driver (see tune.h).
#include "trainscope/tuner/tune.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/tuner/job.h"
#include "trainscope/tuner/learner.h"
#include "trainscope/tuner/search.h"
#include "trainscope/tuner/slurm.h"
#include "trainscope/tuner/trial.h"

namespace trainscope::tuner {
namespace {

std::atomic<int> g_interrupt{0};
extern "C" void onTunerSignal(int sig) {
  if (sig == SIGHUP) signal(SIGPIPE, SIG_IGN);  // the terminal is gone: printing there must not end us
  g_interrupt = sig;
  ProcessTrialRunner::stopRunning();  // the trial stops at its next step and records what it did
}

// SIGINT, SIGTERM and SIGHUP (a closed terminal, a dropped ssh) interrupt the study while it is in
// scope (the previous handlers come back after).
class InterruptScope {
 public:
  InterruptScope() {
    struct sigaction sa {};
    sa.sa_handler = onTunerSignal;
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
    sigaction(SIGHUP, &sa, &old_hup_);
    g_interrupt = 0;
  }
  ~InterruptScope() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
    sigaction(SIGHUP, &old_hup_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {}, old_hup_ {};
};

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// The paths of one attempt at a trial: STUDY.trials/cN-rR, or cN-rR.K for its K-th attempt. An
// attempt interrupted (the tuner killed, kill -9 included) leaves its half-written files where they
// are and the next starts clean beside them; a name that anything already holds (a link planted at
// a predictable name too) is never used.
std::string freshStem(const std::string& dir, int64_t candidate, int64_t round) {
  const std::string base = dir + "/c" + std::to_string(candidate) + "-r" + std::to_string(round);
  for (int attempt = 1; attempt <= 1000; ++attempt) {
    const std::string stem = attempt == 1 ? base : base + "." + std::to_string(attempt);
    bool taken = false;
    struct stat st {};
    for (const char* ext : {".json", ".log", ".db", ".db-wal", ".db-shm", ".db-journal", ".db.rank0", ".job"})
      taken = taken || ::lstat((stem + ext).c_str(), &st) == 0;
    if (!taken) return stem;
  }
  throw UserError("--study", "no free name for a trial of candidate " + std::to_string(candidate) + " in " + dir,
                  "remove " + dir + " or choose another --study path");
}

// The folder of the trials: made if missing, and refused unless it is a real folder of this user's
// (a link or someone else's folder at the predictable name STUDY.trials would take the trials' files).
void makeWorkDir(const std::string& dir) {
  ::mkdir(dir.c_str(), 0755);
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw UserError("--study", "cannot create the trials' folder " + dir + ": " + std::strerror(errno),
                    "check that the study's folder is writable");
  if (S_ISLNK(st.st_mode) || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
    throw UserError("--study",
                    dir + (S_ISLNK(st.st_mode)    ? " is a symbolic link"
                           : !S_ISDIR(st.st_mode) ? " is not a folder"
                                                  : " belongs to another user"),
                    "remove it, or choose another --study path (the trials are written into STUDY.trials)");
}

std::string injectedFault(const std::string& spec, int64_t candidate) {
  std::stringstream ss(spec);
  for (std::string item; std::getline(ss, item, ',');) {
    const auto colon = item.find(':');
    if (colon != std::string::npos && std::atoll(item.substr(0, colon).c_str()) == candidate)
      return item.substr(colon + 1);
  }
  return "";
}

}  // namespace

runconfig::TrainConfig trialConfig(const workloads::Workload& w, const Plan& p, const TuneOptions& o,
                                 const std::string& spec) {
  runconfig::TrainConfig c = runConfigOf(w, p);
  c.workload = spec;
  c.launcher = o.launcher;
  c.mem_limit = o.mem_limit;
  c.steps = o.base_steps;
  c.warmup = 0;
  c.min_lr_ratio = 1.0;
  return c;
}

namespace {

// Refused before a study is made: the models' figures are int64 bytes and seconds, and a batch so
// large that they overflow must not come out as a negative peak that "fits".
std::vector<const Candidate*> validCandidates(const std::vector<Candidate>& all, const SpaceOptions& space) {
  std::vector<const Candidate*> valid;
  for (const auto& cand : all)
    if (cand.rejected.empty()) valid.push_back(&cand);
  for (const Candidate* v : valid)
    if (v->predicted_peak <= 0 || !(v->predicted_step_s > 0) || !std::isfinite(v->predicted_step_s))
      throw UserError(
          "--gbs",
          "the models' figures overflow for " + v->plan.describe() + " (gbs " + std::to_string(space.gbs) + ")",
          "pass a global batch (and --mbs, --seq) that a cluster could hold");
  return valid;
}

// The study's inputs: a study resumed with other inputs (any knob of the space) is refused, as it
// would map its trials onto other plans.
std::string studyInputs(const workloads::Workload& w, const Cluster& c, const SpaceOptions& space,
                        const TuneOptions& o, const std::vector<Candidate>& all) {
  nlohmann::json inputs = {{"workload", w.name}, {"n_layer", w.n_layer}, {"n_embd", w.n_embd}, {"cluster", c.name},
                           {"devices", c.devices()}, {"memory_bytes", c.memory_bytes}, {"gbs", space.gbs},
                           {"seq", space.seq}, {"candidates", all.size()},
                           {"base_steps", o.base_steps}, {"first_round", o.first_round},
                           {"finalists", o.finalists}, {"final_rounds", o.final_rounds},
                           {"exhaustive", o.search == "exhaustive"}, {"launcher", runconfig::toString(o.launcher)},
                           {"kind", toString(c.kind)},  // by name, as studies made before the enums stored them
                           {"workload_source", w.source}, {"n_head", w.n_head}, {"vocab_size", w.vocab_size},
                           {"n_positions", w.n_positions}};
  // Studies made before the search was a choice say only "exhaustive": other strategies add their name.
  if (o.search != "halving" && o.search != "exhaustive") inputs["search"] = o.search;
  if (!o.runner_name.empty() && o.runner_name != "trainscope") inputs["runner"] = o.runner_name;  // job.h
  if (!o.entry.empty()) inputs["entry"] = o.entry;  // the job: a resumed study runs the same script and arguments
  for (const auto& cand : all) inputs["plans"].push_back(cand.plan.describe());
  return jsonText(inputs);
}

// One batch at a time: each trial taken from a resumed study or run now (its spec written, handed
// to the runner), learned from, and reported; between batches the learner re-ranks the space.
class StudyRunner {
 public:
  StudyRunner(const TuneOptions& o, bool gpu, TuneResult& res, Study& study, TrialRunner& runner, Learner& learner,
              const std::function<void(const TuneEvent&)>& progress)
      : o_(o), gpu_(gpu), res_(res), study_(study), runner_(runner), learner_(learner), progress_(progress) {}

  std::string study_id;    // the study's id (slurm.h claimStudyId)
  std::string slurm_name;  // the study's srun step name (job.h), handed to every trial

  void runBatch(const TrialBatch& b, SearchStrategy& search) {
    for (int64_t id : b.candidates) {
      if (g_interrupt) break;
      std::optional<TrialRecord> t = trial(b, id);
      if (!t) {                                             // over the budget: not run
        res_.cut_short = true;
        continue;
      }
      if (t->status == TrialStatus::Running) break;         // interrupted: run again on --resume
      ++done_;
      search.observe(*t);
      report(b, *t, search.planned());
    }
  }

  // Every candidate re-priced from what was learned; the study keeps the ranking and the costs.
  void rerank(const std::vector<std::string>& configs) {
    learner_.rerank(res_.candidates);
    res_.costs = learner_.costs();
    res_.network_fit = learner_.networkFit();
    res_.fitted_constants = learner_.fittedConstants();
    res_.refit_cv = learner_.refitCrossValidation();
    study_.saveCandidates(res_.candidates, configs);
    study_.setValue("measured_costs", costsJson(res_.costs));
    const CollectiveFit& n = res_.network_fit;
    if (n.samples > 0)
      study_.setValue("network_fit", jsonText(nlohmann::json({{"latency_s", n.tier.latency},
                                                              {"bandwidth_bytes_per_s", n.tier.bandwidth},
                                                              {"samples", n.samples}, {"r2", n.r2}})));
    if (!res_.fitted_constants.empty()) {
      study_.setValue("fitted_constants", jsonText(nlohmann::json(res_.fitted_constants)));
      study_.setValue("refit_cross_validation", refitCrossValidationJson(res_.refit_cv));
    }
  }

 private:
  const Candidate& byId(int64_t id) const { return res_.candidates[size_t(id)]; }

  // The trial of `id` in this batch: kept from a resumed study, or run now; nullopt when the budget
  // is spent; status Running when the tuner was interrupted during it.
  std::optional<TrialRecord> trial(const TrialBatch& b, int64_t id) {
    // --max-trials counts the study's trials, those kept from before an interruption too, so that a
    // resumed study stops where the uninterrupted one would have (--budget is this invocation's time).
    const bool over_budget = (o_.budget_s > 0 && seconds(t0_) > o_.budget_s) ||
                             (o_.max_trials >= 0 && res_.trials_run + kept_ >= o_.max_trials);
    std::optional<TrialRecord> prev = study_.trial(id, b.round);
    if (prev && prev->status != TrialStatus::Running) {  // finished before an interruption: kept, not repeated
      ++kept_;
      return learner_.add(*prev, byId(id).plan, /*fresh=*/false);
    }
    if (over_budget) return std::nullopt;
    TrialRecord t;
    t.candidate = id;
    t.round = b.round;
    t.steps = b.steps;
    t.predicted_step_s = byId(id).predicted_step_s;
    t.predicted_peak = byId(id).predicted_peak;
    // A row left "running" (an interrupted attempt) is run again from scratch, into paths of its own.
    const std::string stem = freshStem(o_.work_dir, id, b.round);
    TrialSpec spec = specOf(b, id, stem);
    t.db_path = spec.run.output.trace;
    // --launcher slurm: what its srun starts is recorded in the study (slurm.h), the name now (before
    // the row: a row "running" always has this attempt's record), the ids as squeue shows them.
    if (spec.run.config.launcher == runconfig::Launcher::Slurm && !spec.slurm_name.empty()) {
      const std::string key = slurmLaunchKey(id, b.round);
      study_.setValue(key, slurmLaunchJson(SlurmLaunch{study_id, spec.slurm_name, {}, {}}));
      spec.on_slurm_launch = [this, key](const SlurmLaunch& l) {
        SlurmLaunch r = l;
        r.study_id = study_id;
        study_.setValue(key, slurmLaunchJson(r));
      };
    }
    t.id = study_.beginTrial(t);
    t = runner_.run(spec, t);
    if (g_interrupt && t.status != TrialStatus::Ok) {
      t.status = TrialStatus::Running;
      return t;
    }
    t = learner_.add(t, byId(id).plan);  // its run database read, once
    study_.finishTrial(t);
    ++res_.trials_run;
    return t;
  }

  // The candidate's config as the study keeps it, run for the batch's steps, traced into STEM.db.
  TrialSpec specOf(const TrialBatch& b, int64_t id, const std::string& stem) const {
    TrialSpec spec;
    spec.run.config = runconfig::fromJson(study_.candidateConfig(id), o_.study_path);
    spec.run.config.steps = b.steps;
    const std::string fault = injectedFault(o_.inject, id);
    spec.fault = fault;
    spec.profile = b.stage == SearchStage::Profile;
    if (fault == "crash" || fault == "hang" || fault == "oom")
      spec.run.config.inject_failure = "0:1:" + std::string(fault == "crash" ? "segv" : fault);
    spec.run.output.trace = stem + ".db";
    // A GPU's profile trials record their kernels (CUPTI): the host ranges only launch them. The
    // layer ranges are what the measured time model reads.
    const bool gpu_profile = gpu_ && b.stage == SearchStage::Profile;
    spec.run.output.trace_level = gpu_profile ? runconfig::TraceLevel::All : runconfig::TraceLevel::Ranges;
    spec.run.output.overwrite = true;
    spec.run.quiet = true;
    spec.spec_path = stem + ".json";
    spec.log_path = stem + ".log";
    spec.timeout_s = o_.trial_timeout_s;
    spec.slurm_name = slurm_name;
    return spec;
  }

  void report(const TrialBatch& b, const TrialRecord& t, int64_t planned) {
    if (t.status == TrialStatus::Ok) {
      ok_so_far_.push_back(t);
      best_ = 0;  // the best so far as the pick will judge it: by pooled step time
      for (const TrialRecord& x : ok_so_far_)
        if (const double est = pooledStepTime(ok_so_far_, x.candidate); best_ == 0 || est < best_) {
          best_ = est;
          best_plan_ = byId(x.candidate).plan.describe();
        }
    }
    if (!progress_) return;
    TuneEvent e;
    e.done = done_;
    e.planned = planned;
    e.elapsed_s = seconds(t0_);
    e.eta_s = e.elapsed_s / double(done_) * double(std::max<int64_t>(0, planned - done_));
    e.stage = b.stage;
    e.plan = byId(t.candidate).plan.describe();
    e.trial = t;
    e.best_step_s = best_;
    e.best_plan = best_plan_;
    progress_(e);
  }

  const TuneOptions& o_;
  const bool gpu_;
  TuneResult& res_;
  Study& study_;
  TrialRunner& runner_;
  Learner& learner_;
  const std::function<void(const TuneEvent&)>& progress_;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  std::vector<TrialRecord> ok_so_far_;
  int64_t done_ = 0;
  int64_t kept_ = 0;  // finished trials taken from a resumed study
  double best_ = 0;
  std::string best_plan_;
};

// Every valid candidate's trial config, as the study keeps it ("" for the rejected).
std::vector<std::string> trialConfigs(const workloads::Workload& w, const TuneOptions& o,
                                      const std::vector<Candidate>& all) {
  std::vector<std::string> configs;
  const std::string spec = w.source.empty() ? w.name : w.source;
  for (const auto& cand : all)
    configs.push_back(cand.rejected.empty() ? runconfig::toJson(trialConfig(w, cand.plan, o, spec)) : "");
  return configs;
}

// The pick is the fastest of the candidates that got furthest; when --max-trials or --budget cut the
// search short, a candidate stopped at an earlier round may have measured faster: said, with the fix
// (the pick stays the furthest one: a longer trial's time is the surer).
void noteCutShortPick(TuneResult& res, const Cluster& c) {
  if (!res.cut_short || res.recommended < 0 || res.interrupted) return;
  std::map<int64_t, int64_t> furthest;
  std::set<int64_t> unfit;
  for (const auto& t : res.trials) {
    furthest[t.candidate] = std::max(furthest[t.candidate], t.round);
    if (t.status != TrialStatus::Ok || t.peak_bytes > c.memory_bytes) unfit.insert(t.candidate);
  }
  const double pick_s = res.estimate[res.recommended];
  int64_t faster = -1;
  for (const auto& [cand, s] : res.estimate)
    if (!unfit.count(cand) && s > 0 && s < 0.95 * pick_s && (faster < 0 || s < res.estimate[faster])) faster = cand;
  if (faster < 0 || pick_s <= 0) return;
  char line[400];
  std::snprintf(line, sizeof(line),
                "the trial cap ended the search before every promoted candidate ran: the pick #%lld (%.3g ms/step, "
                "round %lld) is the fastest of those that got furthest, but #%lld measured %.3g ms/step in round %lld; "
                "raise --max-trials (or --budget) to settle it",
                static_cast<long long>(res.recommended), pick_s * 1e3, static_cast<long long>(furthest[res.recommended]),
                static_cast<long long>(faster), res.estimate[faster] * 1e3, static_cast<long long>(furthest[faster]));
  res.notes.push_back(line);
}

// The result's figures from every trial of the study, and the recommendation kept in it.
void finish(TuneResult& res, Study& study, const SearchStrategy& search, const Cluster& c) {
  res.trials = study.trials();
  if (const auto pick = search.pick(res.trials, c.memory_bytes)) res.recommended = *pick;
  std::vector<double> ratios;
  for (const auto& t : res.trials) {
    if (t.status == TrialStatus::Ok && t.predicted_step_s > 0) ratios.push_back(t.step_s / t.predicted_step_s);
    res.estimate[t.candidate] = pooledStepTime(res.trials, t.candidate);
  }
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    res.time_scale = ratios[ratios.size() / 2];
  }
  study.setValue("time_scale", std::to_string(res.time_scale));
  res.prediction_check = checkPredictions(res.trials);
  study.setValue("prediction_check", toJson(res.prediction_check));
  noteCutShortPick(res, c);
  // An interrupted study recommends nothing yet: its last round is incomplete.
  if (res.recommended >= 0 && !res.interrupted) study.setValue("recommended", std::to_string(res.recommended));
  if (res.interrupted) res.recommended = -1;
}

}  // namespace

TuneResult tune(const workloads::Workload& w, const Cluster& c, const SpaceOptions& space, const TuneOptions& o,
                const std::function<void(const TuneEvent&)>& progress) {
  TuneResult res;
  res.candidates = enumerateSpace(w, c, space);
  if (o.refuse)  // an external runner's refusals (job.h): rejected with its reason, as the runtime's are
    for (Candidate& cand : res.candidates)
      if (cand.rejected.empty())
        if (std::string why = o.refuse(cand.plan); !why.empty()) cand.rejected = std::move(why);
  const std::vector<const Candidate*> valid = validCandidates(res.candidates, space);
  if (o.predict_only || valid.empty()) return res;
  const SearchOptions so{o.first_round, o.base_steps, o.finalists, o.final_rounds};
  const std::unique_ptr<SearchStrategy> search = makeSearch(o.search, res.candidates, c, so);

  // Open the study, or resume it.
  std::unique_ptr<StudyLock> own_lock;  // held until the study is closed (declared first)
  if (!o.lock) own_lock = std::make_unique<StudyLock>(o.study_path, o.resume);
  makeWorkDir(o.work_dir);  // before the study is written: refused here, a new study leaves nothing
  Study study(o.lock ? *o.lock : *own_lock, studyInputs(w, c, space, o, res.candidates));
  // A resumed study is checked before any of it is used: every id it holds indexes the space.
  study.checkTrials(res.candidates, int64_t(valid.size()) + std::max<int64_t>(0, o.final_rounds));
  const std::vector<std::string> configs = trialConfigs(w, o, res.candidates);
  study.saveCandidates(res.candidates, configs);
  res.profiles = search->profiles();
  study.setValue("profile_candidates", jsonText(nlohmann::json(res.profiles)));

  // The loop: the strategy's next batch → run (or resumed) → learned → observed → progress; re-rank.
  ProcessTrialRunner processes(o.trainscope);
  Learner learner(w, c, space.framework);
  StudyRunner runner(o, c.kind == ClusterKind::Gpu, res, study, o.runner ? *o.runner : processes, learner, progress);
  const bool recorded_file = !study.value("study_file").empty();  // else a study from before slurm.h
  std::string copied;
  runner.study_id = claimStudyId(study, o.study_path, &copied);
  runner.slurm_name = slurmStepName(runner.study_id);
  if (!copied.empty()) res.notes.push_back(copied);
  // A study whose tuner was killed during a trial (its row left "running") under --launcher slurm: srun
  // died with the tuner but the step's tasks did not (slurm_step.cpp). What it recorded is ended before
  // any trial; what another study recorded (this one a copy of it) is left alone.
  if (o.launcher == runconfig::Launcher::Slurm)
    for (const TrialRecord& t : study.trials()) {
      if (t.status != TrialStatus::Running) continue;
      const SlurmLaunch l = parseSlurmLaunch(study.value(slurmLaunchKey(t.candidate, t.round)));
      const std::string which = "the interrupted trial of candidate " + std::to_string(t.candidate) + " (round " +
                                std::to_string(t.round) + ")";
      std::string ids;
      for (const auto* v : {&l.jobs, &l.steps})
        for (const std::string& x : *v) ids += (ids.empty() ? "" : " ") + x;
      if (l.name.empty()) {
        if (!recorded_file)
          res.notes.push_back(which + " ran in a study from before trainscope recorded its Slurm ids: if squeue "
                              "--name=" + runner.slurm_name + " lists any job of it, scancel it");
        continue;  // else the tuner was killed before its launch: nothing of it started
      }
      if (l.study_id != runner.study_id) {
        res.notes.push_back(which + " was started by the study this one is a copy of (" + l.name +
                            (ids.empty() ? "" : ", Slurm ids " + ids) + "): left alone");
        continue;
      }
      if (const std::string why = cancelSlurmLaunch(l); !why.empty())
        throw UserError("--resume", "the interrupted trial's Slurm step is still running: " + why,
                        "cancel it (scancel " + (ids.empty() ? "--name=" + l.name : ids) + ") and resume again");
    }
  {
    const InterruptScope interrupts;
    while (!g_interrupt) {
      const std::optional<TrialBatch> batch = search->nextBatch(StudyState{res.candidates});
      if (!batch) break;
      runner.runBatch(*batch, *search);
      runner.rerank(configs);
    }
    res.interrupted = g_interrupt != 0;
    res.signal = g_interrupt;
  }
  finish(res, study, *search, c);
  return res;
}

}  // namespace trainscope::tuner
