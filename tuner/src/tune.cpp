// tune.cpp — the study loop and the trial runner (see tune.h).
#include "trainscope/tuner/tune.h"

#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/tuner/calibrate.h"
#include "trainscope/tuner/profile.h"
#include "trainscope/tuner/search.h"

namespace trainscope::tuner {
namespace {

std::atomic<int> g_interrupt{0};
std::atomic<pid_t> g_trial_group{0};
extern "C" void onTunerSignal(int sig) {
  g_interrupt = sig;
  const pid_t g = g_trial_group.load();
  if (g > 0) kill(-g, SIGTERM);  // the trial stops at its next step and records what it did
}

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
    for (const char* ext : {".json", ".log", ".db", ".db-wal", ".db-shm", ".db-journal", ".db.rank0"})
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

runtime::TrainConfig trialConfig(const workloads::Workload& w, const Plan& p, const TuneOptions& o,
                                 const std::string& spec) {
  runtime::TrainConfig c;
  c.workload = spec;
  c.model = w;
  c.seq = p.seq;
  c.mbs = p.mbs;
  c.gbs = p.gbs;
  c.ckpt = p.ckpt;
  c.precision = p.precision;
  c.optimizer = p.optimizer;
  c.zero = p.zero;
  c.tp = int(p.tp);
  c.pp = int(p.pp);
  c.nproc = int(p.world());
  c.sequence_parallel = p.sequence_parallel;
  c.pp_schedule = p.schedule;
  c.launcher = o.launcher == "slurm" ? runtime::Launcher::Slurm : runtime::Launcher::Local;
  c.mem_limit = o.mem_limit;
  c.cpu_lanes = int(p.cpu_lanes);
  c.steps = o.base_steps;
  c.warmup = 0;
  c.min_lr_ratio = 1.0;
  return c;
}

TrialRecord runTrial(const TuneOptions& o, TrialRecord t, const std::string& config_path, const std::string& log_path,
                     const std::string& trace_level) {
  const auto t0 = std::chrono::steady_clock::now();
  // Created here, not in the child: a failure is the tuner's (exit 2), not the candidate's.
  const int log = files::createFile(log_path, files::Existing::Replace, "--study");
  const pid_t pid = fork();
  if (pid < 0) {
    ::close(log);
    t.status = TrialStatus::Failed;
    t.message = std::string("fork failed: ") + std::strerror(errno);
    return t;
  }
  if (pid == 0) {
    setpgid(0, 0);                       // the trial's own process group: killed as one
    prctl(PR_SET_PDEATHSIG, SIGKILL);    // and with the tuner, even by kill -9
    dup2(log, 1);                        // (dup2 clears close-on-exec on 1 and 2)
    dup2(log, 2);
    const std::string steps = std::to_string(t.steps);
    // Traced: the layer ranges (and on a GPU profile, the kernels they launched) are what the
    // measured time model reads.
    execl(o.trainscope.c_str(), o.trainscope.c_str(), "run", "--config", config_path.c_str(), "--steps", steps.c_str(),
          "--trace", t.db_path.c_str(), "--trace-level", trace_level.c_str(), "--overwrite", "-q",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  ::close(log);
  setpgid(pid, pid);
  g_trial_group = pid;
  int status = 0;
  bool timed_out = false;
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (!timed_out && o.trial_timeout_s > 0 && seconds(t0) > o.trial_timeout_s) {
      timed_out = true;
      kill(-pid, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  kill(-pid, SIGKILL);  // nothing of the trial outlives it
  g_trial_group = 0;
  t.seconds = seconds(t0);
  if (timed_out) {
    t.status = TrialStatus::Hang;
    t.message = "no result within " + std::to_string(int(o.trial_timeout_s)) + " s";
  } else if (WIFSIGNALED(status)) {
    t.status = TrialStatus::Crash;
    t.signal = WTERMSIG(status);
    t.message = std::string("killed by ") + strsignal(t.signal);
  } else {
    t.exit_code = WEXITSTATUS(status);
    if (t.exit_code == 0) t.status = TrialStatus::Ok;
    else if (t.exit_code == kExitOutOfMemory) t.status = TrialStatus::OutOfMemory;
    else if (t.exit_code == 2) t.status = TrialStatus::Invalid;
    else if (t.exit_code > 128 && t.exit_code < 160) {  // the launcher passes a rank's signal on
      t.status = TrialStatus::Crash;
      t.signal = t.exit_code - 128;
      t.message = std::string("a rank was killed by ") + strsignal(t.signal);
    } else {
      t.status = TrialStatus::Failed;
    }
    if (t.message.empty() && t.status != TrialStatus::Ok) t.message = "exit status " + std::to_string(t.exit_code);
  }
  if (t.status == TrialStatus::Ok) {
    try {
      rundb::RunReader reader(t.db_path);
      const rundb::RunSummary s = rundb::summarize(reader);
      t.step_s = s.step_s_median;
      t.tokens_per_s = s.tokens_per_s;
      t.peak_bytes = s.peak_bytes;
    } catch (const std::exception& e) {
      t.status = TrialStatus::Failed;
      t.message = std::string("its run database cannot be read: ") + e.what();
    }
  }
  return t;
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
                           {"exhaustive", o.search == "exhaustive"}, {"launcher", o.launcher}, {"kind", c.kind},
                           {"workload_source", w.source}, {"n_head", w.n_head}, {"vocab_size", w.vocab_size},
                           {"n_positions", w.n_positions}};
  // Studies made before the search was a choice say only "exhaustive": other strategies add their name.
  if (o.search != "halving" && o.search != "exhaustive") inputs["search"] = o.search;
  for (const auto& cand : all) inputs["plans"].push_back(cand.plan.describe());
  return inputs.dump();
}

// Runs the batches a strategy asks for: each trial as its own process (or taken from a resumed
// study), what it measured learned, the models refitted and the candidates re-ranked after each batch.
class StudyRunner {
 public:
  StudyRunner(const workloads::Workload& w, const Cluster& c, const TuneOptions& o, TuneResult& res, Study& study,
              std::vector<std::string> configs, const std::function<void(const TuneEvent&)>& progress)
      : w_(w), c_(c), o_(o), res_(res), study_(study), configs_(std::move(configs)), progress_(progress), fitted_(c) {}

  void runBatch(const TrialBatch& b, SearchStrategy& search) {
    for (int64_t id : b.candidates) {
      if (g_interrupt) break;
      std::optional<TrialRecord> t = trial(b, id);
      if (!t) continue;                                     // over the budget: not run
      if (t->status == TrialStatus::Running) break;         // interrupted: run again on --resume
      ++done_;
      search.observe(*t);
      report(b, *t, search.planned());
    }
  }

  // Refit: every candidate's prediction from all that has been measured so far.
  void refit() {
    try {
      // The collectives the trials recorded refit the network's α–β (the intra-node tier, from
      // trials within one node): what composes pipeline sends and the unmeasured shapes' TP and DP terms.
      const CollectiveFit f = fitCollectives(comm_);
      fitted_.intra_node = f.tier;
      res_.network_fit = f;
    } catch (const std::exception&) {
      // Fewer than two message sizes so far: the cluster file's figures stay.
    }
    rerank(w_, fitted_, res_.costs, res_.candidates,
           analytic_ratio_.empty() ? 1.0 : rundb::percentile(analytic_ratio_, 0.5));
    study_.saveCandidates(res_.candidates, configs_);
    study_.setValue("measured_costs", costsJson(res_.costs));
    const CollectiveFit& n = res_.network_fit;
    if (n.samples > 0)
      study_.setValue("network_fit", nlohmann::json({{"latency_s", n.tier.latency},
                                                     {"bandwidth_bytes_per_s", n.tier.bandwidth},
                                                     {"samples", n.samples}, {"r2", n.r2}})
                                         .dump());
  }

 private:
  const Candidate& byId(int64_t id) const { return res_.candidates[size_t(id)]; }

  // The trial of `id` in this batch: kept from a resumed study, or run now; nullopt when the budget
  // is spent; status Running when the tuner was interrupted during it.
  std::optional<TrialRecord> trial(const TrialBatch& b, int64_t id) {
    const bool over_budget = (o_.budget_s > 0 && seconds(t0_) > o_.budget_s) ||
                             (o_.max_trials > 0 && res_.trials_run >= o_.max_trials);
    std::optional<TrialRecord> prev = study_.trial(id, b.round);
    if (prev && prev->status != TrialStatus::Running) {
      learn(*prev);  // finished before an interruption: kept, not repeated
      return prev;
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
    t.db_path = stem + ".db";
    t.id = study_.beginTrial(t);
    runtime::TrainConfig cfg = runtime::fromJson(study_.candidateConfig(id), o_.study_path);
    const std::string fault = injectedFault(o_.inject, id);
    if (fault == "crash") cfg.inject_failure = "0:1:segv";
    if (fault == "hang") cfg.inject_failure = "0:1:hang";
    if (fault == "oom") cfg.inject_failure = "0:1:oom";
    const std::string cfg_path = stem + ".json";
    files::writeAtomically(cfg_path, nlohmann::json::parse(runtime::toJson(cfg)).dump(2), files::Existing::Refuse,
                           "--study");
    // A GPU's profile trials record their kernels (CUPTI): the host ranges only launch them.
    const bool gpu_profile = c_.kind != "cpu" && b.stage == SearchStage::Profile;
    t = runTrial(o_, t, cfg_path, stem + ".log", gpu_profile ? "all" : "ranges");
    if (g_interrupt && t.status != TrialStatus::Ok) {
      t.status = TrialStatus::Running;
      return t;
    }
    study_.finishTrial(t);
    ++res_.trials_run;
    learn(t);
    return t;
  }

  void learn(const TrialRecord& t) {
    if (t.status != TrialStatus::Ok) return;
    const Plan& p = byId(t.candidate).plan;
    try {
      rundb::RunReader reader(t.db_path);
      if (p.world() <= c_.devices_per_node)
        for (const rundb::Collective& x : reader.collectives())
          // Blocking sends wait for their peer, and the embedding's sync for the other stage: only
          // the collectives every member reaches together (gradient buckets, TP) measure the network.
          if ((x.group == "dp" || x.group == "tp") && x.op != "barrier") comm_.push_back(x);
      res_.costs.add(shapeKey(p, c_), costsFromRun(reader, w_, p));
    } catch (const std::exception&) {
      // A GPU trial (its ranges time launches), or one without ranges (an older study's): it still
      // counts by its step time, and the analytic model is scaled to it.
    }
    if (t.step_s > 0) analytic_ratio_.push_back(t.step_s / predictTime(w_, p, fitted_).step_s);
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

  const workloads::Workload& w_;
  const Cluster& c_;
  const TuneOptions& o_;
  TuneResult& res_;
  Study& study_;
  const std::vector<std::string> configs_;
  const std::function<void(const TuneEvent&)>& progress_;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();
  Cluster fitted_;
  std::vector<rundb::Collective> comm_;
  std::vector<double> analytic_ratio_;  // measured / analytic, every ok trial
  std::vector<TrialRecord> ok_so_far_;
  int64_t done_ = 0;
  double best_ = 0;
  std::string best_plan_;
};

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
  // An interrupted study recommends nothing yet: its last round is incomplete.
  if (res.recommended >= 0 && !res.interrupted) study.setValue("recommended", std::to_string(res.recommended));
  if (res.interrupted) res.recommended = -1;
}

}  // namespace

TuneResult tune(const workloads::Workload& w, const Cluster& c, const SpaceOptions& space, const TuneOptions& o,
                const std::function<void(const TuneEvent&)>& progress) {
  TuneResult res;
  res.candidates = enumerateSpace(w, c, space);
  const std::vector<const Candidate*> valid = validCandidates(res.candidates, space);
  if (o.predict_only || valid.empty()) return res;
  const SearchOptions so{o.first_round, o.base_steps, o.finalists, o.final_rounds};
  const std::unique_ptr<SearchStrategy> search = makeSearch(o.search, res.candidates, c, so);

  std::unique_ptr<StudyLock> own_lock;  // held until the study is closed (declared first)
  if (!o.lock) own_lock = std::make_unique<StudyLock>(o.study_path, o.resume);
  makeWorkDir(o.work_dir);  // before the study is written: refused here, a new study leaves nothing
  Study study(o.lock ? *o.lock : *own_lock, studyInputs(w, c, space, o, res.candidates));
  // A resumed study is checked before any of it is used: every id it holds indexes the space.
  study.checkTrials(res.candidates, int64_t(valid.size()) + std::max<int64_t>(0, o.final_rounds));
  std::vector<std::string> configs;
  const std::string spec = w.source.empty() ? w.name : w.source;
  for (const auto& cand : res.candidates)
    configs.push_back(cand.rejected.empty() ? runtime::toJson(trialConfig(w, cand.plan, o, spec)) : "");
  study.saveCandidates(res.candidates, configs);
  res.profiles = search->profiles();
  study.setValue("profile_candidates", nlohmann::json(res.profiles).dump());

  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = onTunerSignal;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_interrupt = 0;
  StudyRunner runner(w, c, o, res, study, configs, progress);
  while (!g_interrupt) {
    const std::optional<TrialBatch> batch = search->nextBatch(StudyState{res.candidates});
    if (!batch) break;
    runner.runBatch(*batch, *search);
    runner.refit();
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  res.interrupted = g_interrupt != 0;
  res.signal = g_interrupt;
  finish(res, study, *search, c);
  return res;
}

}  // namespace trainscope::tuner
