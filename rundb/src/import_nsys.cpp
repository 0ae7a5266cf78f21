// import_nsys.cpp — Nsight Systems SQLite exports (`nsys export --type sqlite`) into the run database:
// CUPTI_ACTIVITY_KIND_KERNEL/RUNTIME/MEMCPY/MEMSET, NVTX_EVENTS (push/pop and start/end ranges),
// StringIds; NVTX ranges named "step" or "ProfilerStep#N" become steps; ThreadNames and PROCESSES
// (the processes whose threads recorded events) → threads; TARGET_INFO_GPU's names (the devices the
// kernels and copies ran on, through TARGET_INFO_CUDA_DEVICE) → the GPU model of the import header. The SQL here reads Nsight's
// tables, not ours: the run database is written through RunStore only.
#include <algorithm>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>
#include <map>
#include <set>

#include "import_impl.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"

namespace trainscope::rundb::importers {
namespace {

// One export being read: where rows go, and what the tables read so far leave for the later ones
// (the kernels' time span for a trace without steps, the pids whose processes get named).
struct NsysImport {
  RunStore& store;
  ImportStats& st;
  Database& in;
  const std::string& path;
  int64_t rank;
  std::map<int64_t, std::string> strings;  // StringIds
  StringId domain = kNoString;
  int64_t t_min = INT64_MAX, t_max = INT64_MIN;
  std::set<int64_t> pids;  // of the threads whose events were imported (globalTid = pid << 24 | tid)
  std::set<int64_t> devices;  // the CUDA device ids kernels, copies and sets ran on

  StringId name(int64_t id) { return store.intern(strings.count(id) ? strings[id] : "<unknown>"); }
  static int64_t pidOf(int64_t global_tid) { return (global_tid >> 24) & 0xFFFFFF; }

  // Column i of the row `q` holds as an integer. NULL reads as `absent`; a fraction, text or a blob
  // (a damaged or foreign export) is left out — `absent` too — and counted by table, column and
  // kind, never coerced (SQLite would read 1.5 as 1 and "7" as 7).
  int64_t integer(const Statement& q, int i, const char* table, int64_t absent = 0) {
    if (const std::optional<int64_t> v = exact(q, i)) return *v;
    if (!q.columnIsNull(i)) ++st.refused_values[std::string(table) + "." + q.columnName(i) + ": " + kindOf(q, i)];
    return absent;
  }
  // An int32 field (launch dimensions, registers, shared memory, a copy's kind, a set's value).
  int32_t integer32(const Statement& q, int i, const char* table) {
    const int64_t v = integer(q, i, table);
    if (v >= INT32_MIN && v <= INT32_MAX) return int32_t(v);
    ++st.refused_values[std::string(table) + "." + q.columnName(i) + ": out of int32 range"];
    return 0;
  }
  // An event's start or end: without it there is no event, and dropping it would change every
  // figure without a word — refused, naming the table, column and row.
  int64_t time(const Statement& q, int i, const char* table) const {
    if (const std::optional<int64_t> v = exact(q, i)) return *v;
    throw UserError("import", path + ": " + table + "." + q.columnName(i) + " is " + kindOf(q, i) + ", not an integer",
                    "re-export the report with `nsys export --type sqlite`");
  }

 private:
  static std::optional<int64_t> exact(const Statement& q, int i) {
    switch (q.columnType(i)) {
      case Statement::Type::Integer: return q.columnInt(i);
      case Statement::Type::Real: {
        const double d = q.columnDouble(i);  // 2.0 is an integer; 1.5 and 1e30 are not
        if (std::isfinite(d) && std::floor(d) == d && d >= -9.2e18 && d <= 9.2e18) return int64_t(d);
        return std::nullopt;
      }
      default: return std::nullopt;
    }
  }
  static std::string kindOf(const Statement& q, int i) {
    switch (q.columnType(i)) {
      case Statement::Type::Real: return std::isfinite(q.columnDouble(i)) && std::fabs(q.columnDouble(i)) < 9.2e18
                                             ? "a fractional number" : "a number past int64";
      case Statement::Type::Text: return "a string";
      case Statement::Type::Blob: return "a blob";
      case Statement::Type::Null: return "null";
      default: return "a number";
    }
  }
};

void readStrings(NsysImport& im) {
  Statement q(im.in, "SELECT id, value FROM StringIds");
  while (q.step()) {
    if (q.columnType(0) == Statement::Type::Integer) im.strings[q.columnInt(0)] = q.columnText(1);
    else ++im.st.refused_values["StringIds.id: " + std::string(q.columnIsNull(0) ? "null" : "not an integer")];
  }
}

void importKernels(NsysImport& im) {
  if (!im.in.tableExists("CUPTI_ACTIVITY_KIND_KERNEL")) return;
  Statement q(im.in, "SELECT start, end, deviceId, streamId, correlationId, COALESCE(demangledName, shortName), gridX, "
                     "gridY, gridZ, blockX, blockY, blockZ, registersPerThread, "
                     "COALESCE(staticSharedMemory, 0) + COALESCE(dynamicSharedMemory, 0) AS sharedMemory "
                     "FROM CUPTI_ACTIVITY_KIND_KERNEL");
  const char* t = "CUPTI_ACTIVITY_KIND_KERNEL";
  while (q.step()) {
    Kernel k{im.time(q, 0, t), im.time(q, 1, t), im.integer(q, 2, t), im.integer(q, 3, t),
             im.name(im.integer(q, 5, t, -1)), im.integer(q, 4, t, -1)};
    for (int i = 0; i < 3; ++i) k.grid[i] = im.integer32(q, 6 + i, t), k.block[i] = im.integer32(q, 9 + i, t);
    k.registers = im.integer32(q, 12, t);
    k.shared_bytes = im.integer32(q, 13, t);
    k.rank = im.rank;
    im.store.put(k);
    im.devices.insert(k.device);
    im.t_min = std::min(im.t_min, k.start_ns);
    im.t_max = std::max(im.t_max, k.end_ns);
    ++im.st.kernels;
  }
}

void importRuntimeCalls(NsysImport& im) {
  if (!im.in.tableExists("CUPTI_ACTIVITY_KIND_RUNTIME")) return;
  Statement q(im.in, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME");
  const char* t = "CUPTI_ACTIVITY_KIND_RUNTIME";
  while (q.step()) {
    const int64_t global_tid = im.integer(q, 2, t);
    im.store.put(ApiCall{im.time(q, 0, t), im.time(q, 1, t), global_tid & 0xFFFFFF, im.name(im.integer(q, 4, t, -1)),
                         im.integer(q, 3, t, -1), int32_t(ApiKind::Runtime), im.rank});
    im.pids.insert(NsysImport::pidOf(global_tid));
    ++im.st.api_calls;
  }
}

void importMemcpyAndMemset(NsysImport& im) {
  if (im.in.tableExists("CUPTI_ACTIVITY_KIND_MEMCPY")) {
    Statement q(im.in,
                "SELECT start, end, deviceId, streamId, correlationId, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY");
    const char* t = "CUPTI_ACTIVITY_KIND_MEMCPY";
    while (q.step()) {
      const Memcpy m{im.time(q, 0, t), im.time(q, 1, t), im.integer(q, 2, t), im.integer(q, 3, t),
                     im.integer(q, 4, t, -1), im.integer32(q, 5, t), im.integer(q, 6, t), im.rank};
      im.store.put(m);
      im.devices.insert(m.device);
      ++im.st.memcpy;
    }
  }
  if (im.in.tableExists("CUPTI_ACTIVITY_KIND_MEMSET")) {
    Statement q(im.in,
                "SELECT start, end, deviceId, streamId, correlationId, bytes, value FROM CUPTI_ACTIVITY_KIND_MEMSET");
    const char* t = "CUPTI_ACTIVITY_KIND_MEMSET";
    while (q.step()) {
      const Memset m{im.time(q, 0, t), im.time(q, 1, t), im.integer(q, 2, t), im.integer(q, 3, t),
                     im.integer(q, 4, t, -1), im.integer(q, 5, t), im.integer32(q, 6, t), im.rank};
      im.store.put(m);
      im.devices.insert(m.device);
      ++im.st.memset;
    }
  }
}

// NVTX ranges, and the steps among them ("step" counts up from 0; "ProfilerStep#N" is step N).
// Returns the number of steps stored.
int64_t importNvtxRanges(NsysImport& im) {
  if (!im.in.tableExists("NVTX_EVENTS")) return 0;
  // eventType 59: push/pop range, 60: start/end range (Nsight Systems' NvtxEventType).
  Statement q(im.in, "SELECT start, end, globalTid, COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)), "
                     "eventType FROM NVTX_EVENTS WHERE end IS NOT NULL AND eventType IN (59, 60)");
  int64_t k = 0, steps_seen = 0;
  StepRows step_rows(im.store, im.path);
  const char* t = "NVTX_EVENTS";
  while (q.step()) {
    const std::string label = q.columnText(3);
    int64_t n = stepNumber(label, im.path);
    if (label == "step") n = k++;
    const int64_t b = im.time(q, 0, t), e = im.time(q, 1, t), global_tid = im.integer(q, 2, t);
    if (n >= 0 && step_rows.add(im.rank, n, b, e)) ++steps_seen;
    im.store.put(Range{b, e, im.store.intern(label), im.domain, global_tid & 0xFFFFFF, 0,
                       int32_t(q.columnInt(4) == 59 ? RangeKind::PushPop : RangeKind::StartEnd), im.rank});
    im.pids.insert(NsysImport::pidOf(global_tid));
    ++im.st.ranges;
  }
  return steps_seen;
}

// Thread names (the tid as the events above take it), and the names of the processes they ran in.
void importThreadNames(NsysImport& im) {
  std::map<std::pair<int32_t, int64_t>, ThreadName> named;  // (kind, tid)
  if (im.in.tableExists("ThreadNames")) {
    Statement q(im.in, "SELECT globalTid, nameId FROM ThreadNames ORDER BY rowid");
    while (q.step()) {
      const auto it = im.strings.find(im.integer(q, 1, "ThreadNames", -1));
      if (it == im.strings.end() || it->second.empty()) continue;
      ThreadName t;
      t.kind = int32_t(ThreadKind::Thread);
      t.tid = im.integer(q, 0, "ThreadNames") & 0xFFFFFF;
      t.name = im.store.intern(it->second);
      t.rank = im.rank;
      named[{t.kind, t.tid}] = t;  // renamed: the last name
    }
  }
  if (im.in.tableExists("PROCESSES")) {
    Statement q(im.in, "SELECT pid, name FROM PROCESSES ORDER BY rowid");
    while (q.step()) {
      const int64_t pid = im.integer(q, 0, "PROCESSES", -1);
      if (!im.pids.count(pid) || q.columnIsNull(1) || q.columnText(1).empty()) continue;
      ThreadName t;
      t.kind = int32_t(ThreadKind::Process);
      t.tid = pid;
      t.name = im.store.intern(q.columnText(1));
      t.rank = im.rank;
      named[{t.kind, t.tid}] = t;
    }
  }
  std::vector<ThreadName> rows;
  for (auto& [key, t] : named) rows.push_back(t);
  if (!rows.empty()) im.store.put(rows);
  im.st.threads += int64_t(rows.size());
}

// The GPU model: TARGET_INFO_GPU names each GPU (id → name); TARGET_INFO_CUDA_DEVICE maps a process's
// CUDA device ids (what kernels' deviceId holds) to those GPUs. The GPUs the trace's kernels, copies
// and sets ran on (in the processes whose threads recorded events, when the table says which), in CUDA
// device order; every GPU of the export when nothing ties them to its work (an older export without
// the mapping, or no device activity).
// Whether `table` exists with every one of `columns` (tables of other Nsight versions differ: an
// optional table without its columns is skipped, not a reason to refuse the export).
bool hasColumns(Database& in, const char* table, std::initializer_list<const char*> columns) {
  if (!in.tableExists(table)) return false;
  std::set<std::string> have;
  Statement q(in, "SELECT name FROM pragma_table_info(?1)");
  q.bind(1, std::string(table));
  while (q.step()) have.insert(q.columnText(0));
  for (const char* c : columns)
    if (!have.count(c)) return false;
  return true;
}

void importGpuModel(NsysImport& im) {
  if (!hasColumns(im.in, "TARGET_INFO_GPU", {"id", "name"})) return;
  std::map<int64_t, std::string> gpu_names;  // TARGET_INFO_GPU.id → name
  {
    Statement q(im.in, "SELECT id, name FROM TARGET_INFO_GPU ORDER BY id");
    while (q.step())
      if (!q.columnIsNull(1)) gpu_names[im.integer(q, 0, "TARGET_INFO_GPU", -1)] = q.columnText(1);
  }
  std::vector<std::string> used;
  if (hasColumns(im.in, "TARGET_INFO_CUDA_DEVICE", {"cudaId", "gpuId", "pid"}) && !im.devices.empty()) {
    struct Mapping {
      int64_t cuda_id, gpu_id, pid;
    };
    std::vector<Mapping> rows;
    Statement q(im.in, "SELECT cudaId, gpuId, pid FROM TARGET_INFO_CUDA_DEVICE ORDER BY cudaId, rowid");
    const char* t = "TARGET_INFO_CUDA_DEVICE";
    while (q.step()) rows.push_back({im.integer(q, 0, t, -1), im.integer(q, 1, t, -1), im.integer(q, 2, t, -1)});
    // The processes' own mapping when it names them (CUDA_VISIBLE_DEVICES differs by process); any otherwise.
    for (const bool by_pid : {true, false}) {
      std::set<int64_t> gpus_taken;
      for (const Mapping& m : rows)
        if (im.devices.count(m.cuda_id) && gpu_names.count(m.gpu_id) && (!by_pid || im.pids.count(m.pid)) &&
            gpus_taken.insert(m.gpu_id).second)
          used.push_back(gpu_names[m.gpu_id]);
      if (!used.empty()) break;
    }
  }
  if (used.empty())
    for (const auto& [id, name] : gpu_names) used.push_back(name);
  if (const std::string g = gpuModels(used); !g.empty()) im.st.gpus[im.rank] = g;
}

}  // namespace

// The recipe: strings → kernels → runtime calls → copies and sets → NVTX ranges and steps (or the
// kernels' span as one step) → thread and process names → the GPU model → the rank.
void importNsys(RunStore& store, ImportStats& st, const std::string& path, int64_t rank) {
  Database in(path, Database::Mode::ReadOnly);
  if (!in.tableExists("StringIds"))
    throw UserError("import", path + " is SQLite but not an Nsight Systems export (no StringIds table)",
                    "export with `nsys export --type sqlite`");
  NsysImport im{store, st, in, path, rank};
  readStrings(im);
  im.domain = store.intern("nsys");
  importKernels(im);
  importRuntimeCalls(im);
  importMemcpyAndMemset(im);
  int64_t steps_seen = importNvtxRanges(im);
  if (steps_seen == 0 && im.t_min < im.t_max) {
    store.appendStep(importedStep(rank, 0, im.t_min, im.t_max, path));
    steps_seen = 1;
  }
  st.steps += steps_seen;
  importThreadNames(im);
  importGpuModel(im);
  store.putRank(RankInfo{rank, "", "nsys", 0, 0, std::nullopt, std::nullopt});
}

}  // namespace trainscope::rundb::importers
