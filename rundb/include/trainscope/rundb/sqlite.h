// trainscope/rundb/sqlite.h — the one wrapper around SQLite (nobody else includes sqlite3.h).
//
// RAII in the manner of SQLiteCpp: Database owns the connection, Statement a prepared statement
// (bind → step → reset, reused for bulk writes), Transaction rolls back in its destructor unless
// committed and never throws from it. Every SQLite code goes through one check path that throws
// SqliteError with SQLite's own message (the statement is kept apart, for logs).
//
// Binding is variadic: `s.exec(a, b, c)` binds ?1..?3 and runs; `s.bindFrom(9, x, y)` binds ?9, ?10.
// std::optional and nullptr bind NULL.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

struct sqlite3;
struct sqlite3_stmt;

namespace trainscope::rundb {

class SqliteError : public std::runtime_error {
 public:
  SqliteError(int code, const std::string& what, std::string statement = "", bool disk_full = false)
      : std::runtime_error(what), code_(code), statement_(std::move(statement)), disk_full_(disk_full) {}
  int code() const { return code_; }  // SQLite's extended result code
  // A write failed for want of space (SQLITE_FULL, or ENOSPC under an I/O error): what() names the
  // database's path and says the disk is full — not a sign of a bad file.
  bool diskFull() const { return disk_full_; }
  // The statement that failed, shortened (for logs; kept out of what(), which users read).
  const std::string& statement() const { return statement_; }

 private:
  int code_;
  std::string statement_;
  bool disk_full_ = false;
};

class Database {
 public:
  // ReadOnly creates nothing beside the file and refuses what is not a regular file (a FIFO would
  // block the open). A WAL database with nothing in its -wal is read as immutable (a plain read-only
  // connection would leave -wal and -shm behind); one being written, or a killed writer's -wal, is
  // read through its -wal — for a -wal without its -shm, SQLite creates the -shm it needs (the only
  // file it may leave), and where the folder is not writable a UserError says to copy the pair. A
  // file a normal read-only open cannot read (on read-only storage) is reopened as immutable.
  enum class Mode { ReadOnly, ReadWrite, Create };
  Database(const std::string& path, Mode mode);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(const std::string& sql);  // one or more statements, no results
  bool tableExists(const std::string& name);
  int64_t lastInsertRowid() const;
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }
  // Once *flag is true, the statement running (and every later one) stops with SQLITE_INTERRUPT,
  // thrown as an error: how a reader on another thread is cancelled. nullptr: never.
  void interruptWhen(const std::atomic<bool>* flag);

 private:
  void open(const std::string& target, int flags);
  sqlite3* db_ = nullptr;
  std::string path_;
};

class Statement {
 public:
  Statement(Database& db, const std::string& sql);
  ~Statement();
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  // Binding is 1-based, as in SQLite.
  void bind(int i, int64_t v);
  void bind(int i, int v) { bind(i, static_cast<int64_t>(v)); }
  void bind(int i, uint32_t v) { bind(i, static_cast<int64_t>(v)); }
  void bind(int i, bool v) { bind(i, static_cast<int64_t>(v)); }
  void bind(int i, double v);
  void bind(int i, std::string_view v);
  void bind(int i, const std::string& v) { bind(i, std::string_view(v)); }
  void bind(int i, const char* v) { bind(i, std::string_view(v)); }
  void bind(int i, std::nullptr_t) { bindNull(i); }
  void bindNull(int i);
  template <class T>
  void bind(int i, const std::optional<T>& v) {
    if (v) bind(i, *v);
    else bindNull(i);
  }
  // Binds ?first, ?first+1, … in order.
  template <class... A>
  void bindFrom(int first, const A&... a) {
    int i = first;
    (bind(i++, a), ...);
  }
  // Binds ?1.. and runs a statement that returns no rows.
  template <class... A>
  void exec(const A&... a) {
    bindFrom(1, a...);
    run();
  }

  bool step();   // true while a row is available; false when done
  void reset();  // ready to bind and step again (keeps bindings until rebound)
  void run() {
    step();
    reset();
  }

  int64_t columnInt(int i) const;  // 0-based, as in SQLite
  double columnDouble(int i) const;
  std::string columnText(int i) const;
  bool columnIsNull(int i) const;
  // What the value in column i is (SQLite's storage class): how a reader of another tool's file tells
  // a wrong-typed value from one to take.
  enum class Type { Integer, Real, Text, Blob, Null };
  Type columnType(int i) const;
  std::optional<int64_t> columnOptInt(int i) const;
  std::optional<double> columnOptDouble(int i) const;
  int columnCount() const;
  std::string columnName(int i) const;
  // True when the statement cannot change the database (sqlite3_stmt_readonly): how a query box
  // refuses writes before running anything.
  bool readOnly() const;

 private:
  Database& db_;
  sqlite3_stmt* stmt_ = nullptr;
  std::string sql_;
};

class Transaction {
 public:
  explicit Transaction(Database& db);
  ~Transaction();  // rolls back unless committed; never throws
  void commit();

 private:
  Database& db_;
  bool done_ = false;
};

// True when `path` starts with SQLite's file header (no SQLite call; for telling formats apart).
bool looksLikeSqlite(const std::string& path);
// Why a file that starts with SQLite's header cannot be a whole database ("" when nothing shows it):
// shorter than the 100-byte header, or than the size its header records (pages x page size: a copy
// or a disk cut short), or not whole pages. No SQLite call (https://www.sqlite.org/fileformat.html,
// 1.3: the in-header size counts when its version-valid-for number equals the change counter).
std::string sqliteDamage(const std::string& path);
// Throws UserError naming `field` and the path when sqliteDamage(path) says the file is damaged, or
// when `sqlite_error` (an error SQLite gave on it, "" for none) is SQLite's own "malformed" one.
void refuseDamaged(const std::string& path, const std::string& field, const std::string& sqlite_error = "");

}  // namespace trainscope::rundb
