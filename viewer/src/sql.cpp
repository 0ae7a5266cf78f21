// sql.cpp — see sql.h.
#include "trainscope/viewer/sql.h"

#include <algorithm>
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
  const std::string w = firstWord(stmt_text);
  if (std::find(std::begin(kReading), std::end(kReading), w) == std::end(kReading)) {
    r.error = "refused: " + (w.empty() ? std::string("this statement") : w) +
              " would change a file; the run database is opened read-only here — only SELECT, WITH, VALUES, "
              "EXPLAIN and PRAGMA queries run";
    return r;
  }
  try {
    rundb::Database db(db_path, rundb::Database::Mode::ReadOnly);
    db.exec("PRAGMA query_only = 1");
    db.interruptWhen(cancel);
    rundb::Statement st(db, stmt_text);
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
    r.error = cancel && cancel->load() ? "cancelled" : e.what();
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace trainscope::viewer
