// context_parallel_links_test.cpp — a context-parallel run's layout in the run database
// (rundb::runLayout with cp: rank = tp + TP·(cp + CP·(dp + DP·pp))) and its collectives linked across
// ranks: the `cp` ring's sends paired with the next rank's receives, `dp_cp` and `tp` calls by instance; and
// expert parallelism's `ep` all-to-alls (per-rank bytes) and `expert_dp` reductions by their instance.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "trainscope/rundb/report.h"

namespace db = trainscope::rundb;

namespace {
db::Collective coll(int64_t rank, const std::string& op, const std::string& group, int64_t size, int64_t seq,
                    int64_t bytes, int64_t start, int64_t end) {
  db::Collective c;
  c.rank = rank, c.op = op, c.group = group, c.group_size = size, c.seq = seq, c.bytes = bytes;
  c.start_ns = start, c.end_ns = end;
  return c;
}
std::set<int64_t> ranksOfCall(const std::vector<db::Collective>& rows, const db::CollectiveLinks& l, size_t row) {
  std::set<int64_t> out;
  if (l.call_of[row] < 0) return out;
  for (size_t i : l.calls[size_t(l.call_of[row])].rows) out.insert(rows[i].rank);
  return out;
}
}  // namespace

TEST(ContextParallelLayout, CoordinatesFollowTpThenCpThenDpThenPp) {
  // TP 2 × CP 2 × DP 2: rank 5 = tp 1 + 2·(cp 0 + 2·dp 1).
  const auto l = db::runLayout({{"config", R"({"world":8,"dp":2,"tp":2,"pp":1,"cp":2,"ga":1})"}});
  ASSERT_TRUE(l);
  EXPECT_EQ(l->cp, 2);
  const db::RunLayout::Coords c = l->coords(5);
  EXPECT_EQ(c.tp, 1);
  EXPECT_EQ(c.cp, 0);
  EXPECT_EQ(c.dp, 1);
  EXPECT_EQ(c.pp, 0);
  EXPECT_EQ(l->rankOf(c), 5);
  EXPECT_EQ(l->coords(2).cp, 1);
  // dp·cp·tp·pp must be the world; a config without cp reads as cp 1.
  EXPECT_FALSE(db::runLayout({{"config", R"({"world":8,"dp":4,"tp":2,"pp":1,"cp":2})"}}));
  EXPECT_EQ(db::runLayout({{"config", R"({"world":4,"dp":2,"tp":2,"pp":1})"}})->cp, 1);
}

TEST(ContextParallelLayout, RingSendsPairWithTheNextRanksReceivesAndGroupsLinkByInstance) {
  // TP 2 × CP 2: the cp groups are {0, 2} and {1, 3}; dp_cp is the same ranks (dp 1); tp {0, 1}, {2, 3}.
  const auto l = db::runLayout({{"config", R"({"world":4,"dp":1,"tp":2,"pp":1,"cp":2,"ga":1})"}});
  ASSERT_TRUE(l);
  const int64_t kv = 4096, dkv = 4096;
  const std::vector<db::Collective> rows = {
      coll(0, "send", "cp", 2, 0, kv, 100, 300),  coll(0, "recv", "cp", 2, 1, kv, 101, 320),   // 0, 1
      coll(2, "send", "cp", 2, 0, kv, 150, 310),  coll(2, "recv", "cp", 2, 1, kv, 151, 330),   // 2, 3
      coll(1, "send", "cp", 2, 0, dkv, 110, 300), coll(1, "recv", "cp", 2, 1, dkv, 111, 320),  // 4, 5
      coll(3, "send", "cp", 2, 0, dkv, 120, 300), coll(3, "recv", "cp", 2, 1, dkv, 121, 320),  // 6, 7
      coll(0, "all_reduce", "dp_cp", 2, 0, 64, 500, 600), coll(1, "all_reduce", "dp_cp", 2, 0, 64, 510, 600),  // 8, 9
      coll(2, "all_reduce", "dp_cp", 2, 0, 64, 520, 600), coll(3, "all_reduce", "dp_cp", 2, 0, 64, 530, 600),  // 10, 11
      coll(0, "all_reduce", "tp", 2, 0, 8, 700, 800), coll(1, "all_reduce", "tp", 2, 0, 8, 705, 800),  // 12, 13
      coll(2, "all_reduce", "tp", 2, 0, 8, 710, 800), coll(3, "all_reduce", "tp", 2, 0, 8, 720, 800)};  // 14, 15
  const db::CollectiveLinks links = db::linkCollectives(rows, l);
  // Rank 0's send went to rank 2 (its next in the ring), whose receive took it; and back.
  ASSERT_GE(links.call_of[0], 0);
  const db::LinkedCall& first = links.calls[size_t(links.call_of[0])];
  EXPECT_TRUE(first.p2p);
  EXPECT_EQ(first.rows, (std::vector<size_t>{0, 3}));
  EXPECT_EQ(links.calls[size_t(links.call_of[2])].rows, (std::vector<size_t>{2, 1}));
  EXPECT_EQ(links.calls[size_t(links.call_of[4])].rows, (std::vector<size_t>{4, 7}));
  EXPECT_EQ(links.calls[size_t(links.call_of[6])].rows, (std::vector<size_t>{6, 5}));
  EXPECT_EQ(ranksOfCall(rows, links, 8), (std::set<int64_t>{0, 2}));
  EXPECT_EQ(ranksOfCall(rows, links, 9), (std::set<int64_t>{1, 3}));
  EXPECT_EQ(ranksOfCall(rows, links, 12), (std::set<int64_t>{0, 1}));
  EXPECT_EQ(ranksOfCall(rows, links, 14), (std::set<int64_t>{2, 3}));
  EXPECT_EQ(links.calls.size(), 8u);
}

TEST(ExpertParallelLinks, AllToAllsWithPerRankSplitsLinkByTheirEpGroup) {
  // DP 4 with ep 2: ep groups {0, 1} and {2, 3}, expert_dp groups {0, 2} and {1, 3}. A MoE layer's
  // all-to-all moves different bytes on each rank (variable splits): it links by the layout's group
  // instance, not by equal bytes. Without "ep" in the config the groups are unknown to the layout.
  const auto l = db::runLayout({{"config", R"({"world":4,"dp":4,"tp":1,"pp":1,"ep":2,"ga":1})"}});
  ASSERT_TRUE(l);
  EXPECT_EQ(l->ep, 2);
  const std::vector<db::Collective> rows = {
      coll(0, "all_to_all", "ep", 2, 0, 1000, 100, 200), coll(1, "all_to_all", "ep", 2, 0, 1400, 130, 200),  // 0, 1
      coll(2, "all_to_all", "ep", 2, 0, 900, 100, 210),  coll(3, "all_to_all", "ep", 2, 0, 1100, 120, 210),  // 2, 3
      coll(0, "all_reduce", "expert_dp", 2, 0, 64, 300, 400), coll(2, "all_reduce", "expert_dp", 2, 0, 64, 310, 400),  // 4, 5
      coll(1, "all_reduce", "expert_dp", 2, 0, 64, 300, 400), coll(3, "all_reduce", "expert_dp", 2, 0, 64, 320, 400)};  // 6, 7
  const db::CollectiveLinks links = db::linkCollectives(rows, l);
  EXPECT_EQ(ranksOfCall(rows, links, 0), (std::set<int64_t>{0, 1}));
  EXPECT_EQ(ranksOfCall(rows, links, 2), (std::set<int64_t>{2, 3}));
  EXPECT_EQ(links.calls[size_t(links.call_of[1])].skewNs(), 30);
  EXPECT_EQ(ranksOfCall(rows, links, 4), (std::set<int64_t>{0, 2}));
  EXPECT_EQ(ranksOfCall(rows, links, 6), (std::set<int64_t>{1, 3}));
  const auto no_ep = db::runLayout({{"config", R"({"world":4,"dp":4,"tp":1,"pp":1,"ga":1})"}});
  const db::CollectiveLinks unlinked = db::linkCollectives(rows, no_ep);
  EXPECT_LT(unlinked.call_of[0], 0);  // unequal bytes, no instance: left unlinked, never guessed
}
