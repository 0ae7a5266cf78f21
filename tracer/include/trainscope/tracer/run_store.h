// trainscope/tracer/run_store.h — the run database: one SQLite file per run.
//
// Holds the run's `meta` (schema version, config, host, device) and one `steps` row per optimizer
// step. The tracer's event tables (issue: tracer) join the same file; docs/trace-schema.md is the
// contract. Each step is committed as it is appended, so a run that dies keeps what it recorded.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "trainscope/tracer/schema.h"

namespace trainscope::tracer {


struct StepRecord {
  int rank = 0;
  int64_t step = 0;             // 0-based optimizer step
  double loss = 0;              // mean over the global batch (unscaled)
  double lr = 0;
  double grad_norm = 0;         // global L2 norm before clipping (unscaled)
  double loss_scale = 1;        // fp16 dynamic loss scale used for this step (1 otherwise)
  bool skipped = false;         // fp16 overflow: update skipped
  int64_t tokens = 0;           // tokens in the global batch
  int64_t start_ns = 0;         // wall clock (CLOCK_REALTIME ns) at step start
  int64_t step_time_ns = 0;
  double tokens_per_s = 0;
  double model_flops = 0;       // Narayanan et al. 2021, no recomputation
  double hw_flops = 0;          // including recomputation
  std::optional<double> mfu;    // model FLOP/s / peak (null when the peak is unknown)
  std::optional<double> hfu;
  int64_t peak_bytes = 0;       // peak allocated bytes during the step
  int64_t param_bytes = 0;
  int64_t grad_bytes = 0;
  int64_t optim_bytes = 0;
  int64_t activation_bytes = 0; // peak during forward/backward above the step's baseline
};

// One collective as one rank saw it (nccl-tests bandwidth definitions; see runtime/comm.h).
struct CollectiveRow {
  int rank = 0;
  std::string op, group;
  int group_size = 1;
  int64_t seq = 0, bytes = 0, start_ns = 0, end_ns = 0;
  double algbw = 0, busbw = 0;  // bytes/s
};

class Database;
class Statement;

class RunStore {
 public:
  // Creates `path`. Throws UserError if it exists and !overwrite, SqliteError on I/O errors.
  RunStore(const std::string& path, bool overwrite);
  ~RunStore();
  RunStore(const RunStore&) = delete;
  RunStore& operator=(const RunStore&) = delete;

  void setMeta(const std::string& key, const std::string& value);
  void appendStep(const StepRecord& r);
  void appendCollectives(const std::vector<CollectiveRow>& rows);  // one transaction
  // Final weights digest by parameter name: sum, sum of squares, sum of |x| (one transaction).
  void writeWeightDigest(const std::map<std::string, std::array<double, 3>>& digest);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<Database> db_;
  std::unique_ptr<Statement> insert_step_;
  std::unique_ptr<Statement> insert_meta_;
};

// Reading side (tests, report): all rows of `steps` for one rank, ordered by step.
std::map<int64_t, StepRecord> readSteps(const std::string& path, int rank = 0);
std::map<std::string, std::string> readMeta(const std::string& path);
std::vector<CollectiveRow> readCollectives(const std::string& path);
std::map<std::string, std::array<double, 3>> readWeightDigest(const std::string& path);

}  // namespace trainscope::tracer
