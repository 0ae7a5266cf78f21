// rank_records.cpp — see rank_records.h.
#include "rank_records.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>

#include "trainscope/common/error.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/range_names.h"

namespace trainscope::rundb::detail {
namespace {

std::string base(const std::string& path) { return std::filesystem::path(path).filename().string(); }

struct Recorded {
  bool readable = true, any_event = false;
  std::string why;  // when not readable
  std::vector<Step> steps;
};

// One file's events of rank `rank` (-1: every rank in it): whether it holds any, and its step ranges.
void readRecords(RunReader& r, std::map<int64_t, Recorded>& out, int64_t only_rank) {
  const std::optional<StringId> step = r.find(names::kStep);
  std::map<int64_t, std::vector<Range>> ranges;
  r.forEach<Range>([&](const Range& g) {
    if (only_rank < 0 || g.rank == only_rank) ranges[g.rank].push_back(g);
  });
  if (only_rank >= 0 && r.firstTime()) out[only_rank].any_event = true;
  for (auto& [rank, rows] : ranges) {
    Recorded& rec = out[rank];
    rec.any_event = true;
    std::sort(rows.begin(), rows.end(), [](const Range& a, const Range& b) { return a.start_ns < b.start_ns; });
    for (const Range& g : rows) {
      if (!step || g.name != *step || g.end_ns <= g.start_ns) continue;
      Step s;
      s.rank = rank;
      s.step = int64_t(rec.steps.size());
      s.loss_recorded = false;
      s.start_ns = g.start_ns;
      s.step_time_ns = g.end_ns - g.start_ns;
      rec.steps.push_back(s);
    }
  }
}

}  // namespace

std::vector<Step> stepsOfRankRecords(RunReader& reader, std::vector<std::string>& notes) {
  if (reader.meta("source") == "import") return {};
  const int64_t self = shardRank(reader.path());
  std::map<int64_t, Recorded> recorded;
  std::map<int64_t, std::string> file_of;
  if (self >= 0) {  // a shard reported on its own: its own ranges
    readRecords(reader, recorded, -1);
    file_of[self] = base(reader.path());
    std::vector<Step> out;
    for (auto& [rank, rec] : recorded) out.insert(out.end(), rec.steps.begin(), rec.steps.end());
    const std::string db = reader.path().substr(0, reader.path().rfind(".rank"));
    if (!out.empty() || recorded.empty())
      notes.push_back(base(reader.path()) + " is rank " + std::to_string(self) + "'s trace shard of a run that stopped "
                      "before merging it: it holds that rank's events, not the run's steps (those are in " + base(db) +
                      ")" +
                      (out.empty() ? "; it holds no event: the rank recorded nothing"
                                   : "; the step times are its step ranges (no loss, no tokens)"));
    return out;
  }
  const std::vector<std::string> shards = leftoverShards(reader.path());
  int64_t world = 1;
  try {
    world = reader.worldSize();
  } catch (const UserError&) {
  }
  for (const std::string& shard : shards) {
    const int64_t rank = shardRank(shard);
    file_of[rank] = base(shard);
    world = std::max(world, rank + 1);
    recorded[rank];  // a shard without an event is a rank that recorded nothing
    try {
      RunReader r(shard);
      readRecords(r, recorded, rank);
    } catch (const std::exception& e) {
      recorded[rank].readable = false;
      recorded[rank].why = e.what();
    }
  }
  const bool no_config = reader.meta("config").empty();
  std::vector<Step> out;
  std::string from;
  for (auto& [rank, rec] : recorded)
    if (!rec.steps.empty()) {
      out.insert(out.end(), rec.steps.begin(), rec.steps.end());
      from += (from.empty() ? "" : ", ") + file_of[rank];
    }
  if (no_config)
    notes.push_back("the run database holds no run configuration: rank 0, which writes it, failed or was killed "
                    "before it did; this is not a clean, empty run");
  if (shards.empty()) return out;
  for (int64_t rank = 0; rank < world; ++rank) {
    const auto it = recorded.find(rank);
    if (it == recorded.end())
      notes.push_back("rank " + std::to_string(rank) + " recorded nothing: no trace shard of it (" +
                      base(shardPath(reader.path(), rank)) + ") is beside the run database");
    else if (!it->second.readable)
      notes.push_back("rank " + std::to_string(rank) + "'s trace shard " + file_of[rank] + " cannot be read: " +
                      it->second.why);
    else if (!it->second.any_event)
      notes.push_back("rank " + std::to_string(rank) + " recorded nothing: its trace shard " + file_of[rank] +
                      " holds no event (it failed or was killed before its first)" +
                      (rank == 0 ? "; rank 0 writes every rank's steps into the run database, so it holds none" : ""));
  }
  if (!out.empty())
    notes.push_back("the step times are the step ranges the other ranks recorded in their trace shards (" + from +
                    "), not steps rank 0 wrote: no loss or tokens, and a rank's last one may end where the run failed");
  return out;
}

}  // namespace trainscope::rundb::detail

namespace trainscope::rundb {

std::string silentRanksNote(const std::string& run_db) {
  std::string names;
  bool rank0 = false;
  for (const std::string& shard : leftoverShards(run_db)) {
    try {
      RunReader r(shard);
      if (r.firstTime()) continue;
    } catch (const std::exception&) {
      continue;  // unreadable: said where it is opened
    }
    names += (names.empty() ? "" : ", ") + std::string("rank ") + std::to_string(shardRank(shard)) + " (" +
             std::filesystem::path(shard).filename().string() + ")";
    rank0 = rank0 || shardRank(shard) == 0;
  }
  if (names.empty()) return "";
  return "recorded nothing, failed or killed before their first event: " + names +
         (rank0 ? "; rank 0 writes every rank's steps into the run database, so it holds none" : "");
}

}  // namespace trainscope::rundb
