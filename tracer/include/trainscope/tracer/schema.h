// trainscope/tracer/schema.h — the run database's schema (docs/trace-schema.md is the contract).
//
// One SQLite file per run. Times are integer nanoseconds on the rank's CLOCK_REALTIME, shifted by
// the rank's clock offset when shards merge; names are interned in `strings`. Enum values written
// to the database are fixed forever: add new ones, never renumber.
#pragma once

#include <cstdint>

namespace trainscope::tracer {

class Database;

inline constexpr int kSchemaVersion = 2;

// ranges.kind
enum class RangeKind : int { PushPop = 0, StartEnd = 1 };
// memcpy.kind (CUPTI's CUpti_ActivityMemcpyKind values)
enum class MemcpyKind : int { Unknown = 0, HtoD = 1, DtoH = 2, HtoA = 3, AtoH = 4, AtoA = 5, AtoD = 6, DtoA = 7,
                              DtoD = 8, HtoH = 9, PtoP = 10 };
// api_calls.kind
enum class ApiKind : int { Runtime = 0, Driver = 1 };

// Creates every table (idempotent). Indexes are separate: createIndexes after bulk loading.
void createSchema(Database& db);
void createIndexes(Database& db);

// Throws SqliteError / std::runtime_error with a clear message when `path` is not a trainscope run
// database (missing meta, unknown schema version).
int checkRunDatabase(Database& db);

}  // namespace trainscope::tracer
