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
    if (colon != std::string::npos && std::atoll(item.substr(0, colon).c_str()) == candidate) return item.substr(colon + 1);
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

TuneResult tune(const workloads::Workload& w, const Cluster& c, const SpaceOptions& space, const TuneOptions& o,
                const std::function<void(const TuneEvent&)>& progress) {
  const auto t0 = std::chrono::steady_clock::now();
  TuneResult res;
  res.candidates = enumerateSpace(w, c, space);
  std::vector<const Candidate*> valid;
  for (const auto& cand : res.candidates)
    if (cand.rejected.empty()) valid.push_back(&cand);
  for (const Candidate* v : valid)
    // The models' figures are int64 bytes and seconds: a batch so large that they overflow must not
    // come out as a negative peak that "fits".
    if (v->predicted_peak <= 0 || !(v->predicted_step_s > 0) || !std::isfinite(v->predicted_step_s))
      throw UserError(
          "--gbs",
          "the models' figures overflow for " + v->plan.describe() + " (gbs " + std::to_string(space.gbs) + ")",
          "pass a global batch (and --mbs, --seq) that a cluster could hold");
  if (o.predict_only || valid.empty()) return res;

  nlohmann::json inputs = {{"workload", w.name}, {"n_layer", w.n_layer}, {"n_embd", w.n_embd}, {"cluster", c.name},
                           {"devices", c.devices()}, {"memory_bytes", c.memory_bytes}, {"gbs", space.gbs},
                           {"seq", space.seq}, {"candidates", res.candidates.size()},
                           {"base_steps", o.base_steps}, {"first_round", o.first_round},
                           {"finalists", o.finalists}, {"final_rounds", o.final_rounds},
                           {"exhaustive", o.exhaustive}, {"launcher", o.launcher}, {"kind", c.kind},
                           {"workload_source", w.source}, {"n_head", w.n_head}, {"vocab_size", w.vocab_size},
                           {"n_positions", w.n_positions}};
  // Every knob of the space: a study resumed with other knobs would map its trials onto other plans.
  for (const auto& cand : res.candidates) inputs["plans"].push_back(cand.plan.describe());
  std::unique_ptr<StudyLock> own_lock;  // held until the study is closed (declared first)
  if (!o.lock) own_lock = std::make_unique<StudyLock>(o.study_path, o.resume);
  makeWorkDir(o.work_dir);  // before the study is written: refused here, a new study leaves nothing
  Study study(o.lock ? *o.lock : *own_lock, inputs.dump());
  // A resumed study is checked before any of it is used: every id it holds indexes the space.
  study.checkTrials(res.candidates, int64_t(valid.size()) + std::max<int64_t>(0, o.final_rounds));
  std::vector<std::string> configs;
  for (const auto& cand : res.candidates) {
    const std::string spec = w.source.empty() ? w.name : w.source;
    configs.push_back(cand.rejected.empty() ? runtime::toJson(trialConfig(w, cand.plan, o, spec)) : "");
  }
  study.saveCandidates(res.candidates, configs);

  struct sigaction sa {}, old_int {}, old_term {};
  sa.sa_handler = onTunerSignal;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_interrupt = 0;

  // Round 0 first runs one candidate per distinct layer shape (the best-predicted of each, at most
  // first_round shapes): their traced layer ranges give every candidate of that shape a step time
  // composed from measured costs (profile.h). The rest of round 0 is the best of the re-ranked space
  // (every valid candidate when exhaustive); each next round the faster half of the last, twice as long.
  MeasuredCosts& costs = res.costs;
  const auto byId = [&](int64_t id) -> const Candidate& { return res.candidates[size_t(id)]; };
  // The collectives the trials recorded refit the network's α–β (the intra-node tier, from trials
  // within one node): what composes pipeline sends and the unmeasured shapes' TP and DP terms.
  Cluster fitted = c;
  std::vector<rundb::Collective> comm;
  std::vector<double> analytic_ratio;  // measured / analytic, every ok trial
  const auto fallbackScale = [&]() { return analytic_ratio.empty() ? 1.0 : rundb::percentile(analytic_ratio, 0.5); };
  const auto refitNetwork = [&]() {
    try {
      const CollectiveFit f = fitCollectives(comm);
      fitted.intra_node = f.tier;
      res.network_fit = f;
    } catch (const std::exception&) {
      // Fewer than two message sizes so far: the cluster file's figures stay.
    }
  };
  const auto learn = [&](const TrialRecord& t) {
    if (t.status != TrialStatus::Ok) return;
    const Plan& p = byId(t.candidate).plan;
    try {
      rundb::RunReader reader(t.db_path);
      if (p.world() <= c.devices_per_node)
        for (const rundb::Collective& x : reader.collectives())
          // Blocking sends wait for their peer, and the embedding's sync for the other stage: only
          // the collectives every member reaches together (gradient buckets, TP) measure the network.
          if ((x.group == "dp" || x.group == "tp") && x.op != "barrier") comm.push_back(x);
      costs.add(shapeKey(p, c), costsFromRun(reader, w, p));
    } catch (const std::exception&) {
      // A GPU trial (its ranges time launches), or one without ranges (an older study's): it still
      // counts by its step time, and the analytic model is scaled to it.
    }
    if (t.step_s > 0) analytic_ratio.push_back(t.step_s / predictTime(w, p, fitted).step_s);
  };
  std::vector<int64_t> round_set;
  std::vector<int64_t>& profiles = res.profiles;
  std::set<std::string> shapes;
  const size_t first_round = size_t(std::max<int64_t>(1, o.first_round));
  for (const Candidate* v : valid)
    if (shapes.size() < first_round && shapes.insert(shapeKey(v->plan, c)).second) profiles.push_back(v->id);
  study.setValue("profile_candidates", nlohmann::json(profiles).dump());
  const size_t first = o.exhaustive ? valid.size() : std::min<size_t>(valid.size(), std::max(first_round, profiles.size()));
  round_set = profiles;
  round_set.resize(first, -1);  // the rest of round 0 is chosen once the profiles are measured
  // The halving stops once it would leave `finalists` or fewer: then the best `finalists` of the last
  // round run final_rounds more times each, alternately, at one length (see below).
  const size_t finalists = size_t(std::max<int64_t>(2, o.finalists));
  int64_t planned = int64_t(round_set.size());
  for (size_t n = round_set.size(); n > 1 && !o.exhaustive;) {
    const size_t keep = (n + 1) / 2;
    if (keep <= finalists && o.final_rounds > 0) {
      planned += int64_t(std::min(n, finalists)) * o.final_rounds;
      break;
    }
    planned += int64_t(keep);
    n = keep;
  }
  int64_t done = 0;
  // Every ok trial so far: candidates are compared by pooledStepTime over all of theirs (study.h),
  // as two processes of one configuration differ by more than the steps of one.
  std::vector<TrialRecord> ok_so_far;
  double best = 0;
  std::string best_plan;
  int64_t steps = o.base_steps << (o.exhaustive ? 2 : 0);
  int64_t final_from = std::numeric_limits<int64_t>::max();  // the final stage's first round
  for (int64_t round = 0; !round_set.empty(); ++round) {
    std::vector<std::pair<double, int64_t>> measured;
    for (size_t slot = 0; slot < round_set.size(); ++slot) {
      if (g_interrupt) break;
      if (round == 0 && slot == profiles.size()) {
        // The profiles are in: re-rank by the composed step times and fill the rest of round 0.
        refitNetwork();
        rerank(w, fitted, costs, res.candidates, fallbackScale());
        study.saveCandidates(res.candidates, configs);
        std::vector<const Candidate*> order = valid;
        std::stable_sort(order.begin(), order.end(), [](const Candidate* a, const Candidate* b) {
          return a->predicted_step_s < b->predicted_step_s;
        });
        std::set<int64_t> taken(profiles.begin(), profiles.end());
        size_t k = slot;
        for (const Candidate* v : order)
          if (k < round_set.size() && !taken.count(v->id)) round_set[k++] = v->id;
      }
      const int64_t id = round_set[slot];
      const bool over_budget = (o.budget_s > 0 && seconds(t0) > o.budget_s) || (o.max_trials > 0 && res.trials_run >= o.max_trials);
      std::optional<TrialRecord> prev = study.trial(id, round);
      TrialRecord t;
      if (prev && prev->status != TrialStatus::Running) {
        t = *prev;  // finished before an interruption: kept, not repeated
        learn(t);
      } else if (over_budget) {
        continue;
      } else {
        t.candidate = id;
        t.round = round;
        t.steps = steps;
        t.predicted_step_s = byId(id).predicted_step_s;
        t.predicted_peak = byId(id).predicted_peak;
        // A row left "running" (an interrupted attempt) is run again from scratch, into paths of its own.
        const std::string stem = freshStem(o.work_dir, id, round);
        t.db_path = stem + ".db";
        t.id = study.beginTrial(t);
        runtime::TrainConfig cfg = runtime::fromJson(study.candidateConfig(id), o.study_path);
        const std::string fault = injectedFault(o.inject, id);
        if (fault == "crash") cfg.inject_failure = "0:1:segv";
        if (fault == "hang") cfg.inject_failure = "0:1:hang";
        if (fault == "oom") cfg.inject_failure = "0:1:oom";
        const std::string cfg_path = stem + ".json";
        files::writeAtomically(cfg_path, nlohmann::json::parse(runtime::toJson(cfg)).dump(2), files::Existing::Refuse,
                               "--study");
        // A GPU's profile trials record their kernels (CUPTI): the host ranges only launch them.
        const bool gpu_profile = c.kind != "cpu" && round == 0 && slot < profiles.size();
        t = runTrial(o, t, cfg_path, stem + ".log", gpu_profile ? "all" : "ranges");
        if (g_interrupt && t.status != TrialStatus::Ok) {
          t.status = TrialStatus::Running;  // interrupted: run again on --resume
          break;
        }
        study.finishTrial(t);
        ++res.trials_run;
        learn(t);
      }
      ++done;
      if (t.status == TrialStatus::Ok) {
        ok_so_far.push_back(t);
        measured.emplace_back(pooledStepTime(ok_so_far, id), id);
        // The best so far as the pick will judge it: by pooled step time.
        best = 0;
        for (const TrialRecord& x : ok_so_far)
          if (const double est = pooledStepTime(ok_so_far, x.candidate); best == 0 || est < best) {
            best = est;
            best_plan = byId(x.candidate).plan.describe();
          }
      }
      if (progress) {
        TuneEvent e;
        e.done = done;
        e.planned = planned;
        e.elapsed_s = seconds(t0);
        e.eta_s = done > 0 ? e.elapsed_s / double(done) * double(std::max<int64_t>(0, planned - done)) : 0;
        char line[300];
        const bool profile = round == 0 && slot < profiles.size();
        const char* stage = profile ? " profile," : round >= final_from ? " final,  " : ",        ";
        std::snprintf(line, sizeof(line), "round %lld%s %-44s %-7s %s", static_cast<long long>(round), stage,
                      byId(id).plan.describe().c_str(), toString(t.status),
                      t.status == TrialStatus::Ok ? (std::to_string(int(t.step_s * 1e3 + 0.5)) + " ms/step, " +
                                                     std::to_string(int64_t(t.tokens_per_s)) + " tok/s")
                                                        .c_str()
                                                  : t.message.c_str());
        e.line = line;
        e.best_step_s = best;
        e.best_plan = best_plan;
        progress(e);
      }
    }
    // Refit: every candidate's prediction from all that has been measured so far.
    refitNetwork();
    rerank(w, fitted, costs, res.candidates, fallbackScale());
    study.saveCandidates(res.candidates, configs);
    study.setValue("measured_costs", costsJson(costs));
    if (res.network_fit.samples > 0)
      study.setValue("network_fit", nlohmann::json({{"latency_s", res.network_fit.tier.latency},
                                                     {"bandwidth_bytes_per_s", res.network_fit.tier.bandwidth},
                                                     {"samples", res.network_fit.samples}, {"r2", res.network_fit.r2}})
                                        .dump());
    if (g_interrupt || o.exhaustive) break;
    if (round >= final_from) {
      // The final stage: the same finalists again, in the opposite order, so that a host that drifts
      // slower or faster over the stage weighs on each of them alike.
      // A finalist whose trial failed (crash, hang, out of memory) leaves the stage.
      if (round + 1 >= final_from + o.final_rounds) break;
      round_set.clear();
      for (auto it = measured.rbegin(); it != measured.rend(); ++it) round_set.push_back(it->second);
      if (round_set.size() <= 1) break;
      continue;
    }
    std::sort(measured.begin(), measured.end());
    if (measured.size() <= 1) break;
    const std::set<int64_t> ran(round_set.begin(), round_set.end());  // ok or not
    // Successive halving keeps the faster half, by each one's pooled step time. Where that would
    // leave `finalists` or fewer, the best `finalists` instead run final_rounds trials each, alternately and
    // at one length: two processes of one configuration differ by up to ±15% on a shared host, and a
    // single trial of each would let that noise, not the configuration, decide the pick.
    size_t keep = (measured.size() + 1) / 2;
    const bool to_final = keep <= finalists && o.final_rounds > 0;
    if (to_final) keep = std::min(measured.size(), finalists);
    round_set.clear();
    for (size_t i = 0; i < keep; ++i) round_set.push_back(measured[i].second);
    // Twice as long each round; the final stage's trials as long as the last round's, at least four
    // times the first's (what decides there is the number of processes, not their length).
    steps = to_final ? std::max(steps, o.base_steps << 2) : steps * 2;
    if (to_final) final_from = round + 1;
    if (round == 0) {
      // The refitted model may point past round 0: candidates never run whose shape was measured and
      // whose composed step time beats the slowest survivor join the next round (at most half as
      // many as survive), so a configuration the analytic ranking misplaced still gets measured.
      const double cut = measured[round_set.size() - 1].first;
      std::vector<std::pair<double, int64_t>> promising;
      for (const Candidate* v : valid)
        if (!ran.count(v->id) && v->time_measured && v->predicted_step_s < cut)
          promising.emplace_back(v->predicted_step_s, v->id);
      std::sort(promising.begin(), promising.end());
      const size_t room = std::max<size_t>(1, round_set.size() / 2);
      for (size_t i = 0; i < promising.size() && i < room; ++i) round_set.push_back(promising[i].second);
      planned += int64_t(std::min(promising.size(), room)) * (to_final ? o.final_rounds : 1);
    }
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  res.interrupted = g_interrupt != 0;
  res.signal = g_interrupt;

  // The recommendation: a candidate none of whose trials failed (a crash, hang or out-of-memory once
  // is not a configuration to hand over) and whose every ok trial stayed within the memory per rank;
  // among those, the ones that got furthest in the halving (every finalist counts as furthest once
  // it ran in the final stage), and of them the fastest by its pooled step time.
  res.trials = study.trials();
  std::map<int64_t, const TrialRecord*> latest;
  for (const auto& t : res.trials)
    if (!latest.count(t.candidate) || latest[t.candidate]->round < t.round) latest[t.candidate] = &t;
  std::vector<double> ratios;
  for (const auto& t : res.trials)
    if (t.status == TrialStatus::Ok && t.predicted_step_s > 0) ratios.push_back(t.step_s / t.predicted_step_s);
  const auto pooledOf = [&](int64_t cand) { return pooledStepTime(res.trials, cand); };
  std::set<int64_t> unfit;  // a trial failed, or peaked over the memory per rank
  for (const auto& t : res.trials)
    if ((t.status != TrialStatus::Ok && t.status != TrialStatus::Running) ||
        (t.status == TrialStatus::Ok && t.peak_bytes > c.memory_bytes))
      unfit.insert(t.candidate);
  const TrialRecord* pick = nullptr;
  for (const auto& [cand, t] : latest) {
    if (t->status != TrialStatus::Ok || unfit.count(cand)) continue;
    const auto level = [&](const TrialRecord* x) { return std::min(x->round, final_from); };
    if (!pick || level(t) > level(pick) ||
        (level(t) == level(pick) && pooledOf(t->candidate) < pooledOf(pick->candidate)))
      pick = t;
  }
  for (const auto& [cand, t] : latest) res.estimate[cand] = pooledOf(cand);
  if (pick) res.recommended = pick->candidate;
  if (!ratios.empty()) {
    std::sort(ratios.begin(), ratios.end());
    res.time_scale = ratios[ratios.size() / 2];
  }
  study.setValue("time_scale", std::to_string(res.time_scale));
  // An interrupted study recommends nothing yet: its last round is incomplete.
  if (res.recommended >= 0 && !res.interrupted) study.setValue("recommended", std::to_string(res.recommended));
  if (res.interrupted) res.recommended = -1;
  return res;
}

}  // namespace trainscope::tuner
