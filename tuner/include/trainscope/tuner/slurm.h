// trainscope/tuner/slurm.h — what a trial's srun started, recorded in the study, and ended by its ids.
//
// Under --launcher slurm a trial's tasks are slurmstepd's, not the tuner's children (job.h,
// slurm_step.cpp). Each trial's srun is named after the study (slurmStepName); while it runs, a
// SlurmWatch asks squeue for this user's jobs and steps of that name and hands each id it finds to the
// study (StudyRunner writes them at once, so a tuner killed with -9 leaves them recorded). A hang and
// `tune --resume` then cancel exactly those ids (cancelSlurmLaunch), never every step of a name.
//
// A study file copied or moved to another file (cp -r of its folder, a backup restored elsewhere) is
// not the file its ids were recorded in: claimStudyId sees it by the file's device and inode, kept in
// the study, and gives the copy a new id. The original's recorded launches are then another study's
// (SlurmLaunch::study_id) and left alone; the tuner says so (TuneResult::notes).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace trainscope::tuner {

class Study;

struct SlurmLaunch {
  std::string study_id;            // the study that started it (a copy's differs: not its to cancel)
  std::string name;                // srun's --job-name (slurmStepName of study_id)
  std::vector<std::string> jobs;   // jobs of that name srun made ("123"): cancelled whole
  std::vector<std::string> steps;  // steps of that name inside an allocation ("77.4"): cancelled alone
  bool found() const { return !jobs.empty() || !steps.empty(); }
};
std::string slurmLaunchJson(const SlurmLaunch& l);
// A record read back; one that is not such JSON (damaged, hand-edited) has an empty name.
SlurmLaunch parseSlurmLaunch(const std::string& json);
// The study's key of the launch of candidate `candidate`'s trial in round `round` (its last attempt).
std::string slurmLaunchKey(int64_t candidate, int64_t round);

// Polls squeue (every poll_s, each command bounded) for this user's jobs and steps named `name` from
// construction until stop() or destruction, calling `found` (on its own thread) with the launch each
// time it finds ids, and stopping once it has some: one srun per trial.
class SlurmWatch {
 public:
  SlurmWatch(SlurmLaunch launch, std::function<void(const SlurmLaunch&)> found, double poll_s = 0.5);
  ~SlurmWatch();
  SlurmWatch(const SlurmWatch&) = delete;
  SlurmWatch& operator=(const SlurmWatch&) = delete;
  SlurmLaunch stop();  // joins the poller; what it found

 private:
  void loop();
  SlurmLaunch launch_;
  std::function<void(const SlurmLaunch&)> found_;
  double poll_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// The user's jobs and steps named `name` now (squeue; bounded by timeout_s). ok: squeue answered.
SlurmLaunch findSlurmLaunch(const std::string& name, double timeout_s, bool* ok);

// Ends exactly the launch's recorded jobs and steps: their tasks killed (scancel --signal=KILL ID),
// then cancelled (scancel ID); then waits (bounded by wait_s) until squeue lists none of them. With no
// id recorded (squeue never saw the launch), this study's name instead (cancelSlurmStep): a study's
// name is its own (a copy takes a new one). Returns "" or what failed, in a sentence.
std::string cancelSlurmLaunch(const SlurmLaunch& l, double timeout_s = 30, double wait_s = 60);

// The study's id (job.h validStudyId) for this run of the tuner on the study file at `path`: kept when
// the study is the file it was made in (device and inode, recorded with the path at the first run),
// new when the study has none, or when it is a copy of another file (then `note` says so, naming the
// file it was copied from). A study from before the file was recorded keeps its id and records it.
std::string claimStudyId(Study& study, const std::string& path, std::string* note);

}  // namespace trainscope::tuner
