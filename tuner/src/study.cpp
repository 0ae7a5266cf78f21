// study.cpp — see study.h.
#include "trainscope/tuner/study.h"

#include <algorithm>
#include <set>
#include <string>

#include <sys/stat.h>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/rundb/sqlite.h"

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

bool isStudy(const std::string& path) {
  if (!rundb::looksLikeSqlite(path)) return false;
  try {
    Database db(path, Database::Mode::ReadOnly);
    return db.tableExists("study") && db.tableExists("trials");
  } catch (const std::exception&) {
    return false;
  }
}

Study::Study(const std::string& path, const std::string& inputs, bool resume) : path_(path) {
  struct stat st {};
  const bool exists = stat(path.c_str(), &st) == 0;
  if (inputs.empty() && !(exists && isStudy(path)))  // opening an existing study (export)
    throw UserError("study", path + (exists ? " is not a trainscope study" : " does not exist"),
                    "pass the --study file of `trainscope tune`");
  if (exists && !isStudy(path))
    throw UserError("--study", path + " exists and is not a trainscope study", "choose another path");
  if (exists && !resume)
    throw UserError("--study", path + " already holds a study", "pass --resume to continue it, or choose another path");
  db_ = std::make_unique<Database>(path, Database::Mode::Create);
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
  if (inputs.empty()) return;
  if (had.empty()) {
    setValue("inputs", inputs);
    setValue("schema_version", "1");
  } else if (const auto a = nlohmann::json::parse(had), b = nlohmann::json::parse(inputs); a != b) {
    // Name what differs: "first_round 8, now 6"; the space's plans by count only.
    std::string diff;
    std::set<std::string> keys;
    for (const auto& [k, v] : a.items()) keys.insert(k);
    for (const auto& [k, v] : b.items()) keys.insert(k);
    for (const std::string& k : keys) {
      const nlohmann::json was = a.value(k, nlohmann::json()), now = b.value(k, nlohmann::json());
      if (was == now) continue;
      diff += (diff.empty() ? "" : "; ") + k + " " +
              (k == "plans" ? std::to_string(was.size()) + " plans, now " + std::to_string(now.size()) + " (other knobs)"
                            : (was.is_null() ? "unset" : was.dump()) + ", now " + (now.is_null() ? "unset" : now.dump()));
    }
    throw UserError("--resume", path + " was made for other inputs: " + diff,
                    "resume with the same --workload, --cluster, --gbs and knobs, or start a new study");
  }
}

Study::~Study() = default;

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
  Statement s(*db_, "INSERT OR REPLACE INTO study (key, value) VALUES (?, ?)");
  s.exec(key, value);
}

std::string Study::value(const std::string& key, const std::string& fallback) {
  Statement s(*db_, "SELECT value FROM study WHERE key = ?");
  s.bind(1, key);
  return s.step() ? s.columnText(0) : fallback;
}

void Study::saveCandidates(const std::vector<Candidate>& all, const std::vector<std::string>& configs) {
  rundb::Transaction tx(*db_);
  Statement s(*db_, "INSERT OR REPLACE INTO candidates (id, plan, config, rejected, predicted_peak, predicted_step_s, "
                    "predicted_tokens_per_s, dp, tp, pp, mbs, ckpt, precision, zero, sequence_parallel, pp_schedule) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  for (size_t i = 0; i < all.size(); ++i) {
    const Candidate& c = all[i];
    const Plan& p = c.plan;
    s.exec(c.id, p.describe(), configs[i], c.rejected, c.predicted_peak, c.predicted_step_s, c.predicted_tokens_per_s,
           p.dp, p.tp, p.pp, p.mbs, toString(p.ckpt), toString(p.precision), p.zero, p.sequence_parallel,
           toString(p.schedule));
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
  if (!isStudy(path))
    throw UserError("study", path + " is not a trainscope study", "pass the --study file of `trainscope tune`");
  StudySnapshot out;
  out.path = path;
  try {
    Database db(path, Database::Mode::ReadOnly);
    {
      Statement s(db, "SELECT key, value FROM study");
      while (s.step()) {
        const std::string k = s.columnText(0);
        if (k == "inputs") out.inputs_json = s.columnText(1);
        if (k == "recommended") out.recommended = std::stoll(s.columnText(1));
        if (k == "profile_candidates")
          for (const auto& id : nlohmann::json::parse(s.columnText(1))) out.profiles.push_back(id.get<int64_t>());
        if (k == "measured_costs") out.costs = costsFromJson(s.columnText(1));
      }
    }
    const auto in = nlohmann::json::parse(out.inputs_json.empty() ? "{}" : out.inputs_json);
    out.workload = in.value("workload", "");
    out.cluster = in.value("cluster", "");
    out.memory_bytes = in.value("memory_bytes", int64_t(0));
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
  Statement s(*db_, "INSERT OR REPLACE INTO trials (candidate, round, steps, status, predicted_step_s, predicted_peak, "
                    "db_path) VALUES (?,?,?,?,?,?,?)");
  s.exec(t.candidate, t.round, t.steps, "running", t.predicted_step_s, t.predicted_peak, t.db_path);
  return db_->lastInsertRowid();
}

void Study::finishTrial(const TrialRecord& t) {
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
