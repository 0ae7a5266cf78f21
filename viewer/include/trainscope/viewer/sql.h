// trainscope/viewer/sql.h — the SQL box: one query over a run database (the file *is* SQLite; its
// tables are in docs/trace-schema.md), for what the panels do not show.
//
// Read-only three times over: the file is opened read-only (rundb::Database::Mode::ReadOnly, which
// creates nothing beside it), the connection is query_only, and a statement is refused before it
// runs unless it starts with SELECT, WITH, VALUES, EXPLAIN or PRAGMA and SQLite calls it read-only
// (sqlite3_stmt_readonly) — so neither INSERT/UPDATE/DELETE/CREATE nor ATTACH or VACUUM INTO (which
// would write another file) can run. One statement at a time. Errors come back as text, never thrown.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include "trainscope/viewer/table.h"

namespace trainscope::viewer {

struct QueryResult {
  Table table;             // column names and cells (NULL as "NULL")
  bool truncated = false;  // more rows than max_rows: the first max_rows kept
  std::string error;       // what went wrong and what to do ("" when it ran)
  double seconds = 0;
};

// cancel: once true the query stops (SQLite's interrupt) and error says "cancelled".
QueryResult runQuery(const std::string& db_path, const std::string& sql, size_t max_rows = 10000,
                     const std::atomic<bool>* cancel = nullptr);

}  // namespace trainscope::viewer
