// trainscope/tracer/sqlite.h — the one wrapper around SQLite (nobody else includes sqlite3.h).
//
// RAII in the manner of SQLiteCpp: Database owns the connection, Statement a prepared statement
// (bind → step → reset, reused for bulk writes), Transaction rolls back in its destructor unless
// committed and never throws from it. Every SQLite code goes through one check path that throws
// SqliteError with SQLite's own message and the statement text.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>

struct sqlite3;
struct sqlite3_stmt;

namespace trainscope::tracer {

class SqliteError : public std::runtime_error {
 public:
  SqliteError(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

class Database {
 public:
  enum class Mode { ReadOnly, ReadWrite, Create };
  Database(const std::string& path, Mode mode);
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  void exec(const std::string& sql);         // one or more statements, no results
  bool tableExists(const std::string& name);
  int64_t lastInsertRowid() const;
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

 private:
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
  void bind(int i, double v);
  void bind(int i, const std::string& v);
  void bindNull(int i);
  template <class T>
  void bind(int i, const std::optional<T>& v) { v ? bind(i, *v) : bindNull(i); }

  bool step();   // true while a row is available; false when done
  void reset();  // ready to bind and step again (keeps bindings until rebound)
  void run() { step(); reset(); }

  int64_t columnInt(int i) const;  // 0-based, as in SQLite
  double columnDouble(int i) const;
  std::string columnText(int i) const;
  bool columnIsNull(int i) const;
  int columnCount() const;

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

}  // namespace trainscope::tracer
