// schema.cpp — DDL of the run database (see docs/trace-schema.md).
#include "trainscope/tracer/schema.h"

#include <stdexcept>
#include <string>

#include "trainscope/common/error.h"
#include "trainscope/tracer/sqlite.h"

namespace trainscope::tracer {

void createSchema(Database& db) {
  db.exec(R"SQL(
CREATE TABLE IF NOT EXISTS meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS strings (
  id    INTEGER PRIMARY KEY,
  value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ranks (
  rank            INTEGER PRIMARY KEY,
  host            TEXT,
  pid             INTEGER,
  device          TEXT,
  clock_offset_ns INTEGER NOT NULL DEFAULT 0,   -- add to this rank's times to get rank 0's clock
  offset_start_ns INTEGER,
  offset_end_ns   INTEGER
);
CREATE TABLE IF NOT EXISTS steps (
  rank INTEGER NOT NULL, step INTEGER NOT NULL, loss REAL, lr REAL, grad_norm REAL, loss_scale REAL,
  skipped INTEGER NOT NULL, tokens INTEGER NOT NULL, start_ns INTEGER NOT NULL, step_time_ns INTEGER NOT NULL,
  tokens_per_s REAL, model_flops REAL, hw_flops REAL, mfu REAL, hfu REAL, peak_bytes INTEGER, param_bytes INTEGER,
  grad_bytes INTEGER, optim_bytes INTEGER, activation_bytes INTEGER,
  PRIMARY KEY (rank, step)
);
CREATE TABLE IF NOT EXISTS ranges (
  rank INTEGER NOT NULL, tid INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  name_id INTEGER NOT NULL, domain_id INTEGER NOT NULL, depth INTEGER NOT NULL, kind INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS host_ops (
  rank INTEGER NOT NULL, tid INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  name_id INTEGER NOT NULL, seq INTEGER, shapes_id INTEGER
);
CREATE TABLE IF NOT EXISTS kernels (
  rank INTEGER NOT NULL, device INTEGER NOT NULL, stream INTEGER NOT NULL, start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL, correlation INTEGER, name_id INTEGER NOT NULL,
  grid_x INTEGER, grid_y INTEGER, grid_z INTEGER, block_x INTEGER, block_y INTEGER, block_z INTEGER,
  registers INTEGER, shared_bytes INTEGER, collective_seq INTEGER
);
CREATE TABLE IF NOT EXISTS memcpy (
  rank INTEGER NOT NULL, device INTEGER NOT NULL, stream INTEGER NOT NULL, start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL, correlation INTEGER, kind INTEGER NOT NULL, bytes INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS memset (
  rank INTEGER NOT NULL, device INTEGER NOT NULL, stream INTEGER NOT NULL, start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL, correlation INTEGER, bytes INTEGER NOT NULL, value INTEGER
);
CREATE TABLE IF NOT EXISTS api_calls (
  rank INTEGER NOT NULL, tid INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
  correlation INTEGER, name_id INTEGER NOT NULL, kind INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS collectives (
  rank INTEGER NOT NULL, op TEXT NOT NULL, grp TEXT NOT NULL, group_size INTEGER NOT NULL, seq INTEGER NOT NULL,
  bytes INTEGER NOT NULL, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL, algbw REAL, busbw REAL
);
CREATE TABLE IF NOT EXISTS counters (
  rank INTEGER NOT NULL, ts_ns INTEGER NOT NULL, name_id INTEGER NOT NULL, value REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS drops (
  rank INTEGER NOT NULL, source TEXT NOT NULL, emitted INTEGER NOT NULL, stored INTEGER NOT NULL,
  dropped INTEGER NOT NULL, PRIMARY KEY (rank, source)
);
CREATE TABLE IF NOT EXISTS weight_digest (
  name TEXT PRIMARY KEY, sum REAL NOT NULL, sumsq REAL NOT NULL, abssum REAL NOT NULL
);
)SQL");
}

void createIndexes(Database& db) {
  db.exec(R"SQL(
CREATE INDEX IF NOT EXISTS ranges_by_time ON ranges(rank, start_ns);
CREATE INDEX IF NOT EXISTS host_ops_by_time ON host_ops(rank, start_ns);
CREATE INDEX IF NOT EXISTS kernels_by_time ON kernels(rank, start_ns);
CREATE INDEX IF NOT EXISTS kernels_by_correlation ON kernels(rank, correlation);
CREATE INDEX IF NOT EXISTS api_by_correlation ON api_calls(rank, correlation);
CREATE INDEX IF NOT EXISTS collectives_by_time ON collectives(rank, start_ns);
CREATE INDEX IF NOT EXISTS counters_by_time ON counters(rank, ts_ns);
)SQL");
}

int checkRunDatabase(Database& db) {
  bool has_meta = false;
  try {
    has_meta = db.tableExists("meta");
  } catch (const SqliteError& e) {
    throw UserError("database", db.path() + " cannot be read as SQLite (" + e.what() + ")",
                    "pass a run database written by `trainscope run --out/--trace` or `trainscope import`");
  }
  if (!has_meta)
    throw UserError("database", db.path() + " is not a trainscope run database (no meta table)",
                    "pass a file written by `trainscope run --out/--trace` or `trainscope import`");
  Statement s(db, "SELECT value FROM meta WHERE key = 'schema_version'");
  if (!s.step()) throw UserError("database", db.path() + " has no schema_version in meta", "it was not written by trainscope");
  const int v = std::atoi(s.columnText(0).c_str());
  if (v != kSchemaVersion)
    throw UserError("database", db.path() + " has schema version " + s.columnText(0) + "; this trainscope reads " +
                                    std::to_string(kSchemaVersion),
                    "use the trainscope that wrote it");
  return v;
}

}  // namespace trainscope::tracer
