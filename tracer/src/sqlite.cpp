// sqlite.cpp — RAII over the SQLite C API; see sqlite.h.
#include "trainscope/tracer/sqlite.h"

#include <sqlite3.h>

namespace trainscope::tracer {
namespace {

void check(sqlite3* db, int rc, const std::string& context) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return;
  std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  throw SqliteError(rc, "sqlite: " + msg + " (code " + std::to_string(rc) + ") in " + context);
}

}  // namespace

Database::Database(const std::string& path, Mode mode) : path_(path) {
  int flags = mode == Mode::ReadOnly    ? SQLITE_OPEN_READONLY
              : mode == Mode::ReadWrite ? SQLITE_OPEN_READWRITE
                                        : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  int rc = sqlite3_open_v2(path.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw SqliteError(rc, "sqlite: cannot open " + path + ": " + msg);
  }
  sqlite3_busy_timeout(db_, 5000);
  sqlite3_extended_result_codes(db_, 1);
}

Database::~Database() { sqlite3_close_v2(db_); }

void Database::exec(const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw SqliteError(rc, "sqlite: " + msg + " in: " + sql.substr(0, 200) + " (" + path_ + ")");
  }
}

bool Database::tableExists(const std::string& name) {
  Statement s(*this, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?");
  s.bind(1, name);
  return s.step();
}

int64_t Database::lastInsertRowid() const { return sqlite3_last_insert_rowid(db_); }

Statement::Statement(Database& db, const std::string& sql) : db_(db), sql_(sql) {
  check(db_.handle(), sqlite3_prepare_v3(db_.handle(), sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr),
        "prepare: " + sql);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::bind(int i, int64_t v) { check(db_.handle(), sqlite3_bind_int64(stmt_, i, v), sql_); }
void Statement::bind(int i, double v) { check(db_.handle(), sqlite3_bind_double(stmt_, i, v), sql_); }
void Statement::bind(int i, const std::string& v) {
  check(db_.handle(), sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT), sql_);
}
void Statement::bindNull(int i) { check(db_.handle(), sqlite3_bind_null(stmt_, i), sql_); }

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  sqlite3_reset(stmt_);
  check(db_.handle(), rc, sql_);
  return false;
}

void Statement::reset() { check(db_.handle(), sqlite3_reset(stmt_), sql_); }

int64_t Statement::columnInt(int i) const { return sqlite3_column_int64(stmt_, i); }
double Statement::columnDouble(int i) const { return sqlite3_column_double(stmt_, i); }
std::string Statement::columnText(int i) const {
  const unsigned char* t = sqlite3_column_text(stmt_, i);
  return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(stmt_, i)) : std::string();
}
bool Statement::columnIsNull(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
int Statement::columnCount() const { return sqlite3_column_count(stmt_); }

Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN"); }
Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);  // never throws
}
void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

}  // namespace trainscope::tracer
