// rank_failures.cpp — see rank_failures.h.
#include "trainscope/rundb/rank_failures.h"

#include <exception>

#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"

namespace trainscope::rundb {

bool recordRunFailure(const std::string& path, const RunFailure& f) {
  if (path.empty() || f.ranks.empty()) return false;
  const PathCheck found = inspectPath(path);  // ours, and not being written (the ranks have exited)
  if (found.kind != PathCheck::Kind::RunDatabase || found.locked || found.writer_pid != f.writer_pid) return false;
  try {
    Database db(path, Database::Mode::ReadWrite);
    {
      Statement v(db, "SELECT value FROM meta WHERE key = 'schema_version'");
      if (!v.step() || v.columnText(0) != std::to_string(kSchemaVersion)) return false;  // another version's file
    }
    Transaction t(db);
    // The row the merge writes (host, pid, device, offsets) is kept; a failed run usually has none.
    Statement row(db, "INSERT INTO ranks (rank, exit_status, error) VALUES (?, ?, ?) ON CONFLICT(rank) DO UPDATE SET "
                      "exit_status = excluded.exit_status, error = excluded.error");
    for (const RankFailure& r : f.ranks) {
      row.bindFrom(1, r.rank, r.exit_status);
      if (r.error.empty()) row.bindNull(3);
      else row.bind(3, r.error);
      row.run();
    }
    if (f.first_rank >= 0)
      Statement(db, "INSERT OR REPLACE INTO meta (key, value) VALUES ('failed_rank', ?)").exec(std::to_string(f.first_rank));
    t.commit();
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace trainscope::rundb
