// hardening_test.cpp — what a run keeps when it is stopped, killed or fails (issue: hardening):
// SIGTERM/SIGINT stop every rank at a step boundary and the trace is still merged; a killed run's log
// keeps its last step lines; a failed traced run names the shards it left; a failed trace merge is a
// warning, not a failed run; --overwrite removes an older run's stale shards but nothing that is not
// ours; of two runs started on one path at once exactly one gets it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <vector>

#include "util.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/store.h"

namespace rdb = trainscope::rundb;
using trainscope::testing::cli;
using trainscope::testing::sh;
using trainscope::testing::tempPath;

namespace {
const std::string kTiny = " run --workload tiny --seq 32 --mbs 2 --device cpu ";
std::string readFile(const std::string& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}
}  // namespace

TEST(Stop, SigtermToTheLauncherStopsEveryRankAtAStepAndKeepsTheMergedTrace) {
  const std::string db = tempPath("stopped.db"), log = tempPath("stopped.log");
  // The launcher alone gets SIGTERM once step 3 is printed; it forwards it to the ranks.
  auto r = sh("(" + std::string(TRAINSCOPE_CLI) + kTiny + "--steps 100000 --nproc 2 --trace " + db + " > " + log +
              " 2>&1 & pid=$!; for i in $(seq 300); do grep -q 'step    3' " + log +
              " && break; sleep 0.1; done; kill -TERM $pid; wait $pid; echo rc=$?)");
  EXPECT_NE(r.output.find("rc=143"), std::string::npos) << r.output << readFile(log);
  const std::string out = readFile(log);
  EXPECT_NE(out.find("stopped by Terminated"), std::string::npos) << out;
  rdb::RunReader reader(db);
  EXPECT_EQ(reader.meta("merged_ranks"), "0,1");
  const auto steps0 = reader.steps(0), steps1 = reader.steps(1);
  ASSERT_GE(steps0.size(), 4u);
  EXPECT_EQ(steps0.size(), steps1.size());  // both ranks stopped after the same step
  EXPECT_TRUE(rdb::leftoverShards(db).empty());
  EXPECT_GT(reader.events<rdb::Range>(1).size(), 0u);
}

TEST(Logs, AKilledRunsLogKeepsItsLastStepLines) {
  const std::string db = tempPath("killed.db"), log = tempPath("killed.log");
  sh("timeout -s KILL 4 " + std::string(TRAINSCOPE_CLI) + kTiny + "--steps 1000000 --out " + db + " > " + log + " 2>&1");
  const std::string out = readFile(log);
  std::regex line(R"(step +(\d+) \|)");
  int64_t last = -1;
  for (std::sregex_iterator it(out.begin(), out.end(), line), end; it != end; ++it) last = std::stoll((*it)[1]);
  ASSERT_GE(last, 2) << out.substr(0, 500);
  const auto steps = rdb::readSteps(db);  // written before the line is printed
  ASSERT_FALSE(steps.empty());
  EXPECT_LE(steps.back().step - last, 1) << "log lost its tail: db has " << steps.back().step << ", log " << last;
  EXPECT_NE(out.find("trainscope run: tiny"), std::string::npos);  // the banner too
}

TEST(FailedRun, NamesTheTraceShardsItLeftBehind) {
  const std::string db = tempPath("failed.db");
  auto r = cli(kTiny + "--steps 20 --nproc 2 --inject-failure 1:2 -q --trace " + db);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("trace shards were not merged"), std::string::npos) << r.output;
  for (const auto& s : rdb::leftoverShards(db)) EXPECT_NE(r.output.find(s), std::string::npos) << s;
  // The next run with --overwrite replaces the database and takes over the shards.
  auto again = cli(kTiny + "--steps 2 -q --overwrite --trace " + db);
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_TRUE(rdb::leftoverShards(db).empty());
}

TEST(FailedTrace, AMergeThatFailsWarnsAndKeepsTheSteps) {
  const std::string db = tempPath("merge-fails.db");
  auto r = cli(kTiny + "--steps 3 -q --inject-failure merge --trace " + db);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("warning: the trace could not be finalised"), std::string::npos) << r.output;
  EXPECT_EQ(rdb::readSteps(db).size(), 3u);
}

TEST(Overwrite, RemovesAnOlderRunsStaleShardsButNothingElse) {
  const std::string db = tempPath("stale.db");
  { rdb::RunStore s(rdb::shardPath(db, 5), rdb::RunStore::Options{}); }  // an old run's rank 5
  std::ofstream(rdb::shardPath(db, 7)) << "not ours";
  auto r = cli(kTiny + "--steps 2 -q --overwrite --trace " + db);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_FALSE(std::filesystem::exists(rdb::shardPath(db, 5)));
  EXPECT_EQ(readFile(rdb::shardPath(db, 7)), "not ours");
}

TEST(RunStore, OfTwoWritersStartedAtOnceExactlyOneGetsThePath) {
  for (int round = 0; round < 20; ++round) {
    const std::string path = tempPath("race" + std::to_string(round) + ".db");
    int ok = 0;
    std::vector<pid_t> kids;
    for (int k = 0; k < 2; ++k) {
      const pid_t pid = fork();
      if (pid == 0) {
        try {
          rdb::RunStore s(path, rdb::RunStore::Options{});
          _exit(0);
        } catch (...) {
          _exit(3);
        }
      }
      kids.push_back(pid);
    }
    for (pid_t p : kids) {
      int st = 0;
      waitpid(p, &st, 0);
      ok += WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    EXPECT_EQ(ok, 1) << "round " << round;
  }
}

TEST(Blame, ARankKilledByASignalIsNamedAsTheRootCause) {
  // Rank 1 dies of SIGSEGV; rank 0 then fails with "connection reset by peer" and reports it first.
  auto r = cli(kTiny + "--steps 20 --nproc 2 -q --inject-failure 1:2:segv");
  EXPECT_EQ(r.status, 128 + SIGSEGV) << r.output;
  EXPECT_NE(r.output.find("rank 1 failed first: it was killed by Segmentation fault"), std::string::npos) << r.output;
}

TEST(Validation, NonFiniteOutOfRangeAndEmptyValuesAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {"--lr inf", "--lr: must be a finite number"},
      {"--clip nan", "--clip: must be a finite number"},
      {"--weight-decay inf", "--weight-decay: must be a finite number"},
      {"--beta1 nan", "--beta1: must be a finite number"},
      {"--beta2 2", "--beta2: must be in [0, 1)"},
      {"--fp16-init-scale inf --precision fp16", "--fp16-init-scale: must be a finite number"},
      {"--seed -1", "--seed: \"-1\" is not an integer"},
      {"--seed 18446744073709551616", "--seed: \"18446744073709551616\" is not an integer"},
      {"--lr ''", "--lr: is empty"},
      {"--inject-failure 5:1", "--inject-failure: names rank 5 step 1"},
      {"--threads 100000", "--threads: 100000 threads on"},
      {"--nproc 100000", "--nproc: 100000 ranks on"},
      {"--mbs 2 --ga 4611686018427387904", "mbs x ga x dp overflows"},
  };
  for (const auto& [flags, expect] : cases) {
    auto r = cli(std::string(kTiny) + "--steps 2 -q " + flags);
    EXPECT_EQ(r.status, 2) << flags << ": " << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << flags << ": " << r.output;
  }
}

TEST(BadFiles, DataThatIsNotAFileOrHasAWrongMagicIsRefused) {
  for (const std::string p : {std::string("/dev/null"), tempPath("")}) {
    auto r = cli(kTiny + "--steps 1 --data " + p);
    EXPECT_EQ(r.status, 2) << p << r.output;
    EXPECT_NE(r.output.find("is not a regular file"), std::string::npos) << r.output;
  }
  // An llm.c file whose magic number is wrong: version 1 and a matching count, magic 1234.
  const std::string f = tempPath("bad-magic.bin");
  {
    std::vector<int32_t> header(256, 0);
    header[0] = 1234;
    header[1] = 1;
    header[2] = 5000;
    std::ofstream out(f, std::ios::binary);
    out.write(reinterpret_cast<const char*>(header.data()), 1024);
    std::vector<uint16_t> tokens(5000, 7);
    out.write(reinterpret_cast<const char*>(tokens.data()), 10000);
  }
  auto r = cli(kTiny + "--steps 1 --data " + f);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("has an llm.c header with magic 1234"), std::string::npos) << r.output;
}

TEST(BadFiles, HuggingFaceKeysThatChangeTheModelAreRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {R"("layer_norm_epsilon": 1e-6)", "workload.layer_norm_epsilon"},
      {R"("tie_word_embeddings": false)", "workload.tie_word_embeddings"},
      {R"("scale_attn_weights": false)", "workload.scale_attn_weights"},
      {R"("resid_pdrop": 0.1)", "workload.resid_pdrop"}};
  for (const auto& [key, expect] : cases) {
    const std::string p = tempPath("hf.json");
    std::ofstream(p) << R"({"model_type":"gpt2","n_layer":2,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128,)"
                     << key << "}";
    auto r = cli("run --workload " + p + " --steps 1 --device cpu -q");
    EXPECT_EQ(r.status, 2) << key << ": " << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
  }
  const std::string ok = tempPath("hf-ok.json");
  std::ofstream(ok) << R"({"model_type":"gpt2","n_layer":2,"n_head":2,"n_embd":32,"n_positions":64,"vocab_size":128,)"
                    << R"("layer_norm_epsilon": 1e-5, "tie_word_embeddings": true, "resid_pdrop": 0.0})";
  EXPECT_EQ(cli("run --workload " + ok + " --steps 1 --device cpu -q").status, 0);
}
