// exchange_test.cpp — what ranks hand each other by name (runtime/src/train/exchange.h):
//   every row type survives its toJson/fromJson pair, with its fields under their names
//   a single process gets its own rows back
//   two real processes (Gloo, the rendezvous store rank 0 hosts) hand rank 0 their rows in rank
//   order, one rank's rows far larger than a store value may be (LibTorch's store drops the
//   connection of a client that sends tens of MB), the other's few or none
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "train/exchange.h"
#include "util.h"

namespace rt = trainscope::runtime;
namespace rdb = trainscope::rundb;
using trainscope::testing::runForkedRanks;

namespace {

// Rank `rank`'s i-th record: every field differs by rank and by i, the times near 2^60.
rdb::Collective record(int rank, int64_t i) {
  rdb::Collective c;
  c.op = rank == 0 ? "all_reduce" : "reduce_scatter";
  c.group = rank == 0 ? "world" : "dp";
  c.rank = rank;
  c.group_size = 2 + rank;
  c.seq = i;
  c.bytes = i * 4096 + rank;
  c.start_ns = (int64_t(1) << 60) + i * 1000 + rank;
  c.end_ns = c.start_ns + 777 + i;
  return c;
}

std::vector<rdb::Collective> records(int rank, int64_t n) {
  std::vector<rdb::Collective> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(record(rank, i));
  return v;
}

bool same(const rdb::Collective& a, const rdb::Collective& b) {
  return a.op == b.op && a.group == b.group && a.rank == b.rank && a.group_size == b.group_size && a.seq == b.seq &&
         a.bytes == b.bytes && a.start_ns == b.start_ns && a.end_ns == b.end_ns;
}


// Rank 1's records: about 14 MB of JSON, above LibTorch's store limit for one value (8 MiB).
constexpr int64_t kManyRecords = 100000;
constexpr int64_t kFewRecords = 3;

// What rank 0 gathered: "" when each rank's records are all there, in order; else what differs.
std::string checkGathered(const std::vector<std::vector<rdb::Collective>>& got) {
  if (got.size() != 2) return "rank 0 got " + std::to_string(got.size()) + " parts";
  for (int q = 0; q < 2; ++q) {
    const auto& part = got[size_t(q)];
    if (part.size() != size_t(q == 0 ? kFewRecords : kManyRecords))
      return "rank " + std::to_string(q) + " handed in " + std::to_string(part.size()) + " records";
    for (size_t i = 0; i < part.size(); ++i)
      if (!same(part[i], record(q, int64_t(i))))
        return "rank " + std::to_string(q) + "'s record " + std::to_string(i) + " differs";
  }
  return "";
}

// One rank of the two-process exchange, in a forked child: 0 when rank 0 got every row right.
int exchangeAsRank(int rank, int port) {
  auto comm = trainscope::testing::connectForkedRank(rank, port);
  const auto got = rt::gatherOnLeader(*comm, "collectives", records(rank, rank == 0 ? kFewRecords : kManyRecords));
  // A second exchange under another key: rank 1 hands in nothing.
  std::vector<rdb::WeightDigest> digest;
  if (rank == 0) digest.push_back({"wte", 1.5, 2.25, 1.5});
  const auto digests = rt::gatherOnLeader(*comm, "digest", digest);
  if (rank != 0) return got.empty() && digests.empty() ? 0 : 1;
  const std::string wrong = checkGathered(got);
  if (!wrong.empty()) std::fprintf(stderr, "%s\n", wrong.c_str());
  const bool digest_ok = digests.size() == 2 && digests[0].size() == 1 && digests[0][0].name == "wte" &&
                         digests[0][0].sumsq == 2.25 && digests[1].empty();
  return wrong.empty() && digest_ok ? 0 : 1;
}

}  // namespace

TEST(Exchange, EveryRowTypeRoundTripsThroughItsNamedFields) {
  const rdb::Collective c = record(1, 42);
  const nlohmann::json jc = rt::toJson(c);
  EXPECT_EQ(jc.at("op"), "reduce_scatter");
  EXPECT_EQ(jc.at("start_ns").get<int64_t>(), c.start_ns);
  rdb::Collective c2;
  rt::fromJson(jc, &c2);
  EXPECT_TRUE(same(c, c2));

  const rdb::WeightDigest d{"h.0.attn.c_attn.weight", 0.1, 1.0 / 3.0, -0.0};
  const nlohmann::json jd = rt::toJson(d);
  EXPECT_EQ(jd.at("name"), d.name);
  rdb::WeightDigest d2;
  rt::fromJson(nlohmann::json::parse(jd.dump()), &d2);  // doubles survive the text exactly
  EXPECT_EQ(d2.name, d.name);
  EXPECT_EQ(d2.sum, d.sum);
  EXPECT_EQ(d2.sumsq, d.sumsq);
  EXPECT_EQ(d2.abssum, d.abssum);

  const rdb::ShardInfo s{"/tmp/run.db.rank1", 1, "host", "cpu", 1234, -5, 7};
  const nlohmann::json js = rt::toJson(s);
  EXPECT_EQ(js.at("path"), s.path);
  EXPECT_EQ(js.at("offset_end_ns"), 7);
  rdb::ShardInfo s2;
  rt::fromJson(js, &s2);
  EXPECT_EQ(s2.path, s.path);
  EXPECT_EQ(s2.rank, 1);
  EXPECT_EQ(s2.host, "host");
  EXPECT_EQ(s2.device, "cpu");
  EXPECT_EQ(s2.pid, 1234);
  EXPECT_EQ(s2.offset_start_ns, -5);
  EXPECT_EQ(s2.offset_end_ns, 7);
  const rdb::ExpertLoad e{3, 17, 5, 6, 640, 96, 40, 0.1 / 3.0, 1e-7};
  const nlohmann::json je = rt::toJson(e);
  EXPECT_EQ(je.at("expert"), 6);
  EXPECT_EQ(je.at("capacity"), 40);
  rdb::ExpertLoad e2;
  rt::fromJson(nlohmann::json::parse(je.dump()), &e2);  // through the text, as the store carries it
  EXPECT_EQ(e2.rank, 3);
  EXPECT_EQ(e2.step, 17);
  EXPECT_EQ(e2.layer, 5);
  EXPECT_EQ(e2.expert, 6);
  EXPECT_EQ(e2.tokens, 640);
  EXPECT_EQ(e2.dropped, 96);
  EXPECT_EQ(e2.capacity, 40);
  EXPECT_EQ(e2.aux_loss, e.aux_loss);
  EXPECT_EQ(e2.z_loss, e.z_loss);
  EXPECT_THROW(rt::fromJson(nlohmann::json{{"rank", 0}, {"step", 1}}, &e2), nlohmann::json::exception);
  // A row missing a field is an error that names it, not a default.
  EXPECT_THROW(rt::fromJson(nlohmann::json{{"op", "send"}}, &c2), nlohmann::json::exception);
}

TEST(Exchange, ASingleProcessGetsItsOwnRowsBack) {
  auto comm = rt::Comm::single();
  const auto got = rt::gatherOnLeader(*comm, "collectives", records(0, 5));
  ASSERT_EQ(got.size(), 1u);
  ASSERT_EQ(got[0].size(), 5u);
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(same(got[0][i], record(0, int64_t(i))));
}

TEST(Exchange, TwoRanksHandRankZeroRowsLargerThanAStoreValueMayBe) {
  runForkedRanks(2, [](int rank, int port) { return exchangeAsRank(rank, port); });
}
