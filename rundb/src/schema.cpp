// schema.cpp — the tables of the run database, and the DDL generated from them (docs/trace-schema.md).
#include "trainscope/rundb/schema.h"

#include <cassert>
#include <cstdlib>

#include "trainscope/common/error.h"
#include "trainscope/rundb/sqlite.h"

namespace trainscope::rundb {
namespace {

using R = ColumnRole;

std::vector<Table> makeTables() {
  const char* I = "INTEGER";
  const char* IN = "INTEGER NOT NULL";
  const char* RN = "REAL NOT NULL";
  const char* TN = "TEXT NOT NULL";
  return {
      {"meta", {{"key", "TEXT PRIMARY KEY"}, {"value", TN}}},
      {"strings", {{"id", "INTEGER PRIMARY KEY"}, {"value", TN}}},
      {"ranks",
       {{"rank", "INTEGER PRIMARY KEY", R::Rank}, {"host", "TEXT"}, {"pid", I}, {"device", "TEXT"},
        {"clock_offset_ns", "INTEGER NOT NULL DEFAULT 0"}, {"offset_start_ns", I}, {"offset_end_ns", I},
        // A failed run (the local launcher, rundb/rank_failures.h): the rank's exit status and its error.
        {"exit_status", I, R::Plain, 8}, {"error", "TEXT", R::Plain, 8}}},
      {"steps",
       {{"rank", IN, R::Rank}, {"step", IN}, {"loss", "REAL"}, {"lr", "REAL"}, {"grad_norm", "REAL"},
        {"loss_scale", "REAL"}, {"skipped", IN}, {"tokens", IN}, {"start_ns", IN, R::Time}, {"step_time_ns", IN},
        {"tokens_per_s", "REAL"}, {"model_flops", "REAL"}, {"hw_flops", "REAL"}, {"mfu", "REAL"}, {"hfu", "REAL"},
        {"peak_bytes", I}, {"param_bytes", I}, {"grad_bytes", I}, {"optim_bytes", I}, {"activation_bytes", I}},
       ", PRIMARY KEY (rank, step)"},
      {"ranges",
       {{"rank", IN, R::Rank}, {"tid", IN}, {"start_ns", IN, R::Time}, {"end_ns", IN, R::Time},
        {"name_id", IN, R::StringId}, {"domain_id", IN, R::StringId}, {"depth", IN}, {"kind", IN}},
       "", true},
      {"host_ops",
       {{"rank", IN, R::Rank}, {"tid", IN}, {"start_ns", IN, R::Time}, {"end_ns", IN, R::Time},
        {"name_id", IN, R::StringId}, {"seq", I}, {"shapes_id", I, R::StringId}},
       "", true},
      {"kernels",
       {{"rank", IN, R::Rank}, {"device", IN}, {"stream", IN}, {"start_ns", IN, R::Time}, {"end_ns", IN, R::Time},
        {"correlation", I}, {"name_id", IN, R::StringId}, {"grid_x", I}, {"grid_y", I}, {"grid_z", I},
        {"block_x", I}, {"block_y", I}, {"block_z", I}, {"registers", I}, {"shared_bytes", I},
        {"collective_seq", I}},
       "", true},
      {"memcpy",
       {{"rank", IN, R::Rank}, {"device", IN}, {"stream", IN}, {"start_ns", IN, R::Time}, {"end_ns", IN, R::Time},
        {"correlation", I}, {"kind", IN}, {"bytes", IN}},
       "", true},
      {"memset",
       {{"rank", IN, R::Rank}, {"device", IN}, {"stream", IN}, {"start_ns", IN, R::Time}, {"end_ns", IN, R::Time},
        {"correlation", I}, {"bytes", IN}, {"value", I}},
       "", true},
      {"gpu_annotations",
       {{"rank", IN, R::Rank}, {"device", IN}, {"stream", IN}, {"start_ns", IN, R::Time}, {"end_ns", IN, R::Time},
        {"name_id", IN, R::StringId}, {"domain_id", IN, R::StringId}},
       "", true},
      {"api_calls",
       {{"rank", IN, R::Rank}, {"tid", IN}, {"start_ns", IN, R::Time}, {"end_ns", IN, R::Time}, {"correlation", I},
        {"name_id", IN, R::StringId}, {"kind", IN}},
       "", true},
      {"collectives",
       {{"rank", IN, R::Rank}, {"op", TN}, {"grp", TN}, {"group_size", IN}, {"seq", IN}, {"bytes", IN},
        {"start_ns", IN, R::Time}, {"end_ns", IN, R::Time}, {"algbw", "REAL"}, {"busbw", "REAL"},
        {"cut", "INTEGER NOT NULL DEFAULT 0", R::Plain, 7, "0"}},
       "", true},
      {"counters", {{"rank", IN, R::Rank}, {"ts_ns", IN, R::Time}, {"name_id", IN, R::StringId}, {"value", RN}}, "",
       true},
      // Names, not events: one row per named thread, stream or process; copied from the shards like
      // the events (names remapped), with no time to shift.
      {"threads",
       {{"rank", IN, R::Rank}, {"kind", IN}, {"device", IN}, {"tid", IN}, {"name_id", I, R::StringId},
        {"sort_index", I}},
       "", true},
      {"drops",
       {{"rank", IN, R::Rank}, {"source", TN}, {"emitted", IN}, {"stored", IN}, {"dropped", IN}},
       ", PRIMARY KEY (rank, source)"},
      {"weight_digest", {{"name", "TEXT PRIMARY KEY"}, {"sum", RN}, {"sumsq", RN}, {"abssum", RN}}},
      // Not events, like `steps`: rank 0 writes every rank's rows into the run database, so the
      // shard merge has nothing to copy and no time to shift (the step's time is in `steps`).
      {"expert_load",
       {{"rank", IN, R::Rank}, {"step", IN}, {"layer", IN}, {"expert", IN}, {"tokens", IN}, {"dropped", IN},
        {"capacity", IN}, {"aux_loss", RN}, {"z_loss", RN}},
       ", PRIMARY KEY (rank, step, layer, expert)"},
      // `run --save` checkpoints (rank 0 writes them; a file without the table: none).
      {"checkpoints", {{"step", IN}, {"seconds", RN}, {"bytes", IN}, {"path", TN}}, ", PRIMARY KEY (step)"},
      // Like expert_load: rank 0 writes every rank's rows.
      {"fp8_scales",
       {{"rank", IN, R::Rank}, {"step", IN}, {"tensor", TN}, {"role", TN}, {"amax", RN}, {"scale", RN}},
       ", PRIMARY KEY (rank, step, tensor, role)"},
  };
}

}  // namespace

const std::vector<Table>& tables() {
  static const std::vector<Table> t = makeTables();
  return t;
}

const Table& table(const std::string& name) {
  for (const Table& t : tables())
    if (name == t.name) return t;
  assert(false && "unknown table");
  std::abort();
}

std::string columnList(const Table& t) {
  std::string s;
  for (const Column& c : t.columns) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

std::string selectList(const Table& t, int version) {
  std::string s;
  for (const Column& c : t.columns)
    s += (s.empty() ? "" : ", ") + (version < c.since ? std::string(c.older) + " AS " + c.name : std::string(c.name));
  return s;
}

std::string insertSql(const Table& t, int rows, const char* verb) {
  std::string one = "(";
  for (size_t i = 0; i < t.columns.size(); ++i) one += i ? ",?" : "?";
  one += ")";
  std::string sql = std::string(verb) + " INTO " + t.name + " (" + columnList(t) + ") VALUES " + one;
  for (int i = 1; i < rows; ++i) sql += "," + one;
  return sql;
}

void createSchema(Database& db) {
  std::string ddl;
  for (const Table& t : tables()) {
    ddl += "CREATE TABLE IF NOT EXISTS " + std::string(t.name) + " (";
    for (size_t i = 0; i < t.columns.size(); ++i)
      ddl += std::string(i ? ", " : "") + t.columns[i].name + " " + t.columns[i].type;
    ddl += std::string(t.constraints) + ");\n";
  }
  db.exec(ddl);
}

void createIndexes(Database& db) {
  db.exec(R"SQL(
CREATE INDEX IF NOT EXISTS ranges_by_time ON ranges(rank, start_ns);
CREATE INDEX IF NOT EXISTS host_ops_by_time ON host_ops(rank, start_ns);
CREATE INDEX IF NOT EXISTS kernels_by_time ON kernels(rank, start_ns);
CREATE INDEX IF NOT EXISTS kernels_by_correlation ON kernels(rank, correlation);
CREATE INDEX IF NOT EXISTS memcpy_by_time ON memcpy(rank, start_ns);
CREATE INDEX IF NOT EXISTS memset_by_time ON memset(rank, start_ns);
CREATE INDEX IF NOT EXISTS gpu_annotations_by_time ON gpu_annotations(rank, start_ns);
CREATE INDEX IF NOT EXISTS api_by_correlation ON api_calls(rank, correlation);
CREATE INDEX IF NOT EXISTS api_by_time ON api_calls(rank, start_ns);
CREATE INDEX IF NOT EXISTS collectives_by_time ON collectives(rank, start_ns);
CREATE INDEX IF NOT EXISTS counters_by_time ON counters(rank, ts_ns);
)SQL");
}

int checkRunDatabase(Database& db) {
  const std::string fix = "pass a run database written by `trainscope run --out/--trace` or `trainscope import`";
  bool has_meta = false;
  try {
    has_meta = db.tableExists("meta");
  } catch (const SqliteError& e) {
    refuseDamaged(db.path(), "database", e.what());
    throw UserError("database", db.path() + " cannot be read as SQLite (" + e.what() + ")", fix);
  }
  if (!has_meta) throw UserError("database", db.path() + " is not a trainscope run database (no meta table)", fix);
  std::string text;
  try {
    Statement s(db, "SELECT value FROM meta WHERE key = 'schema_version'");
    if (!s.step()) throw UserError("database", db.path() + " has no schema_version in meta", "it was not written by trainscope");
    text = s.columnText(0);
  } catch (const SqliteError& e) {
    throw UserError("database", db.path() + " is damaged (" + e.what() + ")", fix);
  }
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str() || *end != '\0' || v < kOldestReadableSchema || v > kSchemaVersion)
    throw UserError("database", db.path() + " has schema version " + text + "; this trainscope reads versions " +
                                    std::to_string(kOldestReadableSchema) + " to " + std::to_string(kSchemaVersion),
                    "use the trainscope that wrote it");
  return int(v);
}

}  // namespace trainscope::rundb
