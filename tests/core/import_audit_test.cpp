// import_audit_test.cpp — what an audit with real CPU traces of torch 2.11 found (2026-12-07), each
// as a hand-made Kineto file with the shape the real one had:
//   ranks' files from two profiling cycles (rank 0's steps 6–7, rank 1's 2–3) link no collective
//   across steps; a subgroup's extra call on one rank shifts no later step's links;
//   the time a thread is blocked in a collective call nested in an op (DDP's c10d::allreduce_ under
//   AccumulateGrad) is communication, not compute;
//   a copy of a trace without distributedInfo is not a second rank;
//   a Gloo annotation's dtype the table does not know leaves its bytes unknown, not another dtype's;
//   report's text keeps long non-ASCII names valid UTF-8.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kineto_events.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/summary.h"

namespace tr = trainscope::rundb;
using nlohmann::json;
using trainscope::testing::tempPath;
using namespace trainscope::testing::kineto_events;

namespace {

// A Gloo transfer as torch 2.11 records it: an annotation on a worker thread, sized by its args.
json gloo(const std::string& op, const std::string& type, int64_t elements, double ts, double dur) {
  json a = annotation("gloo:" + op, ts, dur);
  a["tid"] = 7;
  a["args"] = {{"Input type", json::array({type})}, {"Input Dims", json::array({json::array({elements})})}};
  return a;
}

// Rank `rank`'s file of a 2-rank Gloo job.
std::string rankFile(const std::string& name, int rank, const json& events) {
  const std::string in = tempPath(name + "_rank" + std::to_string(rank) + ".json");
  std::ofstream(in) << json{{"baseTimeNanoseconds", kEventsBase},
                            {"distributedInfo", {{"backend", "gloo"}, {"rank", rank}, {"world_size", 2}}},
                            {"traceEvents", events}}
                           .dump();
  return in;
}

// The import's collectives linked as report and the viewer link them.
struct Linked {
  std::vector<tr::Collective> rows;
  std::vector<tr::Step> steps;
  tr::CollectiveLinks links;
};
Linked linkedImport(const std::vector<std::string>& files, const std::string& name) {
  const std::string db = tempPath(name + ".db");
  tr::importTraces(files, db, true);
  tr::RunReader rd(db);
  Linked l{rd.collectives(), rd.steps(), {}};
  l.links = tr::linkRunCollectives(l.rows, rd.meta(), l.steps);
  return l;
}

// Strict UTF-8: no stray continuation byte, no sequence cut short.
bool validUtf8(const std::string& s) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

}  // namespace

// torch.profiler's schedule(repeat=2) wrote two files per rank; a user imported rank 0's second
// cycle with rank 1's first. Their calls were linked by call number alone: a 20 ms "skew" and 40 ms of
// "wait" between steps 6–7 and 2–3, which share no moment. Now no call links; the same cycle does.
TEST(ImportAudit, RanksFilesFromDifferentCyclesLinkNoCollectiveAcrossSteps) {
  auto cycle = [](int first_step, double t0) {
    json ev = json::array();
    for (int k = 0; k < 2; ++k) {
      ev.push_back(step(first_step + k, t0 + 1000 * k, 1000));
      ev.push_back(gloo("all_reduce", "float", 1000, t0 + 1000 * k + 100, 300));
    }
    return ev;
  };
  const Linked mixed = linkedImport({rankFile("cycles_mixed", 0, cycle(6, 20000)), rankFile("cycles_mixed", 1, cycle(2, 0))},
                                    "cycles_mixed");
  ASSERT_EQ(mixed.rows.size(), 4u);
  EXPECT_TRUE(mixed.links.calls.empty()) << mixed.links.calls.size() << " calls linked across steps";
  for (const tr::Collective& c : mixed.rows) {
    const std::string why = tr::notLinkedReason(c, mixed.links, std::nullopt);
    EXPECT_NE(why.find("in the same step"), std::string::npos) << why;
  }
  const Linked same = linkedImport({rankFile("cycles_same", 0, cycle(6, 20000)), rankFile("cycles_same", 1, cycle(6, 20000))},
                                   "cycles_same");
  ASSERT_EQ(same.links.calls.size(), 2u);
  for (const tr::LinkedCall& call : same.links.calls) EXPECT_EQ(call.skewNs(), 0);
}

// A subgroup of rank 0 alone (new_group([0])) all-reduces 100 floats in step 1 before the world's
// all-reduce of 100 floats; the trace names no group, so both are "default". Rank 0's world call of
// step 1 had been linked to rank 1's of step 2 (skew 9–15 ms against 2–3 true). Numbered within each
// step, step 2's calls are each other's.
TEST(ImportAudit, ASubgroupsExtraCallShiftsNoLaterStepsLinks) {
  json r0 = json::array({step(1, 0, 1000), gloo("all_reduce", "float", 100, 100, 50), gloo("all_reduce", "float", 100, 400, 50),
                         step(2, 1000, 1000), gloo("all_reduce", "float", 100, 1400, 50)});
  json r1 = json::array({step(1, 0, 1000), gloo("all_reduce", "float", 100, 403, 50), step(2, 1000, 1000),
                         gloo("all_reduce", "float", 100, 1402, 50)});
  const Linked l = linkedImport({rankFile("subgroup", 0, r0), rankFile("subgroup", 1, r1)}, "subgroup");
  ASSERT_EQ(l.rows.size(), 5u);
  // Step 2's two copies (rank 0's third row, rank 1's second) are one call, 2 us apart.
  bool step2_linked = false;
  for (const tr::LinkedCall& call : l.links.calls) {
    ASSERT_EQ(call.rows.size(), 2u);
    EXPECT_LT(call.skewNs(), 500'000) << "a call linked across steps";
    bool has_r0_step2 = false, has_r1_step2 = false;
    for (size_t i : call.rows) {
      has_r0_step2 |= l.rows[i].rank == 0 && l.rows[i].start_ns == kEventsBase + 1400'000;
      has_r1_step2 |= l.rows[i].rank == 1 && l.rows[i].start_ns == kEventsBase + 1402'000;
    }
    step2_linked |= has_r0_step2 && has_r1_step2;
  }
  EXPECT_TRUE(step2_linked);
}

// DDP's gradient hook runs inside AccumulateGrad, so c10d::allreduce_ (and the main thread's wait in
// it) is nested in an op. Compute had been every op's span: 0.6 ms here, and the Gloo transfer beside
// it "overlap". Now compute is 0.2 ms (the op less the call), and the 0.4 ms transfer is exposed.
TEST(ImportAudit, TimeBlockedInACollectiveCallNestedInAnOpIsNotCompute) {
  json ev = json::array({step(0, 0, 1000), op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 100, 600),
                         op("c10d::allreduce_", 200, 400), gloo("all_reduce", "float", 1000, 200, 400)});
  const std::string db = importOne(ev, "nested_collective");
  tr::RunReader rd(db);
  const tr::RunSummary s = tr::summarize(rd);
  ASSERT_EQ(s.ranks.size(), 1u);
  ASSERT_TRUE(s.ranks[0].breakdown);
  const tr::Breakdown& b = *s.ranks[0].breakdown;
  EXPECT_NEAR(b.compute_s, 0.2e-3, 1e-12);
  EXPECT_NEAR(b.comm_s, 0.4e-3, 1e-12);
  EXPECT_NEAR(b.exposedCommS(), 0.4e-3, 1e-12);
}

// A single process's trace beside its copy (an export_chrome_trace file and its gzipped copy under
// one *.json* glob) had become two identical ranks. The same processes, steps and span cannot be two
// ranks: refused, naming both files.
TEST(ImportAudit, ACopyOfATraceWithoutDistributedInfoIsNotASecondRank) {
  const std::string a = tempPath("single_trace.json"), b = tempPath("single_trace_copy.json");
  std::ofstream(a) << json{{"baseTimeNanoseconds", kEventsBase},
                           {"traceEvents", json::array({step(0, 0, 1000), op("aten::mm", 100, 500)})}}
                          .dump();
  std::filesystem::copy_file(a, b, std::filesystem::copy_options::overwrite_existing);
  try {
    tr::importTraces({a, b}, tempPath("single_trace_twice.db"), true);
    FAIL() << "a copy was imported as a second rank";
  } catch (const trainscope::UserError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no distributedInfo"), std::string::npos) << what;
    EXPECT_NE(what.find("overlapping times"), std::string::npos) << what;
    EXPECT_NE(what.find(a), std::string::npos) << what;
  }
  // Two processes without distributedInfo are still two ranks by position.
  const std::string c = tempPath("single_trace_other.json");
  json other = json::array({step(0, 0, 1000), op("aten::mm", 100, 500)});
  for (auto& e : other) e["pid"] = 2;
  std::ofstream(c) << json{{"baseTimeNanoseconds", kEventsBase}, {"traceEvents", other}}.dump();
  tr::importTraces({a, c}, tempPath("single_trace_two.db"), true);
  EXPECT_EQ(tr::RunReader(tempPath("single_trace_two.db")).steps().size(), 2u);
  // Two nodes' ranks, one process per container, can share a pid and overlap in time: not a copy
  // unless the span and steps are the same to the nanosecond.
  const std::string d = tempPath("single_trace_node2.json");
  std::ofstream(d) << json{{"baseTimeNanoseconds", kEventsBase},
                           {"traceEvents", json::array({step(0, 3, 1000), op("aten::mm", 110, 480)})}}
                          .dump();
  tr::importTraces({a, d}, tempPath("single_trace_nodes.db"), true);
  EXPECT_EQ(tr::RunReader(tempPath("single_trace_nodes.db")).steps().size(), 2u);
}

// Gloo's annotations of unsigned tensors ("short unsigned int", …) had no width and borrowed the
// last complete broadcast's (8000 bytes for 1000 uint16). Their widths are known now, and a type the
// table does not know leaves the bytes unknown (0), never another dtype's.
TEST(ImportAudit, AGlooDtypeTheTableDoesNotKnowBorrowsNoOtherWidth) {
  json ev = json::array({step(0, 0, 1000), gloo("broadcast", "double", 1000, 100, 10),
                         gloo("broadcast", "short unsigned int", 1000, 200, 10), gloo("broadcast", "unsigned int", 1000, 300, 10),
                         gloo("broadcast", "long unsigned int", 1000, 400, 10), gloo("broadcast", "c10::Float8_e8m0fnu", 1000, 500, 10),
                         gloo("broadcast", "some_future_type", 1000, 600, 10)});
  const auto c = tr::RunReader(importOne(ev, "gloo_dtypes")).collectives(0);
  ASSERT_EQ(c.size(), 6u);
  const std::vector<int64_t> bytes = {8000, 2000, 4000, 8000, 1000, 0};
  for (size_t i = 0; i < c.size(); ++i) EXPECT_EQ(c[i].bytes, bytes[i]) << "call " << i;
}

// report's text cut long names by bytes, inside a character: invalid UTF-8 (Python's text=True
// raised on it). Cut by characters now; --json keeps them whole.
TEST(ImportAudit, ReportTextKeepsLongNonAsciiNamesValidUtf8) {
  std::string accents, japanese;
  for (int i = 0; i < 120; ++i) accents += "é";
  for (int i = 0; i < 20; ++i) japanese += "日本語テキスト";
  json ev = json::array({step(0, 0, 1000), op(accents, 100, 200), op("a" + japanese, 400, 200)});
  const tr::Report r = tr::computeReport(importOne(ev, "utf8_names"), 15, 0);
  const std::string text = tr::formatReport(r);
  EXPECT_TRUE(validUtf8(text)) << text;
  EXPECT_NE(text.find("ééé..."), std::string::npos) << text;
  EXPECT_NE(tr::reportJson(r).find(japanese), std::string::npos);
}

// A GPU trace's collectives are its NCCL kernels, timed on the device, which runs behind the CPU's
// ProfilerStep windows: rank 0's copy of step 0's all-reduce ran at 1,100 us, in the CPU's step 1,
// rank 1's at 900 us. Numbered within the CPU's steps they would link on neither rank; the import
// marks the file (meta collectives_clock "device") and such calls are numbered over the whole trace.
TEST(ImportAudit, NcclKernelsBehindTheCpusStepsStillLink) {
  std::vector<std::string> files;
  for (int r = 0; r < 2; ++r) {
    const double t = r == 0 ? 1100 : 900;
    json nccl = kernel("ncclDevKernel_AllReduce_Sum_bf16_RING_LL", -1, 20, t, 100);
    nccl["args"].update({{"Collective name", "allreduce"}, {"In msg nelems", 1048576}, {"Out msg nelems", 1048576},
                         {"Group size", 2}, {"dtype", "BFloat16"}, {"Process Group Name", "0"}});
    files.push_back(rankFile("nccl_lag", r, json::array({step(0, 0, 1000), step(1, 1000, 1000), nccl})));
  }
  const Linked l = linkedImport(files, "nccl_lag");
  ASSERT_EQ(l.rows.size(), 2u);
  EXPECT_EQ(tr::RunReader(tempPath("nccl_lag.db")).meta("collectives_clock", ""), "device");
  ASSERT_EQ(l.links.calls.size(), 1u);
  EXPECT_EQ(l.links.calls[0].skewNs(), 200'000);
  // Numbered within the CPU's steps, it would link on neither rank.
  EXPECT_TRUE(tr::linkCollectives(l.rows, std::nullopt, l.steps).calls.empty());
  // report links it too.
  const tr::Report rep = tr::computeReport(tempPath("nccl_lag.db"), 15, 0);
  ASSERT_EQ(rep.collectives.size(), 1u);
  EXPECT_EQ(rep.collectives[0].linked, 1);
}
