// job_trial.cpp — a trial that runs the user's job, and its run database from the probe (job.h).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/process.h"
#include "trainscope/rundb/import_probe.h"
#include "trainscope/tuner/job.h"
#include "trainscope/tuner/slurm.h"

namespace trainscope::tuner {
namespace {

// The probe's files of one kind in its folder, in rank order ("rank0.steps.jsonl", …).
std::vector<std::string> probeFiles(const std::string& dir, const std::string& suffix) {
  std::vector<std::pair<long, std::string>> found;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("rank", 0) != 0 || name.size() <= 4 + suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        continue;
      const std::string digits = name.substr(4, name.size() - 4 - suffix.size());
      if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
      found.push_back({std::atol(digits.c_str()), dir + "/" + name});
    }
    ::closedir(d);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& f : found) paths.push_back(f.second);
  return paths;
}

off_t sizeOf(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : 0;
}

// How a job that exited non-zero ended, from its ranks' own records: an out-of-memory exit (the
// probe's rankR.exit.json), a fatal signal (faulthandler's rankR.fault); else its status.
void classifyJobExit(TrialRecord& t, int code, const std::string& probe_dir) {
  for (const std::string& p : probeFiles(probe_dir, ".exit.json")) {
    std::ifstream in(p);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.value("class", "") == "oom") {
      t.status = TrialStatus::OutOfMemory;
      t.exit_code = kExitOutOfMemory;
      t.message = "rank " + std::to_string(j.value("rank", 0)) + " ran out of memory: " + j.value("error", "");
      return;
    }
  }
  for (const std::string& p : probeFiles(probe_dir, ".fault"))
    if (sizeOf(p) > 0) {
      t.status = TrialStatus::Crash;
      t.exit_code = code;
      t.message = "a rank died of a fatal signal (" + p.substr(p.rfind('/') + 1) + ")";
      return;
    }
  classifyExit(t, code);
}

// A job that returned and then died in the interpreter's teardown: each rank with a fault record
// (rankR.fault) had written rankR.returned first (the probe's exit hook, after its rows and the
// process group), and no rank ran out of memory. Its steps are measured: the trial keeps them, and
// this says which rank died and how ("" when the job did not end so). DeepSpeed 0.19.8's CPU path
// ends so in about one trial of twenty ("terminate called without an active exception").
std::string teardownFault(int code, const std::string& probe_dir) {
  for (const std::string& p : probeFiles(probe_dir, ".exit.json"))
    if (sizeOf(p) > 0) return "";
  std::string ranks;
  for (const std::string& p : probeFiles(probe_dir, ".fault")) {
    if (sizeOf(p) == 0) continue;
    const std::string stem = p.substr(0, p.size() - std::strlen(".fault"));
    if (::access((stem + ".returned").c_str(), F_OK) != 0) return "";
    std::ifstream in(p);
    std::string first;
    std::getline(in, first);
    ranks += (ranks.empty() ? "" : "; ") + stem.substr(stem.rfind('/') + 1) + ": " + first;
  }
  if (ranks.empty()) return "";
  return "the job returned, then died in the interpreter's teardown (" + ranks + "; exit " + std::to_string(code) +
         "): its measured steps are kept";
}

// What each rank's intra-op threads were and who set them (the probe's rankR.threads.json, written
// when the rank's probe starts; job.cpp, rankThreads): a JSON list in rank order, for the trial's
// `threads` meta key. A record that cannot be read is left out.
std::string rankThreadsRecord(const std::string& probe_dir) {
  nlohmann::json all = nlohmann::json::array();
  for (const std::string& p : probeFiles(probe_dir, ".threads.json")) {
    std::ifstream in(p);
    nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object()) all.push_back(std::move(j));
  }
  return all.dump();
}

// What the probe noted about its trace (rankR.notice.json: the job's own torch.profiler held Kineto,
// so a rank's trace was skipped or cut short; python/trainscope_probe/profiler.py), "rank R: …" in rank
// order, "" for none. A record that cannot be read is left out.
std::string probeNotices(const std::string& probe_dir) {
  std::string out;
  for (const std::string& p : probeFiles(probe_dir, ".notice.json")) {
    std::ifstream in(p);
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (!j.is_object() || !j.contains("notice") || !j["notice"].is_string()) continue;
    const auto rank = j.contains("rank") && j["rank"].is_number_integer() ? j["rank"].get<int64_t>() : 0;
    out += (out.empty() ? "rank " : "; rank ") + std::to_string(rank) + ": " + j["notice"].get<std::string>();
  }
  return out;
}

bool entryScriptMissing(const std::vector<std::string>& argv, size_t entry_at) {
  if (entry_at >= argv.size() || argv[entry_at] == "-m") return false;  // a module: the interpreter finds it
  struct stat st {};
  return ::stat(argv[entry_at].c_str(), &st) != 0 || !S_ISREG(st.st_mode);
}

}  // namespace

// The trial's own folder, beside its spec (c0-r0.json → c0-r0.job, an absolute path: the job's
// working folder is not the tuner's), made afresh.
static std::string makeTrialFolder(const std::string& spec_path) {
  std::string stem = spec_path.substr(0, spec_path.size() - std::strlen(".json"));
  if (stem.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof(cwd))) stem = std::string(cwd) + "/" + stem;
  }
  const std::string dir = stem + ".job";
  if (::mkdir(dir.c_str(), 0700) != 0)
    throw UserError("--study", "cannot create the trial's folder " + dir + ": " + std::strerror(errno),
                    "check that the study's folder is writable");
  return dir;
}

TrialRecord JobTrialRunner::run(const TrialSpec& spec, TrialRecord t) {
  const auto t0 = std::chrono::steady_clock::now();
  auto finish = [&](TrialStatus status, const std::string& message) {
    t.status = status;
    t.message = message;
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return t;
  };
  files::OutputRule rule;
  rule.field = "--study";
  files::writeAtomically(spec.spec_path, runconfig::toJson(spec.run), rule);
  const std::string dir = makeTrialFolder(spec.spec_path);
  runconfig::TrainConfig c = spec.run.config;
  JobLaunch L;
  try {
    runconfig::resolve(c);
    JobOptions o = o_;
    o.slurm_name = spec.slurm_name;  // the study's step name (job.h)
    L = jobLaunch(o, c, dir, spec.profile, spec.fault);
  } catch (const UserError& e) {
    t.exit_code = 2;
    return finish(TrialStatus::Invalid, e.what());
  }
  for (const ExportFile& f : L.files) files::writeAtomically(dir + "/" + f.name, f.text, rule);
  if (::mkdir(L.probe_dir.c_str(), 0700) != 0)
    throw UserError("--study", "cannot create " + L.probe_dir + ": " + std::strerror(errno), "check the study's folder");
  // The script is the job's first word after the launcher's own (argv ends with the entry, then any
  // flags the runner adds): a path that is not a file is this trial's Invalid, nothing started.
  const size_t entry_at = [&] {
    for (size_t i = 0; i < L.argv.size(); ++i)
      if (L.argv[i] == o_.entry[0] || L.argv[i] == dir + "/no-such-script.py") return i;
    return L.argv.size();
  }();
  if (entryScriptMissing(L.argv, entry_at)) {
    t.exit_code = 2;
    return finish(TrialStatus::Invalid, "--entry: no such script: " + L.argv[entry_at]);
  }
  files::OutputRule log_rule = rule;
  log_rule.inputs = {spec.spec_path};
  log_rule.overwrite = true;
  const int log = files::createFile(spec.log_path, log_rule);
  process::SpawnOptions so;
  so.argv = L.argv;
  so.search_path = L.argv[0].find('/') == std::string::npos;
  so.env = L.env;
  so.own_group = true;        // the job's own group; its ranks die with their launcher (the probe's
  so.death_signal = SIGKILL;  // sitecustomize: PR_SET_PDEATHSIG), the launcher with the tuner
  so.stdout_fd = so.stderr_fd = log;
  pid_t pid = -1;
  try {
    pid = process::spawn(so);
  } catch (const std::exception& e) {
    ::close(log);
    return finish(TrialStatus::Failed, e.what());
  }
  ::close(log);
  setRunningTrialGroup(pid);
  const bool slurm = c.launcher == runconfig::Launcher::Slurm;
  std::optional<SlurmWatch> watch;  // what srun starts, recorded by id as squeue shows it (slurm.h)
  if (slurm) watch.emplace(SlurmLaunch{"", spec.slurm_name, {}, {}}, spec.on_slurm_launch);
  const process::Exit end = process::wait(pid, spec.timeout_s, /*group=*/true);
  setRunningTrialGroup(0);
  const SlurmLaunch launched = watch ? watch->stop() : SlurmLaunch{};
  // srun killed (the timeout's SIGKILL, or a signal): its step's tasks are not in the group (slurm_step.cpp).
  std::string cancel;
  if (slurm && end.kind != process::Exit::Exited)
    if (cancel = cancelSlurmLaunch(launched); !cancel.empty()) cancel = "; " + cancel;
  if (end.kind == process::Exit::TimedOut)
    return finish(TrialStatus::Hang, "no result within " + std::to_string(int(spec.timeout_s)) + " s" + cancel);
  if (end.kind == process::Exit::Signaled) {
    t.signal = end.signal;
    return finish(TrialStatus::Crash, std::string("the launcher was killed by ") + strsignal(end.signal) + cancel);
  }
  const std::string teardown = end.code != 0 ? teardownFault(end.code, L.probe_dir) : "";
  if (end.code != 0 && teardown.empty()) {
    classifyJobExit(t, end.code, L.probe_dir);
    t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return t;
  }
  t.exit_code = 0;
  const std::string notices = probeNotices(L.probe_dir);
  try {
    // The trial's resolved configuration and framework beside its rows: `calibrate` prices the plan
    // the job ran under its framework's profile, from the study or the database alone.
    std::map<std::string, std::string> meta = {{"config", runconfig::toJson(c)},
                                               {"framework", frameworkKey(frameworkOf(o_.kind))},
                                               {"device", o_.cpu ? "cpu" : "cuda"},
                                               {"threads", rankThreadsRecord(L.probe_dir)}};
    if (!notices.empty()) meta["probe_notice"] = notices;
    rundb::importProbe(probeFiles(L.probe_dir, ".steps.jsonl"), probeFiles(L.probe_dir, ".trace.json"),
                       spec.run.output.trace, o_.workload, "--study", meta);
  } catch (const std::exception& e) {
    return finish(TrialStatus::Failed, std::string("the job ended but its steps cannot be read: ") + e.what());
  }
  return finish(TrialStatus::Ok, teardown.empty() || notices.empty() ? teardown + notices : teardown + "; " + notices);
}

}  // namespace trainscope::tuner
