// sql.cpp — see sql.h.
#include "trainscope/viewer/sql.h"

#include <algorithm>
#include <memory>
#include <cctype>
#include <chrono>

#include "trainscope/rundb/sqlite.h"

namespace trainscope::viewer {

namespace {

// Where the first statement ends: the first ';' outside quotes and comments (sql.size() if none).
size_t firstStatementEnd(const std::string& sql) {
  for (size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (c == '\'' || c == '"' || c == '`' || c == '[') {
      const char close = c == '[' ? ']' : c;
      for (++i; i < sql.size() && sql[i] != close; ++i) {
      }
    } else if (c == '-' && i + 1 < sql.size() && sql[i + 1] == '-') {
      while (i < sql.size() && sql[i] != '\n') ++i;
    } else if (c == '/' && i + 1 < sql.size() && sql[i + 1] == '*') {
      const size_t e = sql.find("*/", i + 2);
      i = e == std::string::npos ? sql.size() : e + 1;
    } else if (c == ';') {
      return i;
    }
  }
  return sql.size();
}

// True when s holds only spaces, semicolons and comments.
bool blank(const std::string& s) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (std::isspace(static_cast<unsigned char>(s[i])) || s[i] == ';') continue;
    if (s.compare(i, 2, "--") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
      continue;
    }
    if (s.compare(i, 2, "/*") == 0) {
      const size_t e = s.find("*/", i + 2);
      if (e == std::string::npos) return true;
      i = e + 1;
      continue;
    }
    return false;
  }
  return true;
}

std::string firstWord(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {  // past spaces and comments
    if (std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    else if (s.compare(i, 2, "--") == 0) i = std::min(s.size(), s.find('\n', i));
    else if (s.compare(i, 2, "/*") == 0) i = std::min(s.size(), s.find("*/", i) + 2);
    else break;
  }
  std::string w;
  for (; i < s.size() && std::isalpha(static_cast<unsigned char>(s[i])); ++i)
    w += char(std::toupper(static_cast<unsigned char>(s[i])));
  return w;
}

// SQLite's own message ("near \"SELEC\": syntax error") without the wrapper's "sqlite: " and "(code N)".
std::string sqliteMessage(const rundb::SqliteError& e) {
  std::string m = e.what();
  if (m.rfind("sqlite: ", 0) == 0) m = m.substr(8);
  const size_t code = m.rfind(" (code ");
  if (code != std::string::npos && m.back() == ')') m = m.substr(0, code);
  return m;
}

}  // namespace

QueryResult runQuery(const std::string& db_path, const std::string& sql, size_t max_rows,
                     const std::atomic<bool>* cancel) {
  QueryResult r;
  const auto t0 = std::chrono::steady_clock::now();
  const size_t end = firstStatementEnd(sql);
  const std::string stmt_text = sql.substr(0, end);
  if (blank(stmt_text)) {
    r.error = "no query: type one, e.g. SELECT s.value, count(*) FROM kernels k JOIN strings s ON s.id = k.name_id GROUP BY 1 (tables: docs/trace-schema.md)";
    return r;
  }
  if (end < sql.size() && !blank(sql.substr(end))) {
    r.error = "one statement at a time: remove what follows the first ';'";
    return r;
  }
  static const char* kReading[] = {"SELECT", "WITH", "VALUES", "EXPLAIN", "PRAGMA"};
  // SQLite's statements that write: refused before SQLite sees them. Any other first word is not SQL
  // SQLite knows: its syntax error is reported (a typo such as SELEC changes no file).
  static const char* kWriting[] = {"INSERT", "UPDATE",  "DELETE", "REPLACE", "CREATE",  "DROP",
                                   "ALTER",  "ATTACH",  "DETACH", "VACUUM",  "REINDEX", "ANALYZE",
                                   "BEGIN",  "COMMIT",  "END",    "ROLLBACK", "SAVEPOINT", "RELEASE"};
  const std::string w = firstWord(stmt_text);
  const bool reading = std::find(std::begin(kReading), std::end(kReading), w) != std::end(kReading);
  if (!reading && std::find(std::begin(kWriting), std::end(kWriting), w) != std::end(kWriting)) {
    r.error = "refused: " + w +
              " would change a file; the run database is opened read-only here — only SELECT, WITH, VALUES, "
              "EXPLAIN and PRAGMA queries run";
    return r;
  }
  try {
    rundb::Database db(db_path, rundb::Database::Mode::ReadOnly);
    db.exec("PRAGMA query_only = 1");
    db.interruptWhen(cancel);
    std::unique_ptr<rundb::Statement> prepared;
    try {
      prepared = std::make_unique<rundb::Statement>(db, stmt_text);
    } catch (const rundb::SqliteError& e) {
      r.error = "syntax error: " + sqliteMessage(e) + " (only SELECT, WITH, VALUES, EXPLAIN and PRAGMA queries run)";
      return r;
    }
    rundb::Statement& st = *prepared;
    if (!st.readOnly()) {
      r.error = "refused: this statement would change the database, which is opened read-only here";
      return r;
    }
    for (int i = 0; i < st.columnCount(); ++i) r.table.columns.push_back(st.columnName(i));
    while (st.step()) {
      if (r.table.rows.size() >= max_rows) {
        r.truncated = true;
        break;
      }
      auto& row = r.table.rows.emplace_back();
      for (int i = 0; i < st.columnCount(); ++i) row.push_back(st.columnIsNull(i) ? "NULL" : st.columnText(i));
    }
  } catch (const std::exception& e) {
    r.table = {};
    const auto* sqlite = dynamic_cast<const rundb::SqliteError*>(&e);
    r.error = cancel && cancel->load() ? "cancelled" : sqlite ? "SQLite: " + sqliteMessage(*sqlite) : e.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace trainscope::viewer
