// trainscope/tuner/study.h — a tuning study: its inputs, every candidate with its predictions or
// rejection reason, and every trial with its outcome, in one SQLite file (through rundb's wrapper).
//
// A trial row is written as "running" before its process starts and completed when it ends, each in
// its own transaction: a study killed at any point (kill -9 included) resumes with every finished
// trial kept and only the interrupted one run again (into fresh paths: tune.cpp).
//
// One tuner per study: a tune holds an exclusive flock(2) on the study file for as long as it runs
// (StudyLock, as RunStore locks a run database), so a second tune or --resume of the same study is
// refused, naming the process that holds it. Readers (export, the viewer) take no lock and open the
// study read-only: they write nothing into it or beside it.
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

// The lock a tune holds on its study file (see the top of this file). Taking it also applies the
// rules of --study and --resume; each refusal is a UserError:
//   - an empty or blank path;
//   - a study another process is tuning (its pid named);
//   - with `resume`: a missing file, or one that holds no study yet;
//   - without `resume`: a file that already holds a study, or any other non-empty file.
// A missing study file is created empty (files::createFile under files::OutputRule: never one of
// `inputs` nor their -wal/-shm/-journal, never with anything at its own -wal/-shm/-journal, never
// through a link planted at the name) for SQLite to fill; if nothing was written into it when the
// lock is released, it is removed.
class StudyLock {
 public:
  StudyLock(const std::string& path, bool resume, const std::vector<std::string>& inputs = {});
  ~StudyLock();
  StudyLock(const StudyLock&) = delete;
  StudyLock& operator=(const StudyLock&) = delete;
  const std::string& path() const { return path_; }
  bool resume() const { return resume_; }

 private:
  std::string path_;
  bool resume_ = false;
  int fd_ = -1;
  bool created_ = false;  // this lock created the (empty) file
};

// The refusals StudyLock makes of what is at `path` (empty, not a regular file, not a study, a study
// without `resume`), without creating, locking or writing anything: `tune --predict-only`.
void checkStudyPath(const std::string& path, bool resume);

class Study {
 public:
  // Opens the study `lock` holds, creating it with `inputs` (a JSON object) or checking that an
  // existing study was made with the same inputs (UserError otherwise: a resumed study must be the
  // same study).
  Study(const StudyLock& lock, const std::string& inputs_json);
  // The same, taking the lock itself. With empty `inputs_json`: Study(path) (read-only).
  Study(const std::string& path, const std::string& inputs_json, bool resume);
  // Opens an existing study read-only (export): nothing is written into it or beside it, and a
  // killed tune's WAL study without its -shm in a folder that cannot be written is read from a
  // private copy (so the trials still in its -wal are not lost). UserError when it is not a study.
  explicit Study(const std::string& path);
  ~Study();

  // Refuses (UserError naming the study) a damaged study before anything of it is used: a trial row
  // whose candidate is not one of the valid `candidates`, whose round is outside [0, max_round],
  // whose steps are not positive, or whose status is unknown.
  // Also each trial's figures (seconds, step_s, tokens_per_s, peak_bytes, predicted_step_s, …):
  // numbers, finite, not negative, a finished trial's time above 0 (checkTrialFigures).
  void checkTrials(const std::vector<Candidate>& candidates, int64_t max_round);
  // The recommended candidate (-1: none yet), checked to be a candidate with a config (UserError:
  // a damaged study).
  int64_t recommended();

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
  void create(const std::string& inputs_json);
  void openReadOnly();
  void requireWritable() const;
  void checkTrialFigures();
  std::string path_;
  bool read_only_ = false;
  std::unique_ptr<StudyLock> own_lock_;  // declared before db_: released after the database closes
  std::string copy_dir_;                 // a private copy being read (see Study(path)); removed at close
  std::unique_ptr<rundb::Database> db_;
};

// Whether `path` is a study (not a run database). Reads only.
bool isStudy(const std::string& path);

// The private copies of studies (`$TMPDIR/trainscope-study-XXXXXX`, made to read a study whose -wal
// needs a -shm its folder cannot hold) that a reader killed mid-read left: removed when provably ours
// (the name; a folder, not a link, of this user's; its marker names a writer that is gone,
// common/owner_marker.h), and then only a copy's own files. Run before each new copy and when a tune
// starts (StudyLock). Returns the folders removed.
std::vector<std::string> removeStaleStudyCopies();

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
