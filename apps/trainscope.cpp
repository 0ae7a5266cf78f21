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

#include "predict_command.h"
#include "tune_command.h"
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

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "run") return execSibling("trainscope-train", "TRAINSCOPE_TRAIN_EXE", argc, argv, 1);
  if (argc >= 2 && std::string(argv[1]) == "view")
    return execSibling("trainscope-viewer", "TRAINSCOPE_VIEWER_EXE", argc, argv, 2);

  CLI::App app{"trainscope — find the fastest way to train a GPT that fits, and show why"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(1);
  app.add_subcommand("run", "train a GPT and record per-step metrics (see `trainscope run --help`)");
  app.add_subcommand("view", "open run databases or a tuner study in trainscope-viewer (see `trainscope view --help`)");
  trainscope::apps::TuneFlags* tune_flags = nullptr;
  CLI::App* tune = trainscope::apps::addTuneCommand(app, tune_flags);
  trainscope::apps::PredictFlags* predict_flags = nullptr;
  CLI::App* predict = trainscope::apps::addPredictCommand(app, predict_flags);
  std::vector<std::string> import_files;
  std::string import_out;
  bool import_overwrite = false;
  CLI::App* imp = app.add_subcommand("import", "PyTorch profiler (Kineto) JSON[.gz] or Nsight Systems SQLite → run database");
  imp->add_option("files", import_files, "one trace per rank")->required();
  imp->add_option("-o,--out", import_out, "run database to write")->required();
  imp->add_flag("--overwrite", import_overwrite, "replace --out if it is an earlier run database");
  std::string report_path;
  bool report_json = false;
  int report_top = 15;
  CLI::App* report = app.add_subcommand("report", "summarise a run database: step times, compute/comm/idle, top ops, collectives");
  report->add_option("db", report_path, "run database")->required();
  report->add_flag("--json", report_json, "one JSON object instead of text");
  report->add_option("--top", report_top, "how many ops to list")->capture_default_str();
  std::string export_path, chrome_path, export_format, export_out;
  int64_t export_trial = -1;
  bool export_overwrite = false;
  CLI::App* exp = app.add_subcommand("export", "a run database for other tools, or a study's configuration in their formats");
  exp->add_option("db", export_path, "run database, or tuner study")->required();
  exp->add_option("--chrome", chrome_path, "run database: write Chrome trace JSON (Perfetto, chrome://tracing)");
  exp->add_option("--format", export_format,
                 std::string("study: ") + trainscope::tuner::exportFormatNames() + " (docs/tuner.md, \"Exports\")");
  exp->add_option("--trial", export_trial, "study: this candidate (its id) instead of the recommendation");
  exp->add_option("-o,--out", export_out, "study: write here instead of stdout (never the study itself)");
  exp->add_flag(
      "--overwrite", export_overwrite,
      "replace an existing file (--chrome: one that is not an earlier export; -o: any file, or a link itself)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (fix: see `trainscope --help`)\n";
    return 2;
  }
  try {
    if (predict->parsed()) return trainscope::apps::runPredict(*predict_flags);
    if (report->parsed()) {
      auto r = db::computeReport(report_path, report_top);
      std::cout << (report_json ? db::reportJson(r) + "\n" : db::formatReport(r));
      return 0;
    }
    if (tune->parsed()) return trainscope::apps::runTune(*tune_flags, selfDir());
    if (exp->parsed()) {
      if (trainscope::tuner::isStudy(export_path)) {
        if (export_format.empty())
          throw trainscope::UserError("--format", "is needed to export a study",
                                      std::string("pass --format ") + trainscope::tuner::exportFormatNames());
        if (exp->count("--out") > 0 && export_out.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
          throw trainscope::UserError("-o", "is empty", "name the file to write, or leave -o out for stdout");
        return trainscope::apps::exportStudy(
            export_path, export_format, exp->count("--trial") > 0 ? std::optional<int64_t>(export_trial) : std::nullopt,
            export_out, export_overwrite);
      }
      if (chrome_path.empty())
        throw trainscope::UserError("--chrome", "is needed to export a run database", "pass --chrome OUT.json");
      auto st = db::exportChrome(export_path, chrome_path, export_overwrite);
      std::cout << "wrote " << chrome_path << ": " << st.complete_events << " events, " << st.counter_events
                << " counter samples, " << st.flow_pairs << " launch flows\n";
      return 0;
    }
    if (imp->parsed()) {
      auto st = db::importTraces(import_files, import_out, import_overwrite);
      std::cout << "imported " << st.files << " file(s) into " << import_out << ": " << st.kernels << " kernels, "
                << st.api_calls << " API calls, " << st.host_ops << " host ops, " << st.ranges << " ranges, "
                << st.memcpy << " memcpy, " << st.memset << " memset, " << st.collectives << " collectives, "
                << st.steps << " steps\n";
      if (st.dropped_out_of_range + st.dropped_negative > 0)
        std::cout << "dropped and counted (drops table): " << st.dropped_out_of_range
                  << " event(s) whose time does not fit int64 nanoseconds, " << st.dropped_negative
                  << " with a negative duration\n";
      return 0;
    }
  } catch (const db::SqliteError& e) {
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
