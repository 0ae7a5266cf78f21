// tune_inputs.cpp — see tune_inputs.h.
#include "trainscope/tuner/tune_inputs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "trainscope/common/error.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/runconfig/fields.h"

#ifndef TRAINSCOPE_PROBE_ROOT
#define TRAINSCOPE_PROBE_ROOT ""  // no checkout known: --python's
#endif

namespace trainscope::tuner {

namespace {

// Whether `name` is a program this host can start: a path (with a '/') to an executable file, or a
// name found so in PATH (as execvp looks it up).
bool startable(const std::string& name) {
  const auto executable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
  };
  if (name.empty()) return false;
  if (name.find('/') != std::string::npos) return executable(name);
  const char* inherited = std::getenv("PATH");
  const std::string path = inherited ? inherited : "/bin:/usr/bin";
  for (size_t begin = 0; begin <= path.size();) {
    size_t end = path.find(':', begin);
    if (end == std::string::npos) end = path.size();
    if (executable((end == begin ? std::string(".") : path.substr(begin, end - begin)) + "/" + name)) return true;
    begin = end + 1;
  }
  return false;
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

std::vector<int64_t> parseCounts(const std::string& list, const std::string& field, int64_t hi) {
  std::vector<int64_t> out;
  for (const auto& item : split(list))
    out.push_back(runconfig::parseInteger(item, field, 1, hi, "pass a comma-separated list such as 1,2,4"));
  return out;
}

void requireAtLeast(int64_t v, int64_t lo, const std::string& field, const std::string& fix) {
  if (v < lo) throw UserError(field, std::to_string(v) + " is below " + std::to_string(lo), fix);
}

// Counts that are doubled, summed or turned into clock durations: past `hi` refused naming the flag,
// before any of that can wrap.
void requireAtMost(int64_t v, int64_t hi, const std::string& field, const std::string& fix) {
  if (v > hi) throw UserError(field, std::to_string(v) + " is above " + std::to_string(hi), fix);
}

// The longest wall time a flag may name (10^7 s, 115 days): a duration past it would overflow the clock.
constexpr double kLongestSeconds = 1e7;

// --inject: CANDIDATE:crash|hang|oom|badpath|teardown[,…].
void checkInject(const std::string& spec) {
  for (const auto& item : split(spec)) {
    const auto colon = item.find(':');
    const std::string what = colon == std::string::npos ? "" : item.substr(colon + 1);
    if (colon == std::string::npos || (what != "crash" && what != "hang" && what != "oom" && what != "badpath" &&
                                  what != "teardown"))
      throw UserError("--inject", "\"" + item + "\" is not CANDIDATE:crash|hang|oom|badpath|teardown",
                      "e.g. --inject 0:crash,1:hang");
    runconfig::parseInteger(item.substr(0, colon), "--inject", 0, int64_t(1) << 40,
                          "name a candidate by its id, e.g. --inject 0:crash");
  }
}

}  // namespace

void checkFigures(const workloads::Workload& w, const Cluster& c, int64_t gbs, int64_t seq_flag) {
  const int64_t seq = seq_flag > 0 ? std::min<int64_t>(seq_flag, w.n_positions) : std::min<int64_t>(w.n_positions, 1024);
  if (!figuresCountable(w, (long double)gbs, seq, c.devices()))
    throw UserError("--gbs",
                    std::to_string(gbs) + " sequences of " + std::to_string(seq) + " tokens of " + w.name +
                        " need more memory than the models can count (over 2^60 bytes)",
                    "pass a global batch a cluster could hold");
}

double parseDuration(const std::string& s) {
  if (s.empty()) return 0;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  const std::string unit(end);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : -1;
  if (end == s.c_str() || scale < 0 || !(v > 0) || !std::isfinite(v))
    throw UserError("--budget", "\"" + s + "\" is not a duration", "pass e.g. 90s, 20m or 2h");
  if (v * scale > kLongestSeconds)
    throw UserError("--budget", "\"" + s + "\" is longer than 10^7 s (115 days)", "pass e.g. 90s, 20m or 2h");
  return v * scale;
}

SpaceOptions checkedSpace(const TuneInputs& f) {
  if (f.study.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
    throw UserError("--study", "is empty", "name the study's file, e.g. --study study.db");
  requireAtLeast(f.gbs, 1, "--gbs", "pass the global batch in sequences");
  requireAtLeast(f.seq, 0, "--seq", "pass a sequence length, or leave it out for the workload's");
  requireAtLeast(f.nodes, 0, "--nodes", "pass a number of nodes, or leave it out for the cluster file's");
  if (f.max_trials != kMaxTrialsUnset)  // left out: no cap
    requireAtLeast(f.max_trials, 0, "--max-trials", "pass a number of trial processes (0: none), or leave it out for no cap");
  requireAtLeast(f.first_round, 1, "--first-round", "pass 1 or more (default 8)");
  requireAtLeast(f.steps, 1, "--trial-steps", "pass 1 or more (default 3)");
  if (f.finalists < 2) throw UserError("--finalists", "must be at least 2", "pass 2 or more (default 3)");
  if (f.final_rounds < 0) throw UserError("--final-rounds", "must not be negative", "pass 0 for plain halving, or 2");
  if (!(f.trial_timeout > 0) || !std::isfinite(f.trial_timeout) || f.trial_timeout > kLongestSeconds)
    throw UserError("--trial-timeout", "must be a positive number of seconds, at most 10^7", "pass e.g. 300");
  constexpr int64_t kMost = int64_t(1) << 20;
  requireAtMost(f.nodes, kMostClusterDevices, "--nodes", "pass a number of nodes, or leave it out for the cluster file's");
  requireAtMost(f.max_trials, kMost, "--max-trials", "pass a number of trial processes (0: none), or leave it out for no cap");
  requireAtMost(f.first_round, kMost, "--first-round", "pass a smaller first round (default 8)");
  requireAtMost(f.steps, kMost, "--trial-steps", "pass a few steps (default 3; each round doubles them)");
  requireAtMost(f.finalists, kMost, "--finalists", "pass a few finalists (default 3)");
  requireAtMost(f.final_rounds, kMost, "--final-rounds", "pass a few rounds (default 2)");
  runconfig::parseLauncher(f.launcher);  // refused before anything is made (TuneOptions takes it parsed)
  checkInject(f.inject);
  if (parseJobKind(f.runner) != JobKind::Trainscope && f.entry.empty())
    throw UserError("--entry", "is required with --runner " + f.runner,
                    "name the training script and its arguments, e.g. --entry 'examples/hf_trainer.py --model gpt2'");
  if (parseJobKind(f.runner) == JobKind::Trainscope && !f.entry.empty())
    throw UserError("--entry", "runs under an external runner only", "add --runner hf|accelerate|deepspeed|megatron|torchtitan");
  if (f.search != "halving" && f.search != "exhaustive")
    throw UserError("--search", "unknown value \"" + f.search + "\"", std::string("use one of ") + searchNames());
  SpaceOptions so;
  so.framework = frameworkOf(parseJobKind(f.runner));  // an external job's trials priced as its framework runs
  so.gbs = f.gbs;
  so.seq = f.seq;
  so.mbs = parseCounts(f.mbs, "--mbs", int64_t(1) << 30);
  if (so.mbs.empty()) throw UserError("--mbs", "lists no micro-batch size", "pass e.g. --mbs 1,2,4");
  so.ckpt.clear();
  for (const auto& m : split(f.ckpt)) so.ckpt.push_back(runconfig::parseCheckpointing(m, "--ckpt"));
  if (so.ckpt.empty()) throw UserError("--ckpt", "lists no checkpointing mode", "pass e.g. --ckpt none,selective,full");
  for (const auto& m : split(f.precision)) so.precisions.push_back(runconfig::parsePrecision(m, "--precision"));
  so.schedules.clear();
  // "interleaved", as predict takes it: the 1F1B schedule with more than one model chunk per stage.
  bool plain_1f1b = false, interleaved = false;
  for (const auto& m : split(f.schedules)) {
    runconfig::Parallelism named;  // by its one name (runconfig's parseScheduleInto, as run and predict read it)
    runconfig::parseScheduleInto(m, "--pp-schedules", named);
    const runconfig::PipelineSchedule s = named.pp_schedule;
    (named.interleaved() ? interleaved : plain_1f1b) |= s == runconfig::PipelineSchedule::OneFOneB;
    if (std::find(so.schedules.begin(), so.schedules.end(), s) == so.schedules.end()) so.schedules.push_back(s);
  }
  if (so.schedules.empty())
    throw UserError("--pp-schedules", "lists no schedule", "pass e.g. --pp-schedules 1f1b,gpipe");
  so.plain_one_f_one_b = plain_1f1b || !interleaved;
  so.worlds = parseCounts(f.ranks, "--ranks", int64_t(1) << 20);
  so.zero.clear();
  for (const auto& z : split(f.zero))
    so.zero.push_back(runconfig::zeroStage(runconfig::parseInteger(z, "--zero", 0, 3, "pass stages from 0 to 3, e.g. --zero 0,1"), "--zero"));
  if (so.zero.empty()) throw UserError("--zero", "lists no ZeRO stage", "pass e.g. --zero 0,1,2,3");
  if (f.no_zero) so.zero = {runconfig::ZeroStage::None};
  so.cp = parseCounts(f.cp, "--cp", int64_t(1) << 20);
  if (so.cp.empty()) throw UserError("--cp", "lists no degree", "pass e.g. --cp 1,2");
  so.virtual_stages = parseCounts(f.virtual_stages, "--virtual-stages", int64_t(1) << 20);
  if (so.virtual_stages.empty()) throw UserError("--virtual-stages", "lists no count", "pass e.g. --virtual-stages 1,2");
  if (interleaved && std::none_of(so.virtual_stages.begin(), so.virtual_stages.end(), [](int64_t v) { return v > 1; }))
    throw UserError("--pp-schedules", "interleaved needs model chunks per stage above 1, and --virtual-stages lists none",
                    "pass e.g. --virtual-stages 2,4 with it");
  if (f.no_sp) so.sequence_parallel = {false};
  return so;
}

namespace {

// --entry as words, its script made absolute: the trial's paths do not depend on where tune was
// started, and a study resumed from another folder has the same entry.
std::vector<std::string> resolvedEntry(const std::string& text) {
  std::vector<std::string> entry = splitEntry(text);
  if (entry[0] == "-m" && (entry.size() < 2 || entry[1].empty() || entry[1][0] == '-'))
    throw UserError("--entry", "-m names no module", "name the module after it, e.g. --entry '-m mypackage.train --lr 1e-3'");
  if (entry[0] != "-m") {
    char* real = ::realpath(entry[0].c_str(), nullptr);
    struct stat st {};
    if (!real || ::stat(real, &st) != 0 || !S_ISREG(st.st_mode)) {
      std::free(real);
      throw UserError("--entry", "no such script: " + entry[0], "name the training script (a .py file), or -m MODULE");
    }
    entry[0] = real;
    std::free(real);
  }
  return entry;
}

}  // namespace

JobOptions jobOptions(const TuneInputs& f, const Cluster& c, const workloads::Workload& w) {
  JobOptions o;
  o.kind = parseJobKind(f.runner);
  o.entry = resolvedEntry(f.entry);
  o.python = !f.python.empty() ? f.python : std::getenv("TRAINSCOPE_PYTHON") ? std::getenv("TRAINSCOPE_PYTHON") : "python3";
  // Every trial would start it and exit 127: refused before any is made. Under Slurm it starts on the
  // allocation's nodes, whose programs this host may not see.
  if (f.launcher != "slurm" && !startable(o.python))
    throw UserError(f.python.empty() && std::getenv("TRAINSCOPE_PYTHON") ? "--python (from $TRAINSCOPE_PYTHON)" : "--python",
                    o.python + " is not an executable file" +
                        (o.python.find('/') == std::string::npos ? " found in PATH" : ""),
                    "pass the interpreter that runs your job, e.g. --python /path/to/venv/bin/python");
  struct stat st {};
  if (!f.probe.empty())
    o.probe_root = f.probe;
  else if (::stat(TRAINSCOPE_PROBE_ROOT "/trainscope_probe/site/sitecustomize.py", &st) == 0)
    o.probe_root = TRAINSCOPE_PROBE_ROOT;  // this build's own checkout: never another clone's, whatever the venv says
  else
    o.probe_root = locateProbe(o.python);  // a build moved away from its sources: where --python imports it from
  if (::stat((o.probe_root + "/trainscope_probe/site/sitecustomize.py").c_str(), &st) != 0)
    throw UserError("--probe", o.probe_root + " holds no trainscope_probe/site/sitecustomize.py",
                    "pass the repository's python/ folder");
  o.workload = w.name;
  o.cpu = c.kind == ClusterKind::Cpu;
  o.mem_limit = o.cpu ? c.memory_bytes : 0;
  return o;
}

TuneOptions tuneOptions(const TuneInputs& f, const Cluster& c, const StudyLock* lock, const std::string& trainscope,
                        double budget_s) {
  TuneOptions o;
  o.study_path = f.study;
  o.resume = f.resume;
  o.lock = lock;
  o.predict_only = f.predict_only;
  o.search = f.exhaustive ? "exhaustive" : f.search;  // --exhaustive: an alias
  o.max_trials = f.max_trials == kMaxTrialsUnset ? -1 : f.max_trials;
  o.budget_s = budget_s;
  o.first_round = f.first_round;
  o.base_steps = std::max<int64_t>(2, f.steps);
  o.finalists = f.finalists;
  o.final_rounds = f.final_rounds;
  o.trial_timeout_s = f.trial_timeout;
  o.launcher = runconfig::parseLauncher(f.launcher);
  o.trainscope = trainscope;
  o.work_dir = f.study + ".trials";
  o.mem_limit = c.kind == ClusterKind::Cpu ? c.memory_bytes : 0;
  o.inject = f.inject;
  const JobKind kind = parseJobKind(f.runner);
  if (kind != JobKind::Trainscope) {
    o.runner_name = f.runner;
    o.entry = resolvedEntry(f.entry);  // another script or other arguments are another job's trials
    const bool cpu = c.kind == ClusterKind::Cpu;
    o.refuse = [kind, cpu](const Plan& p) { return jobRefusal(kind, p, cpu); };
  } else if (f.inject.find("badpath") != std::string::npos || f.inject.find("teardown") != std::string::npos) {
    throw UserError("--inject", "badpath and teardown are faults of an external job (its script; its interpreter's exit)",
                    "use them with --runner hf|accelerate|…");
  }
  return o;
}

}  // namespace trainscope::tuner
