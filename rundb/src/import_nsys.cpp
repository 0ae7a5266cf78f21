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

void importNsys(RunStore& store, ImportStats& st, const std::string& path, int64_t rank) {
  Database in(path, Database::Mode::ReadOnly);
  if (!in.tableExists("StringIds"))
    throw UserError("import", path + " is SQLite but not an Nsight Systems export (no StringIds table)",
                    "export with `nsys export --type sqlite`");
  std::map<int64_t, std::string> strings;
  {
    Statement q(in, "SELECT id, value FROM StringIds");
    while (q.step()) strings[q.columnInt(0)] = q.columnText(1);
  }
  auto name = [&](int64_t id) { return store.intern(strings.count(id) ? strings[id] : "<unknown>"); };
  const StringId domain = store.intern("nsys");
  int64_t steps_seen = 0, t_min = INT64_MAX, t_max = INT64_MIN;
  std::set<int64_t> pids;  // of the threads whose events were imported (globalTid = pid << 24 | tid)
  auto pidOf = [](int64_t global_tid) { return (global_tid >> 24) & 0xFFFFFF; };
  if (in.tableExists("CUPTI_ACTIVITY_KIND_KERNEL")) {
    Statement q(in, "SELECT start, end, deviceId, streamId, correlationId, COALESCE(demangledName, shortName), gridX, "
                    "gridY, gridZ, blockX, blockY, blockZ, registersPerThread, "
                    "COALESCE(staticSharedMemory, 0) + COALESCE(dynamicSharedMemory, 0) FROM CUPTI_ACTIVITY_KIND_KERNEL");
    while (q.step()) {
      Kernel k{q.columnInt(0), q.columnInt(1), q.columnInt(2), q.columnInt(3), name(q.columnInt(5)), q.columnInt(4)};
      for (int i = 0; i < 3; ++i) k.grid[i] = int32_t(q.columnInt(6 + i)), k.block[i] = int32_t(q.columnInt(9 + i));
      k.registers = int32_t(q.columnInt(12));
      k.shared_bytes = int32_t(q.columnInt(13));
      k.rank = rank;
      store.put(k);
      t_min = std::min(t_min, k.start_ns);
      t_max = std::max(t_max, k.end_ns);
      ++st.kernels;
    }
  }
  if (in.tableExists("CUPTI_ACTIVITY_KIND_RUNTIME")) {
    Statement q(in, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME");
    while (q.step()) {
      store.put(ApiCall{q.columnInt(0), q.columnInt(1), q.columnInt(2) & 0xFFFFFF, name(q.columnInt(4)),
                        q.columnInt(3), int32_t(ApiKind::Runtime), rank});
      pids.insert(pidOf(q.columnInt(2)));
      ++st.api_calls;
    }
  }
  if (in.tableExists("CUPTI_ACTIVITY_KIND_MEMCPY")) {
    Statement q(in, "SELECT start, end, deviceId, streamId, correlationId, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY");
    while (q.step()) {
      store.put(Memcpy{q.columnInt(0), q.columnInt(1), q.columnInt(2), q.columnInt(3), q.columnInt(4),
                       int32_t(q.columnInt(5)), q.columnInt(6), rank});
      ++st.memcpy;
    }
  }
  if (in.tableExists("CUPTI_ACTIVITY_KIND_MEMSET")) {
    Statement q(in, "SELECT start, end, deviceId, streamId, correlationId, bytes, value FROM CUPTI_ACTIVITY_KIND_MEMSET");
    while (q.step()) {
      store.put(Memset{q.columnInt(0), q.columnInt(1), q.columnInt(2), q.columnInt(3), q.columnInt(4), q.columnInt(5),
                       int32_t(q.columnInt(6)), rank});
      ++st.memset;
    }
  }
  if (in.tableExists("NVTX_EVENTS")) {
    // eventType 59: push/pop range, 60: start/end range (Nsight Systems' NvtxEventType).
    Statement q(in, "SELECT start, end, globalTid, COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)), "
                    "eventType FROM NVTX_EVENTS WHERE end IS NOT NULL AND eventType IN (59, 60)");
    int64_t k = 0;
    StepRows step_rows(store, path);
    while (q.step()) {
      const std::string label = q.columnText(3);
      int64_t n = stepNumber(label, path);
      if (label == "step") n = k++;
      if (n >= 0 && step_rows.add(rank, n, q.columnInt(0), q.columnInt(1))) ++steps_seen;
      store.put(Range{q.columnInt(0), q.columnInt(1), store.intern(label), domain, q.columnInt(2) & 0xFFFFFF, 0,
                      int32_t(q.columnInt(4) == 59 ? RangeKind::PushPop : RangeKind::StartEnd), rank});
      pids.insert(pidOf(q.columnInt(2)));
      ++st.ranges;
    }
  }
  if (steps_seen == 0 && t_min < t_max) {
    store.appendStep(importedStep(rank, 0, t_min, t_max, path));
    steps_seen = 1;
  }
  st.steps += steps_seen;
  // Thread names (the tid as the events above take it), and the names of the processes they ran in.
  std::map<std::pair<int32_t, int64_t>, ThreadName> named;  // (kind, tid)
  if (in.tableExists("ThreadNames")) {
    Statement q(in, "SELECT globalTid, nameId FROM ThreadNames ORDER BY rowid");
    while (q.step()) {
      const auto it = strings.find(q.columnInt(1));
      if (it == strings.end() || it->second.empty()) continue;
      ThreadName t;
      t.kind = int32_t(ThreadKind::Thread);
      t.tid = q.columnInt(0) & 0xFFFFFF;
      t.name = store.intern(it->second);
      t.rank = rank;
      named[{t.kind, t.tid}] = t;  // renamed: the last name
    }
  }
  if (in.tableExists("PROCESSES")) {
    Statement q(in, "SELECT pid, name FROM PROCESSES ORDER BY rowid");
    while (q.step()) {
      if (!pids.count(q.columnInt(0)) || q.columnIsNull(1) || q.columnText(1).empty()) continue;
      ThreadName t;
      t.kind = int32_t(ThreadKind::Process);
      t.tid = q.columnInt(0);
      t.name = store.intern(q.columnText(1));
      t.rank = rank;
      named[{t.kind, t.tid}] = t;
    }
  }
  std::vector<ThreadName> rows;
  for (auto& [key, t] : named) rows.push_back(t);
  if (!rows.empty()) store.put(rows);
  st.threads += int64_t(rows.size());
  store.putRank(RankInfo{rank, "", "nsys", 0, 0, std::nullopt, std::nullopt});
}

}  // namespace trainscope::rundb::importers
