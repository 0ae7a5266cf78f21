// rundb_test.cpp — the run database as a file: what a writer may replace, the lock, O_EXCL creation,
// a finished file in one piece (journal_mode=DELETE), shard merge with known clock offsets, and clear
// errors on truncated, corrupted, foreign or unreadable files.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <tuple>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"
#include "trainscope/tracer/trace.h"

namespace db = trainscope::rundb;
namespace tr = trainscope::tracer;
using trainscope::UserError;
using trainscope::testing::cli;
using trainscope::testing::tempPath;

namespace {

db::RunStore::Options replace() { return db::RunStore::Options{true, "--out", false}; }

// A run database holding one rank's steps, as the runtime writes them.
void makeRun(const std::string& path, const std::vector<std::pair<int64_t, int64_t>>& windows, int world = 1) {
  db::RunStore store(path, replace());
  store.setMeta("world_size", std::to_string(world));
  store.setMeta("config", R"({"workload":"hand-built"})");
  for (int rank = 0; rank < world; ++rank)
    for (size_t k = 0; k < windows.size(); ++k) {
      db::Step r;
      r.rank = rank;
      r.step = int64_t(k);
      r.start_ns = windows[k].first;
      r.step_time_ns = windows[k].second - windows[k].first;
      r.tokens = 1000;
      r.peak_bytes = 1 << 20;
      store.appendStep(r);
    }
}

std::string expectUserError(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no UserError";
  return "";
}

}  // namespace

TEST(RunStore, RefusesToReplaceWhatIsNotARunDatabase) {
  const std::string text = tempPath("notes.txt");
  std::ofstream(text) << "precious";
  std::string msg = expectUserError([&] { db::RunStore s(text, replace()); });
  EXPECT_NE(msg.find("not a trainscope run database"), std::string::npos) << msg;
  EXPECT_EQ(std::filesystem::file_size(text), 8u);  // untouched
  const std::string dir = tempPath("a-folder");
  std::filesystem::create_directories(dir);
  msg = expectUserError([&] { db::RunStore s(dir, replace()); });
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
  EXPECT_TRUE(std::filesystem::is_directory(dir));
  msg = expectUserError([&] { db::RunStore s("/dev/null", replace()); });
  EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  struct stat st {};
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  msg = expectUserError([&] { db::RunStore s(tempPath("no/such/folder/run.db"), replace()); });
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;
}

TEST(RunStore, ExistingRunNeedsOverwriteAndALockedOneIsRefusedWithItsWriter) {
  const std::string path = tempPath("locked.db");
  makeRun(path, {{0, 10}});
  std::string msg = expectUserError([&] { db::RunStore s(path, db::RunStore::Options{}); });
  EXPECT_NE(msg.find("already exists"), std::string::npos) << msg;
  EXPECT_EQ(db::readSteps(path).size(), 1u);
  // Another process writes it: a second writer with --overwrite must not wipe it.
  // The child holds its run open until the parent has tried (a pipe each way, no fixed sleep: on a
  // busy machine the parent's attempt may come late).
  int ready[2], done[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(done), 0);
  const pid_t child = fork();
  if (child == 0) {
    close(done[1]);  // so that the parent's exit, too, ends the wait below
    {
      db::RunStore s(path, replace());
      db::Step r;
      s.appendStep(r);
      char c = 1;
      (void)!write(ready[1], &c, 1);
      (void)!read(done[0], &c, 1);  // until the parent writes, or exits (EOF)
    }
    _exit(0);
  }
  close(done[0]);
  close(ready[1]);  // a child that dies before it is ready gives EOF, not a wait
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  msg = expectUserError([&] { db::RunStore s(path, replace()); });
  (void)!write(done[1], &c, 1);
  close(done[1]);
  EXPECT_NE(msg.find("being written by another trainscope process (pid " + std::to_string(child) + ")"),
            std::string::npos)
      << msg;
  int status = 0;
  waitpid(child, &status, 0);
  EXPECT_EQ(db::readSteps(path).size(), 1u);  // the child's run survived
  db::RunStore again(path, replace());       // unlocked now: replaced
}

TEST(RunStore, AFinishedDatabaseIsOneFileInDeleteJournalMode) {
  const std::string path = tempPath("finished.db");
  makeRun(path, {{0, 10}, {10, 30}});
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
  {
    db::Database d(path, db::Database::Mode::ReadOnly);
    db::Statement s(d, "PRAGMA journal_mode");
    ASSERT_TRUE(s.step());
    EXPECT_EQ(s.columnText(0), "delete");
  }
  db::RunReader r(path);  // reading creates nothing beside it
  EXPECT_EQ(r.steps(0).size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
}

TEST(RunStore, StringsInternAcrossReopensAndMetaRoundTrips) {
  const std::string path = tempPath("strings.db");
  {
    db::RunStore s(path, replace());
    s.begin();
    const auto a = s.intern("alpha"), b = s.intern("beta");
    EXPECT_NE(a, b);
    EXPECT_EQ(s.intern("alpha"), a);
    s.put(db::Range{1, 2, a, b, 0, 0, 0, 4});
    s.commit();
    s.setMeta("world_size", "5");
  }
  db::RunReader r(path);
  EXPECT_EQ(r.worldSize(), 5);
  auto ranges = r.events<db::Range>(4);
  ASSERT_EQ(ranges.size(), 1u);
  EXPECT_EQ(r.string(ranges[0].name), "alpha");
  EXPECT_EQ(r.string(ranges[0].domain), "beta");
  EXPECT_EQ(r.find("beta"), ranges[0].domain);
}

TEST(Merge, ShardsMergeOntoRankZerosClockAndRecordTheMergedRanks) {
  const std::string run = tempPath("merged.db"), s0 = db::shardPath(run, 0), s1 = db::shardPath(run, 1);
  {
    tr::Tracer a(s0, 0, tr::TraceLevel::Ranges);
    a.intern("padding-so-ids-differ");
    a.record(tr::RangeEvent{100, 200, a.intern("forward"), a.intern("trainscope"), 0, 0, 0});
    tr::Tracer b(s1, 1, tr::TraceLevel::Ranges);
    b.record(tr::RangeEvent{100, 200, b.intern("backward"), b.intern("trainscope"), 0, 0, 0});
    b.record(tr::RangeEvent{300, 350, b.intern("forward"), b.intern("trainscope"), 0, 0, 0});
    db::Collective c;
    c.op = "all_reduce";
    c.group = "dp";
    c.group_size = 2;
    c.bytes = 64;
    c.start_ns = 400;
    c.end_ns = 500;
    b.record(c);
  }
  // Rank 1's clock runs 1000 ns behind at the start and 3000 ns behind at the end: mean 2000.
  {
    db::RunStore w(run, replace());
    w.setMeta("world_size", "2");
    db::Step st;
    st.rank = 1;
    st.start_ns = 5;
    st.step_time_ns = 10;
    w.appendStep(st);
    db::mergeShards(w, {{s0, 0, "h0", "cpu", 11, 0, 0}, {s1, 1, "h1", "cpu", 12, 1000, 3000}});
  }
  EXPECT_FALSE(std::filesystem::exists(s1));
  db::RunReader r(run);
  auto r1 = r.events<db::Range>(1);
  ASSERT_EQ(r1.size(), 2u);
  EXPECT_EQ(r.string(r1[0].name), "backward");
  EXPECT_EQ(r1[0].start_ns, 2100);
  EXPECT_EQ(r1[1].end_ns, 2350);
  EXPECT_EQ(r.events<db::Range>(0).at(0).start_ns, 100);
  EXPECT_EQ(r.collectives(1).at(0).start_ns, 2400);
  EXPECT_EQ(r.steps(1).at(0).start_ns, 2005);  // steps move onto rank 0's clock too
  auto ranks = r.ranks();
  ASSERT_EQ(ranks.size(), 2u);
  EXPECT_EQ(ranks[1].clock_offset_ns, 2000);
  EXPECT_EQ(ranks[1].pid, 12);
  EXPECT_EQ(r.meta("merged_ranks"), "0,1");
}

TEST(Merge, TiesNcclKernelsToTheirCollectivesInOrder) {
  const std::string run = tempPath("nccl.db"), shard = db::shardPath(run, 0);
  {
    tr::Tracer t(shard, 0, tr::TraceLevel::All);
    const auto nccl = t.intern("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), gemm = t.intern("sm90_gemm");
    t.record(tr::KernelEvent{100, 200, 0, 1, gemm, 1, {1, 1, 1}, {1, 1, 1}, 0, 0});
    t.record(tr::KernelEvent{310, 390, 0, 9, nccl, 2, {1, 1, 1}, {1, 1, 1}, 0, 0});
    t.record(tr::KernelEvent{610, 690, 0, 9, nccl, 3, {1, 1, 1}, {1, 1, 1}, 0, 0});
    for (auto [op, seq, b] : {std::tuple{"all_reduce", 7, 300}, {"barrier", 0, 450}, {"all_reduce", 8, 600}}) {
      db::Collective c;
      c.op = op;
      c.group = "dp";
      c.group_size = 2;
      c.seq = seq;
      c.start_ns = b;
      c.end_ns = b + 100;
      t.record(c);
    }
  }
  {
    db::RunStore w(run, replace());
    db::mergeShards(w, {{shard, 0, "h", "cuda:0", 1, 0, 0}});
  }
  db::RunReader r(run);
  std::map<int64_t, int64_t> seq_of;
  for (const auto& k : r.events<db::Kernel>(0)) seq_of[k.correlation] = k.collective_seq;
  EXPECT_EQ(seq_of[2], 7);
  EXPECT_EQ(seq_of[3], 8);
  EXPECT_EQ(seq_of[1], -1);
}

TEST(RunReader, TruncatedCorruptedForeignAndMissingFilesGiveClearErrors) {
  const std::string good = tempPath("good.db");
  makeRun(good, {{0, 1000}, {1000, 2000}});
  const std::string foreign = tempPath("foreign.db");
  {
    db::Database d(foreign, db::Database::Mode::Create);
    d.exec("CREATE TABLE t(x)");
  }
  const std::string garbage = tempPath("garbage.db");
  std::ofstream(garbage) << std::string(8192, 'x');
  const std::string truncated = tempPath("truncated.db");
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, 1000);
  }
  const std::string bad_world = tempPath("bad-world.db");
  makeRun(bad_world, {{0, 10}});
  { db::RunStore s(bad_world, replace()); s.setMeta("world_size", "two"); }
  for (const auto& p : {foreign, garbage, truncated, tempPath("no-such.db"), tempPath("")}) {
    const std::string msg = expectUserError([&] { db::RunReader r(p); });
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
  }
  const std::string msg = expectUserError([&] { db::RunReader(bad_world).worldSize(); });
  EXPECT_NE(msg.find("world_size"), std::string::npos) << msg;
  // The command line: exit 2, one line naming the file, no crash, no SQL, no backtrace.
  for (const auto& p : {foreign, garbage, truncated, std::string("/no/such.db"), tempPath("")}) {
    auto r = cli("report " + p);
    EXPECT_EQ(r.status, 2) << p << ": " << r.output;
    EXPECT_NE(r.output.find("error:"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("SELECT"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("frame #"), std::string::npos) << r.output;
  }
}

// `run --save` checkpoints: rows in `checkpoints`, read back by step, shown by `report` (text and
// JSON); a run database without the table reads as none.
TEST(RunStore, CheckpointsAreRecordedAndReported) {
  const std::string none = tempPath("no-checkpoints.db");
  makeRun(none, {{0, 100}, {100, 200}});
  EXPECT_TRUE(db::RunReader(none).checkpoints().empty());
  EXPECT_EQ(db::formatReport(db::computeReport(none)).find("checkpoints (run --save)"), std::string::npos);

  const std::string path = tempPath("checkpoints.db");
  {
    db::RunStore store(path, replace());
    store.setMeta("world_size", "1");
    store.setMeta("config", R"({"workload":"hand-built"})");
    for (int64_t k = 0; k < 3; ++k) {
      db::Step r;
      r.step = k;
      r.start_ns = 100 * k;
      r.step_time_ns = 100;
      r.tokens = 1000;
      store.appendStep(r);
    }
    store.appendCheckpoint({3, 0.5, 3 << 20, "/ck/b"});
    store.appendCheckpoint({1, 0.25, 1 << 20, "/ck/a"});
  }
  const std::vector<db::Checkpoint> rows = db::RunReader(path).checkpoints();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].step, 1);
  EXPECT_EQ(rows[1].bytes, 3 << 20);
  EXPECT_EQ(rows[1].path, "/ck/b");
  EXPECT_DOUBLE_EQ(rows[1].seconds, 0.5);
  const db::Report rep = db::computeReport(path);
  const std::string text = db::formatReport(rep);
  EXPECT_NE(text.find("after step 3: 3.0 MiB in 0.500 s (6.3 MB/s)  /ck/b"), std::string::npos) << text;
  const std::string json = db::reportJson(rep);
  EXPECT_NE(json.find(R"("checkpoints":[{"bytes":1048576,"path":"/ck/a","seconds":0.25,"step":1})"), std::string::npos)
      << json;
}
