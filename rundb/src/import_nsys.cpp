// import_nsys.cpp — Nsight Systems SQLite exports (`nsys export --type sqlite`) into the run database:
// CUPTI_ACTIVITY_KIND_KERNEL/RUNTIME/MEMCPY/MEMSET, NVTX_EVENTS (push/pop and start/end ranges),
// StringIds; NVTX ranges named "step" or "ProfilerStep#N" become steps; ThreadNames and PROCESSES
// (the processes whose threads recorded events) → threads. The SQL here reads Nsight's
// tables, not ours: the run database is written through RunStore only.
#include <algorithm>
#include <climits>
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

  StringId name(int64_t id) { return store.intern(strings.count(id) ? strings[id] : "<unknown>"); }
  static int64_t pidOf(int64_t global_tid) { return (global_tid >> 24) & 0xFFFFFF; }
};

void readStrings(NsysImport& im) {
  Statement q(im.in, "SELECT id, value FROM StringIds");
  while (q.step()) im.strings[q.columnInt(0)] = q.columnText(1);
}

void importKernels(NsysImport& im) {
  if (!im.in.tableExists("CUPTI_ACTIVITY_KIND_KERNEL")) return;
  Statement q(im.in, "SELECT start, end, deviceId, streamId, correlationId, COALESCE(demangledName, shortName), gridX, "
                     "gridY, gridZ, blockX, blockY, blockZ, registersPerThread, "
                     "COALESCE(staticSharedMemory, 0) + COALESCE(dynamicSharedMemory, 0) FROM CUPTI_ACTIVITY_KIND_KERNEL");
  while (q.step()) {
    Kernel k{q.columnInt(0), q.columnInt(1), q.columnInt(2), q.columnInt(3), im.name(q.columnInt(5)), q.columnInt(4)};
    for (int i = 0; i < 3; ++i) k.grid[i] = int32_t(q.columnInt(6 + i)), k.block[i] = int32_t(q.columnInt(9 + i));
    k.registers = int32_t(q.columnInt(12));
    k.shared_bytes = int32_t(q.columnInt(13));
    k.rank = im.rank;
    im.store.put(k);
    im.t_min = std::min(im.t_min, k.start_ns);
    im.t_max = std::max(im.t_max, k.end_ns);
    ++im.st.kernels;
  }
}

void importRuntimeCalls(NsysImport& im) {
  if (!im.in.tableExists("CUPTI_ACTIVITY_KIND_RUNTIME")) return;
  Statement q(im.in, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME");
  while (q.step()) {
    im.store.put(ApiCall{q.columnInt(0), q.columnInt(1), q.columnInt(2) & 0xFFFFFF, im.name(q.columnInt(4)),
                         q.columnInt(3), int32_t(ApiKind::Runtime), im.rank});
    im.pids.insert(NsysImport::pidOf(q.columnInt(2)));
    ++im.st.api_calls;
  }
}

void importMemcpyAndMemset(NsysImport& im) {
  if (im.in.tableExists("CUPTI_ACTIVITY_KIND_MEMCPY")) {
    Statement q(im.in,
                "SELECT start, end, deviceId, streamId, correlationId, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY");
    while (q.step()) {
      im.store.put(Memcpy{q.columnInt(0), q.columnInt(1), q.columnInt(2), q.columnInt(3), q.columnInt(4),
                          int32_t(q.columnInt(5)), q.columnInt(6), im.rank});
      ++im.st.memcpy;
    }
  }
  if (im.in.tableExists("CUPTI_ACTIVITY_KIND_MEMSET")) {
    Statement q(im.in,
                "SELECT start, end, deviceId, streamId, correlationId, bytes, value FROM CUPTI_ACTIVITY_KIND_MEMSET");
    while (q.step()) {
      im.store.put(Memset{q.columnInt(0), q.columnInt(1), q.columnInt(2), q.columnInt(3), q.columnInt(4),
                          q.columnInt(5), int32_t(q.columnInt(6)), im.rank});
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
  while (q.step()) {
    const std::string label = q.columnText(3);
    int64_t n = stepNumber(label, im.path);
    if (label == "step") n = k++;
    if (n >= 0 && step_rows.add(im.rank, n, q.columnInt(0), q.columnInt(1))) ++steps_seen;
    im.store.put(Range{q.columnInt(0), q.columnInt(1), im.store.intern(label), im.domain, q.columnInt(2) & 0xFFFFFF, 0,
                       int32_t(q.columnInt(4) == 59 ? RangeKind::PushPop : RangeKind::StartEnd), im.rank});
    im.pids.insert(NsysImport::pidOf(q.columnInt(2)));
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
      const auto it = im.strings.find(q.columnInt(1));
      if (it == im.strings.end() || it->second.empty()) continue;
      ThreadName t;
      t.kind = int32_t(ThreadKind::Thread);
      t.tid = q.columnInt(0) & 0xFFFFFF;
      t.name = im.store.intern(it->second);
      t.rank = im.rank;
      named[{t.kind, t.tid}] = t;  // renamed: the last name
    }
  }
  if (im.in.tableExists("PROCESSES")) {
    Statement q(im.in, "SELECT pid, name FROM PROCESSES ORDER BY rowid");
    while (q.step()) {
      if (!im.pids.count(q.columnInt(0)) || q.columnIsNull(1) || q.columnText(1).empty()) continue;
      ThreadName t;
      t.kind = int32_t(ThreadKind::Process);
      t.tid = q.columnInt(0);
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

}  // namespace

// The recipe: strings → kernels → runtime calls → copies and sets → NVTX ranges and steps (or the
// kernels' span as one step) → thread and process names → the rank.
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
  store.putRank(RankInfo{rank, "", "nsys", 0, 0, std::nullopt, std::nullopt});
}

}  // namespace trainscope::rundb::importers
