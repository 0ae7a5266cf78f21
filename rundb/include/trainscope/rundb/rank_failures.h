// trainscope/rundb/rank_failures.h — why a run failed, written into its run database after the ranks
// have ended: the rank that failed first (meta.failed_rank) and, per rank that failed or reported an
// error, its exit status and error text (ranks.exit_status, ranks.error; schema 8). The local
// launcher is the one process that sees every rank's end (its exit status, the error it reported
// through its pipe, the signal that killed it), and rank 0, which writes the database, may be the
// rank that failed: so the launcher writes these, once every rank has exited (docs/trace-schema.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::rundb {

struct RankFailure {
  int64_t rank = 0;
  int64_t exit_status = 0;  // the process's: an exit code, or 128 + signal when killed
  std::string error;        // the error it reported ("" when it reported none), or what killed it
};

struct RunFailure {
  int64_t first_rank = -1;          // the rank that failed first (the root cause the launcher names)
  int64_t writer_pid = 0;           // rank 0's process: the run database is the one its meta.writer_pid names
  std::vector<RankFailure> ranks;   // every rank that failed or reported an error
};

// Writes `f` into the run database at `path` when that file is a trainscope run database of this
// schema version that no writer holds, written by this run's rank 0 (meta.writer_pid is
// `writer_pid`: a rank 0 that failed before creating its database leaves an earlier run's file at
// the path, or none; nothing is written into the one, nor created). Returns false, writing nothing, where it cannot; never throws
// (a failed run's report of its failure must not be hidden by a second error).
bool recordRunFailure(const std::string& path, const RunFailure& f);

}  // namespace trainscope::rundb
