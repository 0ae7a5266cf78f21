// trainscope/rundb/store.h — RunStore, the one writer of run databases.
//
// Creating a database is careful about what is already at the path:
//   - a new database is made complete (schema, meta) under a random name beside the path and then
//     linked there (link(2): of two runs started at once exactly one takes the path) or renamed over
//     the database it replaces: a run killed at any moment leaves nothing or a database, never an
//     empty or half-made file;
//   - an existing path is replaced only with `overwrite`, only when it is a regular file holding a
//     trainscope run database, and only when no other writer holds it; anything else (a device node,
//     a directory, someone else's file) is refused with a UserError naming `field`;
//   - the writer holds an exclusive flock(2) on the file for its lifetime; `overwrite` of a database
//     that another process is writing is refused with the writer's pid.
// Steps are committed one by one (a run that dies keeps every finished step); events go in batches
// inside a transaction (the tracer's writer thread, import). close() checkpoints the WAL and leaves
// the file in journal_mode=DELETE, so a finished database is one file that read-only storage can hold.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "trainscope/common/files.h"
#include "trainscope/rundb/rows.h"

namespace trainscope::rundb {

class Database;
class Statement;

class RunStore {
 public:
  struct Options {
    bool overwrite = false;
    std::string field = "--out";  // the flag named in errors about the path
    bool bulk = false;            // large pages, no fsync: a tracer shard, rebuilt if lost
    std::vector<std::string> inputs;  // the command's input files: never replaced (files::OutputRule)
  };
  RunStore(const std::string& path, const Options& options);
  ~RunStore();  // close(), never throws
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  const std::string& path() const { return path_; }
  Database& database() { return *db_; }

  void setMeta(const std::string& key, const std::string& value);
  void appendStep(const Step& r);                          // committed on its own
  void appendCollectives(const std::vector<Collective>& rows);  // one transaction
  // A step's MoE router rows (every rank's, written by rank 0), one transaction; a row of the same
  // (rank, step, layer, expert) is replaced.
  void appendExpertLoad(const std::vector<ExpertLoad>& rows);
  void appendCheckpoint(const Checkpoint& row);             // committed on its own
  void appendFp8Scales(const std::vector<Fp8Scale>& rows);  // --precision fp8, every rank's rows
  void writeWeightDigest(const std::vector<WeightDigest>& digest);
  void putRank(const RankInfo& r);

  // Batched event writing: call inside begin()/commit(). Strings are written with explicit ids
  // (the tracer interns them itself); intern() is the writer's own table for single-threaded
  // producers (import), continuing after the ids already in the file.
  void begin();
  void commit();
  void rollback();  // never throws
  void putStrings(const std::vector<std::pair<StringId, std::string>>& strings);
  StringId intern(std::string_view s);
  void put(const std::vector<Range>& rows);
  void put(const std::vector<GpuAnnotation>& rows);
  void put(const std::vector<ThreadName>& rows);
  void put(const std::vector<HostOp>& rows);
  void put(const std::vector<Kernel>& rows);
  void put(const std::vector<Memcpy>& rows);
  void put(const std::vector<Memset>& rows);
  void put(const std::vector<ApiCall>& rows);
  void put(const std::vector<Counter>& rows);
  void put(const std::vector<Collective>& rows);
  void put(const std::vector<Drop>& rows);
  template <class Row>
  void put(const Row& row) { put(std::vector<Row>{row}); }

  void createIndexes();
  // Checkpoints, switches to journal_mode=DELETE, closes and releases the lock. Idempotent; throws
  // when the final write fails (the destructor swallows that).
  void close();

 private:
  template <class Row>
  void putRows(const std::vector<Row>& rows);
  Statement& cached(const std::string& sql);

  std::string path_;
  int lock_fd_ = -1;
  std::unique_ptr<Database> db_;
  std::unordered_map<std::string, std::unique_ptr<Statement>> statements_;
  std::unordered_map<std::string, StringId> interned_;
  StringId next_string_ = 0;
  bool strings_loaded_ = false;
  bool in_tx_ = false;
};

// What a writer of `path` would find there: nothing, a trainscope database (and whether another
// process is writing it, with its pid), or something that is not ours to replace.
struct PathCheck {
  // Empty: a 0-byte regular file (nothing recorded: replaced with overwrite, like a database).
  enum class Kind { Missing, RunDatabase, Empty, Other } kind = Kind::Missing;
  bool locked = false;
  int64_t writer_pid = 0;
  std::string what;  // for Other: what it is ("a directory", "not a trainscope run database", …)
};
PathCheck inspectPath(const std::string& path);

// Throws UserError(field) unless a writer may create `path` (missing) or replace it (overwrite, an
// unlocked trainscope database), under files::checkOutput's rule (runDatabaseRule: never one of
// `inputs` or their -wal/-shm/-journal, nothing but the database's own files beside it). Also checks
// that the folder exists and is writable. Returns what it found there.
PathCheck checkWritable(const std::string& path, bool overwrite, const std::string& field,
                        const std::vector<std::string>& inputs = {});
// The rule of an output that is a run database (the OutputRule of files.h).
files::OutputRule runDatabaseRule(const std::string& field, bool overwrite, std::vector<std::string> inputs);

// Removes a trainscope run database and its -wal/-shm files, refusing anything else (UserError).
void removeRunDatabase(const std::string& path, const std::string& field);

}  // namespace trainscope::rundb
