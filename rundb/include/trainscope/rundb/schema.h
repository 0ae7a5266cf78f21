// trainscope/rundb/schema.h — the run database's schema as data (docs/trace-schema.md is the contract).
//
// One SQLite file per run. Times are integer nanoseconds (CLOCK_REALTIME of the rank, shifted onto
// rank 0's clock when shards merge); names are interned in `strings`. Enum values written to the
// database are fixed forever: add new ones, never renumber.
//
// The list of tables below is the single description of the file: the DDL, every INSERT of the
// writer, the shard merge (which columns are times to shift and which are string ids to remap) and
// the reader's SELECTs are all generated from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace trainscope::rundb {

class Database;

// 3: journal_mode=DELETE on close, meta.writer_pid, meta.merged_ranks, NULL (not -1) for a missing
//    correlation id. Version-2 files are read as well.
// 4: `threads` (names and sort order of threads, streams and processes) and `gpu_annotations`
//    (ranges on a device stream). Older files read without them: no names, no GPU annotations.
// 5: `expert_load` (a MoE router's tokens, drops and losses per rank, step, layer and expert). Older
//    files read with none (a dense run).
// 6: `fp8_scales` (--precision fp8: amax and scale per rank, step, FP8 linear and role). Older files
//    read with none (not an fp8 run).
// 7: `collectives.cut` (1: the trace's end cut the call — an import's "finished": false — so its end
//    is not the call's and it has no duration or bandwidth). Older files read 0 there.
// 8: `ranks.exit_status` and `ranks.error` (a failed run: how each rank ended and the error it
//    reported, written by the local launcher) and `meta.failed_rank`. Older files read NULL there.
inline constexpr int kSchemaVersion = 8;
inline constexpr int kOldestReadableSchema = 2;

enum class ColumnRole { Plain, Rank, Time, StringId };

struct Column {
  const char* name;
  const char* type;   // SQL type and constraint, e.g. "INTEGER NOT NULL"
  ColumnRole role = ColumnRole::Plain;
  int since = 0;               // the schema version that added the column to its table (0: with the table)
  const char* older = "NULL";  // what a file older than `since` reads in its place (an SQL literal)
};

struct Table {
  const char* name;
  std::vector<Column> columns;
  const char* constraints = "";  // e.g. ", PRIMARY KEY (rank, step)"
  bool events = false;           // one rank's recorded events: merged from shards, times shifted
};

const std::vector<Table>& tables();
const Table& table(const std::string& name);  // asserts it exists

// "a, b, c" and "INSERT INTO t (a, b, c) VALUES (?,?,?)[,(?,?,?)…]" for `rows` rows.
std::string columnList(const Table& t);
// The SELECT list of a file of schema `version`: columnList, with each column the file predates read
// as its `older` value ("…, 0 AS cut").
std::string selectList(const Table& t, int version);
std::string insertSql(const Table& t, int rows = 1, const char* verb = "INSERT");

// Creates every table (idempotent). Indexes are separate: createIndexes after bulk loading.
void createSchema(Database& db);
void createIndexes(Database& db);

// Throws UserError naming the file when `db` is not a trainscope run database (not SQLite, no meta,
// a schema version this build cannot read). Returns the version.
int checkRunDatabase(Database& db);

}  // namespace trainscope::rundb
