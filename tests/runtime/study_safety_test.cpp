// study_safety_test.cpp — studies and their exports can be trusted: `trainscope tune` and
// `trainscope export` for real, on a one-candidate space of the tiny workload (one 2-step trial),
// against the ways a study was lost or damaged and the ways a file could be written through a link:
//   - export -o onto the study, onto an existing file, through a planted link; atomic writes;
//   - two tunes of one study at once (the lock);
//   - a damaged study (ids out of range) resumed or exported;
//   - a tuner killed with SIGKILL mid-trial, resumed over a half-written trial database;
//   - bad flags, an empty --study, --resume of nothing, a batch whose figures overflow, --trial -5,
//     the exit status after SIGTERM and SIGINT;
//   - a killed tune's WAL study without its -shm, exported by another user from a folder they cannot write;
//   - links planted at the trials' and the cluster file's predictable names;
//   - the exported command line pasted into a shell, with a workload path that holds `';touch MARKER;'`.
//
// Trials that must be "running" at a known moment run through a gate: TRAINSCOPE_TRAIN_EXE (what
// `trainscope run` executes) is a script that records that it started, waits for a file, then runs
// the real trainscope-train. Every wait is for a condition, never a fixed time.
//
// TRAINSCOPE_TEST_CLI, when set, runs these tests against another `trainscope` (with its
// trainscope-train beside it): an older build, to see them fail.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/cli.h"
#include "trainscope/common/files.h"
#include "trainscope/rundb/sqlite.h"

using trainscope::testing::sh;
using trainscope::testing::tempPath;
namespace db = trainscope::rundb;

namespace {

std::string cliPath() {
  const char* other = std::getenv("TRAINSCOPE_TEST_CLI");
  return other && *other ? other : TRAINSCOPE_CLI;
}
std::string trainExe() { return trainscope::files::folderOf(cliPath()) + "/trainscope-train"; }
std::string q(const std::string& s) { return trainscope::files::shellQuote(s); }
trainscope::testing::CliResult cli(const std::string& args) { return sh(q(cliPath()) + " " + args); }

// One candidate (dp1 tp1 pp1 mbs2, no checkpointing), one trial of 2 steps: about two seconds.
const std::string kTiny =
    " --workload tiny --seq 16 --gbs 2 --mbs 2 --ckpt none --ranks 1 --trial-steps 2 --first-round 1 "
    "--final-rounds 0 --mem-limit 200M ";

std::string readFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void writeFile(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

// Polls `cond` every 20 ms, for at most two minutes (a bound against hanging, not a timing check).
bool waitUntil(const std::function<bool()>& cond) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (std::chrono::steady_clock::now() < until) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return cond();
}

// A shell command started in the background, its stdout and stderr in `log`; `exec` keeps its pid.
class Spawned {
 public:
  Spawned(const std::string& command, std::string log) : log_(std::move(log)) {
    pid_ = fork();
    if (pid_ == 0) {
      execl("/bin/sh", "sh", "-c", ("exec " + command + " > " + q(log_) + " 2>&1").c_str(),
            static_cast<char*>(nullptr));
      _exit(127);
    }
  }
  pid_t pid() const { return pid_; }
  // Whether it has ended (reaped once; its status kept).
  bool done() {
    int st = 0;
    if (status_ < 0 && waitpid(pid_, &st, WNOHANG) == pid_) status_ = decode(st);
    return status_ >= 0;
  }
  // Its exit status (128 + signal when killed), waiting for it.
  int status() {
    int st = 0;
    if (status_ < 0 && waitpid(pid_, &st, 0) == pid_) status_ = decode(st);
    return status_;
  }
  std::string output() const { return readFile(log_); }

 private:
  static int decode(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }
  std::string log_;
  pid_t pid_ = -1;
  int status_ = -1;
};

// The gate (see the top of the file): `env()` is the prefix that sends trials through it, `waiting()`
// how many trials are held at it, `open()` lets them run.
struct Gate {
  std::string dir;
  explicit Gate(const std::string& name) : dir(tempPath(name)) {
    ::mkdir(dir.c_str(), 0755);
    writeFile(dir + "/gate.sh", "#!/bin/sh\necho $$ >> " + q(dir + "/waiting") + "\nwhile [ ! -e " + q(dir + "/go") +
                                    " ]; do sleep 0.02; done\nexec " + q(trainExe()) + " \"$@\"\n");
    ::chmod((dir + "/gate.sh").c_str(), 0755);
  }
  std::string env() const { return "env TRAINSCOPE_TRAIN_EXE=" + q(dir + "/gate.sh") + " " + q(cliPath()); }
  int waiting() const {
    std::ifstream f(dir + "/waiting");
    int n = 0;
    for (std::string line; std::getline(f, line);) n += !line.empty();
    return n;
  }
  void open() const { writeFile(dir + "/go", ""); }
};

nlohmann::json lastJson(const std::string& output) {
  const auto at = output.rfind("\n{");
  return nlohmann::json::parse(output.substr(at == std::string::npos ? 0 : at + 1));
}

// A finished one-trial study at `study` (its recommendation: candidate 0).
void tinyStudy(const std::string& study) {
  auto r = cli("tune" + kTiny + "--json --study " + q(study));
  ASSERT_EQ(r.status, 0) << r.output;
  ASSERT_EQ(lastJson(r.output)["recommended"], 0) << r.output;
}

void sql(const std::string& study, const std::string& statement) {
  db::Database d(study, db::Database::Mode::ReadWrite);
  d.exec(statement);
}
int64_t count(const std::string& study, const std::string& where) {
  db::Database d(study, db::Database::Mode::ReadOnly);
  db::Statement s(d, "SELECT COUNT(*) FROM trials WHERE " + where);
  return s.step() ? s.columnInt(0) : -1;
}
bool rowRunning(const std::string& study) {
  try {
    return exists(study) && count(study, "status = 'running'") > 0;
  } catch (const std::exception&) {
    return false;  // not yet a study
  }
}

}  // namespace

// 13. `export STUDY --format run -o STUDY` overwrote the study. -o is never the study (through any
// name or link) nor its -wal; an existing -o is refused without --overwrite; a link at -o is never
// followed (replaced itself with --overwrite); the file is written whole or not at all.
TEST(StudySafety, ExportNeverOverwritesTheStudyOrAnExistingFileOrFollowsALink) {
  const std::string study = tempPath("export-o.db");
  tinyStudy(study);
  const std::string before = readFile(study);
  for (const std::string& out : {study, study + " --overwrite"}) {
    auto r = cli("export " + q(study) + " --format run -o " + out);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("-o: "), std::string::npos) << r.output;
  }
  // Through a link, and through another name of the same file.
  const std::string link = tempPath("export-o-link.json"), hard = tempPath("export-o-hard.db");
  ASSERT_EQ(::symlink(study.c_str(), link.c_str()), 0);
  ASSERT_EQ(::link(study.c_str(), hard.c_str()), 0);
  for (const std::string& out : {link, hard}) {
    auto r = cli("export " + q(study) + " --format run --overwrite -o " + q(out));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("is the input " + study + " itself"), std::string::npos) << r.output;
  }
  EXPECT_TRUE(readFile(study) == before) << "the study was written";
  ASSERT_EQ(cli("export " + q(study) + " --format run --trial 0").status, 0) << "the study no longer exports";

  // An existing file: refused, then replaced with --overwrite.
  const std::string out = tempPath("export-o.json");
  writeFile(out, "mine\n");
  auto r = cli("export " + q(study) + " --format run -o " + q(out));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--overwrite"), std::string::npos) << r.output;
  EXPECT_EQ(readFile(out), "mine\n");
  r = cli("export " + q(study) + " --format run --overwrite -o " + q(out));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(readFile(out))["mbs"], 2);

  // A link planted at -o, to a file of someone else's: never written through.
  const std::string marker = tempPath("export-o-marker.txt"), planted = tempPath("export-o-planted.json");
  writeFile(marker, "marker\n");
  ASSERT_EQ(::symlink(marker.c_str(), planted.c_str()), 0);
  r = cli("export " + q(study) + " --format command -o " + q(planted));
  EXPECT_EQ(r.status, 2) << r.output;
  r = cli("export " + q(study) + " --format command --overwrite -o " + q(planted));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(readFile(marker), "marker\n") << "written through the link";
  struct stat st {};
  ASSERT_EQ(::lstat(planted.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link itself is replaced by the export";
  EXPECT_NE(readFile(planted).find("trainscope run"), std::string::npos);
  // No temporary file left beside the outputs.
  EXPECT_EQ(sh("ls -a " + q(trainscope::files::folderOf(out)) + " | grep -c '\\.tmp-'").output, "0\n");
}

// 14. Nothing locked a study: a second `tune --resume` of a study being tuned erased the first's
// trials. The first holds the study's lock for its whole run; the second (with or without --resume)
// exits 2 naming the first's pid; the first then finishes with its trials intact.
TEST(StudySafety, ASecondTuneOfAStudyBeingTunedIsRefusedNamingThePid) {
  const std::string study = tempPath("locked.db");
  const Gate gate("locked-gate");
  Spawned first(gate.env() + " tune" + kTiny + "--json --study " + q(study), tempPath("locked-first.log"));
  ASSERT_TRUE(waitUntil([&] { return gate.waiting() >= 1 || first.done(); }) && !first.done()) << first.output();
  // The second runs while the first's trial is held at the gate: refused at once, or (unlocked) it
  // reaches the gate too.
  Spawned second(gate.env() + " tune" + kTiny + "--json --resume --study " + q(study), tempPath("locked-second.log"));
  ASSERT_TRUE(waitUntil([&] { return second.done() || gate.waiting() >= 2; }));
  auto fresh = cli("tune" + kTiny + "--study " + q(study));
  gate.open();
  const int second_status = second.status(), first_status = first.status();
  const std::string second_out = second.output();
  const std::string pid = "process " + std::to_string(first.pid());
  EXPECT_EQ(second_status, 2) << second_out;
  EXPECT_NE(second_out.find(pid), std::string::npos) << second_out;
  EXPECT_EQ(fresh.status, 2) << fresh.output;
  EXPECT_NE(fresh.output.find(pid), std::string::npos) << fresh.output;
  // The first ran to the end, and the study holds exactly its trials.
  const std::string first_out = first.output();
  ASSERT_EQ(first_status, 0) << first_out;
  const auto j = lastJson(first_out);
  EXPECT_EQ(j["recommended"], 0);
  ASSERT_EQ(j["trials"].size(), 1u) << first_out;
  db::Database d(study, db::Database::Mode::ReadOnly);
  db::Statement s(d, "SELECT candidate, round, status, step_s, db_path FROM trials");
  ASSERT_TRUE(s.step());
  EXPECT_EQ(s.columnInt(0), j["trials"][0]["candidate"].get<int64_t>());
  EXPECT_EQ(s.columnText(2), "ok");
  EXPECT_EQ(s.columnDouble(3), j["trials"][0]["step_s"].get<double>());
  EXPECT_EQ(s.columnText(4), j["trials"][0]["db"].get<std::string>());
  EXPECT_FALSE(s.step()) << "another tune added a trial";
  // Released at the end: the study resumes.
  EXPECT_EQ(cli("tune" + kTiny + "--resume --study " + q(study)).status, 0);
}

// 15. A trial row with an out-of-range candidate id crashed `tune --resume` (SIGSEGV). Every id read
// from a study is checked: a damaged study is refused with exit 2, naming what is wrong.
TEST(StudySafety, ADamagedStudyIsRefusedWithExit2NotACrash) {
  const std::string study = tempPath("damaged.db");
  tinyStudy(study);
  // A candidate the space does not have, with a step time that would make it the pick.
  sql(study, "UPDATE trials SET candidate = 1000000000, step_s = 1e-9");
  auto r = cli("tune" + kTiny + "--resume --study " + q(study));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is damaged: trial"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("candidate 1000000000"), std::string::npos) << r.output;
  for (const char* damage :
       {"UPDATE trials SET candidate = 0, round = -7", "UPDATE trials SET round = 1000000",
        "UPDATE trials SET round = 0, candidate = 'x'", "UPDATE trials SET candidate = 0, status = 'bogus'",
        "UPDATE trials SET status = 'ok', steps = 0"}) {
    sql(study, damage);
    r = cli("tune" + kTiny + "--resume --study " + q(study));
    EXPECT_EQ(r.status, 2) << damage << "\n" << r.output;
    EXPECT_NE(r.output.find("is damaged"), std::string::npos) << damage << "\n" << r.output;
  }
  // A recommendation that is not a candidate id: export refuses, naming the study.
  sql(study, "UPDATE trials SET steps = 2; UPDATE study SET value = '12abc' WHERE key = 'recommended'");
  r = cli("export " + q(study) + " --format run");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is damaged"), std::string::npos) << r.output;
  sql(study, "UPDATE study SET value = '0' WHERE key = 'recommended'");
  EXPECT_EQ(cli("export " + q(study) + " --format run").status, 0);
}

// 16. After kill -9 of the tuner mid-trial, the resumed trial failed on the half-created trial
// database and its candidate was excluded for good. The interrupted attempt is run again into paths
// of its own; the candidate is measured and recommended.
TEST(StudySafety, ATrialInterruptedByKill9IsRunAgainCleanlyOnResume) {
  const std::string study = tempPath("killed.db");
  const Gate gate("killed-gate");
  Spawned tuner(gate.env() + " tune" + kTiny + "--study " + q(study), tempPath("killed.log"));
  ASSERT_TRUE(waitUntil([&] { return (gate.waiting() >= 1 && rowRunning(study)) || tuner.done(); }) && !tuner.done())
      << tuner.output();
  ::kill(tuner.pid(), SIGKILL);
  EXPECT_EQ(tuner.status(), 128 + SIGKILL);
  ASSERT_TRUE(waitUntil([&] { return sh("pgrep -f -- '" + study + ".trial[s]'").status != 0; }))
      << "the trial outlived the tuner";
  std::string interrupted;
  {
    db::Database d(study, db::Database::Mode::ReadOnly);
    db::Statement s(d, "SELECT db_path FROM trials WHERE status = 'running'");
    ASSERT_TRUE(s.step());
    interrupted = s.columnText(0);
  }
  // What a trial killed while creating its database leaves: a SQLite header and nothing usable.
  writeFile(interrupted, std::string("SQLite format 3\0", 16) + std::string(4080, '\x5a'));
  auto r = cli("tune" + kTiny + "--resume --json --study " + q(study));
  ASSERT_EQ(r.status, 0) << r.output;
  const auto j = lastJson(r.output);
  EXPECT_EQ(j["recommended"], 0) << r.output;
  ASSERT_EQ(j["trials"].size(), 1u) << r.output;
  EXPECT_EQ(j["trials"][0]["status"], "ok") << r.output;
  EXPECT_NE(j["trials"][0]["db"].get<std::string>(), interrupted) << "run again over the half-written database";
  EXPECT_EQ(count(study, "status <> 'ok'"), 0);
}

// 17. Input that used to be accepted, lost or misreported.
TEST(StudySafety, BadTuneAndExportInputExits2NamingTheFlag) {
  // --study '' ran and lost the study; blank likewise.
  for (const char* empty : {"''", "'  '"}) {
    auto r = cli("tune" + kTiny + "--study " + empty);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("--study: is empty"), std::string::npos) << r.output;
  }
  // --resume of a study that does not exist silently started a new one.
  const std::string missing = tempPath("missing.db");
  auto r = cli("tune" + kTiny + "--resume --study " + q(missing));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find(missing + " does not exist"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("drop --resume"), std::string::npos) << r.output;
  EXPECT_FALSE(exists(missing));
  // Bad flags exit 2 with the flag named, before any trial, --predict-only or not (they exited 1
  // with "see the trials' logs").
  const std::string study = tempPath("bad-flags.db");
  for (const auto& [flags, field] :
       std::vector<std::pair<std::string, std::string>>{{"--mbs 0", "--mbs"},
                                                        {"--mbs two", "--mbs"},
                                                        {"--ranks 0", "--ranks"},
                                                        {"--gbs 3", "--gbs"},
                                                        {"--trial-steps 0", "--trial-steps"},
                                                        {"--first-round 0", "--first-round"},
                                                        {"--max-trials -1", "--max-trials"},
                                                        {"--trial-timeout -5", "--trial-timeout"},
                                                        {"--inject 0:explode", "--inject"},
                                                        {"--ckpt ''", "--ckpt"}})
    for (const char* mode : {" --predict-only", ""}) {
      r = cli("tune" + kTiny + flags + mode + " --study " + q(study));
      EXPECT_EQ(r.status, 2) << flags << mode << "\n" << r.output;
      EXPECT_NE(r.output.find("error: " + field + ":"), std::string::npos) << flags << mode << "\n" << r.output;
      EXPECT_EQ(r.output.find("trials' logs"), std::string::npos) << flags << mode << "\n" << r.output;
      EXPECT_FALSE(exists(study)) << flags << mode << ": a study was left behind";
      EXPECT_FALSE(exists(study + ".trials")) << flags << mode << ": a trial folder was made";
    }
  // A batch whose memory figures overflow int64 came out with a negative peak that "fit".
  for (const char* huge : {"1000000000000000000", "4611686018427387904"}) {
    r = cli(std::string("tune --workload small-cpu --predict-only --gbs ") + huge + " --study " + q(study));
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("error: --gbs:"), std::string::npos) << r.output;
  }
  // export --trial -5 exported the recommendation; an unknown candidate is refused too.
  const std::string done = tempPath("bad-export.db");
  tinyStudy(done);
  for (const char* trial : {"-5", "-1", "1", "99999999999"}) {
    r = cli("export " + q(done) + " --format run --trial " + trial);
    EXPECT_EQ(r.status, 2) << trial << "\n" << r.output;
    EXPECT_NE(r.output.find("--trial"), std::string::npos) << trial << "\n" << r.output;
  }
  EXPECT_EQ(cli("export " + q(done) + " --format run --trial 0").status, 0);
}

// 17. SIGTERM to tune exited 130 like SIGINT: 128 + the signal, and the study resumes. SIGHUP (a
// closed terminal) ended it at once, the trial counted as running: it interrupts it the same way.
TEST(StudySafety, TuneExits128PlusTheSignalOnSigtermSigintAndSighup) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    const std::string name = "signal-" + std::to_string(sig);
    const std::string study = tempPath(name + ".db");
    const Gate gate(name + "-gate");
    Spawned tuner(gate.env() + " tune" + kTiny + "--study " + q(study), tempPath(name + ".log"));
    ASSERT_TRUE(waitUntil([&] { return gate.waiting() >= 1 || tuner.done(); }) && !tuner.done()) << tuner.output();
    ::kill(tuner.pid(), sig);
    EXPECT_EQ(tuner.status(), 128 + sig) << tuner.output();
    EXPECT_NE(tuner.output().find("continue with --resume"), std::string::npos) << tuner.output();
    EXPECT_EQ(count(study, "status NOT IN ('running')"), 0) << "the interrupted trial was counted as finished";
  }
}

// 18. A study on storage its reader cannot write (another user's folder): export opens it read-only
// and writes nothing; a killed tune's WAL study without its -shm still reads, trials in the -wal
// included.
TEST(StudySafety, AKilledTunesStudyExportsReadOnlyFromAFolderTheReaderCannotWrite) {
  const std::string folder = tempPath("readonly");
  ASSERT_EQ(::mkdir(folder.c_str(), 0755), 0);
  const std::string study = folder + "/study.db";
  const Gate gate("readonly-gate");
  Spawned tuner(gate.env() + " tune" + kTiny + "--study " + q(study), tempPath("readonly.log"));
  ASSERT_TRUE(waitUntil([&] { return (gate.waiting() >= 1 && rowRunning(study)) || tuner.done(); }) && !tuner.done())
      << tuner.output();
  ::kill(tuner.pid(), SIGKILL);
  tuner.status();
  struct stat st {};
  ASSERT_EQ(::stat((study + "-wal").c_str(), &st), 0);
  ASSERT_GT(st.st_size, 32) << "the study's rows should still be in its -wal";
  ASSERT_EQ(::unlink((study + "-shm").c_str()), 0);
  const std::string before = readFile(study), wal_before = readFile(study + "-wal");
  // Another user, for whom the folder is read-only (as root, through setpriv; otherwise the folder
  // is made read-only for us).
  std::string as_reader;
  if (::geteuid() == 0) {
    as_reader = "setpriv --reuid=65534 --regid=65534 --clear-groups env TMPDIR=/tmp ";
    if (sh(as_reader + q(cliPath()) + " --help").status != 0)
      GTEST_SKIP() << "cannot run trainscope as nobody (setpriv, or the build folder's permissions)";
    // The other user may read the folder and the study, whatever the umask, but not write them.
    for (const std::string& p : {trainscope::files::folderOf(folder), folder, study, study + "-wal"})
      ::chmod(p.c_str(), p == study || p == study + "-wal" ? 0644 : 0755);
  } else {
    ASSERT_EQ(::chmod(folder.c_str(), 0555), 0);
  }
  auto r = sh(as_reader + q(cliPath()) + " export " + q(study) + " --format run --trial 0");
  ::chmod(folder.c_str(), 0755);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output.substr(r.output.find('{')))["mbs"], 2);
  EXPECT_TRUE(readFile(study) == before) << "export wrote into the study";
  EXPECT_TRUE(readFile(study + "-wal") == wal_before) << "export wrote into the study's -wal";
  EXPECT_FALSE(exists(study + "-shm")) << "export wrote beside the study";
  // The study's owner resumes it: the interrupted trial is run, nothing was lost.
  r = cli("tune" + kTiny + "--resume --json --study " + q(study));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lastJson(r.output)["recommended"], 0);
  // A finished study exports without writing into its folder either.
  const std::string listing = sh("ls -a " + q(folder)).output, finished = readFile(study);
  r = sh(as_reader + q(cliPath()) + " export " + q(study) + " --format command");
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(sh("ls -a " + q(folder)).output, listing);
  EXPECT_TRUE(readFile(study) == finished) << "export wrote into the study";
}

// 19. The tuner wrote trial logs, trial configs and the --cluster local file through links planted
// at their predictable names. None is followed: the marker they point at is unchanged, and the
// trials' folder itself may not be a link.
TEST(StudySafety, LinksPlantedAtTheTunersPredictableNamesAreNeverFollowed) {
  const std::string study = tempPath("planted.db"), marker = tempPath("planted-marker.txt");
  writeFile(marker, "marker\n");
  const std::string trials = study + ".trials";
  ASSERT_EQ(::mkdir(trials.c_str(), 0755), 0);
  std::vector<std::string> planted = {study + ".cluster.json", study + ".cluster.json.tmp"};
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 3; ++r)
      for (const char* ext : {".json", ".log"})
        planted.push_back(trials + "/c" + std::to_string(c) + "-r" + std::to_string(r) + ext);
  for (const auto& p : planted) ASSERT_EQ(::symlink(marker.c_str(), p.c_str()), 0) << p;
  // A link at the cluster file's own name is refused (files::OutputRule: a link only with
  // --overwrite, which tune has not), before the measuring; the study it created is removed.
  auto r = cli("tune --cluster local" + kTiny + "--json --study " + q(study));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--cluster local: " + study + ".cluster.json is a symbolic link"), std::string::npos)
      << r.output;
  EXPECT_EQ(readFile(marker), "marker\n") << "written through a planted link";
  EXPECT_NE(::access(study.c_str(), F_OK), 0) << "the refused tune left its study";
  ASSERT_EQ(::unlink((study + ".cluster.json").c_str()), 0);
  r = cli("tune --cluster local" + kTiny + "--json --study " + q(study));
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_EQ(lastJson(r.output)["recommended"], 0) << r.output;
  EXPECT_EQ(readFile(marker), "marker\n") << "written through a planted link";
  // The cluster file, where the link was.
  struct stat st {};
  ASSERT_EQ(::lstat((study + ".cluster.json").c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  EXPECT_EQ(nlohmann::json::parse(readFile(study + ".cluster.json"))["kind"], "cpu");

  // The trials' folder as a link to someone else's folder: refused before any trial.
  const std::string other = tempPath("planted-other"), study2 = tempPath("planted2.db");
  ASSERT_EQ(::mkdir(other.c_str(), 0755), 0);
  ASSERT_EQ(::symlink(other.c_str(), (study2 + ".trials").c_str()), 0);
  r = cli("tune" + kTiny + "--study " + q(study2));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("is a symbolic link"), std::string::npos) << r.output;
  EXPECT_EQ(sh("ls -A " + q(other)).output, "") << "a trial wrote into the linked folder";
}

// 20. `export --format command` did not quote: a workload path holding `';touch MARKER;'` ran the
// command when the exported line was pasted. Both lines (local, Slurm) go through bash here: no
// MARKER, and the arguments arrive exactly as the config has them, --launcher once.
TEST(StudySafety, TheExportedCommandLineIsQuotedForTheShell) {
  const std::string folder = tempPath("w';touch MARKER;' $(touch MARKER2) \"x\"");
  ASSERT_EQ(::mkdir(folder.c_str(), 0755), 0);
  const std::string workload = folder + "/tiny.json";
  writeFile(workload,
            R"({"name": "tiny", "n_layer": 2, "n_head": 2, "n_embd": 32, "n_positions": 64, "vocab_size": 128})");
  const std::string study = tempPath("quoted.db");
  auto r = cli("tune" + kTiny + "--workload " + q(workload) + " --study " + q(study));
  ASSERT_EQ(r.status, 0) << r.output;
  const std::string out = tempPath("quoted-command.txt");
  r = cli("export " + q(study) + " --format command -o " + q(out));
  ASSERT_EQ(r.status, 0) << r.output;
  std::vector<std::string> lines;
  {
    std::ifstream f(out);
    for (std::string line; std::getline(f, line);)
      if (line.rfind("trainscope run", 0) == 0) lines.push_back(line);
  }
  ASSERT_EQ(lines.size(), 2u) << readFile(out);
  const std::string run_dir = tempPath("quoted-run");
  ASSERT_EQ(::mkdir(run_dir.c_str(), 0755), 0);
  for (size_t i = 0; i < lines.size(); ++i) {
    // `trainscope` prints its arguments, one per line (NUL-free, so a line each).
    writeFile(run_dir + "/pasted.sh", "trainscope() { printf '%s\\n' \"$@\" > argv.txt; }\n" + lines[i] + "\n");
    r = sh("cd " + q(run_dir) + " && bash pasted.sh");
    EXPECT_EQ(r.status, 0) << r.output;
    EXPECT_FALSE(exists(run_dir + "/MARKER")) << "the pasted line ran a command: " << lines[i];
    EXPECT_FALSE(exists(run_dir + "/MARKER2")) << "the pasted line ran a command: " << lines[i];
    std::vector<std::string> argv;
    std::ifstream f(run_dir + "/argv.txt");
    for (std::string a; std::getline(f, a);) argv.push_back(a);
    ASSERT_GE(argv.size(), 3u) << lines[i];
    EXPECT_EQ(argv[0], "run");
    EXPECT_EQ(argv[1], "--workload");
    EXPECT_EQ(argv[2], workload);
    int launchers = 0;
    for (size_t k = 0; k + 1 < argv.size(); ++k)
      if (argv[k] == "--launcher") {
        ++launchers;
        EXPECT_EQ(argv[k + 1], i == 0 ? "local" : "slurm") << lines[i];
      }
    EXPECT_EQ(launchers, 1) << lines[i];
  }
}
