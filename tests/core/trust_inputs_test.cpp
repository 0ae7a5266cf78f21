// trust_inputs_test.cpp — what the command line reads (issue "Trust, round 3", the input side):
// every file input refuses a FIFO and a device at once, naming its flag (a FIFO hung `predict`,
// `tune` and `run`; /dev/zero was read until the OOM killer); a string that is not UTF-8 is written
// into JSON with its bad bytes replaced (report --json, export --chrome, the viewer's --layout);
// numbers out of range are refused naming the flag or key, never wrapped or priced; the messages of
// an unknown command, a typo in SQL and a batch line's shared checks say what happened.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../common/cli.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/models/cluster.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/viewer/details.h"
#include "trainscope/viewer/notes.h"
#include "trainscope/viewer/sql.h"
#include "trainscope/workloads/workload.h"

#ifdef TRAINSCOPE_VIEWER
#include "viewer_app_support.h"
#endif

namespace fs = std::filesystem;
using nlohmann::json;
using trainscope::files::shellQuote;
using trainscope::testing::cli;
using trainscope::testing::CliResult;
using trainscope::testing::sh;
using trainscope::testing::tempPath;

namespace {

// The command under a bound: a hang ends as status 137 (killed), which the tests report.
CliResult bounded(const std::string& command) { return sh("timeout -s KILL 120 " + command); }
CliResult boundedCli(const std::string& args) { return bounded(std::string(TRAINSCOPE_CLI) + " " + args); }

std::string fifo() {
  const std::string p = tempPath("input.fifo");
  if (!fs::exists(p)) ::mkfifo(p.c_str(), 0600);
  return p;
}

std::string readAll(const std::string& path) {
  std::stringstream s;
  s << std::ifstream(path, std::ios::binary).rdbuf();
  return s.str();
}

// A synthetic run whose every string ends in bytes that are not UTF-8 (as an Nsight export's
// StringIds or a hostile database can hold).
std::string badUtf8Run() {
  const std::string p = tempPath("bad-utf8.db");
  if (fs::exists(p)) return p;
  trainscope::viewer::writeSyntheticTrace(p, {1, 2'000, 2});
  trainscope::rundb::Database d(p, trainscope::rundb::Database::Mode::ReadWrite);
  d.exec("UPDATE strings SET value = value || CAST(x'ff' AS TEXT) || ' ' || CAST(x'c3' AS TEXT)");
  return p;
}

const std::string kReplacement = "\xef\xbf\xbd";  // U+FFFD

}  // namespace

// Every file input of every command, pointed at a FIFO and at /dev/zero: refused at once (status 2,
// well inside the bound) naming its flag. Before, a FIFO as --workload blocked forever and
// /dev/zero was read until the memory ran out.
TEST(FileInputs, AFifoOrADeviceIsRefusedAtOnceNamingItsFlag) {
  const std::string study = tempPath("fifo-study.db"), out = tempPath("fifo-out.json");
  const std::string tune = "tune --workload small-cpu --cluster cpu-local --gbs 8 --predict-only --study " + study;
  for (const std::string& input : {fifo(), std::string("/dev/zero")}) {
    struct Case {
      std::string args, field;
    };
    std::vector<Case> cases = {
        {"predict --workload " + input, "--workload"},
        {"predict --cluster " + input, "--cluster"},
        {"predict --batch " + input, "--batch"},
        {"predict --workload gpt2-124m --cluster a100-80gb-x8 --profile " + input, "--profile"},
        {"tune --workload " + input + " --gbs 8 --predict-only --study " + study, "--workload"},
        {"tune --cluster " + input + " --gbs 8 --predict-only --study " + study, "--cluster"},
        {"tune --workload small-cpu --cluster cpu-local --gbs 8 --predict-only --study " + input, "--study"},
        {"tune --workload small-cpu --cluster cpu-local --gbs 8 --study " + input, "--study"},
        {"report " + input, "database"},
        {"export " + input + " --chrome " + out, "database"},
        {"import " + input + " -o " + tempPath("fifo-import.db"), "import"},
    };
    // `run` execs its sibling trainscope-train: where that is built, its inputs too.
    if (fs::exists(fs::path(TRAINSCOPE_CLI).parent_path() / "trainscope-train"))
      for (const Case& c : std::vector<Case>{{"run --workload " + input, "--workload"},
                                             {"run --config " + input, "--config"},
                                             {"run --workload tiny --steps 1 --data " + input, "--data"}})
        cases.push_back(c);
    for (const Case& c : cases) {
      const CliResult r = boundedCli(c.args);
      EXPECT_EQ(r.status, 2) << c.args << "\n" << r.output;
      EXPECT_NE(r.output.find("error: " + c.field), std::string::npos) << c.args << "\n" << r.output;
    }
#ifdef TRAINSCOPE_VIEWER
    ensureDisplay();
    const std::string png = tempPath("fifo.png");
    for (const Case& c : std::vector<Case>{{input + " --screenshot " + png, "file"},
                                           {badUtf8Run() + " --script " + input + " --screenshot " + png, "--script"}}) {
      const CliResult r = bounded(kViewer + " " + c.args);
      EXPECT_EQ(r.status, 2) << c.args << "\n" << r.output;
      EXPECT_NE(r.output.find(c.field), std::string::npos) << c.args << "\n" << r.output;
    }
#endif
  }
  EXPECT_FALSE(fs::exists(study));
  EXPECT_FALSE(fs::exists(out));
}

// The one reader of text inputs: a regular file, whole, up to its cap; past it refused naming the field.
TEST(FileInputs, ATextInputPastItsCapIsRefusedNamingTheField) {
  const std::string big = tempPath("big.json");
  std::ofstream(big) << std::string(4096, ' ') << "{}";
  EXPECT_EQ(trainscope::files::readTextFile(big, "--workload", "fix", 1 << 20).size(), 4098u);
  try {
    trainscope::files::readTextFile(big, "--workload", "pass a smaller file", 1024);
    ADD_FAILURE() << "a file past the cap was read";
  } catch (const trainscope::UserError& e) {
    EXPECT_EQ(e.field(), "--workload");
    EXPECT_NE(std::string(e.what()).find("more than"), std::string::npos) << e.what();
  }
  // The loader of `run`, `predict` and `tune` (workloads::load) goes through it.
  for (const std::string& input : {fifo(), std::string("/dev/zero")}) {
    try {
      trainscope::workloads::load(input);
      ADD_FAILURE() << input << " was read as a workload";
    } catch (const trainscope::UserError& e) {
      EXPECT_EQ(e.field(), "--workload") << e.what();
    }
  }
}

// Strings that are not UTF-8 are written with U+FFFD in their place; before, report --json,
// export --chrome and the viewer's --layout ended with nlohmann's type_error 316.
TEST(JsonText, InvalidUtf8IsReplacedInEveryJsonTheCommandsWrite) {
  const std::string run = badUtf8Run();
  const CliResult report = cli("report --json " + run);
  ASSERT_EQ(report.status, 0) << report.output;
  EXPECT_NE(report.output.find(kReplacement), std::string::npos);
  EXPECT_NO_THROW(json::parse(report.output.substr(report.output.find('{'))));

  const std::string chrome = tempPath("bad-utf8.json");
  const CliResult exp = cli("export " + run + " --chrome " + chrome);
  ASSERT_EQ(exp.status, 0) << exp.output;
  const std::string text = readAll(chrome);
  EXPECT_NE(text.find(kReplacement), std::string::npos);
  EXPECT_NO_THROW(json::parse(text));
#ifdef TRAINSCOPE_VIEWER
  const std::string script = tempPath("bad-utf8-sql.txt");
  std::ofstream(script) << "sql \"SELECT value FROM strings\"\nframes 2\n";
  const Shot s = shoot(run, "--script " + script, "bad-utf8-view");
  ASSERT_EQ(s.run.status, 0) << s.run.output;
  EXPECT_NE(s.layout["sql"].dump(-1, ' ', false, json::error_handler_t::strict).find(kReplacement), std::string::npos);
#endif
}

// Numbers out of range are refused naming the flag or key: none is priced, wrapped or let through.
TEST(NumericInputs, NonFiniteNonPositiveAndHugeValuesAreRefusedByName) {
  // --dp-overlap nan passed CLI11's Range (every comparison with NaN is false).
  for (const char* v : {"nan", "inf", "1.5"}) {
    const CliResult r = cli(std::string("predict --dp-overlap ") + v);
    EXPECT_EQ(r.status, 2) << v << "\n" << r.output;
    EXPECT_NE(r.output.find("--dp-overlap"), std::string::npos) << r.output;
  }
  // A cluster whose memory bandwidth is 0 gave a NaN throughput; a link bandwidth of 0 a step of
  // 871,078,656 s.
  const json base = json::parse(readAll(trainscope::models::loadCluster("a100-80gb-x8").source));
  struct Key {
    std::vector<std::string> path;
    json value;
    std::string named;
  };
  for (const Key& k : std::vector<Key>{{{"memory_bandwidth"}, 0, "memory_bandwidth"},
                                       {{"intra_node", "bandwidth"}, 0, "intra_node.bandwidth"},
                                       {{"inter_node", "efficiency"}, 0, "inter_node.efficiency"},
                                       {{"peak_flops", "bf16"}, 0, "peak_flops.bf16"},
                                       {{"nodes"}, 1e30, "nodes"},
                                       {{"devices_per_node"}, 8.5, "devices_per_node"},
                                       {{"memory_bytes"}, -1, "memory_bytes"},
                                       {{"name"}, 7, "name"}}) {
    json j = base;
    json* at = &j;
    for (size_t i = 0; i + 1 < k.path.size(); ++i) at = &(*at)[k.path[i]];
    (*at)[k.path.back()] = k.value;
    const std::string file = tempPath("cluster-" + k.named + ".json");
    std::ofstream(file) << j.dump();
    const CliResult r = cli("predict --cluster " + file);
    EXPECT_EQ(r.status, 2) << k.named << "\n" << r.output;
    EXPECT_NE(r.output.find(": " + k.named + ": "), std::string::npos) << k.named << "\n" << r.output;
    EXPECT_EQ(r.output.find("json.exception"), std::string::npos) << r.output;
  }
  // gpus 2^63 - 1 in a batch suggested --nodes -1152921504606846975.
  const std::string batch = tempPath("huge.jsonl");
  std::ofstream(batch) << "{\"gpus\": 9223372036854775807}\n{\"gpus\": 1000000}\n{\"ckpt\": \"sometimes\"}\n"
                       << "{\"tp\": 18446744073709551615}\n";
  CliResult r = cli("predict --batch " + batch);
  EXPECT_EQ(r.status, 2) << r.output;
  std::vector<json> lines;
  std::istringstream in(r.output);
  for (std::string l; std::getline(in, l);)
    if (!l.empty() && l[0] == '{') lines.push_back(json::parse(l));
  ASSERT_EQ(lines.size(), 4u) << r.output;
  EXPECT_NE(lines[0]["error"].get<std::string>().find("--batch line 1: gpus"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1]["error"].get<std::string>().find("--gpus"), std::string::npos) << lines[1];
  EXPECT_EQ(lines[1]["error"].get<std::string>().find("--nodes -"), std::string::npos) << lines[1];
  // A shared check (the checkpointing mode's) names the line too.
  EXPECT_NE(lines[2]["error"].get<std::string>().find("--batch line 3: "), std::string::npos) << lines[2];
  EXPECT_NE(lines[3]["error"].get<std::string>().find("--batch line 4: tp"), std::string::npos) << lines[3];
  // A huge --nodes is named, not blamed on --mbs (2^40 nodes) nor wrapped (2^62).
  for (const char* nodes : {"1099511627776", "4611686018427387904"}) {
    r = cli(std::string("predict --nodes ") + nodes);
    EXPECT_EQ(r.status, 2) << r.output;
    EXPECT_NE(r.output.find("error: --nodes"), std::string::npos) << r.output;
  }
  r = cli("predict --workload gpt2-124m --cluster a100-80gb-x8 --tp 4611686018427387904 --pp 4");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("--tp"), std::string::npos) << r.output;
  r = cli("tune --workload small-cpu --cluster cpu-local --gbs 8 --predict-only --nodes 4611686018427387904 --study " +
          tempPath("huge-nodes.db"));
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("error: --nodes"), std::string::npos) << r.output;
}

// A workload's integer past int64 is refused naming its key, not read back wrapped.
TEST(NumericInputs, AWorkloadIntegerPastInt64IsRefusedByName) {
  for (const char* key : {"n_layer", "n_experts"}) {
    const std::string file = tempPath(std::string("wrapped-") + key + ".json");
    std::ofstream(file) << R"({"n_layer": 2, "n_head": 2, "n_embd": 64, "n_positions": 64, "vocab_size": 256, ")" << key
                        << R"(": 18446744073709551615})";
    try {
      trainscope::workloads::load(file);
      ADD_FAILURE() << key << " was read";
    } catch (const trainscope::UserError& e) {
      EXPECT_EQ(e.field(), std::string("workload.") + key) << e.what();
      EXPECT_NE(std::string(e.what()).find("18446744073709551615"), std::string::npos) << e.what();
    }
  }
}

// An unknown command says which commands there are, not "A subcommand is required".
TEST(Messages, AnUnknownCommandListsTheCommands) {
  const CliResult r = cli("frobnicate --x 1");
  EXPECT_EQ(r.status, 2) << r.output;
  EXPECT_NE(r.output.find("unknown command frobnicate; commands are: run tune predict calibrate report export import view"),
            std::string::npos)
      << r.output;
  const CliResult none = cli("");
  EXPECT_EQ(none.status, 2) << none.output;
  EXPECT_NE(none.output.find("no command; commands are: run tune"), std::string::npos) << none.output;
}

// A typo in the SQL box is a syntax error with SQLite's words; before it was refused as a statement
// that "would change a file".
TEST(Messages, ATypoInSqlIsASyntaxErrorNotAWrite) {
  const std::string run = badUtf8Run();
  const trainscope::viewer::QueryResult r = trainscope::viewer::runQuery(run, "SELEC 1");
  EXPECT_NE(r.error.find("syntax error"), std::string::npos) << r.error;
  EXPECT_NE(r.error.find("SELEC"), std::string::npos) << r.error;
  EXPECT_EQ(r.error.find("would change"), std::string::npos) << r.error;
  EXPECT_EQ(r.error.find("(code "), std::string::npos) << r.error;
  EXPECT_NE(trainscope::viewer::runQuery(run, "DELETE FROM kernels").error.find("read-only"), std::string::npos);
}

// A JSON input that does not parse, or holds a value of the wrong type, is reported in words:
// nlohmann's "[json.exception.parse_error.101]" tag is for programmers.
TEST(Messages, JsonErrorsCarryNoLibraryTag) {
  const std::string bad = tempPath("bad-syntax.json");
  std::ofstream(bad) << "{\"n_layer\": oops}";
  for (const std::string& args : {"predict --workload " + bad, "run --config " + bad}) {
    if (args.rfind("run", 0) == 0 && !fs::exists(fs::path(TRAINSCOPE_CLI).parent_path() / "trainscope-train")) continue;
    const CliResult r = cli(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find("parse error"), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(r.output.find("json.exception"), std::string::npos) << args << "\n" << r.output;
  }
  try {
    trainscope::viewer::notesFromJson(R"({"trainscope_notes":1,"bookmarks":[{"at_ns":1,"label":5}]})", "n.json");
    ADD_FAILURE() << "a numeric label was read";
  } catch (const trainscope::UserError& e) {
    EXPECT_EQ(std::string(e.what()).find("json.exception"), std::string::npos) << e.what();
  }
}

// A note or bookmark whose time is not a whole number inside int64 is refused naming it; before,
// 1e30 was kept as INT64_MIN and 2^64 - 1 as -1.
TEST(Messages, ANotesTimeOutOfRangeIsRefusedNamingTheNote) {
  const std::string file = "run.db.notes.json";
  for (const auto& [text, which] : std::vector<std::pair<std::string, std::string>>{
           {R"({"trainscope_notes":1,"bookmarks":[{"at_ns":5,"label":"ok"},{"at_ns":1e30,"label":"far"}]})",
            "bookmark 2 (\"far\")'s at_ns"},
           {R"({"trainscope_notes":1,"notes":[{"rank":0,"track":"t","name":"n","start_ns":18446744073709551615,"text":"slow"}]})",
            "note 1 (\"slow\")'s start_ns"}}) {
    try {
      trainscope::viewer::notesFromJson(text, file);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const trainscope::UserError& e) {
      EXPECT_NE(std::string(e.what()).find(which), std::string::npos) << e.what();
    }
  }
  const auto n = trainscope::viewer::notesFromJson(
      R"({"trainscope_notes":1,"bookmarks":[{"at_ns":-9223372036854775808,"label":"first"}]})", file);
  ASSERT_EQ(n.bookmarks.size(), 1u);
  EXPECT_EQ(n.bookmarks[0].at_ns, INT64_MIN);
}
