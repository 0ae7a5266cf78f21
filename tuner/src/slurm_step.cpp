// slurm_step.cpp — ending a trial's srun step when the tuner stops waiting for it (job.h).
//
// srun is only the step's client: the tasks are slurmstepd's children on the allocated nodes, outside
// the trial's process group, and killing srun (the tuner's timeout kills the trial's group with
// SIGKILL; a tuner killed with -9 takes srun with it by its death signal) leaves them running and
// holding their CPUs — under Slurm's default InactiveLimit of 0 even the job srun allocated stays. So
// every step of a study is named after the study (srun --job-name=trainscope-study-ID, ID a random id
// kept in the study) and cancelled by that name through Slurm's own commands, for this user only: its
// tasks first (scancel --signal=KILL, delivered by the slurmd at once, a job that ignores SIGTERM
// included), then the job (scancel, which ends the allocation srun made). Inside an allocation (the
// tuner itself run by salloc/sbatch) srun's name is the step's, not the job's: the user's steps of that
// name are found with squeue --steps (in any of the user's jobs: a resumed tuner may run in another
// allocation than the killed one did) and cancelled by their ids.
//
// That name is the study's, the same for every trial: what a trial's srun started is recorded by id
// while it runs (SlurmWatch, slurm.h), and a hang or --resume cancels those ids (cancelSlurmLaunch);
// the name is the fallback only where squeue never saw the launch.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "trainscope/common/process.h"
#include "trainscope/tuner/job.h"
#include "trainscope/tuner/slurm.h"

namespace trainscope::tuner {
namespace {

// Runs a Slurm command (argv, looked up in PATH), its output captured; "" for a command that could
// not run. Bounded: a controller that does not answer is given up on after `timeout_s`.
std::string slurmCommand(const std::vector<std::string>& argv, double timeout_s, bool* ok) {
  int fds[2];
  *ok = false;
  if (::pipe2(fds, O_CLOEXEC) != 0) return "";
  process::SpawnOptions so;
  so.argv = argv;
  so.search_path = true;
  so.own_group = true;
  so.stdout_fd = fds[1];
  const int null = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
  so.stderr_fd = null;
  pid_t pid = -1;
  try {
    pid = process::spawn(so);
  } catch (const std::exception&) {
  }
  ::close(fds[1]);
  if (null >= 0) ::close(null);
  std::string out;
  if (pid > 0) {
    // squeue's output is a line per step; a pipe's buffer holds it, so reading after the wait is safe
    // for the few lines asked for.
    const process::Exit e = process::wait(pid, timeout_s, /*group=*/true);
    char buf[4096];
    for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, size_t(n));
    *ok = e.kind == process::Exit::Exited && e.code == 0;
  }
  ::close(fds[0]);
  return out;
}

}  // namespace

bool validStudyId(const std::string& id) {
  if (id.size() != 16) return false;
  for (const char ch : id)
    if (!((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f'))) return false;
  return true;
}

std::string slurmStepName(const std::string& study_id) { return "trainscope-study-" + study_id; }

namespace {

// The ids of this user's steps named `name` (squeue --steps, every job of the user's), and whether
// squeue answered.
std::vector<std::string> namedSteps(const std::string& name, const std::string& user, double timeout_s, bool* ok) {
  const std::string steps =
      slurmCommand({"squeue", "--noheader", "--steps", user, "--format=%i %j"}, timeout_s, ok);
  std::vector<std::string> ids;
  std::istringstream in(steps);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string id, step_name;
    if (words >> id >> step_name && step_name == name) ids.push_back(id);
  }
  return ids;
}

// Whether Slurm still lists a job or step of this user's named `name` ("" when squeue did not answer).
bool slurmStillHolds(const std::string& name, const std::string& user, double timeout_s) {
  bool ok = false;
  if (!namedSteps(name, user, timeout_s, &ok).empty()) return true;
  const std::string jobs = slurmCommand({"squeue", "--noheader", user, "--name=" + name, "--format=%i"}, timeout_s, &ok);
  return ok && jobs.find_first_not_of(" \n") != std::string::npos;
}

}  // namespace

std::string cancelSlurmStep(const std::string& name, double timeout_s, double wait_s) {
  const std::string user = "--user=" + std::to_string(::getuid());
  bool killed = false, cancelled = false, ok = false;
  slurmCommand({"scancel", "--signal=KILL", "--name=" + name, user}, timeout_s, &killed);
  slurmCommand({"scancel", "--name=" + name, user}, timeout_s, &cancelled);
  for (const std::string& id : namedSteps(name, user, timeout_s, &ok)) {
    bool done = false;
    slurmCommand({"scancel", "--signal=KILL", id}, timeout_s, &done);
    slurmCommand({"scancel", id}, timeout_s, &done);
    cancelled = cancelled || done;
  }
  if (!killed && !cancelled) return "scancel could not cancel Slurm job/step " + name;
  // Bounded: the cancelled tasks and job leave Slurm's lists once their slurmd has ended them.
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  while (slurmStillHolds(name, user, timeout_s)) {
    if (std::chrono::steady_clock::now() >= until)
      return "Slurm still lists job/step " + name + " " + std::to_string(int(wait_s)) + " s after scancel";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return "";
}

std::string slurmLaunchJson(const SlurmLaunch& l) {
  return nlohmann::json({{"study_id", l.study_id}, {"name", l.name}, {"jobs", l.jobs}, {"steps", l.steps}}).dump();
}

SlurmLaunch parseSlurmLaunch(const std::string& json) {
  SlurmLaunch l;
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (!j.is_object()) return l;
  auto text = [&](const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : ""; };
  auto ids = [&](const char* key, bool step) {
    std::vector<std::string> out;
    if (j.contains(key) && j[key].is_array())
      for (const auto& x : j[key])  // Slurm ids only ("123", "123.4"): they become scancel's arguments
        if (x.is_string() && !x.get<std::string>().empty() &&
            x.get<std::string>().find_first_not_of(step ? "0123456789._" : "0123456789_") == std::string::npos)
          out.push_back(x.get<std::string>());
    return out;
  };
  l.study_id = text("study_id");
  l.name = text("name");
  if (!validStudyId(l.study_id) || l.name != slurmStepName(l.study_id)) return SlurmLaunch{};
  l.jobs = ids("jobs", false);
  l.steps = ids("steps", true);
  return l;
}

std::string slurmLaunchKey(int64_t candidate, int64_t round) {
  return "slurm_launch:" + std::to_string(candidate) + ":" + std::to_string(round);
}

SlurmLaunch findSlurmLaunch(const std::string& name, double timeout_s, bool* ok) {
  const std::string user = "--user=" + std::to_string(::getuid());
  SlurmLaunch l;
  l.name = name;
  bool steps_ok = false, jobs_ok = false;
  l.steps = namedSteps(name, user, timeout_s, &steps_ok);
  std::istringstream jobs(slurmCommand({"squeue", "--noheader", user, "--name=" + name, "--format=%i"}, timeout_s, &jobs_ok));
  for (std::string id; jobs >> id;) l.jobs.push_back(id);
  *ok = steps_ok && jobs_ok;
  return l;
}

SlurmWatch::SlurmWatch(SlurmLaunch launch, std::function<void(const SlurmLaunch&)> found, double poll_s)
    : launch_(std::move(launch)), found_(std::move(found)), poll_s_(poll_s), thread_([this] { loop(); }) {}

SlurmWatch::~SlurmWatch() { stop(); }

void SlurmWatch::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    lock.unlock();
    bool ok = false;
    SlurmLaunch now = findSlurmLaunch(launch_.name, 10, &ok);
    lock.lock();
    if (ok && now.found()) {
      launch_.jobs = now.jobs;
      launch_.steps = now.steps;
      if (found_) found_(launch_);  // recorded before the trial can end: the main thread waits on it
      return;
    }
    cv_.wait_for(lock, std::chrono::duration<double>(poll_s_), [this] { return stop_; });
  }
}

SlurmLaunch SlurmWatch::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  return launch_;
}

std::string cancelSlurmLaunch(const SlurmLaunch& l, double timeout_s, double wait_s) {
  if (!l.found()) return cancelSlurmStep(l.name, timeout_s, wait_s);
  std::vector<std::string> ids = l.steps;
  ids.insert(ids.end(), l.jobs.begin(), l.jobs.end());
  bool any = false;
  for (const std::string& id : ids) {  // a job's or step's tasks killed, then the job or step cancelled
    bool killed = false, cancelled = false;
    slurmCommand({"scancel", "--signal=KILL", id}, timeout_s, &killed);
    slurmCommand({"scancel", id}, timeout_s, &cancelled);
    any = any || killed || cancelled;
  }
  // Already gone is as good as cancelled: what matters is that Slurm lists none of them.
  const std::string user = "--user=" + std::to_string(::getuid());
  bool answered = false;
  auto listed = [&] {  // the recorded ids squeue still lists (all of them when it did not answer)
    bool jobs_ok = false, steps_ok = false;
    std::istringstream in(slurmCommand({"squeue", "--noheader", user, "--format=%i"}, timeout_s, &jobs_ok) + "\n" +
                          slurmCommand({"squeue", "--noheader", "--steps", user, "--format=%i"}, timeout_s, &steps_ok));
    answered = jobs_ok && steps_ok;
    std::string left;
    if (!answered)
      for (const std::string& id : ids) left += (left.empty() ? "" : ", ") + id;
    else
      for (std::string id; in >> id;)
        if (std::find(ids.begin(), ids.end(), id) != ids.end()) left += (left.empty() ? "" : ", ") + id;
    return left;
  };
  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (std::string left; !(left = listed()).empty();) {
    if (!answered && std::chrono::steady_clock::now() >= until)
      return "squeue did not answer, so whether Slurm job/step " + left + " (" + l.name + ") ended is not known";
    if (answered && !any) return "scancel could not cancel Slurm job/step " + left + " (" + l.name + ")";
    if (std::chrono::steady_clock::now() >= until)
      return "Slurm still lists job/step " + left + " (" + l.name + ") " + std::to_string(int(wait_s)) + " s after scancel";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return "";
}

}  // namespace trainscope::tuner
