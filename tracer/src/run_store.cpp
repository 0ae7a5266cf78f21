// run_store.cpp — the run database's meta and steps tables (schema in docs/trace-schema.md).
#include "trainscope/tracer/run_store.h"

#include <filesystem>

#include "trainscope/common/error.h"
#include "trainscope/tracer/schema.h"
#include "trainscope/tracer/sqlite.h"

namespace trainscope::tracer {
namespace {



constexpr const char* kStepColumns =
    "rank, step, loss, lr, grad_norm, loss_scale, skipped, tokens, start_ns, step_time_ns, tokens_per_s, "
    "model_flops, hw_flops, mfu, hfu, peak_bytes, param_bytes, grad_bytes, optim_bytes, activation_bytes";

}  // namespace

RunStore::RunStore(const std::string& path, bool overwrite) : path_(path) {
  namespace fs = std::filesystem;
  if (fs::exists(path)) {
    if (!overwrite)
      throw UserError("--out", path + " already exists", "choose another path or pass --overwrite");
    for (const char* suffix : {"", "-wal", "-shm"}) fs::remove(path + suffix);
  }
  db_ = std::make_unique<Database>(path, Database::Mode::Create);
  db_->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  createSchema(*db_);
  insert_meta_ = std::make_unique<Statement>(*db_, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
  insert_step_ = std::make_unique<Statement>(
      *db_, std::string("INSERT OR REPLACE INTO steps(") + kStepColumns +
                ") VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
  setMeta("schema_version", std::to_string(kSchemaVersion));
}

RunStore::~RunStore() {
  insert_step_.reset();
  insert_meta_.reset();
  try {
    if (db_) db_->exec("PRAGMA wal_checkpoint(TRUNCATE);");
  } catch (...) {
  }
}

void RunStore::setMeta(const std::string& key, const std::string& value) {
  insert_meta_->bind(1, key);
  insert_meta_->bind(2, value);
  insert_meta_->run();
}

void RunStore::appendCollectives(const std::vector<CollectiveRow>& rows) {
  Statement s(*db_, "INSERT INTO collectives(rank, op, grp, group_size, seq, bytes, start_ns, end_ns, algbw, busbw) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?)");
  Transaction tx(*db_);
  for (const auto& r : rows) {
    s.bind(1, r.rank);
    s.bind(2, r.op);
    s.bind(3, r.group);
    s.bind(4, r.group_size);
    s.bind(5, r.seq);
    s.bind(6, r.bytes);
    s.bind(7, r.start_ns);
    s.bind(8, r.end_ns);
    s.bind(9, r.algbw);
    s.bind(10, r.busbw);
    s.run();
  }
  tx.commit();
}

void RunStore::writeWeightDigest(const std::map<std::string, std::array<double, 3>>& digest) {
  Statement s(*db_, "INSERT OR REPLACE INTO weight_digest(name, sum, sumsq, abssum) VALUES (?,?,?,?)");
  Transaction tx(*db_);
  for (const auto& [name, v] : digest) {
    s.bind(1, name);
    s.bind(2, v[0]);
    s.bind(3, v[1]);
    s.bind(4, v[2]);
    s.run();
  }
  tx.commit();
}

void RunStore::appendStep(const StepRecord& r) {
  Statement& s = *insert_step_;
  int i = 1;
  s.bind(i++, r.rank);
  s.bind(i++, r.step);
  s.bind(i++, r.loss);
  s.bind(i++, r.lr);
  s.bind(i++, r.grad_norm);
  s.bind(i++, r.loss_scale);
  s.bind(i++, static_cast<int64_t>(r.skipped));
  s.bind(i++, r.tokens);
  s.bind(i++, r.start_ns);
  s.bind(i++, r.step_time_ns);
  s.bind(i++, r.tokens_per_s);
  s.bind(i++, r.model_flops);
  s.bind(i++, r.hw_flops);
  s.bind(i++, r.mfu);
  s.bind(i++, r.hfu);
  s.bind(i++, r.peak_bytes);
  s.bind(i++, r.param_bytes);
  s.bind(i++, r.grad_bytes);
  s.bind(i++, r.optim_bytes);
  s.bind(i++, r.activation_bytes);
  s.run();  // autocommit: each step is durable on its own
}

std::map<int64_t, StepRecord> readSteps(const std::string& path, int rank) {
  Database db(path, Database::Mode::ReadOnly);
  Statement s(db, std::string("SELECT ") + kStepColumns + " FROM steps WHERE rank = ? ORDER BY step");
  s.bind(1, rank);
  std::map<int64_t, StepRecord> out;
  while (s.step()) {
    StepRecord r;
    int i = 0;
    r.rank = static_cast<int>(s.columnInt(i++));
    r.step = s.columnInt(i++);
    r.loss = s.columnDouble(i++);
    r.lr = s.columnDouble(i++);
    r.grad_norm = s.columnDouble(i++);
    r.loss_scale = s.columnDouble(i++);
    r.skipped = s.columnInt(i++) != 0;
    r.tokens = s.columnInt(i++);
    r.start_ns = s.columnInt(i++);
    r.step_time_ns = s.columnInt(i++);
    r.tokens_per_s = s.columnDouble(i++);
    r.model_flops = s.columnDouble(i++);
    r.hw_flops = s.columnDouble(i++);
    if (!s.columnIsNull(i)) r.mfu = s.columnDouble(i);
    ++i;
    if (!s.columnIsNull(i)) r.hfu = s.columnDouble(i);
    ++i;
    r.peak_bytes = s.columnInt(i++);
    r.param_bytes = s.columnInt(i++);
    r.grad_bytes = s.columnInt(i++);
    r.optim_bytes = s.columnInt(i++);
    r.activation_bytes = s.columnInt(i++);
    out[r.step] = r;
  }
  return out;
}

std::vector<CollectiveRow> readCollectives(const std::string& path) {
  Database db(path, Database::Mode::ReadOnly);
  Statement s(db, "SELECT rank, op, grp, group_size, seq, bytes, start_ns, end_ns, algbw, busbw FROM collectives "
                  "ORDER BY rank, start_ns");
  std::vector<CollectiveRow> out;
  while (s.step()) {
    CollectiveRow r;
    r.rank = int(s.columnInt(0));
    r.op = s.columnText(1);
    r.group = s.columnText(2);
    r.group_size = int(s.columnInt(3));
    r.seq = s.columnInt(4);
    r.bytes = s.columnInt(5);
    r.start_ns = s.columnInt(6);
    r.end_ns = s.columnInt(7);
    r.algbw = s.columnDouble(8);
    r.busbw = s.columnDouble(9);
    out.push_back(r);
  }
  return out;
}

std::map<std::string, std::array<double, 3>> readWeightDigest(const std::string& path) {
  Database db(path, Database::Mode::ReadOnly);
  Statement s(db, "SELECT name, sum, sumsq, abssum FROM weight_digest");
  std::map<std::string, std::array<double, 3>> out;
  while (s.step()) out[s.columnText(0)] = {s.columnDouble(1), s.columnDouble(2), s.columnDouble(3)};
  return out;
}

std::map<std::string, std::string> readMeta(const std::string& path) {
  Database db(path, Database::Mode::ReadOnly);
  Statement s(db, "SELECT key, value FROM meta");
  std::map<std::string, std::string> out;
  while (s.step()) out[s.columnText(0)] = s.columnText(1);
  return out;
}

}  // namespace trainscope::tracer
