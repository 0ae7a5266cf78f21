// output_safety_test.cpp — every output of every command under one rule (files::OutputRule): never
// the input nor its -wal/-shm/-journal, never a non-regular file, an existing file only with
// --overwrite or when it is an earlier output of the same kind. A table of (command, output flag)
// lists every output path a command writes; at each, every hazard is planted and must survive
// byte for byte (or type for type) while the command exits non-zero naming the flag. Then a fresh
// path works, --overwrite replaces a regular file, and an earlier output of the same kind is
// replaced. `run` is in the table when trainscope-train is built beside trainscope; the viewer's
// outputs when the viewer is built.
#include <gtest/gtest.h>

#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/store.h"
#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/study.h"
#include "trainscope/viewer/notes.h"

#ifdef TRAINSCOPE_VIEWER
#include "viewer_app_support.h"
#endif

namespace {

using trainscope::testing::cli;
using trainscope::testing::sh;
using trainscope::testing::tempPath;
namespace fs = std::filesystem;

const std::string kCli = TRAINSCOPE_CLI;
const std::string kTinyWorkload = std::string(TRAINSCOPE_FUZZ_DIR) + "/../../workloads/tiny.json";

std::string readAll(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

void writeText(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// A run database of one step.
void makeRunDb(const std::string& path) {
  trainscope::rundb::RunStore st(path, {true, "--out", false});
  st.setMeta("world_size", "1");
  st.putRank({0, "node0", "cpu"});
  trainscope::rundb::Step s;
  s.step = 0;
  s.start_ns = 1'000'000;
  s.step_time_ns = 2'000'000;
  s.loss = 5.5;
  st.appendStep(s);
  st.close();
}

// A study with one candidate that `export --format run --trial 0` writes.
void makeStudy(const std::string& path) {
  trainscope::tuner::Study st(path, R"({"workload":"tiny","cluster":"cpu-local","memory_bytes":1000000})", false);
  trainscope::tuner::Candidate c;
  st.saveCandidates({c}, {trainscope::runconfig::toJson(trainscope::runconfig::TrainConfig{})});
}

// What is at a path, to compare before and after: its type, bytes, a link's target and its bytes,
// a folder's entries.
std::string snapshot(const std::string& p) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) return "missing";
  if (S_ISREG(st.st_mode)) return "file " + std::to_string(st.st_ino) + ":" + readAll(p);
  if (S_ISLNK(st.st_mode)) {
    char buf[4096];
    const ssize_t n = ::readlink(p.c_str(), buf, sizeof buf);
    const std::string target(buf, size_t(std::max<ssize_t>(n, 0)));
    return "link " + target + ":" + readAll(target);
  }
  if (S_ISDIR(st.st_mode)) {
    std::string s = "dir";
    for (const auto& e : fs::directory_iterator(p)) s += " " + e.path().filename().string();
    return s;
  }
  if (S_ISFIFO(st.st_mode)) return "fifo";
  if (S_ISCHR(st.st_mode)) return "chr " + std::to_string(st.st_rdev);
  return "other";
}

enum class Hazard { Input, InputWal, RunDb, Study, Text, Fifo, Device, Link, Dir };
const char* name(Hazard h) {
  static const char* n[] = {"the input", "the input's -wal", "another run database", "a study", "a text file",
                            "a FIFO", "a device node", "a link to a file", "a directory"};
  return n[int(h)];
}

// One output of one command: how to run it writing `out`, what it reads, and what replaces what.
struct Output {
  std::string label;  // "export --chrome"
  std::string flag;   // named in its errors
  std::string input;  // a regular file the command reads ("": none to plant at)
  std::function<std::string(const std::string& out, bool overwrite)> command;  // a shell command line
  std::function<std::string(const std::string& folder)> path;  // where to write in a folder of its own
  bool has_overwrite = true;   // the command takes --overwrite
  bool overwrite_any = true;   // --overwrite replaces a plain regular file (run databases: only a run database)
  bool earlier_free = true;    // its own earlier output is replaced without --overwrite
  bool positive = true;        // it can write here (no LibTorch trials, no 20 s measuring)
};

std::string q(const std::string& s) { return "'" + s + "'"; }

std::vector<Output> outputs(const std::string& run, const std::string& study, const std::string& trace,
                            const std::string& workload) {
  const auto plain = [](const std::string& file) { return [file](const std::string& d) { return d + "/" + file; }; };
  const auto ow = [](bool o) { return o ? std::string(" --overwrite") : std::string(); };
  std::vector<Output> v;
  v.push_back({"export --chrome", "--chrome", run,
               [=](const std::string& o, bool w) { return q(kCli) + " export " + q(run) + " --chrome " + q(o) + ow(w); },
               plain("out.json")});
  v.push_back({"export -o (study)", "-o", study,
               [=](const std::string& o, bool w) {
                 return q(kCli) + " export " + q(study) + " --format run --trial 0 -o " + q(o) + ow(w);
               },
               plain("out.json"), true, true, false});
  v.push_back({"import -o", "-o", trace,
               [=](const std::string& o, bool w) { return q(kCli) + " import " + q(trace) + " -o " + q(o) + ow(w); },
               plain("out.db"), true, false, false});
  v.push_back({"tune --study", "--study", workload,
               [=](const std::string& o, bool) {
                 return q(kCli) + " tune --workload " + q(workload) + " --gbs 8 --max-trials 1 --study " + q(o);
               },
               plain("study.db"), false, false, false, false});
  // `tune --cluster local` writes STUDY.cluster.json: checked before the study's 20 s of measuring.
  v.push_back({"tune --cluster local", "--cluster local", "",
               [=](const std::string& o, bool) {
                 const std::string s = o.substr(0, o.size() - std::string(".cluster.json").size());
                 return q(kCli) + " tune --workload " + q(workload) + " --gbs 8 --cluster local --study " + q(s);
               },
               plain("s.db.cluster.json"), false, false, false, false});
  if (fs::exists(fs::path(kCli).parent_path() / "trainscope-train")) {
    for (const std::string flag : {"--out", "--trace"})
      v.push_back({"run " + flag, flag, workload,
                   [=](const std::string& o, bool w) {
                     return q(kCli) + " run --workload " + q(workload) + " --steps 1 -q " + flag + " " + q(o) + ow(w);
                   },
                   plain("run.db"), true, false, false});
  }
#ifdef TRAINSCOPE_VIEWER
  const std::string viewer = TRAINSCOPE_VIEWER;
  v.push_back({"viewer --screenshot", "--screenshot", run,
               [=](const std::string& o, bool w) {
                 return q(viewer) + " " + q(run) + " --size 400x300 --frames 1 --screenshot " + q(o) + ow(w);
               },
               plain("shot.png")});
  v.push_back({"viewer --layout", "--layout", run,
               [=](const std::string& o, bool w) {
                 const std::string png = fs::path(o).parent_path().string() + "/layout-shot.png";
                 return q(viewer) + " " + q(run) + " --size 400x300 --frames 1 --screenshot " + q(png) + " --layout " +
                        q(o) + ow(w);
               },
               plain("layout.json")});
  v.push_back({"viewer script csv", "csv", run,
               [=](const std::string& o, bool w) {
                 static int n = 0;
                 const std::string dir = fs::path(o).parent_path().string();
                 const std::string script = dir + "/script-" + std::to_string(n++) + ".txt";
                 writeText(script, "csv stats " + o + "\n");
                 return q(viewer) + " " + q(run) + " --size 400x300 --frames 1 --screenshot " + q(dir + "/csv-shot.png") +
                        " --script " + q(script) + ow(w);
               },
               plain("table.csv")});
#endif
  return v;
}

class OutputSafety : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
#ifdef TRAINSCOPE_VIEWER
    trainscope::testing::ensureDisplay();
#endif
  }
};

TEST_F(OutputSafety, EveryOutputOfEveryCommandRefusesEveryHazardAndWritesWhereItMay) {
  const std::string base = tempPath("outputs");
  fs::create_directories(base);
  const std::string run = base + "/in-run.db", study = base + "/in-study.db", trace = base + "/in-trace.json",
                    workload = base + "/in-workload.json";
  makeRunDb(run);
  makeStudy(study);
  writeText(trace, R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 50.0,)"
                   R"( "dur": 5.0, "args": {"stream": 7, "correlation": 5}}]})");
  fs::copy_file(kTinyWorkload, workload);
  const std::string other_run = base + "/other-run.db", other_study = base + "/other-study.db";
  makeRunDb(other_run);
  makeStudy(other_study);
  const std::string inputs_before = snapshot(run) + snapshot(study) + snapshot(trace) + snapshot(workload);

  int n = 0;
  for (const Output& o : outputs(run, study, trace, workload)) {
    SCOPED_TRACE(o.label);
    for (Hazard h : {Hazard::Input, Hazard::InputWal, Hazard::RunDb, Hazard::Study, Hazard::Text, Hazard::Fifo,
                     Hazard::Device, Hazard::Link, Hazard::Dir}) {
      if ((h == Hazard::Input || h == Hazard::InputWal) && o.input.empty()) continue;
      SCOPED_TRACE(name(h));
      const std::string dir = base + "/case-" + std::to_string(n++);
      fs::create_directories(dir);
      std::string at = o.path(dir);
      switch (h) {
        case Hazard::Input: at = o.input; break;
        case Hazard::InputWal: at = o.input + "-wal"; break;
        case Hazard::RunDb: fs::copy_file(other_run, at); break;
        case Hazard::Study: fs::copy_file(other_study, at); break;
        case Hazard::Text: writeText(at, "precious notes\n"); break;
        case Hazard::Fifo: ASSERT_EQ(::mkfifo(at.c_str(), 0600), 0); break;
        case Hazard::Device:  // a character device like /dev/null (root), else a link to /dev/null
          if (::mknod(at.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) ASSERT_EQ(::symlink("/dev/null", at.c_str()), 0);
          break;
        case Hazard::Link:
          writeText(dir + "/target.txt", "someone else's file\n");
          ASSERT_EQ(::symlink((dir + "/target.txt").c_str(), at.c_str()), 0);
          break;
        case Hazard::Dir:
          fs::create_directories(at);
          writeText(at + "/inside.txt", "kept\n");
          break;
      }
      if (h == Hazard::InputWal && o.flag == "--cluster local") continue;
      const std::string before = snapshot(at);
      const auto r = sh("timeout 120 " + o.command(at, false) + " < /dev/null");
      EXPECT_NE(r.status, 0) << r.output;
      EXPECT_NE(r.status, 124) << "timed out (waited on a FIFO?)";
      EXPECT_NE(r.output.find(o.flag + ":"), std::string::npos) << r.output;
      EXPECT_EQ(snapshot(at), before) << "the planted thing changed";
      if (h == Hazard::Input || h == Hazard::InputWal) continue;
      // Nothing else was left: no temporary file, no study or database beside it.
      for (const auto& e : fs::directory_iterator(dir))
        EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
    }
    EXPECT_EQ(snapshot(run) + snapshot(study) + snapshot(trace) + snapshot(workload), inputs_before)
        << "an input changed";
    EXPECT_FALSE(fs::exists(run + "-wal") || fs::exists(study + "-wal") || fs::exists(trace + "-wal") ||
                 fs::exists(workload + "-wal"));
    if (!o.positive) continue;
    // A fresh path works; its own earlier output is replaced (with --overwrite where the output needs it).
    const std::string dir = base + "/ok-" + std::to_string(n++);
    fs::create_directories(dir);
    const std::string at = o.path(dir);
    auto r = sh(o.command(at, false));
    ASSERT_EQ(r.status, 0) << r.output;
    ASSERT_TRUE(fs::is_regular_file(at));
    r = sh(o.command(at, !o.earlier_free));
    EXPECT_EQ(r.status, 0) << "an earlier output of the same kind: " << r.output;
    if (o.overwrite_any && o.has_overwrite) {
      // Without --overwrite, a text file is refused (the hazard above); with it, replaced.
      writeText(at, "an old text\n");
      r = sh(o.command(at, true));
      EXPECT_EQ(r.status, 0) << r.output;
      EXPECT_NE(readAll(at), "an old text\n");
    }
    if (!o.overwrite_any && o.has_overwrite) {  // run databases: --overwrite replaces only a run database
      writeText(at, "an old text\n");
      r = sh(o.command(at, true));
      EXPECT_NE(r.status, 0) << r.output;
      EXPECT_EQ(readAll(at), "an old text\n");
    }
  }
}

// The viewer's notes file (RUN.db.notes.json, written as bookmarks and notes change): the same rule,
// with an earlier notes file as its own kind. Each hazard is refused naming "notes" and kept.
TEST_F(OutputSafety, TheViewersNotesFileReplacesOnlyEarlierNotes) {
  const std::string dir = tempPath("notes-out");
  fs::create_directories(dir);
  trainscope::viewer::Notes notes;
  notes.addBookmark(5, "here");
  int n = 0;
  for (Hazard h : {Hazard::RunDb, Hazard::Study, Hazard::Text, Hazard::Fifo, Hazard::Device, Hazard::Link, Hazard::Dir}) {
    SCOPED_TRACE(name(h));
    const std::string at = dir + "/run" + std::to_string(n++) + ".db.notes.json";
    switch (h) {
      case Hazard::RunDb: makeRunDb(at); break;
      case Hazard::Study: makeStudy(at); break;
      case Hazard::Text: writeText(at, "{\"mine\": 1}\n"); break;
      case Hazard::Fifo: ASSERT_EQ(::mkfifo(at.c_str(), 0600), 0); break;
      case Hazard::Device:
        if (::mknod(at.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0) ASSERT_EQ(::symlink("/dev/null", at.c_str()), 0);
        break;
      case Hazard::Link:
        writeText(dir + "/target.txt", "someone else's\n");
        ASSERT_EQ(::symlink((dir + "/target.txt").c_str(), at.c_str()), 0);
        break;
      default: fs::create_directories(at); break;
    }
    const std::string before = snapshot(at);
    try {
      trainscope::viewer::saveNotes(at, notes);
      ADD_FAILURE() << "written";
    } catch (const trainscope::UserError& e) {
      EXPECT_EQ(e.field(), "notes") << e.what();
    }
    EXPECT_EQ(snapshot(at), before);
  }
  const std::string mine = dir + "/mine.db.notes.json";
  trainscope::viewer::saveNotes(mine, notes);
  notes.addBookmark(9, "there");
  trainscope::viewer::saveNotes(mine, notes);  // an earlier notes file: replaced
  EXPECT_EQ(trainscope::viewer::loadNotes(mine).bookmarks.size(), 2u);
}

// A new study finds nothing at its -wal/-shm: a link planted there is refused (SQLite would write
// through it) and no empty study file is left to block the path.
TEST_F(OutputSafety, LinksAtANewStudysWalAndShmAreRefusedAndLeaveNothing) {
  for (const std::string side : {"-wal", "-shm", "-journal"}) {
    const std::string dir = tempPath("study-side" + side);
    fs::create_directories(dir);
    const std::string s = dir + "/s.db";
    writeText(dir + "/target.txt", "someone else's\n");
    ASSERT_EQ(::symlink((dir + "/target.txt").c_str(), (s + side).c_str()), 0);
    const auto r = cli("tune --workload tiny --gbs 8 --max-trials 1 --study " + q(s));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--study: " + s + side), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(fs::symlink_status(s))) << "an empty study file blocks the path";
    EXPECT_EQ(readAll(dir + "/target.txt"), "someone else's\n");
  }
}

// A path too long for the file system or for SQLite: said so, naming the flag (not "sqlite: cannot open").
TEST_F(OutputSafety, APathTooLongIsSaidToBeTooLongNamingTheFlag) {
  const std::string base = tempPath("long");
  fs::create_directories(base);
  const std::string run = base + "/run.db";
  makeRunDb(run);
  const std::string one_name = base + "/" + std::string(512 - base.size() - 1, 'n');
  ASSERT_EQ(one_name.size(), 512u);
  // Nested folders of 200-byte names: each name is fine, the whole is past SQLite's 512 bytes.
  std::string nested = base;
  while (nested.size() < 500) nested += "/" + std::string(200, 'd');
  fs::create_directories(nested);
  nested += "/run.db";
  const std::string trace = base + "/t.json";
  writeText(trace, R"({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 50.0,)"
                   R"( "dur": 5.0, "args": {"stream": 7, "correlation": 5}}]})");
  for (const auto& [args, flag] : std::vector<std::pair<std::string, std::string>>{
           {"import " + q(trace) + " -o " + q(one_name), "-o"},
           {"import " + q(trace) + " -o " + q(nested), "-o"},
           {"export " + q(run) + " --chrome " + q(one_name), "--chrome"},
           {"tune --workload tiny --gbs 8 --study " + q(one_name), "--study"},
           {"tune --workload tiny --gbs 8 --study " + q(nested), "--study"}}) {
    const auto r = cli(args);
    EXPECT_EQ(r.status, 2) << args << ": " << r.output;
    EXPECT_NE(r.output.find(flag + ": the path is too long"), std::string::npos) << args << ": " << r.output;
    EXPECT_EQ(r.output.find("sqlite"), std::string::npos) << r.output;
  }
  EXPECT_EQ(sh("ls -A " + q(fs::path(nested).parent_path().string())).output, "");
}

// A full disk while tune writes its study: said to be the disk, naming the study's path — not "pass a
// trainscope run database". A small tmpfs of our own (a private mount namespace; skipped where the
// test may not mount).
TEST_F(OutputSafety, ADiskFullDuringTuneSaysTheDiskIsFullAndNamesThePath) {
  const std::string dir = tempPath("full");
  fs::create_directories(dir);
  const std::string s = dir + "/study.db";
  const auto probe = sh("unshare -m sh -c " + q("mount -t tmpfs -o size=256k tmpfs " + dir) + " 2>&1");
  if (probe.status != 0) GTEST_SKIP() << "cannot mount a tmpfs here: " << probe.output;
  const std::string inner = "mount -t tmpfs -o size=256k tmpfs " + dir + " && (dd if=/dev/zero of=" + dir +
                            "/fill bs=4k 2>/dev/null; true) && " + kCli + " tune --workload tiny --gbs 8 --study " +
                            s + " --max-trials 1";
  const auto r = sh("unshare -m sh -c " + q(inner));
  EXPECT_NE(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("the disk is full"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(s), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("pass a trainscope run database"), std::string::npos) << r.output;
}

}  // namespace

// What is put at the path between the last check and the replace is not destroyed: the new file and
// the old entry are exchanged in one step, and exchanged back when the old one is not what was checked.
TEST(OutputRace, AFileSwappedInAfterTheCheckIsLeftAndTheOutputRefused) {
  const std::string path = tempPath("race-out.txt"), planted = tempPath("race-planted.txt");
  std::ofstream(path) << "earlier output\n";
  int swaps = 0;
  trainscope::files::OutputRule rule;
  rule.field = "-o";
  rule.earlier = [&](int, const std::string& p) {  // runs inside each check: a swap right after it
    std::ofstream(planted) << "planted " << ++swaps << "\n";
    EXPECT_EQ(::rename(planted.c_str(), p.c_str()), 0);
    return true;
  };
  try {
    trainscope::files::AtomicFile out(path, rule);
    out.stream() << "new output\n";
    out.commit();
    ADD_FAILURE() << "the swapped-in file was replaced";
  } catch (const trainscope::UserError& e) {
    EXPECT_NE(std::string(e.what()).find("was replaced by something else while the output was written"),
              std::string::npos)
        << e.what();
  }
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "planted " + std::to_string(swaps));
  // Nothing of ours is left beside it.
  for (const auto& entry : fs::directory_iterator(fs::path(path).parent_path()))
    EXPECT_EQ(entry.path().filename().string().find(".race-out.txt.tmp-"), std::string::npos) << entry.path();
  // Unchanged since the check, it is replaced as before.
  rule.earlier = [](int, const std::string&) { return true; };
  trainscope::files::AtomicFile again(path, rule);
  again.stream() << "new output\n";
  again.commit();
  std::ifstream in2(path);
  std::getline(in2, line);
  EXPECT_EQ(line, "new output");
}
