// trainscope/tuner/study.h — a tuning study: its inputs, every candidate with its predictions or
// rejection reason, and every trial with its outcome, in one SQLite file (through rundb's wrapper).
//
// A trial row is written as "running" before its process starts and completed when it ends, each in
// its own transaction: a study killed at any point (kill -9 included) resumes with every finished
// trial kept and only the interrupted one run again.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/tuner/profile.h"
#include "trainscope/tuner/space.h"

namespace trainscope::rundb {
class Database;
}

namespace trainscope::tuner {

// How a trial ended, from its exit status, signal and the clock: never from its log.
enum class TrialStatus { Running, Ok, OutOfMemory, Crash, Hang, Failed, Invalid };
const char* toString(TrialStatus s);
TrialStatus parseTrialStatus(const std::string& s);

struct TrialRecord {
  int64_t id = 0, candidate = 0, round = 0, steps = 0;
  TrialStatus status = TrialStatus::Running;
  int exit_code = 0, signal = 0;
  double seconds = 0;             // wall time of the trial process
  double step_s = 0;              // measured: the run summary's median step time (warm-up dropped)
  double tokens_per_s = 0;
  int64_t peak_bytes = 0;
  double predicted_step_s = 0;
  int64_t predicted_peak = 0;
  std::string db_path, message;
};

// A candidate's measured step time over all its trials, as the tuner compares and recommends:
// each ok trial's median weighted by its counted steps (steps − 1, the warm-up dropped); 0 when no
// trial of it ran ok. One process's noise (±15% on a shared CPU host) weighs less this way.
double pooledStepTime(const std::vector<TrialRecord>& trials, int64_t candidate, int64_t* ok_trials = nullptr);

class Study {
 public:
  // Opens `path`, creating it with `inputs` (a JSON object) or checking that an existing study was
  // made with the same inputs (UserError otherwise: a resumed study must be the same study).
  Study(const std::string& path, const std::string& inputs_json, bool resume);
  ~Study();

  void saveCandidates(const std::vector<Candidate>& all, const std::vector<std::string>& configs);
  std::vector<TrialRecord> trials();
  std::optional<TrialRecord> trial(int64_t candidate, int64_t round);
  int64_t beginTrial(const TrialRecord& t);  // "running"; returns its id
  void finishTrial(const TrialRecord& t);
  void setValue(const std::string& key, const std::string& value);
  std::string value(const std::string& key, const std::string& fallback = "");
  std::string candidateConfig(int64_t candidate);  // the TrainConfig JSON of a candidate
  std::string candidatePlan(int64_t candidate);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<rundb::Database> db_;
};

// Whether `path` is a study (not a run database).
bool isStudy(const std::string& path);

// A study as it stands, read without writing anything (the viewer; a study still being tuned).
struct StudyCandidate {
  int64_t id = 0;
  std::string plan, rejected;
  int64_t predicted_peak = 0;
  double predicted_step_s = 0;
};
struct StudySnapshot {
  std::string path, inputs_json;
  std::string workload, cluster;
  int64_t memory_bytes = 0;      // per device / rank: the limit the recommendation had to fit
  int64_t recommended = -1;      // candidate id, -1 when none yet
  std::vector<StudyCandidate> candidates;
  std::vector<TrialRecord> trials;
  std::vector<int64_t> profiles;                               // candidates profiled first (round 0)
  std::vector<std::pair<std::string, LayerCosts>> costs;       // measured layer costs per shape
  bool isProfile(const TrialRecord& t) const;
  const StudyCandidate* candidate(int64_t id) const;
};
// Throws UserError naming the file when it is not a study.
StudySnapshot readStudy(const std::string& path);

}  // namespace trainscope::tuner
