// viewer_files_test.cpp — the viewer's model on the files it is handed: the bad files the loader must
// refuse (with the file named), studies read without writing, the pooled step time, the summary pass
// stopped when its document closes, a killed run's WAL read whole, nothing created beside a run or a
// study, a FIFO refused without blocking, many ranks each with their rows, imported Kineto traces and
// version-3 files without names. The model's level of detail, loading and statistics: viewer_test.cpp.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "../common/cli.h"
#include "kineto_structure.h"
#include "viewer_support.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/import_probe.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"
#include "trainscope/rundb/summary.h"
#include "trainscope/tuner/study.h"
#include "trainscope/viewer/comm.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/header.h"
#include "trainscope/viewer/image.h"
#include "trainscope/viewer/lod.h"
#include "trainscope/viewer/model.h"
#include "trainscope/viewer/names.h"
#include "trainscope/viewer/query.h"
#include "trainscope/viewer/ruler.h"
#include "trainscope/viewer/stats.h"
#include "trainscope/viewer/view_state.h"

namespace v = trainscope::viewer;
namespace db = trainscope::rundb;
using trainscope::testing::tempPath;

namespace {

// The names in a folder (what a reader must not add to).
std::set<std::string> listing(const std::string& dir) {
  std::set<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// True when the file's header says WAL (bytes 18 and 19 are 2).
bool walMode(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  char h[20] = {};
  f.read(h, sizeof h);
  return h[18] == 2 && h[19] == 2;
}

}  // namespace

TEST(ViewerModel, BadFilesAreRefusedWithTheFileNamed) {
  auto msg = [](const std::string& path) -> std::string {
    try {
      v::loadTrace(path);
    } catch (const trainscope::UserError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(msg("/no/such.db").find("/no/such.db does not exist"), std::string::npos);
  const std::string text = tempPath("notes.txt");
  std::ofstream(text) << "not a database\n";
  EXPECT_NE(msg(text).find("not a trainscope run database"), std::string::npos);
  // Truncated: the first 40% of a real run database.
  const std::string good = synthetic("v_layout.db", {2, 6'000, 3});
  const std::string cut = tempPath("cut.db");
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() * 2 / 5));
  }
  EXPECT_NE(msg(cut).find(cut), std::string::npos);
  // A schema version this build does not know.
  const std::string future = tempPath("future.db");
  std::filesystem::copy_file(good, future, std::filesystem::copy_options::overwrite_existing);
  {
    db::Database d(future, db::Database::Mode::ReadWrite);
    d.exec("UPDATE meta SET value = '99' WHERE key = 'schema_version'");
  }
  EXPECT_NE(msg(future).find("99"), std::string::npos) << msg(future);
  // An empty trace loads, with nothing in it.
  const std::string empty = tempPath("empty.db");
  { db::RunStore s(empty, {}); }
  const v::Trace t = v::loadTrace(empty);
  EXPECT_EQ(t.event_count, 0);
  EXPECT_EQ(t.ranks.size(), 1u);
}

TEST(ViewerModel, StudySnapshotReadsTrialsWithoutWriting) {
  const std::string path = tempPath("study.db");
  {
    trainscope::tuner::Study s(path, R"({"workload":"tiny","cluster":"cpu-local","memory_bytes":1000})", false);
    trainscope::tuner::TrialRecord tr;
    tr.candidate = 4;
    tr.round = 0;
    tr.steps = 3;
    tr.id = s.beginTrial(tr);
    tr.status = trainscope::tuner::TrialStatus::Ok;
    tr.step_s = 0.5;
    tr.peak_bytes = 900;
    tr.db_path = "/tmp/x.db";
    s.finishTrial(tr);
    s.setValue("recommended", "4");
  }
  const auto before = std::filesystem::last_write_time(path);
  const auto snap = trainscope::tuner::readStudy(path);
  EXPECT_EQ(snap.workload, "tiny");
  EXPECT_EQ(snap.memory_bytes, 1000);
  EXPECT_EQ(snap.recommended, 4);
  ASSERT_EQ(snap.trials.size(), 1u);
  EXPECT_EQ(snap.trials[0].status, trainscope::tuner::TrialStatus::Ok);
  EXPECT_DOUBLE_EQ(snap.trials[0].step_s, 0.5);
  EXPECT_EQ(std::filesystem::last_write_time(path), before);
  EXPECT_THROW(trainscope::tuner::readStudy(synthetic("v_layout.db", {2, 6'000, 3})), trainscope::UserError);
}

TEST(ViewerModel, PooledStepTimeWeighsEachOkTrialByItsCountedSteps) {
  // What the tuner picks on and the viewer and terminal show: (2·0.5 + 11·0.25) / 13.
  using trainscope::tuner::TrialRecord;
  using trainscope::tuner::TrialStatus;
  auto trial = [](int64_t cand, int64_t steps, double s, TrialStatus st) {
    TrialRecord t;
    t.candidate = cand, t.steps = steps, t.step_s = s, t.status = st;
    return t;
  };
  const std::vector<TrialRecord> trials = {trial(1, 3, 0.5, TrialStatus::Ok), trial(1, 12, 0.25, TrialStatus::Ok),
                                           trial(1, 12, 9.0, TrialStatus::Hang), trial(2, 3, 0.125, TrialStatus::Ok)};
  int64_t n = 0;
  EXPECT_DOUBLE_EQ(trainscope::tuner::pooledStepTime(trials, 1, &n), (2 * 0.5 + 11 * 0.25) / 13);
  EXPECT_EQ(n, 2);
  EXPECT_DOUBLE_EQ(trainscope::tuner::pooledStepTime(trials, 2), 0.125);
  EXPECT_EQ(trainscope::tuner::pooledStepTime(trials, 3, &n), 0);
  EXPECT_EQ(n, 0);
}

TEST(ViewerModel, TheSummaryPassStopsWhenTheDocumentIsClosed) {
  // The app computes statistics and the run summary after the timeline is up; closing the file sets
  // the load's cancel flag, and both passes must then stop rather than make the close wait.
  const std::string path = synthetic("v_layout.db", {2, 6'000, 3});
  const v::Trace t = v::loadTrace(path, nullptr, 0, /*summary=*/false);
  std::atomic<bool> cancel{false};
  ASSERT_FALSE(v::computeStatistics(t, &cancel).rows.empty());
  ASSERT_TRUE(v::loadSummary(path, &cancel));  // not cancelled: as before
  cancel.store(true);
  EXPECT_THROW(v::computeStatistics(t, &cancel), v::Cancelled);
  EXPECT_THROW(v::loadSummary(path, &cancel), v::Cancelled);
  // A query already running stops too: the reader's statements are interrupted once the flag is set.
  db::RunReader r(path);
  std::atomic<bool> stop{false};
  r.interruptWhen(&stop);
  EXPECT_FALSE(r.events<db::HostOp>(0).empty());
  stop.store(true);
  EXPECT_ANY_THROW(r.events<db::HostOp>(0));
  r.interruptWhen(nullptr);  // and the reader works again without it
  EXPECT_FALSE(r.events<db::HostOp>(0).empty());
  // The summary's own work between its queries (the device work's order, the waits, stragglers and
  // critical paths, each rank's breakdown) stops too: given the flag, it throws even on a reader whose
  // queries nothing interrupts (before, only the queries stopped and the in-memory pass ran on).
  std::map<int64_t, db::DeviceWork> work;
  work[0].kernels.push_back({{0, 10, -1}, false});
  std::atomic<bool> go_on{false};
  EXPECT_EQ(db::summarize(r, 1, work, &go_on).ranks.size(), 2u);  // not cancelled: summarized
  EXPECT_THROW(db::summarize(r, 1, work, &stop), db::SummaryCancelled);  // `stop` is set, `r` not interrupted
}

// A run killed with its last writes still in the -wal (never closed, never checkpointed), and a copy
// of it made without the -shm: both read with every step and event. Reading it must not go by the
// file alone (immutable), which would drop what the -wal holds.
TEST(ViewerModel, AKilledRunsWalIsReadWholeEvenWithoutItsShm) {
  const std::string dir = tempPath("killed-wal"), copy = tempPath("killed-wal-copy");
  std::filesystem::create_directories(dir);
  std::filesystem::create_directories(copy);
  const std::string path = dir + "/run.db";
  constexpr int kSteps = 6;
  const int64_t t0 = 1'700'000'000'000'000'000;
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto* s = new db::RunStore(path, db::RunStore::Options{});  // never destroyed: as a SIGKILL leaves it
    s->setMeta("world_size", "1");
    for (int i = 0; i < kSteps; ++i) {
      const int64_t a = t0 + i * 1'000'000;
      s->begin();
      s->put(std::vector<db::Range>{{a, a + 900'000, s->intern("step"), s->intern("trainscope"), 7, 0, 0, 0},
                                    {a + 100'000, a + 500'000, s->intern("forward"), s->intern("trainscope"), 7, 1, 0, 0}});
      s->commit();
      db::Step st;
      st.step = i;
      st.start_ns = a;
      st.step_time_ns = 900'000;
      st.tokens = 64;
      s->appendStep(st);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ASSERT_TRUE(walMode(path));
  ASSERT_GT(std::filesystem::file_size(path + "-wal"), 32u) << "the writes are meant to be in the -wal";
  std::filesystem::copy_file(path, copy + "/run.db");
  std::filesystem::copy_file(path + "-wal", copy + "/run.db-wal");
  const auto before = listing(dir);
  for (const std::string& p : {path, copy + "/run.db"}) {
    const v::Trace t = v::loadTrace(p);
    EXPECT_EQ(t.steps.size(), size_t(kSteps)) << p;
    EXPECT_EQ(t.event_count, 3 * kSteps) << p;  // two ranges and a step block per step
    EXPECT_EQ(db::readSteps(p).size(), size_t(kSteps)) << p;
  }
  EXPECT_EQ(listing(dir), before);  // the killed run's own -wal and -shm: joined, nothing added
  // The copy: SQLite makes the -shm it needs to read the -wal, and nothing else.
  EXPECT_EQ(listing(copy), (std::set<std::string>{"run.db", "run.db-wal", "run.db-shm"}));

  // The same copy in a folder the reader cannot write: the -shm cannot be made, and an immutable read
  // would drop the steps in the -wal. Refused, saying what to do, and nothing is written there.
  const std::string locked = tempPath("killed-wal-locked");
  std::filesystem::create_directories(locked);
  std::filesystem::copy_file(path, locked + "/run.db");
  std::filesystem::copy_file(path + "-wal", locked + "/run.db-wal");
  const auto locked_before = listing(locked);
  std::string out;
  if (::geteuid() == 0) {  // root writes anywhere: read as nobody, for whom the folder is read-only
    if (trainscope::testing::sh("setpriv --reuid=65534 --regid=65534 --clear-groups true").status != 0)
      GTEST_SKIP() << "setpriv cannot drop to nobody";
    const auto r = trainscope::testing::sh("setpriv --reuid=65534 --regid=65534 --clear-groups " +
                                           std::string(TRAINSCOPE_CLI) + " report " + locked + "/run.db");
    EXPECT_EQ(r.status, 2) << r.output;
    out = r.output;
  } else {
    ASSERT_EQ(::chmod(locked.c_str(), 0555), 0);
    try {
      v::loadTrace(locked + "/run.db");
      ADD_FAILURE() << "read without the steps in its -wal";
    } catch (const trainscope::UserError& e) {
      out = e.what();
    }
    ::chmod(locked.c_str(), 0755);
  }
  EXPECT_NE(out.find("run.db-wal holds writes not yet in"), std::string::npos) << out;
  EXPECT_NE(out.find("-wal together into a writable folder"), std::string::npos) << out;
  EXPECT_EQ(listing(locked), locked_before);
}

// Opening a finished run (journal_mode=DELETE) and a finished study (WAL, closed) creates no -wal,
// -shm or any other file beside them: what the viewer and every reader do.
TEST(ViewerModel, ReadingARunOrAStudyCreatesNothingBesideIt) {
  const std::string dir = tempPath("read-only-folder");
  std::filesystem::create_directories(dir);
  const std::string run = dir + "/run.db", study = dir + "/study.db";
  v::writeSyntheticTrace(run, {2, 2'000, 2});
  {
    trainscope::tuner::Study s(study, R"({"workload":"tiny","cluster":"cpu-local","memory_bytes":1000})", false);
    trainscope::tuner::TrialRecord tr;
    tr.candidate = 1;
    tr.steps = 2;
    tr.db_path = run;
    tr.id = s.beginTrial(tr);
    tr.status = trainscope::tuner::TrialStatus::Ok;
    s.finishTrial(tr);
  }
  ASSERT_TRUE(walMode(study));
  const auto before = listing(dir);
  ASSERT_EQ(before, (std::set<std::string>{"run.db", "study.db"}));
  EXPECT_TRUE(trainscope::tuner::isStudy(study));
  EXPECT_EQ(trainscope::tuner::readStudy(study).trials.size(), 1u);
  EXPECT_GT(v::loadTrace(run).event_count, 0);
  EXPECT_TRUE(v::loadSummary(run));
  EXPECT_EQ(listing(dir), before);
}

// A FIFO where a run database or study should be is refused at once, not waited on.
TEST(ViewerModel, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = tempPath("model.fifo");
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(db::looksLikeSqlite(fifo));
  EXPECT_FALSE(trainscope::tuner::isStudy(fifo));
  try {
    v::loadTrace(fifo);
    ADD_FAILURE() << "a FIFO loaded";
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
  try {  // every read-only open checks through files::requireRegularFile before SQLite opens anything
    db::Database d(fifo, db::Database::Mode::ReadOnly);
    ADD_FAILURE() << "a FIFO opened as a database";
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a regular file"), std::string::npos) << e.what();
  }
  EXPECT_THROW(v::readPng(fifo), trainscope::UserError);
}

// Tens of thousands of ranks load in one pass per table (steps, collectives and counters are not
// queried or scanned once per rank), and each rank still gets exactly its own rows.
TEST(ViewerModel, ManyRanksLoadEachWithItsOwnRows) {
  v::SyntheticOptions o;
  o.ranks = 3'000;
  o.events_per_rank = 10;
  o.steps = 2;
  o.kernels = false;
  const std::string path = synthetic("v_many_ranks.db", o);
  const v::Trace t = v::loadTrace(path);
  ASSERT_EQ(t.ranks.size(), size_t(o.ranks));
  for (int64_t r : {int64_t(0), int64_t(1), int64_t(1'234), int64_t(o.ranks - 1)}) {
    const v::RankGroup& g = t.ranks[size_t(r)];
    EXPECT_EQ(g.rank, r);
    const auto own = db::readSteps(path, r);
    ASSERT_EQ(own.size(), 2u);
    const v::Track* steps = findTrack(t, r, v::TrackKind::Steps);
    ASSERT_TRUE(steps);
    ASSERT_EQ(steps->lanes.size(), 1u);
    ASSERT_EQ(steps->lanes[0].events.size(), 2u);
    EXPECT_EQ(steps->lanes[0].events[1].start, own[1].start_ns);
    const v::Track* coll = findTrack(t, r, v::TrackKind::Collectives);
    ASSERT_TRUE(coll);
    EXPECT_EQ(coll->lanes[0].events.size(), 2u);
    const v::Track* mem = findTrack(t, r, v::TrackKind::Counter);
    ASSERT_TRUE(mem);
    EXPECT_EQ(mem->label, "memory");
    ASSERT_EQ(mem->counter.ts.size(), 4u);  // two samples per step
    EXPECT_TRUE(std::is_sorted(mem->counter.ts.begin(), mem->counter.ts.end()));
    EXPECT_EQ(mem->counter.ts[0], own[0].start_ns);
    for (size_t ti : g.tracks) EXPECT_EQ(t.tracks[ti].rank, r);
  }
}

// --- Ranks related: collectives linked across ranks (rundb::linkCollectives, viewer/comm.h) ---

TEST(ViewerModel, AnImportedKinetoTraceShowsItsNamesItsGpuAnnotationsAndOnlyItsRank) {
  const std::string in = tempPath("v_structure.json"), path = tempPath("v_structure.db");
  std::ofstream(in) << trainscope::testing::kinetoStructureTrace();
  db::importTraces({in}, path, true);
  const v::Trace t = v::loadTrace(path, nullptr, 2);
  ASSERT_EQ(t.ranks.size(), 1u);  // no phantom rank 0: world_size counts the one file
  const v::RankGroup& g = t.ranks[0];
  EXPECT_EQ(g.rank, 3);
  EXPECT_EQ(g.process, "python3 (pid 4242)");
  std::vector<std::pair<v::TrackKind, std::string>> rows;
  for (size_t i : g.tracks) rows.emplace_back(t.tracks[i].kind, t.tracks[i].label);
  using K = v::TrackKind;
  const std::vector<std::pair<v::TrackKind, std::string>> want = {
      {K::Steps, "steps"},
      {K::Thread, "thread -5"},                  // no name: the tid, signed (sort: its id)
      {K::Thread, "thread 4242 (python3)"},      // sort index 4242
      {K::Thread, "thread 77 (pt_autograd_0)"},  // tid -77, sort index 5000
      {K::Annotations, "stream 7 annotations (device 0)"},
      {K::Stream, "stream 7 (device 0)"},
      {K::Stream, "stream 20 (device 0)"}};
  EXPECT_EQ(rows.size(), want.size());
  for (size_t i = 0; i < std::min(rows.size(), want.size()); ++i) {
    EXPECT_EQ(rows[i].second, want[i].second) << i;
    EXPECT_TRUE(rows[i].first == want[i].first) << rows[i].second;
  }
  const v::Track* autograd = &t.tracks[g.tracks[3]];
  EXPECT_EQ(autograd->id, -77);
  EXPECT_EQ(autograd->name, "thread 77 (pt_autograd_0)");
  // The annotations nest (ProfilerStep#7 encloses forward); the stream below holds only kernels.
  const v::Track* ann = findTrack(t, 3, K::Annotations);
  ASSERT_NE(ann, nullptr);
  EXPECT_EQ(ann->device, 0);
  EXPECT_EQ(ann->id, 7);
  ASSERT_EQ(ann->lanes.size(), 2u);
  ASSERT_EQ(ann->lanes[0].events.size(), 1u);
  ASSERT_EQ(ann->lanes[1].events.size(), 1u);
  EXPECT_EQ(t.names[ann->lanes[0].events[0].name], "ProfilerStep#7");
  EXPECT_EQ(t.names[ann->lanes[1].events[0].name], "forward");
  EXPECT_TRUE(ann->lanes[0].events[0].kind == v::EventKind::Range);
  EXPECT_EQ(ann->lanes[0].events[0].start, trainscope::testing::kStructureBase + 99'999);
  const v::Track& stream7 = t.tracks[g.tracks[5]];
  int kernels = 0;
  for (const auto& l : stream7.lanes)
    for (const auto& e : l.events) kernels += e.kind == v::EventKind::Kernel ? 1 : -100;
  EXPECT_EQ(kernels, 2);
  EXPECT_EQ(t.event_count, 1 + 1 + 5 + 2 + 2 + 3);  // step, CPU range, ops, launches, annotations, kernels
}

namespace {

// The details of rank 0's first step in the run database at `path`, by field.
std::map<std::string, std::string> firstStepDetails(const std::string& path) {
  const v::Trace t = v::loadTrace(path);
  EXPECT_EQ(t.ranks.size(), 1u);
  const v::Track* steps = t.ranks.empty() ? nullptr : findTrack(t, t.ranks[0].rank, v::TrackKind::Steps);
  std::map<std::string, std::string> f;
  if (!steps || steps->lanes.empty() || steps->lanes[0].events.empty()) {
    ADD_FAILURE() << path << ": no step track";
    return f;
  }
  db::RunReader reader(path);
  for (const auto& [key, value] : v::eventDetails(reader, t, {uint32_t(steps - t.tracks.data()), 0, 0})) f[key] = value;
  return f;
}

}  // namespace

// An imported trace's step has no loss, no token counts and (without profile_memory) no memory
// events: its details say "not recorded" (they read loss 0.0000, tokens 0, tokens/s 0, peak 0 B).
TEST(ViewerModel, AnImportedStepsDetailsSayWhatTheTraceDidNotRecord) {
  const std::string in = tempPath("v_step_fields.json"), path = tempPath("v_step_fields.db");
  std::ofstream(in) << trainscope::testing::kinetoStructureTrace();
  db::importTraces({in}, path, true);
  std::map<std::string, std::string> f = firstStepDetails(path);
  for (const char* key : {"loss", "tokens", "tokens/s", "peak memory"}) EXPECT_EQ(f[key], "not recorded") << key;
}

// A probe trial's step with tokens but no loss (torchtitan; Megatron's non-last stages): "not recorded".
TEST(ViewerModel, AProbeStepWithoutALossSaysItWasNotRecorded) {
  const std::string dir = tempPath("v_probe_noloss");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/rank0.steps.jsonl")
      << R"({"rank": 0, "step": 0, "start_ns": 1000000, "step_time_ns": 5000000, "tokens": 128, "world": 1})" << "\n";
  const std::string path = dir + "/t.db";
  db::importProbe({dir + "/rank0.steps.jsonl"}, {}, path, "tiny", "--study");
  std::map<std::string, std::string> f = firstStepDetails(path);
  EXPECT_EQ(f["loss"], "not recorded");
  EXPECT_EQ(f["tokens"], "128");
  // In a run of this runtime a NULL loss is a NaN the step computed (SQLite stores NaN as NULL).
  {
    db::Database d(path, db::Database::Mode::ReadWrite);
    d.exec("UPDATE meta SET value = 'run' WHERE key = 'source'");
  }
  EXPECT_EQ(firstStepDetails(path)["loss"], "NaN (not finite)");
}

// A file written before the threads table (schema version 3) loads as before: ids label the rows.
TEST(ViewerModel, AVersion3FileWithoutNamesLoadsWithIdsForLabels) {
  const std::string in = tempPath("v_structure3.json"), path = tempPath("v_structure3.db");
  std::ofstream(in) << trainscope::testing::kinetoStructureTrace();
  db::importTraces({in}, path, true);
  {
    db::Database d(path, db::Database::Mode::ReadWrite);
    d.exec("DROP TABLE threads; DROP TABLE gpu_annotations; UPDATE meta SET value = '3' WHERE key = 'schema_version'");
  }
  db::RunReader r(path);
  EXPECT_EQ(r.schemaVersion(), 3);
  EXPECT_TRUE(r.threads().empty());
  EXPECT_TRUE(r.events<db::GpuAnnotation>(3).empty());
  EXPECT_FALSE(r.hasEvents("gpu_annotations"));
  const v::Trace t = v::loadTrace(path);
  ASSERT_EQ(t.ranks.size(), 1u);
  EXPECT_EQ(t.ranks[0].process, "");
  std::vector<std::string> labels;
  for (size_t i : t.ranks[0].tracks) labels.push_back(t.tracks[i].label);
  EXPECT_EQ(labels, (std::vector<std::string>{"steps", "thread -77", "thread -5", "thread 4242", "stream 7 (device 0)",
                                              "stream 20 (device 0)"}));
}

// A traced run killed before it merged its ranks' shards holds its steps and no event: drawn as it is,
// it read as a run that did nothing between its steps (audit 2026-12-07: `run --nproc 2 --trace`
// killed with SIGKILL at step 4). The header says the events were not merged and names the shards
// beside it that hold them; nothing is said for a run traced at level steps or one with events.
TEST(ViewerModel, AKilledTracedRunNamesTheShardsHoldingItsEvents) {
  auto make = [](const std::string& path, const std::string& level, bool with_event) {
    std::filesystem::remove(path);
    db::RunStore s(path, db::RunStore::Options{});
    s.setMeta("world_size", "2");
    s.setMeta("trace_level", level);
    s.setMeta("source", "run");
    if (with_event) {
      s.begin();
      s.put(std::vector<db::Range>{{1000, 2000, s.intern("step"), s.intern("trainscope"), 7, 0, 0, 0}});
      s.commit();
    }
    for (int64_t r = 0; r < 2; ++r) {
      db::Step st;
      st.rank = r;
      st.start_ns = 1000;
      st.step_time_ns = 1000;
      st.tokens = 64;
      s.appendStep(st);
    }
    s.close();
  };
  const std::string killed = tempPath("killed_run.db");
  make(killed, "ranges", false);
  for (int64_t r = 0; r < 2; ++r) std::filesystem::remove(db::shardPath(killed, r));
  std::string h = v::unmergedTraceHeader(killed, v::loadTrace(killed));
  EXPECT_NE(h.find("traced at level ranges, but its events are not merged"), std::string::npos) << h;
  EXPECT_NE(h.find("no shard of its ranks (killed_run.db.rank0, ...)"), std::string::npos) << h;

  for (int64_t r = 0; r < 2; ++r) db::RunStore(db::shardPath(killed, r), db::RunStore::Options{}).close();
  h = v::unmergedTraceHeader(killed, v::loadTrace(killed));
  EXPECT_NE(h.find("the events recorded are in killed_run.db.rank0, killed_run.db.rank1 (open each on its own)"),
            std::string::npos)
      << h;

  const std::string steps_only = tempPath("steps_level_run.db"), traced = tempPath("traced_run.db");
  make(steps_only, "steps", false);
  make(traced, "ranges", true);
  EXPECT_EQ(v::unmergedTraceHeader(steps_only, v::loadTrace(steps_only)), "");
  EXPECT_EQ(v::unmergedTraceHeader(traced, v::loadTrace(traced)), "");
  // A run without --trace records trace_level "off": it has steps alone by design, nothing to merge.
  const std::string untraced = tempPath("untraced_run.db");
  make(untraced, "off", false);
  EXPECT_EQ(v::unmergedTraceHeader(untraced, v::loadTrace(untraced)), "");
}
