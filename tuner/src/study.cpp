// study.cpp — see study.h.
#include "trainscope/tuner/study.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/tuner/study_inputs.h"
#include "study_copy.h"

namespace trainscope::tuner {

using rundb::Database;
using rundb::Statement;

namespace {
const char* kStatus[] = {"running", "ok", "oom", "crash", "hang", "failed", "invalid"};
}

const char* toString(TrialStatus s) { return kStatus[int(s)]; }
TrialStatus parseTrialStatus(const std::string& s) {
  for (int i = 0; i < 7; ++i)
    if (s == kStatus[i]) return TrialStatus(i);
  return TrialStatus::Failed;
}

namespace {

bool blank(const std::string& s) { return s.find_first_not_of(" \t\n\r\f\v") == std::string::npos; }

// A whole non-negative number written in decimal, or -1.
int64_t parseId(const std::string& s) {
  if (s.empty() || s.size() > 18 || s.find_first_not_of("0123456789") != std::string::npos) return -1;
  return std::strtoll(s.c_str(), nullptr, 10);
}

// The process that holds a flock on the file `st` describes, from /proc/locks ("1: FLOCK ADVISORY
// WRITE PID MAJ:MIN:INODE 0 EOF"); 0 when it cannot be told. Where the device numbers differ from
// stat's (overlay file systems), the inode alone is matched.
long lockHolder(const struct stat& st) {
  char dev_ino[80];
  std::snprintf(dev_ino, sizeof dev_ino, "%02x:%02x:%llu", major(st.st_dev), minor(st.st_dev),
                static_cast<unsigned long long>(st.st_ino));
  const std::string ino = ":" + std::to_string(static_cast<unsigned long long>(st.st_ino));
  std::ifstream f("/proc/locks");
  long by_inode = 0;
  for (std::string line; std::getline(f, line);) {
    std::istringstream ss(line);
    std::string n, kind, mode, rw, pid, where;
    if (!(ss >> n >> kind >> mode >> rw >> pid >> where) || kind != "FLOCK") continue;  // "->": a waiter
    if (where == dev_ino) return std::atol(pid.c_str());
    if (where.size() > ino.size() && where.compare(where.size() - ino.size(), ino.size(), ino) == 0)
      by_inode = std::atol(pid.c_str());
  }
  return by_inode;
}

const char* kStudyFix = "pass the --study file of `trainscope tune`";

}  // namespace


bool isStudy(const std::string& path) {
  if (!rundb::looksLikeSqlite(path)) return false;
  std::string copy;
  bool yes = false;
  try {
    auto db = openForReading(path, copy);
    yes = db->tableExists("study") && db->tableExists("trials");
  } catch (const std::exception&) {
  }
  removeCopy(copy);
  return yes;
}

StudyLock::StudyLock(const std::string& path, bool resume, const std::vector<std::string>& inputs)
    : path_(path), resume_(resume) {
  if (blank(path)) throw UserError("--study", "is empty", "name the study's file, e.g. --study study.db");
  removeStaleStudyCopies();  // what a reader killed mid-read left in $TMPDIR, when provably ours
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (resume)
      throw UserError("--resume", path + " does not exist: there is no study to resume",
                      "drop --resume to start a new study there, or name the study's file");
    files::OutputRule rule;
    rule.field = "--study";
    rule.inputs = inputs;
    rule.sqlite = true;  // nothing at its -wal/-shm/-journal: SQLite would read it, or write through it
    files::checkOutput(path, rule);
    try {
      fd_ = files::createFile(path, rule);
      created_ = true;
    } catch (const UserError&) {
      if (::lstat(path.c_str(), &st) != 0) throw;  // not another tune's file: a real failure
    }
  }
  if (fd_ < 0) fd_ = files::openRegularFile(path, "--study", "name a study file, or a new path");
  const auto refuse = [&](const UserError& e) {
    ::close(fd_);
    fd_ = -1;
    throw e;
  };
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK) {
    // Another tune holds it (a file system without flock tunes unlocked, as RunStore writes).
    ::fstat(fd_, &st);
    const long pid = lockHolder(st);
    const std::string who = pid > 0 ? "process " + std::to_string(pid) : "another process";
    refuse(UserError("--study", path + " is being tuned by " + who + " (it holds the study's lock)",
                     "wait for that tune to finish, or stop it" +
                         (pid > 0 ? " (kill " + std::to_string(pid) + ")" : std::string()) +
                         " and continue with --resume"));
  }
  if (created_) return;
  ::fstat(fd_, &st);
  if (st.st_size == 0) {  // created by a tune that stopped before SQLite wrote to it
    if (resume)
      refuse(UserError("--resume", path + " holds no study yet (a tune stopped before writing it)",
                       "drop --resume to start the study there"));
    return;
  }
  if (!isStudy(path)) {
    try {
      rundb::refuseDamaged(path, "--study");
    } catch (const UserError& e) {
      refuse(e);
    }
    refuse(UserError("--study", path + " exists and is not a trainscope study", "choose another path"));
  }
  if (!resume)
    refuse(
        UserError("--study", path + " already holds a study", "pass --resume to continue it, or choose another path"));
}

void checkStudyPath(const std::string& path, bool resume) {
  if (blank(path)) throw UserError("--study", "is empty", "name the study's file, e.g. --study study.db");
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    const std::string dir = files::folderOf(path);
    if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      throw UserError("--study", "the folder " + dir + " of " + path + " does not exist",
                      "create it, or name a study file in an existing folder");
    return;  // nothing to resume is fine here: the models rank the space; only `--cluster local` files are reused
  }
  const int fd = files::openRegularFile(path, "--study", "name a study file, or a new path");
  ::fstat(fd, &st);
  ::close(fd);
  if (st.st_size == 0) return;  // made by a tune that stopped before SQLite wrote to it
  if (!isStudy(path)) {
    rundb::refuseDamaged(path, "--study");
    throw UserError("--study", path + " exists and is not a trainscope study", "choose another path");
  }
  if (!resume)
    throw UserError("--study", path + " already holds a study", "pass --resume to continue it, or choose another path");
}

StudyLock::~StudyLock() {
  if (fd_ < 0) return;
  // A study file this lock created and nothing wrote into (the tune stopped on bad input): removed,
  // while still locked, so that the path is free again. Only if the name still leads to our file.
  struct stat mine {
  }, now{};
  if (created_ && ::fstat(fd_, &mine) == 0 && mine.st_size == 0 && ::lstat(path_.c_str(), &now) == 0 &&
      now.st_dev == mine.st_dev && now.st_ino == mine.st_ino) {
    ::unlink(path_.c_str());
    for (const char* side : {"-wal", "-shm", "-journal"}) {
      const std::string p = path_ + side;
      if (::lstat(p.c_str(), &now) == 0 && S_ISREG(now.st_mode) && now.st_size == 0) ::unlink(p.c_str());
    }
  }
  ::close(fd_);
}

Study::Study(const StudyLock& lock, const std::string& inputs) : path_(lock.path()) { create(inputs); }

Study::Study(const std::string& path, const std::string& inputs, bool resume) : path_(path) {
  if (inputs.empty()) {  // opening an existing study (export)
    openReadOnly();
    return;
  }
  own_lock_ = std::make_unique<StudyLock>(path, resume);
  create(inputs);
}

Study::Study(const std::string& path) : path_(path) { openReadOnly(); }

void Study::openReadOnly() {
  const std::string& path = path_;
  read_only_ = true;
  struct stat st {};
  const bool sqlite = rundb::looksLikeSqlite(path);
  try {
    if (sqlite) db_ = openForReading(path, copy_dir_);
  } catch (const rundb::SqliteError& e) {
    rundb::refuseDamaged(path, "study", e.what());
    throw UserError("study", path + " cannot be read (" + jsonErrorText(e.what()) + ")", kStudyFix);
  }
  bool tables = false;
  try {
    tables = sqlite && db_->tableExists("study") && db_->tableExists("trials");
  } catch (const rundb::SqliteError& e) {
    db_.reset();
    removeCopy(copy_dir_);
    rundb::refuseDamaged(path, "study", e.what());
    throw UserError("study", path + " cannot be read (" + jsonErrorText(e.what()) + ")", kStudyFix);
  }
  if (!tables) {
    db_.reset();  // (the destructor does not run for a constructor that throws)
    removeCopy(copy_dir_);
    rundb::refuseDamaged(path, "study");
    throw UserError("study", path + (::stat(path.c_str(), &st) == 0 ? " is not a trainscope study" : " does not exist"),
                    kStudyFix);
  }
}

void Study::create(const std::string& inputs) {
  db_ = std::make_unique<Database>(path_, Database::Mode::ReadWrite);
  db_->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  db_->exec(R"SQL(
CREATE TABLE IF NOT EXISTS study (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
  id INTEGER PRIMARY KEY, plan TEXT NOT NULL, config TEXT, rejected TEXT, predicted_peak INTEGER,
  predicted_step_s REAL, predicted_tokens_per_s REAL, dp INTEGER, tp INTEGER, pp INTEGER, mbs INTEGER,
  ckpt TEXT, precision TEXT, zero INTEGER, sequence_parallel INTEGER, pp_schedule TEXT);
CREATE TABLE IF NOT EXISTS trials (
  id INTEGER PRIMARY KEY AUTOINCREMENT, candidate INTEGER NOT NULL, round INTEGER NOT NULL, steps INTEGER NOT NULL,
  status TEXT NOT NULL, exit_code INTEGER, signal INTEGER, seconds REAL, step_s REAL, tokens_per_s REAL,
  peak_bytes INTEGER, predicted_step_s REAL, predicted_peak INTEGER, db_path TEXT, message TEXT,
  UNIQUE (candidate, round));
)SQL");
  const std::string had = value("inputs");
  if (had.empty()) {
    setValue("inputs", inputs);
    setValue("schema_version", "1");
    return;
  }
  nlohmann::json a, b;
  try {
    a = nlohmann::json::parse(had);
  } catch (const std::exception&) {
    throw UserError("--study", path_ + " is damaged: its inputs are not JSON",
                    "start a new study at another --study path");
  }
  b = nlohmann::json::parse(inputs);
  if (a != b) {
    // Name what differs: "first_round 8, now 6"; the space's plans by count only.
    std::string diff;
    std::set<std::string> keys;
    if (a.is_object())
      for (const auto& [k, v] : a.items()) keys.insert(k);
    for (const auto& [k, v] : b.items()) keys.insert(k);
    for (const std::string& k : keys) {
      const nlohmann::json was = a.is_object() ? a.value(k, nlohmann::json()) : nlohmann::json(),
                           now = b.value(k, nlohmann::json());
      if (was == now) continue;
      diff += (diff.empty() ? "" : "; ") + k + " " +
              (k == "plans" ? std::to_string(was.size()) + " plans, now " + std::to_string(now.size()) + " (other knobs)"
                            : (was.is_null() ? "unset" : jsonText(was)) + ", now " + (now.is_null() ? "unset" : jsonText(now)));
    }
    throw UserError("--resume", path_ + " was made for other inputs: " + diff,
                    "resume with the same --workload, --cluster, --gbs and knobs, or start a new study");
  }
}

Study::~Study() {
  db_.reset();
  removeCopy(copy_dir_);
}

void Study::requireWritable() const { assert(!read_only_ && "a study opened read-only is not written"); }

void Study::checkTrials(const std::vector<Candidate>& candidates, int64_t max_round) {
  Statement s(*db_,
              "SELECT id, candidate, round, steps, status, typeof(candidate), typeof(round), typeof(steps) "
              "FROM trials ORDER BY id");
  const int64_t n = int64_t(candidates.size());
  while (s.step()) {
    std::string what;
    const int64_t cand = s.columnInt(1), round = s.columnInt(2), steps = s.columnInt(3);
    const std::string status = s.columnText(4);
    if (s.columnText(5) != "integer" || s.columnText(6) != "integer" || s.columnText(7) != "integer")
      what = "has a candidate, round or step count that is not a whole number";
    else if (cand < 0 || cand >= n)
      what = "names candidate " + std::to_string(cand) + ", which the study does not have (its candidates are 0 to " +
             std::to_string(n - 1) + ")";
    else if (!candidates[size_t(cand)].rejected.empty())
      what = "names candidate " + std::to_string(cand) + ", which is not a valid one (" +
             candidates[size_t(cand)].rejected + ")";
    else if (round < 0 || round > max_round)
      what = "has round " + std::to_string(round) + " (a study of these inputs has rounds 0 to " +
             std::to_string(max_round) + ")";
    else if (steps < 1)
      what = "has " + std::to_string(steps) + " steps";
    else if (std::none_of(std::begin(kStatus), std::end(kStatus), [&](const char* k) { return status == k; }))
      what = "has the unknown status \"" + status + "\"";
    if (!what.empty())
      throw UserError("--study", path_ + " is damaged: trial " + std::to_string(s.columnInt(0)) + " " + what,
                      "start a new study at another --study path; this one cannot be resumed");
  }
  checkTrialFigures();
}

// The measured and predicted figures of every trial, before a resumed study trusts them: a number
// (not text; not NaN, which SQLite keeps as NULL, where a finished trial must hold one), finite and
// not negative (0: no step time, which the search skips). A step can take no longer than its
// trial's process ran, nor over a million seconds (11 days: no trial of a tuner runs so long).
void Study::checkTrialFigures() {
  struct Column {
    const char* name;
    bool whole;  // INTEGER column
  };
  static const Column kColumns[] = {{"seconds", false},    {"step_s", false},           {"tokens_per_s", false},
                                    {"peak_bytes", true},  {"predicted_step_s", false}, {"predicted_peak", true},
                                    {"exit_code", true},   {"signal", true}};
  std::string select = "SELECT id, status";
  for (const Column& c : kColumns) select += std::string(", ") + c.name + ", typeof(" + c.name + ")";
  Statement s(*db_, select + " FROM trials ORDER BY id");
  constexpr double kLongestStep = 1e6;
  while (s.step()) {
    const int64_t id = s.columnInt(0);
    const bool ok = s.columnText(1) == "ok";
    auto refuse = [&](const char* column, const std::string& value, const std::string& why) {
      throw UserError("--study",
                      path_ + " is damaged: trials." + column + " of trial " + std::to_string(id) + " holds " + value +
                          ", " + why,
                      "start a new study at another --study path; this one cannot be resumed");
    };
    double seconds = 0;
    for (int i = 0; i < int(std::size(kColumns)); ++i) {
      const Column& c = kColumns[i];
      const int col = 2 + 2 * i;
      const std::string type = s.columnText(col + 1);
      const bool needed = ok && (std::strcmp(c.name, "step_s") == 0 || std::strcmp(c.name, "tokens_per_s") == 0);
      if (type == "null") {
        if (needed) refuse(c.name, "nothing (NULL, or a NaN)", "but the trial finished ok: it must hold a number");
        continue;
      }
      if (type != "integer" && type != "real")
        refuse(c.name, "the " + type + " '" + s.columnText(col) + "'", std::string("not a number"));
      if (c.whole) {
        if (type != "integer") refuse(c.name, s.columnText(col), "not a whole number");
        if (std::strcmp(c.name, "exit_code") != 0 && std::strcmp(c.name, "signal") != 0 && s.columnInt(col) < 0)
          refuse(c.name, s.columnText(col), "a negative size");
        continue;
      }
      const double v = s.columnDouble(col);
      char text[40];  // the shortest form that reads back as v
      std::snprintf(text, sizeof text, "%.15g", v);
      if (std::strtod(text, nullptr) != v) std::snprintf(text, sizeof text, "%.17g", v);
      if (!std::isfinite(v) || v < 0) refuse(c.name, text, "not a finite number of at least 0");
      if (std::strcmp(c.name, "seconds") == 0) seconds = v;
      if (std::strcmp(c.name, "step_s") == 0 && (v > kLongestStep || (seconds > 0 && v > seconds)))
        refuse(c.name, text,
               seconds > 0 && v > seconds ? "longer than the whole trial ran (" + std::to_string(seconds) + " s)"
                                          : std::string("a step of over a million seconds"));
    }
  }
}

int64_t Study::recommended() {
  const std::string rec = value("recommended");
  if (rec.empty()) return -1;
  const int64_t id = parseId(rec);
  if (id < 0 || candidateConfig(id).empty())
    throw UserError("study",
                    path_ + " is damaged: its recommendation \"" + rec + "\" is not one of its valid candidates",
                    "pass --trial N, or run the tune again with --resume");
  return id;
}

namespace {
double trialWeight(const TrialRecord& t) {  // its counted steps; 0 unless ok with a step time
  if (t.status != TrialStatus::Ok || t.step_s <= 0) return 0;
  return double(std::max<int64_t>(1, t.steps - 1));
}
}  // namespace

double pooledStepTime(const std::vector<TrialRecord>& trials, int64_t candidate, int64_t* ok_trials) {
  double sum = 0, weight = 0;
  int64_t n = 0;
  for (const TrialRecord& t : trials)
    if (t.candidate == candidate && trialWeight(t) > 0) {
      sum += trialWeight(t) * t.step_s;
      weight += trialWeight(t);
      ++n;
    }
  if (ok_trials) *ok_trials = n;
  return weight > 0 ? sum / weight : 0;
}

void Study::setValue(const std::string& key, const std::string& value) {
  requireWritable();
  Statement s(*db_, "INSERT OR REPLACE INTO study (key, value) VALUES (?, ?)");
  s.exec(key, value);
}

std::string Study::value(const std::string& key, const std::string& fallback) {
  Statement s(*db_, "SELECT value FROM study WHERE key = ?");
  s.bind(1, key);
  return s.step() ? s.columnText(0) : fallback;
}

void Study::saveCandidates(const std::vector<Candidate>& all, const std::vector<std::string>& configs) {
  requireWritable();
  rundb::Transaction tx(*db_);
  Statement s(*db_, "INSERT OR REPLACE INTO candidates (id, plan, config, rejected, predicted_peak, predicted_step_s, "
                    "predicted_tokens_per_s, dp, tp, pp, mbs, ckpt, precision, zero, sequence_parallel, pp_schedule) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  for (size_t i = 0; i < all.size(); ++i) {
    const Candidate& c = all[i];
    const Plan& p = c.plan;
    s.exec(c.id, p.describe(), configs[i], c.rejected, c.predicted_peak, c.predicted_step_s, c.predicted_tokens_per_s,
           p.dp, p.tp, p.pp, p.mbs, toString(p.ckpt), toString(p.precision), runconfig::stageNumber(p.zero),
           p.sequence_parallel, runconfig::scheduleName(p));
  }
  tx.commit();
}

namespace {
TrialRecord readTrial(const Statement& s) {
  TrialRecord t;
  t.id = s.columnInt(0);
  t.candidate = s.columnInt(1);
  t.round = s.columnInt(2);
  t.steps = s.columnInt(3);
  t.status = parseTrialStatus(s.columnText(4));
  t.exit_code = int(s.columnInt(5));
  t.signal = int(s.columnInt(6));
  t.seconds = s.columnDouble(7);
  t.step_s = s.columnDouble(8);
  t.tokens_per_s = s.columnDouble(9);
  t.peak_bytes = s.columnInt(10);
  t.predicted_step_s = s.columnDouble(11);
  t.predicted_peak = s.columnInt(12);
  t.db_path = s.columnText(13);
  t.message = s.columnText(14);
  return t;
}
const char* kTrialColumns =
    "id, candidate, round, steps, status, exit_code, signal, seconds, step_s, tokens_per_s, peak_bytes, "
    "predicted_step_s, predicted_peak, db_path, message";
}  // namespace

const StudyCandidate* StudySnapshot::candidate(int64_t id) const {
  for (const auto& c : candidates)
    if (c.id == id) return &c;
  return nullptr;
}

bool StudySnapshot::isProfile(const TrialRecord& t) const {
  return t.round == 0 && std::find(profiles.begin(), profiles.end(), t.candidate) != profiles.end();
}

StudySnapshot readStudy(const std::string& path) {
  if (!isStudy(path)) {
    rundb::refuseDamaged(path, "study");
    throw UserError("study", path + " is not a trainscope study", "pass the --study file of `trainscope tune`");
  }
  StudySnapshot out;
  out.path = path;
  std::string copy;  // a private copy, where the study must be read from one (openForReading)
  struct Cleanup {
    std::string& dir;
    ~Cleanup() { removeCopy(dir); }
  } cleanup{copy};
  try {
    const std::unique_ptr<Database> opened = openForReading(path, copy);
    Database& db = *opened;
    {
      Statement s(db, "SELECT key, value FROM study");
      while (s.step()) {
        const std::string k = s.columnText(0);
        if (k == "inputs") out.inputs_json = s.columnText(1);
        if (k == "recommended" && (out.recommended = parseId(s.columnText(1))) < 0)
          throw std::runtime_error("its recommendation \"" + s.columnText(1) + "\" is not a candidate id");
        if (k == "profile_candidates")
          for (const auto& id : nlohmann::json::parse(s.columnText(1))) out.profiles.push_back(id.get<int64_t>());
        if (k == "measured_costs") out.costs = costsFromJson(s.columnText(1));
      }
    }
    const StudyInputs in = parseStudyInputs(out.inputs_json);
    out.workload = in.workload;
    out.cluster = in.cluster;
    out.memory_bytes = in.memory_bytes;
    {
      Statement s(db, "SELECT id, plan, rejected, predicted_peak, predicted_step_s FROM candidates ORDER BY id");
      while (s.step())
        out.candidates.push_back({s.columnInt(0), s.columnText(1), s.columnText(2), s.columnInt(3), s.columnDouble(4)});
    }
    Statement s(db, std::string("SELECT ") + kTrialColumns + " FROM trials ORDER BY id");
    while (s.step()) out.trials.push_back(readTrial(s));
  } catch (const rundb::SqliteError& e) {
    throw UserError("study", path + " is damaged (" + e.what() + ")", "run the study again");
  } catch (const std::exception& e) {
    throw UserError("study", path + " is damaged (" + e.what() + ")", "run the study again");
  }
  return out;
}

std::vector<TrialRecord> Study::trials() {
  std::vector<TrialRecord> out;
  Statement s(*db_, std::string("SELECT ") + kTrialColumns + " FROM trials ORDER BY id");
  while (s.step()) out.push_back(readTrial(s));
  return out;
}

std::optional<TrialRecord> Study::trial(int64_t candidate, int64_t round) {
  Statement s(*db_, std::string("SELECT ") + kTrialColumns + " FROM trials WHERE candidate = ? AND round = ?");
  s.bindFrom(1, candidate, round);
  if (!s.step()) return std::nullopt;
  return readTrial(s);
}

int64_t Study::beginTrial(const TrialRecord& t) {
  requireWritable();
  Statement s(*db_, "INSERT OR REPLACE INTO trials (candidate, round, steps, status, predicted_step_s, predicted_peak, "
                    "db_path) VALUES (?,?,?,?,?,?,?)");
  s.exec(t.candidate, t.round, t.steps, "running", t.predicted_step_s, t.predicted_peak, t.db_path);
  return db_->lastInsertRowid();
}

void Study::finishTrial(const TrialRecord& t) {
  requireWritable();
  Statement s(*db_, "UPDATE trials SET status = ?, exit_code = ?, signal = ?, seconds = ?, step_s = ?, tokens_per_s = ?, "
                    "peak_bytes = ?, message = ? WHERE id = ?");
  s.exec(toString(t.status), t.exit_code, t.signal, t.seconds, t.step_s, t.tokens_per_s, t.peak_bytes, t.message, t.id);
}

std::string Study::candidateConfig(int64_t candidate) {
  Statement s(*db_, "SELECT config FROM candidates WHERE id = ?");
  s.bind(1, candidate);
  return s.step() ? s.columnText(0) : "";
}

std::string Study::candidatePlan(int64_t candidate) {
  Statement s(*db_, "SELECT plan FROM candidates WHERE id = ?");
  s.bind(1, candidate);
  return s.step() ? s.columnText(0) : "";
}

}  // namespace trainscope::tuner
