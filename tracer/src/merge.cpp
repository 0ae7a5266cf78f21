// merge.cpp — see merge.h.
#include "trainscope/tracer/merge.h"

#include <cstdio>
#include <limits>
#include <map>

#include "trainscope/tracer/schema.h"
#include "trainscope/tracer/sqlite.h"
#include "trainscope/tracer/trace.h"

namespace trainscope::tracer {

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

// NCCL kernels ↔ collectives: ProcessGroupNCCL issues one NCCL kernel per collective, in order, on
// its stream; so the i-th NCCL kernel of a rank (by start time) belongs to its i-th collective (by
// start time). kernels.collective_seq gets that collective's seq (per group, with its grp).
static void tieNcclKernels(Database& db, int rank) {
  const std::string r = std::to_string(rank);
  db.exec("WITH k AS (SELECT kernels.rowid AS rid, ROW_NUMBER() OVER (ORDER BY start_ns) AS n FROM kernels "
          "JOIN strings s ON s.id = kernels.name_id WHERE kernels.rank = " + r + " AND s.value LIKE 'nccl%'), "
          "c AS (SELECT seq, ROW_NUMBER() OVER (ORDER BY start_ns) AS n FROM collectives WHERE rank = " + r +
          " AND op <> 'barrier') "
          "UPDATE kernels SET collective_seq = (SELECT c.seq FROM k JOIN c ON c.n = k.n WHERE k.rid = kernels.rowid) "
          "WHERE rowid IN (SELECT rid FROM k)");
}

void mergeShards(const std::string& run_db, const std::vector<ShardInfo>& shards, bool remove_shards) {
  Database db(run_db, Database::Mode::ReadWrite);
  createSchema(db);
  // Strings already in the run database keep their ids; shard strings map onto them.
  std::map<std::string, int64_t> ids;
  {
    Statement s(db, "SELECT id, value FROM strings");
    while (s.step()) ids[s.columnText(1)] = s.columnInt(0);
  }
  int64_t next_id = ids.empty() ? 0 : 0;
  for (const auto& [v, id] : ids) next_id = std::max(next_id, id + 1);

  for (const ShardInfo& sh : shards) {
    const int64_t off = (sh.offset_start_ns + sh.offset_end_ns) / 2;
    {
      Statement attach(db, "ATTACH DATABASE ? AS shard");  // bound: any path is safe
      attach.bind(1, sh.path);
      attach.run();
    }
    try {
      Transaction tx(db);
      // string id remapping table for this shard
      db.exec("CREATE TEMP TABLE IF NOT EXISTS idmap (old INTEGER PRIMARY KEY, new INTEGER NOT NULL); DELETE FROM idmap;");
      {
        Statement read(db, "SELECT id, value FROM shard.strings");
        Statement add(db, "INSERT INTO strings(id, value) VALUES (?, ?)");
        Statement map(db, "INSERT INTO idmap(old, new) VALUES (?, ?)");
        while (read.step()) {
          const std::string v = read.columnText(1);
          auto it = ids.find(v);
          int64_t id;
          if (it != ids.end()) {
            id = it->second;
          } else {
            id = next_id++;
            ids[v] = id;
            add.bind(1, id);
            add.bind(2, v);
            add.run();
          }
          map.bind(1, read.columnInt(0));
          map.bind(2, id);
          map.run();
        }
      }
      const std::string o = std::to_string(off);
      auto nm = [](const char* col) {
        return std::string("(SELECT new FROM idmap WHERE old = ") + col + ")";
      };
      db.exec("INSERT INTO ranges SELECT rank, tid, start_ns + " + o + ", end_ns + " + o + ", " + nm("name_id") + ", " +
              nm("domain_id") + ", depth, kind FROM shard.ranges");
      db.exec("INSERT INTO host_ops SELECT rank, tid, start_ns + " + o + ", end_ns + " + o + ", " + nm("name_id") +
              ", seq, " + nm("shapes_id") + " FROM shard.host_ops");
      db.exec("INSERT INTO kernels SELECT rank, device, stream, start_ns + " + o + ", end_ns + " + o +
              ", correlation, " + nm("name_id") +
              ", grid_x, grid_y, grid_z, block_x, block_y, block_z, registers, shared_bytes, collective_seq "
              "FROM shard.kernels");
      db.exec("INSERT INTO memcpy SELECT rank, device, stream, start_ns + " + o + ", end_ns + " + o +
              ", correlation, kind, bytes FROM shard.memcpy");
      db.exec("INSERT INTO memset SELECT rank, device, stream, start_ns + " + o + ", end_ns + " + o +
              ", correlation, bytes, value FROM shard.memset");
      db.exec("INSERT INTO api_calls SELECT rank, tid, start_ns + " + o + ", end_ns + " + o + ", correlation, " +
              nm("name_id") + ", kind FROM shard.api_calls");
      db.exec("INSERT INTO counters SELECT rank, ts_ns + " + o + ", " + nm("name_id") + ", value FROM shard.counters");
      db.exec("INSERT INTO collectives SELECT rank, op, grp, group_size, seq, bytes, start_ns + " + o + ", end_ns + " +
              o + ", algbw, busbw FROM shard.collectives");
      db.exec("INSERT OR REPLACE INTO drops SELECT * FROM shard.drops");
      // The steps rows were written with each rank's own start times: onto rank 0's clock too.
      db.exec("UPDATE steps SET start_ns = start_ns + " + o + " WHERE rank = " + std::to_string(sh.rank));
      Statement rk(db, "INSERT OR REPLACE INTO ranks(rank, host, pid, device, clock_offset_ns, offset_start_ns, "
                       "offset_end_ns) VALUES (?,?,?,?,?,?,?)");
      rk.bind(1, sh.rank);
      rk.bind(2, sh.host);
      rk.bind(3, sh.pid);
      rk.bind(4, sh.device);
      rk.bind(5, off);
      rk.bind(6, sh.offset_start_ns);
      rk.bind(7, sh.offset_end_ns);
      rk.run();
      tx.commit();
    } catch (...) {
      db.exec("DETACH DATABASE shard");
      throw;
    }
    db.exec("DETACH DATABASE shard");
    tieNcclKernels(db, sh.rank);
    if (remove_shards)
      for (const char* suffix : {"", "-wal", "-shm"}) std::remove((sh.path + suffix).c_str());
  }
  createIndexes(db);
}

}  // namespace trainscope::tracer
