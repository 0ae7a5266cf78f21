// merge.cpp — see merge.h. The INSERT … SELECT of every event table is generated from the schema:
// time columns get the rank's offset, string-id columns go through the shard's id map.
#include "trainscope/rundb/merge.h"

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <limits>

#include "row_io.h"
#include "trainscope/common/clock.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"

namespace trainscope::rundb {

std::string shardPath(const std::string& run_db, int64_t rank) { return run_db + ".rank" + std::to_string(rank); }

int64_t shardRank(const std::string& p) {
  const auto at = p.rfind(".rank");
  if (at == std::string::npos || at + 5 >= p.size()) return -1;
  int64_t r = 0;
  for (size_t i = at + 5; i < p.size(); ++i) {
    if (p[i] < '0' || p[i] > '9' || r > (int64_t(1) << 40)) return -1;
    r = r * 10 + (p[i] - '0');
  }
  return r;
}

std::vector<std::string> leftoverShards(const std::string& run_db) {
  namespace fs = std::filesystem;
  std::vector<std::pair<int64_t, std::string>> found;
  const fs::path db(run_db);
  const fs::path dir = db.parent_path().empty() ? fs::path(".") : db.parent_path();
  const std::string prefix = db.filename().string() + ".rank";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string full = (db.parent_path().empty() ? name : (db.parent_path() / name).string());
    const int64_t r = shardRank(full);
    if (r >= 0 && it->is_regular_file(ec)) found.emplace_back(r, full);
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [r, p] : found) out.push_back(p);
  return out;
}

std::string unmergedEventsNote(const std::string& run_db, const std::string& trace_level, const std::string& source,
                               const std::string& verb) {
  if (trace_level.empty() || trace_level == "steps" || trace_level == "off" || source == "import") return "";
  const auto base = [](const std::string& path) { return std::filesystem::path(path).filename().string(); };
  std::string names;
  for (const std::string& shard : leftoverShards(run_db)) names += (names.empty() ? "" : ", ") + base(shard);
  const std::string head = "traced at level " + trace_level +
                           ", but its events are not merged into it (the run is still running, or stopped before its end); ";
  if (names.empty()) return head + "no shard of its ranks (" + base(shardPath(run_db, 0)) + ", ...) is beside it";
  return head + "the events recorded are in " + names + " (" + verb + " each on its own)";
}

ClockSample measureClockOffset(const std::function<int64_t()>& ask, int rounds) {
  ClockSample best;
  best.rtt_ns = std::numeric_limits<int64_t>::max();
  for (int i = 0; i < rounds; ++i) {
    const int64_t t1 = nowNs();
    const int64_t ref = ask();
    const int64_t t3 = nowNs();
    if (t3 - t1 < best.rtt_ns) best = {ref - (t1 + t3) / 2, t3 - t1};
  }
  return best;
}

namespace {

// NCCL kernels ↔ collectives: ProcessGroupNCCL issues one NCCL kernel per collective, in order, on
// its stream; so the i-th NCCL kernel of a rank (by start time) belongs to its i-th collective (by
// start time). kernels.collective_seq gets that collective's seq (per group, with its grp).
void tieNcclKernels(Database& db, int64_t rank) {
  const std::string r = std::to_string(rank);
  db.exec("WITH k AS (SELECT kernels.rowid AS rid, ROW_NUMBER() OVER (ORDER BY start_ns) AS n FROM kernels "
          "JOIN strings s ON s.id = kernels.name_id WHERE kernels.rank = " + r + " AND s.value LIKE 'nccl%'), "
          "c AS (SELECT seq, ROW_NUMBER() OVER (ORDER BY start_ns) AS n FROM collectives WHERE rank = " + r +
          " AND op <> 'barrier') "
          "UPDATE kernels SET collective_seq = (SELECT c.seq FROM k JOIN c ON c.n = k.n WHERE k.rid = kernels.rowid) "
          "WHERE rowid IN (SELECT rid FROM k)");
}

// "INSERT INTO t (cols) SELECT <shifted, remapped cols> FROM shard.t"
std::string copySql(const Table& t, int64_t offset) {
  std::string select;
  for (const Column& c : t.columns) {
    std::string e = c.name;
    if (c.role == ColumnRole::Time) e += " + " + std::to_string(offset);
    if (c.role == ColumnRole::StringId) e = std::string("(SELECT new FROM idmap WHERE old = ") + c.name + ")";
    select += (select.empty() ? "" : ", ") + e;
  }
  return std::string(t.name == std::string("drops") ? "INSERT OR REPLACE" : "INSERT") + " INTO main." + t.name + " (" +
         columnList(t) + ") SELECT " + select + " FROM shard." + t.name;
}

}  // namespace

void mergeShards(RunStore& store, const std::vector<ShardInfo>& shards, bool remove_shards) {
  Database& db = store.database();
  std::string merged;
  for (const ShardInfo& sh : shards) {
    const int64_t off = (sh.offset_start_ns + sh.offset_end_ns) / 2;
    std::vector<std::pair<int64_t, std::string>> shard_strings;
    {
      Database shard(sh.path, Database::Mode::ReadOnly);
      shard_strings = io::loadStrings(shard);
    }
    Statement attach(db, "ATTACH DATABASE ? AS shard");  // bound: any path is safe
    attach.exec(sh.path);
    try {
      store.begin();
      db.exec("CREATE TEMP TABLE IF NOT EXISTS idmap (old INTEGER PRIMARY KEY, new INTEGER NOT NULL); DELETE FROM idmap;");
      {
        Statement map(db, "INSERT INTO idmap(old, new) VALUES (?, ?)");
        for (const auto& [old_id, text] : shard_strings) map.exec(old_id, store.intern(text));
      }
      for (const Table& t : tables())
        if (t.events || t.name == std::string("drops")) db.exec(copySql(t, t.events ? off : 0));
      // The steps rows were written with each rank's own start times: onto rank 0's clock too.
      for (const Column& c : table("steps").columns)
        if (c.role == ColumnRole::Time)
          db.exec(std::string("UPDATE steps SET ") + c.name + " = " + c.name + " + " + std::to_string(off) +
                  " WHERE rank = " + std::to_string(sh.rank));
      store.putRank(RankInfo{sh.rank, sh.host, sh.device, sh.pid, off, sh.offset_start_ns, sh.offset_end_ns});
      store.commit();
    } catch (...) {
      store.rollback();
      db.exec("DETACH DATABASE shard");
      throw;
    }
    db.exec("DETACH DATABASE shard");
    tieNcclKernels(db, sh.rank);
    merged += (merged.empty() ? "" : ",") + std::to_string(sh.rank);
    store.setMeta("merged_ranks", merged);
    if (remove_shards) {
      try {
        removeRunDatabase(sh.path, "--trace");
      } catch (const std::exception& e) {
        std::cerr << "warning: could not remove the merged shard " << sh.path << ": " << e.what() << "\n";
      }
    }
  }
  store.createIndexes();
}

}  // namespace trainscope::rundb
