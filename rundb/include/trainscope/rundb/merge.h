// trainscope/rundb/merge.h — folding per-rank trace shards into the run database.
//
// Each rank writes its own shard (<run.db>.rank<N>). At the end of the run rank 0 merges them into
// the run database: strings are re-interned into the run's table, and every time column of rank N
// (the schema marks them) is shifted by that rank's clock offset (ranks.clock_offset_ns) onto rank
// 0's clock. Offsets are measured through the rendezvous store at start and at end
// (measureClockOffset, NTP-style: the sample with the smallest round trip wins), and the mean of the
// two is applied; docs/trace-schema.md has the method and its error bound (half the round trip).
// meta.merged_ranks lists the ranks whose shards were merged, so that a reader can tell a run with a
// missing rank from a complete one.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trainscope::rundb {

class RunStore;

struct ShardInfo {
  std::string path;
  int64_t rank = 0;
  std::string host, device;
  int64_t pid = 0;
  int64_t offset_start_ns = 0, offset_end_ns = 0;  // add to the shard's times → rank 0's clock
};

// Appends the shards' events into the run database `store` writes, and writes `ranks` and
// meta.merged_ranks. The shard files are removed after a successful merge.
void mergeShards(RunStore& store, const std::vector<ShardInfo>& shards, bool remove_shards = true);

// One NTP-style exchange round. `ask` sends t1 to the reference and returns the reference's clock
// when it answered; the offset estimate is ref - (t1 + t3) / 2, kept from the fastest round trip.
struct ClockSample {
  int64_t offset_ns = 0, rtt_ns = 0;
};
ClockSample measureClockOffset(const std::function<int64_t()>& ask_reference_time, int rounds = 8);

// The shard path of `rank` for the run database `run_db`, and back (-1: not a shard path).
std::string shardPath(const std::string& run_db, int64_t rank);
int64_t shardRank(const std::string& shard_path);
// The shard files beside `run_db` (`run_db.rank<N>`), sorted by rank: what a failed or killed run
// left behind.
std::vector<std::string> leftoverShards(const std::string& run_db);
// The ranks of `run_db`'s leftover shards that recorded nothing (a shard without an event: the rank
// failed or was killed first), named in one line ("" when every shard holds events, or none is
// beside it). Rank 0 writes every rank's steps, so with it the run database holds none.
std::string silentRanksNote(const std::string& run_db);
// What a traced run's database (trace_level, source: its meta) says of the events it does not hold
// when its ranks' shards were never merged (the run was killed, or is still running): which shard
// files beside it hold them, "(VERB each on its own)". Empty for an untraced, steps-level or imported
// run. The caller decides that the database holds no events (report: no event table; the viewer: no
// track).
std::string unmergedEventsNote(const std::string& run_db, const std::string& trace_level, const std::string& source,
                               const std::string& verb);

}  // namespace trainscope::rundb
