// hardening_test.cpp — what a run keeps when it is stopped, killed or fails (issue: hardening):
// SIGTERM/SIGINT stop every rank at a step boundary and the trace is still merged; a killed run's log
// keeps its last step lines; a failed traced run names the shards it left; a failed trace merge is a
// warning, not a failed run; --overwrite removes an older run's stale shards but nothing that is not
// ours; of two runs started on one path at once exactly one gets it. Then round 2 ("numbers and data
// you can trust"): the stock Hugging Face config, messages printed once and without build paths, a
// double Ctrl-C, a signal to one rank, a full disk at close, the host's task and memory limits, and
// the rank a timed-out collective waited for.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "background.h"
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
using trainscope::testing::Background;
using trainscope::testing::ownV1Cgroup;
using trainscope::testing::rankPid;
using trainscope::testing::readFile;
}  // namespace

TEST(Stop, SigtermToTheLauncherStopsEveryRankAtAStepAndKeepsTheMergedTrace) {
  const std::string db = tempPath("stopped.db"), log = tempPath("stopped.log");
  // The launcher alone gets SIGTERM once step 3 is printed; it forwards it to the ranks.
  auto r = sh("(" + std::string(TRAINSCOPE_CLI) + kTiny + "--steps 100000 --nproc 2 --trace " + db + " > " + log +
              " 2>&1 & pid=$!; while kill -0 $pid 2>/dev/null; do grep -q 'step    3' " + log +
              " && break; sleep 0.1; done; kill -TERM $pid; wait $pid; echo rc=$?)");  // waits for the step, however long
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
  const std::string db = tempPath("logs-killed.db"), log = tempPath("logs-killed.log");
  // SIGKILL (no handler runs) once the log shows step 2 or later, however long that takes on a busy
  // machine: the condition is waited for, not a fixed time. The loop also ends if the run exits on
  // its own, and the test's ctest timeout bounds it.
  const auto r = sh("(" + std::string(TRAINSCOPE_CLI) + kTiny + "--steps 1000000 --out " + db + " > " + log +
                    " 2>&1 & pid=$!; until grep -qE 'step +([2-9]|[1-9][0-9]+) \\|' " + log +
                    "; do kill -0 $pid 2>/dev/null || break; sleep 0.1; done; kill -KILL $pid; wait $pid; echo rc=$?)");
  EXPECT_NE(r.output.find("rc=137"), std::string::npos) << "the run ended before it was killed: " << r.output;
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
      {R"("resid_pdrop": 1.5)", "workload.resid_pdrop"},
      {R"("scale_attn_by_inverse_layer_idx": true)", "workload.scale_attn_by_inverse_layer_idx"},
      {R"("n_layers": 4)", "workload.n_layers: unknown key \"n_layers\""}};
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

// ---- round 2 -------------------------------------------------------------------------------------

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace

TEST(Workload, TheStockGpt2ConfigKeysRunWithANoteAndModelTypeIsChecked) {
  // Every key of Hugging Face's stock gpt2 config.json (dropout 0.1 included), at a tiny size.
  const std::string p = tempPath("gpt2-tiny-config.json");
  std::ofstream(p) << R"({"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
    "bos_token_id": 127, "embd_pdrop": 0.1, "eos_token_id": 127, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
    "model_type": "gpt2", "n_ctx": 64, "n_embd": 32, "n_head": 2, "n_layer": 2, "n_positions": 64, "resid_pdrop": 0.1,
    "summary_activation": null, "summary_first_dropout": 0.1, "summary_proj_to_labels": true,
    "summary_type": "cls_index", "summary_use_proj": true, "task_specific_params": {"text-generation": {"do_sample": true, "max_length": 50}},
    "vocab_size": 128})";
  auto r = cli("run --workload " + p + " --seq 16 --mbs 2 --steps 1 --device cpu -q");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(count(r.output, "note: "), 1u) << r.output;
  EXPECT_NE(r.output.find("trains without dropout"), std::string::npos) << r.output;
  const std::string bad = tempPath("model-type-5.json");
  std::ofstream(bad) << R"({"model_type": 5, "n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 64,
                            "vocab_size": 128})";
  r = cli("run --workload " + bad + " --steps 1 --device cpu -q");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("workload.model_type: 5 in"), std::string::npos) << r.output;
}

TEST(Messages, ARefusalIsPrintedOnceAndFailuresShowNoBuildPathsOrRawGlooLines) {
  // Lanes that the config rules out: once, by the launcher, before any rank starts.
  auto r = cli(kTiny + "--steps 2 -q --nproc 2 --cpu-lanes 2 --precision bf16");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_EQ(count(r.output, "lanes need a CPU run"), 1u) << r.output;
  // A failing rank: one error line, the root cause's, with the thrower's file name only; rank 0's
  // "connection closed by peer" from Gloo is not printed before it.
  r = cli(kTiny + "--steps 20 -q --nproc 2 --inject-failure 1:2");
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_EQ(count(r.output, "error: "), 1u) << r.output;
  EXPECT_NE(r.output.find("rank 1 failed first: injected failure on rank 1 at step 2 [train.cpp:"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("[/"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("Connection closed by peer"), std::string::npos) << r.output;
}

TEST(Stop, ADoubleSigintWithinASecondIsOneRequestAndTheRunIsRecorded) {
  const std::string db = tempPath("double-int.db");
  Background run(kTiny + "--steps 100000 --nproc 2 --out " + db, "double-int.log");
  ASSERT_TRUE(run.waitFor("step    3")) << run.output();
  // The second Ctrl-C as a separate delivery: sent once the first has been taken (no longer pending).
  kill(run.pid, SIGINT);
  for (int i = 0; i < 2000; ++i) {
    const std::string st = readFile("/proc/" + std::to_string(run.pid) + "/status");
    const size_t at = st.find("ShdPnd:");
    if (at == std::string::npos || (std::stoull(st.substr(at + 7), nullptr, 16) & (1ull << (SIGINT - 1))) == 0) break;
    usleep(1000);
  }
  kill(run.pid, SIGINT);
  EXPECT_EQ(run.wait(), 128 + SIGINT) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("stopped by Interrupt after step"), std::string::npos) << out;
  EXPECT_NE(out.find("every rank finished its step"), std::string::npos) << out;
  rdb::RunReader reader(db);
  EXPECT_GE(reader.steps(0).size(), 4u);
  EXPECT_EQ(reader.steps(0).size(), reader.steps(1).size());
}

TEST(Blame, ASignalToOneRankNamesThatRankNotRankZero) {
  const std::string db = tempPath("rank-term.db");
  Background run(kTiny + "--steps 100000 --nproc 2 --out " + db, "rank-term.log");
  ASSERT_TRUE(run.waitFor("step    3")) << run.output();
  const pid_t rank1 = rankPid(run.pid, 1);
  ASSERT_GT(rank1, 0);
  kill(rank1, SIGTERM);
  EXPECT_EQ(run.wait(), 128 + SIGTERM) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("stopped by Terminated sent to rank 1 after step"), std::string::npos) << out;
  EXPECT_EQ(out.find("rank 0 failed"), std::string::npos) << out;
  rdb::RunReader reader(db);
  EXPECT_EQ(reader.steps(0).size(), reader.steps(1).size());
}

TEST(BadFiles, AForeignFileAtAShardPathIsNotCalledAShardAndACutLlmcHeaderIsRefused) {
  const std::string db = tempPath("foreign.db");
  std::ofstream(rdb::shardPath(db, 5)) << "somebody else's file";
  auto r = cli(kTiny + "--steps 20 --nproc 2 --inject-failure 1:2 -q --trace " + db);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("trace shards were not merged"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(rdb::shardPath(db, 5)), std::string::npos) << r.output;
  // llm.c's magic, then less than its 1024-byte header: truncated, not 50 raw tokens.
  const std::string f = tempPath("cut-header.bin");
  {
    std::vector<int32_t> start = {20240520, 1, 5000};
    start.resize(25, 7);
    std::ofstream(f, std::ios::binary).write(reinterpret_cast<const char*>(start.data()), 100);
  }
  r = cli(kTiny + "--seq 16 --steps 1 --data " + f);
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is truncated: it starts with llm.c's magic number"), std::string::npos) << r.output;
}

TEST(FailedClose, AFullDiskWhenTheDatabaseIsClosedWarnsAndKeepsEveryStep) {
  // --inject-failure close lowers the file-size limit below the database's size while it is closed:
  // folding its write-ahead log in then fails for real, as when the disk fills just then.
  const std::string db = tempPath("full-at-close.db");
  auto r = cli(kTiny + "--steps 3 -q --json --inject-failure close --out " + db);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("warning: the run database could not be closed cleanly"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\"final_loss\""), std::string::npos) << r.output;
  EXPECT_EQ(rdb::readSteps(db).size(), 3u);
}

TEST(Validation, ThreadsBeyondWhatTheHostsTaskLimitAllowsAreRefusedBeforeAnyRankStarts) {
  auto r = cli(kTiny + "--steps 1 -q --threads 100000 --oversubscribe");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--threads: 100000 threads per rank is more than trainscope starts"), std::string::npos)
      << r.output;
  // A real pids limit: a child of this process's own pids cgroup, with room for 300 tasks (v1's pids
  // hierarchy, as root; skipped elsewhere).
  const auto own = ownV1Cgroup("pids");
  const std::string name = own.value_or("") + "/trainscope-test-" + std::to_string(getpid());
  const std::string cg = "/sys/fs/cgroup/pids" + name;
  if (!own || mkdir(cg.c_str(), 0755) != 0) GTEST_SKIP() << "cannot create a pids cgroup here (" << cg << ")";
  std::ofstream(cg + "/pids.max") << "300\n";
  r = sh("sh -c 'echo $$ > " + cg + "/cgroup.procs && exec " + TRAINSCOPE_CLI + " " + kTiny +
         "--steps 1 -q --nproc 2 --threads 1000 --oversubscribe'");
  rmdir(cg.c_str());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--threads: 2 ranks with 1000 threads each need about"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pids.max of cgroup " + name + ")"), std::string::npos) << r.output;
}

TEST(MemoryCheck, ANestedCgroupV1LimitIsFound) {
  // The limit sits one level above the cgroup the run is in, as in a job with steps.
  const auto own = ownV1Cgroup("memory");
  const std::string name = own.value_or("") + "/trainscope-test-" + std::to_string(getpid());
  const std::string top = "/sys/fs/cgroup/memory" + name, inner = top + "/step";
  if (!own || mkdir(top.c_str(), 0755) != 0 || mkdir(inner.c_str(), 0755) != 0) {
    rmdir(top.c_str());
    GTEST_SKIP() << "cannot create a memory cgroup here (" << top << ")";
  }
  std::ofstream(top + "/memory.limit_in_bytes") << (int64_t(1) << 30) << "\n";
  auto r = sh("sh -c 'echo $$ > " + inner + "/cgroup.procs && exec " + TRAINSCOPE_CLI +
              " run --workload gpt2-124m --seq 1024 --mbs 8 --steps 1 --device cpu -q'");
  rmdir(inner.c_str());
  rmdir(top.c_str());
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("memory.limit_in_bytes of cgroup " + name + ")"), std::string::npos) << r.output;
}

TEST(CollectiveTimeout, AStoppedRankIsNamedNotOnlyTheRankThatWaited) {
  Background run(kTiny + "--steps 100000 --nproc 2 --collective-timeout 5", "stopped-rank.log");
  ASSERT_TRUE(run.waitFor("step    3")) << run.output();
  const pid_t rank1 = rankPid(run.pid, 1);
  ASSERT_GT(rank1, 0);
  kill(rank1, SIGSTOP);  // rank 0 now waits for it in the next collective, until --collective-timeout
  const int status = run.wait();
  kill(rank1, SIGKILL);  // in case the launcher left it (it does not: SIGKILL ends a stopped process)
  const std::string out = run.output();
  EXPECT_EQ(status, 1) << out;
  EXPECT_NE(out.find("error: rank 0 failed first: "), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 shows no sign of life"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 had been stopped (SIGSTOP)"), std::string::npos) << out;
  EXPECT_EQ(out.find("frame #"), std::string::npos) << out;  // no c10d backtraces
}

TEST(CollectiveTimeout, AHungRankIsNamedAsAliveButNotArrived) {
  auto r = cli(kTiny + "--steps 20 --nproc 2 -q --collective-timeout 4 --inject-failure 1:2:hang");
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 is alive but did not arrive (rank 1's last collective: "), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("frame #"), std::string::npos) << r.output;  // no c10d backtraces
}

// A user's file (or a link) at one of the run's shard paths is refused before anything is created: no
// run database is left at the path (which would make the next run need --overwrite), and the file is
// untouched. Before, the single-process run made PATH first and then refused rank 0's shard.
TEST(BadFiles, AForeignFileAtThisRunsShardPathLeavesNoRunDatabase) {
  for (const int nproc : {1, 2}) {
    const std::string db = tempPath("foreign-shard-" + std::to_string(nproc) + ".db");
    const std::string shard = rdb::shardPath(db, nproc - 1);
    std::ofstream(shard) << "somebody else's file";
    auto r = cli(kTiny + "--steps 2 -q --nproc " + std::to_string(nproc) + " --gbs " + std::to_string(2 * nproc) +
                 " --trace " + db);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--trace: " + shard + " exists and is not a trainscope run database"), std::string::npos)
        << r.output;
    EXPECT_FALSE(std::filesystem::exists(db)) << "nproc " << nproc << ": a refused run left " << db;
    EXPECT_EQ(readFile(shard), "somebody else's file");
  }
}

// `run --json` stopped by SIGINT still prints its line (exit 130): the steps it recorded, "stopped":
// true, and the summary's note that the run asked for more. Before, a stopped run printed no JSON
// at all, and a script reading the last line got the "stopped by …" text.
TEST(Stop, AStoppedRunStillPrintsItsJsonLineWithItsNote) {
  const std::string db = tempPath("stopped-json.db");
  Background run(kTiny + "--steps 100000 --json --out " + db, "stopped-json.log");
  ASSERT_TRUE(run.waitFor("step    3")) << run.output();
  kill(run.pid, SIGINT);
  EXPECT_EQ(run.wait(), 128 + SIGINT) << run.output();
  const std::string out = run.output();
  const size_t at = out.find("\n{");
  ASSERT_NE(at, std::string::npos) << out;
  const auto j = nlohmann::json::parse(out.substr(at + 1, out.find('\n', at + 1) - at - 1));
  EXPECT_TRUE(j["stopped"].get<bool>()) << j.dump();
  EXPECT_GE(j["steps"].get<int64_t>(), 4);
  ASSERT_EQ(j["summary"]["notes"].size(), 1u) << j.dump();
  EXPECT_NE(j["summary"]["notes"][0].get<std::string>().find("recorded of the 100000 the run was started for"),
            std::string::npos);
  EXPECT_EQ(rdb::RunReader(db).steps(0).size(), size_t(j["steps"].get<int64_t>()));
}
