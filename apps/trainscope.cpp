// trainscope — the command line: run | tune | predict | report | export | import | view.
// Thin, and without LibTorch: `report`, `export` and `import` read and write run databases through
// rundb; `run` executes trainscope-train (beside this executable), the one program that loads
// LibTorch, as git runs its subcommands. Bad input exits 2 with a message that names the flag and
// the fix; a failure exits 1.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "calibrate_command.h"
#include "predict_command.h"
#include "tune_command.h"
#include "export_command.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/study.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/chrome.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/sqlite.h"

namespace db = trainscope::rundb;

namespace {

std::string selfDir() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, size_t(n));
  return p.substr(0, p.rfind('/'));
}

// `trainscope run …` → `trainscope-train run …` (same arguments, same process id);
// `trainscope view …` → `trainscope-viewer …`.
int execSibling(const char* name, const char* env_name, int argc, char** argv, int first_arg) {
  const char* env = std::getenv(env_name);
  const std::string exe = env && *env ? env : selfDir() + "/" + name;
  std::vector<char*> args;
  args.push_back(const_cast<char*>(exe.c_str()));
  for (int i = first_arg; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execv(exe.c_str(), args.data());
  std::cerr << "error: cannot start " << exe << ": " << std::strerror(errno) << " (fix: build the " << name
            << " target; it is installed beside trainscope)\n";
  return 1;
}

// `trainscope import`: traces of other profilers into a run database.
struct ImportCommand {
  std::vector<std::string> files;
  std::string out;
  bool overwrite = false;
  CLI::App* cli = nullptr;

  void add(CLI::App& app) {
    cli = app.add_subcommand("import", "PyTorch profiler (Kineto) JSON[.gz] or Nsight Systems SQLite → run database");
    cli->add_option("files", files, "one trace per rank")->required();
    cli->add_option("-o,--out", out, "run database to write")->required();
    cli->add_flag("--overwrite", overwrite, "replace --out if it is an earlier run database");
  }
  int run() const {
    auto st = db::importTraces(files, out, overwrite);
    std::cout << "imported " << st.files << " file(s) into " << out << ": " << st.kernels << " kernels, "
              << st.api_calls << " API calls, " << st.host_ops << " host ops, " << st.ranges << " ranges, "
              << st.memcpy << " memcpy, " << st.memset << " memset, " << st.collectives << " collectives, "
              << st.steps << " steps" << (st.memory_samples ? ", " + std::to_string(st.memory_samples) + " memory events" : "")
              << "\n";
    if (st.dropped_out_of_range + st.dropped_negative > 0)
      std::cout << "dropped and counted (drops table): " << st.dropped_out_of_range
                << " event(s) whose time does not fit int64 nanoseconds, " << st.dropped_negative
                << " with a negative duration\n";
    std::cout << db::describeRefusals(st);
    return 0;
  }
};

// `trainscope report`: a run database summarised, as text or JSON.
struct ReportCommand {
  std::string path;
  bool json = false;
  int top = 15;
  CLI::App* cli = nullptr;

  void add(CLI::App& app) {
    cli = app.add_subcommand("report", "summarise a run database: step times, compute/comm/idle, top ops, collectives");
    cli->add_option("db", path, "run database")->required();
    cli->add_flag("--json", json, "one JSON object instead of text");
    cli->add_option("--top", top, "how many ops to list")->capture_default_str();
  }
  int run() const {
    auto r = db::computeReport(path, top);
    std::cout << (json ? db::reportJson(r) + "\n" : db::formatReport(r));
    return 0;
  }
};

// `trainscope export`: a run database as a Chrome trace, or a study's configuration in another
// tool's format.
struct ExportCommand {
  std::string path, chrome, format, out, reduce_dtype = "default";
  int64_t trial = -1;
  bool overwrite = false;
  CLI::App* cli = nullptr;

  void add(CLI::App& app) {
    cli = app.add_subcommand("export", "a run database for other tools, or a study's configuration in their formats");
    cli->add_option("db", path, "run database, or tuner study")->required();
    cli->add_option("--chrome", chrome, "run database: write Chrome trace JSON (Perfetto, chrome://tracing)");
    cli->add_option("--format", format,
                    std::string("study: ") + trainscope::tuner::exportFormatNames() + " (docs/tuner.md, \"Exports\")");
    cli->add_option("--trial", trial, "study: this candidate (its id) instead of the recommendation");
    cli->add_option("-o,--out", out, "study: write here instead of stdout (never the study itself)");
    cli->add_option("--reduce-dtype", reduce_dtype,
                    "study, --format deepspeed: communication_data_type, default|fp32|bf16|fp16 (default: the model's dtype)");
    cli->add_flag(
        "--overwrite", overwrite,
        "replace an existing file (--chrome: one that is not an earlier export; -o: any file, or a link itself)");
  }
  int run() const { return trainscope::tuner::isStudy(path) ? runStudy() : runChrome(); }
  int runStudy() const {
    if (format.empty())
      throw trainscope::UserError("--format", "is needed to export a study",
                                  std::string("pass --format ") + trainscope::tuner::exportFormatNames());
    if (cli->count("--out") > 0 && out.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
      throw trainscope::UserError("-o", "is empty", "name the file to write, or leave -o out for stdout");
    return trainscope::apps::exportStudy(
        path, format, cli->count("--trial") > 0 ? std::optional<int64_t>(trial) : std::nullopt, out, overwrite,
        reduce_dtype);
  }
  int runChrome() const {
    // Not a study: a missing path is said to be missing, and --format on a run database is said to
    // want a study (not "--chrome is needed", which sent the user after the wrong flag).
    if (::access(path.c_str(), F_OK) != 0)
      throw trainscope::UserError("db", path + " does not exist",
                                  "pass a run database (run --out, import -o) or a tuner study (tune --study)");
    trainscope::rundb::refuseDamaged(path, "db");  // not "not a tuner study" for a cut-short study
    if (chrome.empty() && !format.empty())
      throw trainscope::UserError("--format", path + " is not a tuner study: --format exports a study's candidate",
                                  "pass the study `tune --study` wrote, or --chrome OUT.json to export this run database");
    if (chrome.empty())
      throw trainscope::UserError("--chrome", "is needed to export a run database", "pass --chrome OUT.json");
    auto st = db::exportChrome(path, chrome, overwrite);
    std::cout << "wrote " << chrome << ": " << st.complete_events << " events, " << st.counter_events
              << " counter samples, " << st.flow_pairs << " launch flows\n";
    return 0;
  }
};

// The subcommands this executable runs itself, with their flags (`run` and `view` are exec'd).
struct Commands {
  trainscope::apps::TuneFlags* tune_flags = nullptr;
  CLI::App* tune = nullptr;
  trainscope::apps::PredictFlags* predict_flags = nullptr;
  CLI::App* predict = nullptr;
  trainscope::apps::CalibrateFlags* calibrate_flags = nullptr;
  CLI::App* calibrate = nullptr;
  ImportCommand import;
  ReportCommand report;
  ExportCommand exp;
};

// Every subcommand, in the order `trainscope --help` lists them.
void addCommands(CLI::App& app, Commands& c) {
  app.add_subcommand("run", "train a GPT and record per-step metrics (see `trainscope run --help`)");
  app.add_subcommand("view", "open run databases or a tuner study in trainscope-viewer (see `trainscope view --help`)");
  c.tune = trainscope::apps::addTuneCommand(app, c.tune_flags);
  c.predict = trainscope::apps::addPredictCommand(app, c.predict_flags);
  c.calibrate = trainscope::apps::addCalibrateCommand(app, c.calibrate_flags);
  c.import.add(app);
  c.report.add(app);
  c.exp.add(app);
}

// The commands, as an unknown one is answered ("run" and "view" start the sibling programs).
constexpr const char* kCommandNames = "run tune predict calibrate report export import view";

// Parses the command line; the exit status when that ends the program (help, or bad flags: 2).
std::optional<int> parseCommandLine(CLI::App& app, int argc, char** argv) {
  const auto known = [&](const std::string& name) {
    for (const CLI::App* sub : app.get_subcommands({}))
      if (sub->check_name(name)) return true;
    return false;
  };
  if (argc >= 2 && argv[1][0] != '-' && !known(argv[1])) {
    std::cerr << "error: unknown command " << argv[1] << "; commands are: " << kCommandNames
              << " (fix: see `trainscope --help`)\n";
    return 2;
  }
  if (argc < 2) {
    std::cerr << "error: no command; commands are: " << kCommandNames << " (fix: see `trainscope --help`)\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {  // the command's own help, where a command was named
    std::cerr << "error: " << e.what() << " (fix: see `trainscope "
              << (argv[1][0] != '-' ? std::string(argv[1]) + " " : "") << "--help`)\n";
    return 2;
  } catch (const trainscope::UserError& e) {  // a flag's own parser, run by CLI11 while it parses (it aborted)
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  }
  return std::nullopt;
}

// Runs the subcommand that was parsed: bad input exits 2 with its message, a failure 1.
int runParsed(const Commands& c) {
  try {
    if (c.predict->parsed()) return trainscope::apps::runPredict(*c.predict_flags);
    if (c.calibrate->parsed()) return trainscope::apps::runCalibrate(*c.calibrate_flags);
    if (c.report.cli->parsed()) return c.report.run();
    if (c.tune->parsed()) return trainscope::apps::runTune(*c.tune_flags, selfDir());
    if (c.exp.cli->parsed()) return c.exp.run();
    if (c.import.cli->parsed()) return c.import.run();
  } catch (const db::SqliteError& e) {
    if (e.diskFull()) {  // writing a study or run database: not the input's fault
      std::cerr << "error: " << e.what() << " (fix: free space on that disk, or write to another)\n";
      return 1;
    }
    // Reading a database the user named: bad input.
    std::cerr << "error: " << e.what() << " (fix: pass a trainscope run database; it may be truncated or corrupted)\n";
    return 2;
  } catch (const trainscope::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "run") return execSibling("trainscope-train", "TRAINSCOPE_TRAIN_EXE", argc, argv, 1);
  if (argc >= 2 && std::string(argv[1]) == "view")
    return execSibling("trainscope-viewer", "TRAINSCOPE_VIEWER_EXE", argc, argv, 2);

  CLI::App app{"trainscope — find the fastest way to train a GPT that fits, and show why"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(1);
  Commands commands;
  addCommands(app, commands);
  if (const std::optional<int> status = parseCommandLine(app, argc, argv)) return *status;
  return runParsed(commands);
}
