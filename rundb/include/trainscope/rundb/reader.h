// trainscope/rundb/reader.h — RunReader, the typed read side of a run database.
//
// Every tool reads through this class (report, Chrome export, the run summary, the tuner, the
// viewer); none writes SQL of its own. The file is opened read-only — nothing is created beside it,
// and a WAL database on read-only storage is read as immutable — and checked to be a run database
// of a schema version this build reads. Names are resolved through string(id), loaded once.
//
// Event queries return one rank's rows of one table, sorted by start time, optionally limited to
// those overlapping a window [begin, end); forEach streams a whole table in storage order without
// holding it in memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "trainscope/rundb/rows.h"

namespace trainscope::rundb {

class Database;

inline constexpr int64_t kAllTime = std::numeric_limits<int64_t>::min();
inline constexpr int64_t kNoEnd = std::numeric_limits<int64_t>::max();

// The columns a timeline draws from, for any event table: what the viewer loads per event.
//   ranges, host_ops, api_calls: a = tid
//   kernels, memset, gpu_annotations: a = device, b = stream    memcpy: a = device, b = stream, kind = MemcpyKind
// correlation: api_calls, kernels, memcpy and memset (-1 where NULL); name: all but memcpy and memset.
// What a table does not have keeps its default.
struct SpanRow {
  int64_t rank = 0, start_ns = 0, end_ns = 0;
  StringId name = kNoString;
  int64_t a = 0, b = 0, correlation = -1;
  int32_t kind = 0;
};

class RunReader {
 public:
  // Throws UserError naming the file when it is missing, not SQLite, not ours, or damaged.
  explicit RunReader(const std::string& path);
  ~RunReader();
  RunReader(const RunReader&) = delete;
  RunReader& operator=(const RunReader&) = delete;

  const std::string& path() const { return path_; }
  int schemaVersion() const { return version_; }
  // Every query stops (throws) once *flag is true: a reader on a background thread, cancelled.
  void interruptWhen(const std::atomic<bool>* flag);

  const std::map<std::string, std::string>& meta() const { return meta_; }
  std::string meta(const std::string& key, const std::string& fallback = "") const;
  // meta.world_size (1 when absent); a UserError when present and not a positive integer.
  int64_t worldSize() const;

  const std::string& string(StringId id) const;  // "" for an unknown id
  std::optional<StringId> find(const std::string& text) const;

  std::vector<int64_t> stepRanks();                // ranks with steps, ascending
  std::vector<RankInfo> ranks();                   // the ranks table (merged ranks)
  std::vector<Step> steps(int64_t rank);           // by step
  std::vector<Step> steps();                       // every rank, by (rank, step)

  template <class Row>
  std::vector<Row> events(int64_t rank, int64_t begin = kAllTime, int64_t end = kNoEnd);
  template <class Row>
  void forEach(const std::function<void(const Row&)>& f);
  // One rank's rows of one table that start exactly at `start_ns` (an index lookup: the viewer's
  // details of a selected event, wherever it lies in the file).
  template <class Row>
  std::vector<Row> startingAt(int64_t rank, int64_t start_ns);
  // One rank's rows that start in [begin, end), by start (a range of the (rank, start) index: cheap
  // anywhere in a large file, unlike events(), whose end bound scans from the file's start).
  template <class Row>
  std::vector<Row> startingIn(int64_t rank, int64_t begin, int64_t end);
  // One rank's rows of one table, streamed by start time (the viewer's loader).
  template <class Row>
  void forEachOf(int64_t rank, const std::function<void(const Row&)>& f);
  // Rows [rowid_begin, rowid_end) of an event table in storage order, as SpanRows appended to `out`
  // (no sorting and no per-row allocation: the loader sorts per track). Tables: ranges, host_ops,
  // api_calls, kernels, memcpy, memset, gpu_annotations.
  void spans(const char* table, int64_t rowid_begin, int64_t rowid_end, std::vector<SpanRow>& out);
  // The dense part of the string table (ids 0..n-1); ids past it go through string(id).
  const std::vector<std::string>& denseStrings() const { return strings_; }
  // An upper bound on a table's rows, without counting them (its largest rowid); for progress bars.
  int64_t rowBound(const char* table);

  // The names and order of threads, streams and processes, by (rank, kind, device, tid); empty for
  // a file written before schema version 4 (no names recorded).
  std::vector<ThreadName> threads();
  // Whether the file has a table: one added by a later schema version reads as empty where it is not.
  bool hasTable(const std::string& table) const { return tables_.count(table) > 0; }

  std::vector<Collective> collectives(std::optional<int64_t> rank = std::nullopt);  // by (rank, start)
  std::vector<Drop> drops();
  std::vector<WeightDigest> weightDigest();
  // MoE router rows by (step, layer, rank, expert); empty for a dense run or a file older than
  // schema version 5.
  std::vector<ExpertLoad> expertLoad();
  std::vector<Checkpoint> checkpoints();  // by step; none in a file older than the table
  std::vector<Fp8Scale> fp8Scales();  // empty for a run that is not --precision fp8
  // Earliest start over steps and every event table (nullopt when the file holds none).
  std::optional<int64_t> firstTime();
  bool hasEvents(const char* table);

 private:
  std::string path_;
  std::unique_ptr<Database> db_;
  int version_ = 0;
  std::map<std::string, std::string> meta_;
  std::set<std::string> tables_;      // the tables the file has
  std::vector<std::string> strings_;  // by id (ids are dense from 0 in files we write)
  std::map<StringId, std::string> sparse_strings_;  // ids past the dense range (imports of other files)
  bool mapped_ = false;                              // spans() maps the file once
};

// Shorthands used by tests and small tools.
std::vector<Step> readSteps(const std::string& path, int64_t rank = 0);
std::map<std::string, std::string> readMeta(const std::string& path);

}  // namespace trainscope::rundb
