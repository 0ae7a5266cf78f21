// trainscope-train — `trainscope run`: the one executable that loads LibTorch. `trainscope run …`
// executes it as `trainscope-train run …`; the launcher starts ranks as copies of it.
// Thin: parses flags, calls runtime::train() with an observer that prints, prints --json. Bad input
// exits 2 with a message that names the flag and the fix; a failure while running exits 1.
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <thread>

#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "run_flags.h"
#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"
#include "trainscope/common/slurm_ping.h"
#include "trainscope/rundb/merge.h"
#include "trainscope/rundb/rank_failures.h"
#include "trainscope/rundb/store.h"
#include "trainscope/runtime/calibrate.h"
#include "trainscope/runtime/launch.h"
#include "trainscope/runtime/train.h"

namespace rt = trainscope::runtime;

namespace {

std::string mib(int64_t bytes) {
  char b[32];
  std::snprintf(b, sizeof(b), "%.1f MiB", double(bytes) / (1024.0 * 1024.0));
  return b;
}

// Prints the banner and a line per step on rank 0 (flushed line by line: logs keep their tail).
class ConsoleObserver final : public rt::RunObserver {
 public:
  explicit ConsoleObserver(bool quiet) : quiet_(quiet) {}
  void started(const rt::RunInfo& i) override {
    if (quiet_ || !i.leader) return;
    const rt::TrainConfig& c = *i.config;
    std::cout << "trainscope run: " << c.model.name << " (L=" << c.model.n_layer << " NH=" << c.model.n_head
              << " C=" << c.model.n_embd << " V=" << c.model.vocab_size << "), " << i.parameters << " parameters\n"
              << "  batch: seq " << c.seq << ", mbs " << c.mbs << " x ga " << c.ga_steps << " x dp " << c.dp
              << " = gbs " << c.global_batch << " (" << c.tokensPerStep() << " tokens/step); ckpt "
              << toString(c.ckpt) << ", " << toString(c.precision) << ", " << toString(c.optimizer) << "\n";
    if (c.world > 1)
      std::cout << "  parallel: " << c.world << " ranks = dp " << c.dp << " x tp " << c.tp << " x pp " << c.pp
                << (c.sequence_parallel ? ", sequence parallel" : "")
                << (rt::shardsOptimizer(c.zero) ? ", ZeRO-" + std::to_string(rt::stageNumber(c.zero)) : "")
                << (c.pp > 1 ? std::string(", ") + rt::scheduleName(c) +
                                   (c.interleaved() ? " v" + std::to_string(c.virtual_stages) : "")
                             : "")
                << (c.local_sgd ? ", local SGD H=" + std::to_string(c.local_sgd) : "") << " (" << i.rank_source << ")\n";
    std::cout << "  device: " << i.device_name << "; data: " << c.data << std::endl;
  }
  void stepDone(const rt::RunInfo& i, const trainscope::rundb::Step& r) override {
    if (quiet_ || !i.leader) return;
    char line[320];
    std::string mfu = r.mfu ? " | MFU " + std::to_string(*r.mfu * 100).substr(0, 5) + "%" : "";
    std::snprintf(line, sizeof(line), "step %4lld | loss %.6f | lr %.3e | norm %.4f | %7.1f ms | %9.0f tok/s%s%s",
                  static_cast<long long>(r.step), r.loss, r.lr, r.grad_norm, double(r.step_time_ns) * 1e-6,
                  r.tokens_per_s, mfu.c_str(),
                  !r.skipped ? "" : i.config->precision == rt::Precision::FP16 ? " | skipped (fp16 overflow)"
                                                                               : " | skipped (non-finite gradient)");
    std::cout << line << std::endl;
  }
  void notice(const std::string& line) override { std::cerr << line << std::endl; }

 private:
  bool quiet_;
};

void printDone(const rt::RunResult& r) {
  const auto& s = r.summary;
  // After --resume, what this invocation ran: its step numbers are the run's (0-based, as the step lines).
  const int64_t ran = r.steps_done - r.first_step;
  const std::string steps = r.first_step == 0 ? std::to_string(r.steps_done) + " steps"
                                              : std::to_string(ran) + " step" + (ran == 1 ? "" : "s") + " (steps " +
                                                    std::to_string(r.first_step) + "-" + std::to_string(r.steps_done - 1) +
                                                    " of " + std::to_string(r.config.steps) + ", resumed at step " +
                                                    std::to_string(r.first_step) + ")";
  std::cout << "done: " << steps << ", " << int64_t(s.tokens_per_s + 0.5) << " tokens/s; peak memory "
            << mib(s.peak_bytes) << (s.world > 1 ? " (max over ranks)" : "") << "; rank 0: params "
            << mib(r.last.param_bytes) << ", grads " << mib(r.last.grad_bytes) << ", optimizer "
            << mib(r.last.optim_bytes) << ", activations " << mib(r.last.activation_bytes) << "\n";
  if (!r.database.empty()) std::cout << "run database: " << r.database << "\n";
  if (!r.checkpoints.empty()) {
    const rt::CheckpointWritten& c = r.checkpoints.back();
    std::cout << "checkpoint: " << c.dir << " (after step " << c.step << ", " << mib(c.bytes) << " in "
              << c.seconds << " s" << (r.checkpoints.size() > 1 ? ", " + std::to_string(r.checkpoints.size()) + " written" : "")
              << ")\n";
  }
  std::cout << std::flush;
}

// A fatal error, once: a rank of the local launcher hands it to the launcher, which prints the
// first one for the whole run (the peers' "connection closed by peer" that follow it are not news);
// anything else prints it. Build-tree paths in it are cut to the file name.
void printError(const std::string& what) {
  if (rt::launchedByLocalLauncher()) return rt::reportRankError(what);
  std::cerr << "error: " << rt::userFacing(what) << std::endl;
}

// After a failure: the trace shards still on disk hold the events recorded before it. Only our own
// shards are named: a file of someone else's that happens to sit at a shard path is not one.
void noteLeftoverShards(const rt::RunOutput& out) {
  if (!out.tracing()) return;
  std::vector<std::string> shards;
  for (const auto& s : trainscope::rundb::leftoverShards(out.trace))
    if (trainscope::rundb::inspectPath(s).kind == trainscope::rundb::PathCheck::Kind::RunDatabase) shards.push_back(s);
  if (shards.empty()) return;
  std::cerr << "note: the run's trace shards were not merged; they hold the events recorded before the failure:";
  for (const auto& s : shards) std::cerr << " " << s;
  std::cerr << " (each opens with `trainscope report` or `export`; they are replaced by the next run with --overwrite)"
            << std::endl;
}

// A one-process run that failed records why in its run database, as the launcher does for its ranks
// (rundb/rank_failures.h): this process wrote it, and has closed it by now.
int recordOwnFailure(const trainscope::apps::RunFlags& f, int status, const std::string& what) {
  if (rt::isRankProcess() || f.cfg.nproc != 1 || f.cfg.launcher != rt::Launcher::Local) return status;
  trainscope::rundb::RunFailure failure;
  failure.first_rank = 0;
  failure.writer_pid = ::getpid();
  failure.ranks.push_back({0, status, rt::userFacing(what)});
  trainscope::rundb::recordRunFailure(f.out.out.empty() ? f.out.trace : f.out.out, failure);
  return status;
}

// One line: the run's figures (all from the run summary, the numbers `report` prints) and its config.
void printJson(const rt::RunResult& r) {
  const auto& s = r.summary;
  const rt::TrainConfig& c = r.config;
  const double flops_step = r.last.model_flops * double(c.world), hw_step = r.last.hw_flops * double(c.world);
  nlohmann::json j = {{"workload", c.model.name}, {"parameters", r.info.parameters}, {"device", r.info.device},
                      {"world", c.world}, {"dp", c.dp}, {"tp", c.tp}, {"pp", c.pp}, {"steps", r.steps_done},
                      {"first_step", r.first_step},
                      {"first_loss", r.first_loss}, {"final_loss", r.final_loss},
                      {"tokens_per_s", s.tokens_per_s}, {"step_time_s", s.step_s_mean},
                      {"step_time_median_s", s.step_s_median},
                      {"tokens_per_s_median", s.step_s_median > 0 ? double(c.tokensPerStep()) / s.step_s_median : 0.0},
                      {"peak_bytes", s.peak_bytes}, {"param_bytes", r.last.param_bytes},
                      {"grad_bytes", r.last.grad_bytes}, {"optim_bytes", r.last.optim_bytes},
                      {"activation_bytes", r.last.activation_bytes}, {"model_flops_per_step", flops_step},
                      {"hw_flops_per_step", hw_step},
                      {"model_flops_per_s", s.step_s_mean > 0 ? flops_step / s.step_s_mean : 0.0},
                      {"allreduce_hidden_share", r.allreduce_hidden_share},
                      {"grad_comm_s_per_step", r.grad_comm_s_per_step}, {"skipped_steps", r.skipped_steps},
                      {"loss_scale", r.loss_scale}, {"summary", nlohmann::json::parse(summaryJson(s))},
                      {"config", nlohmann::json::parse(toJson(c))}};
  if (s.mfu) j["mfu"] = *s.mfu, j["hfu"] = *s.hfu, j["peak_tflops"] = *s.peak_flops * 1e-12;
  if (r.resident_peak_bytes > 0) {  // rank 0's process: resident memory and what is not tensors
    j["resident_start_bytes"] = r.resident_start_bytes;
    j["resident_peak_bytes"] = r.resident_peak_bytes;
    j["non_tensor_bytes"] = r.non_tensor_bytes;
  }
  if (!r.database.empty()) j["out"] = r.database;
  // Stopped by a signal (which one: the stderr line; under the launcher the ranks see its SIGTERM);
  // summary.notes says the steps are fewer than asked for.
  if (r.end == rt::RunEnd::Stopped) j["stopped"] = true;
  for (const rt::CheckpointWritten& c : r.checkpoints)
    j["checkpoints"].push_back({{"step", c.step}, {"seconds", c.seconds}, {"bytes", c.bytes}, {"dir", c.dir}});
  std::cout << trainscope::jsonText(j) << std::endl;
}

// `--pp-schedule 1f1b --virtual-stages V` (V > 1) still means interleaved 1F1B; its one name, as
// predict, tune, the study and the exports spell it, is `--pp-schedule interleaved`. Said once, by
// the process the user started (not by each rank).
void noteScheduleSpelling(const std::vector<std::string>& args, const rt::TrainConfig& c) {
  if (rt::isRankProcess() || c.virtual_stages <= 1) return;
  for (size_t i = 1; i < args.size(); ++i)
    if (args[i] == "--pp-schedule=1f1b" || (args[i] == "--pp-schedule" && i + 1 < args.size() && args[i + 1] == "1f1b")) {
      std::cerr << "note: --pp-schedule 1f1b --virtual-stages " << c.virtual_stages
                << " runs interleaved 1F1B; its name is --pp-schedule interleaved (--virtual-stages "
                << c.virtual_stages << ")" << std::endl;
      return;
    }
}

// Reads the command line into `f`; returns the exit status when there is nothing to run (help, or
// bad input). `run --config FILE` alone reads FILE straight; otherwise a --config among the flags
// is expanded into flags first, so that the others override it.
std::optional<int> parseCommandLine(std::vector<std::string>& args, trainscope::apps::RunFlags& f) {
  CLI::App app{"trainscope-train — `trainscope run` (train a GPT and record per-step metrics)"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(1);
  CLI::App* run = app.add_subcommand("run", "train a GPT and record per-step metrics");
  trainscope::apps::addRunFlags(run, f);
  try {
    if (auto spec = trainscope::apps::configOnly(args)) {
      f.cfg = spec->config;
      f.out = spec->output;
      f.quiet = spec->quiet;
      return std::nullopt;
    }
    args = trainscope::apps::expandConfigFlag(args);
    std::vector<std::string> rev(args.rbegin(), args.rend() - 1);  // CLI11 takes argv reversed, without argv[0]
    app.parse(rev);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (fix: see `trainscope run --help`)\n";
    return 2;
  } catch (const trainscope::UserError& e) {
    printError(e.what());
    return 2;
  }
  noteScheduleSpelling(args, f.cfg);
  // Said once, by the process the user started, before any rank (or the memory supervisor's child).
  if (!rt::isRankProcess())
    if (const std::string note = trainscope::runconfig::warmupNote(f.cfg); !note.empty()) std::cerr << note << std::endl;
  // --init-from / --resume without --workload: the checkpoint's own config.json is the model.
  const std::string from = !f.out.resume.empty() ? f.out.resume : f.out.init_from;
  bool workload_given = false;
  for (const auto& a : args) workload_given = workload_given || a == "--workload" || a.rfind("--workload=", 0) == 0;
  if (!from.empty() && !workload_given) {
    // The folder is what the user named: a missing one, a file or one without config.json is
    // refused naming --resume / --init-from, not the --workload they did not pass.
    const std::string flag = !f.out.resume.empty() ? "--resume" : "--init-from";
    const std::string fix = !f.out.resume.empty()
                                ? "pass a folder an earlier `run --save` wrote"
                                : "pass a Hugging Face checkpoint folder (config.json and model.safetensors), or name "
                                  "the model with --workload";
    struct stat st {};
    if (::stat(from.c_str(), &st) != 0) {
      printError(trainscope::UserError(flag, from + " does not exist", fix).what());
      return 2;
    }
    if (!S_ISDIR(st.st_mode)) {
      printError(trainscope::UserError(flag, from + " is not a folder", fix).what());
      return 2;
    }
    if (::stat((from + "/config.json").c_str(), &st) != 0) {
      printError(trainscope::UserError(flag, from + " holds no config.json (the model it holds is unknown)", fix).what());
      return 2;
    }
    f.cfg.workload = from + "/config.json";
  }
  return std::nullopt;
}

}  // namespace

int main(int argc, char** argv) {
  // `trainscope-train calibrate [THREADS]`: the machine's rates as JSON, for `tune --cluster local`.
  if (argc >= 2 && std::string(argv[1]) == "calibrate") {
    const int threads = argc >= 3 ? std::atoi(argv[2]) : 0;
    std::cout << rt::measureMachine(threads > 0 ? threads : int(std::thread::hardware_concurrency())) << std::endl;
    return 0;
  }
  std::vector<std::string> args(argv, argv + argc);
  trainscope::apps::RunFlags f;
  if (const auto status = parseCommandLine(args, f)) return *status;
  try {
    const rt::TrainConfig& cfg = f.cfg;
    if (!rt::isRankProcess() && cfg.nproc == 1 && cfg.launcher == rt::Launcher::Local)
      if (const std::optional<int> rc = rt::superviseUnderMemoryLimit(std::cerr)) {
        if (*rc != 0) noteLeftoverShards(f.out);
        return *rc;
      }
    if (!rt::isRankProcess() && (cfg.nproc > 1 || cfg.launcher == rt::Launcher::Slurm)) {
      rt::validateBeforeLaunch(cfg, f.out);  // bad input is reported once, before any rank starts
      if (cfg.launcher == rt::Launcher::Slurm) trainscope::slurm::requireController();  // else srun's exit 1
      rt::LaunchOptions lo;
      lo.nproc = cfg.nproc;
      lo.argv = args;  // each rank parses the same command line (a lone --config FILE: reads FILE)
      trainscope::rundb::RunFailure failure;
      const int rc =
          cfg.launcher == rt::Launcher::Slurm ? rt::launchSlurm(lo, std::cerr) : rt::launchLocal(lo, std::cerr, &failure);
      // Why it failed, into the run database rank 0 left (none when it failed before creating it).
      if (rc != 0) trainscope::rundb::recordRunFailure(f.out.out.empty() ? f.out.trace : f.out.out, failure);
      if (rc != 0) noteLeftoverShards(f.out);
      return rc;
    }
    ConsoleObserver console(f.quiet);
    const rt::RunResult r = rt::train(cfg, f.out, &console);
    for (const auto& w : r.warnings) std::cerr << "warning: " << rt::userFacing(w) << std::endl;
    if (r.end == rt::RunEnd::Diverged) {
      std::cerr << "error: " << r.message << std::endl;
      return recordOwnFailure(f, 1, r.message);
    }
    if (r.end == rt::RunEnd::Stopped) {
      // Rank 0 says how it ended; under the local launcher the launcher prints it, once.
      const std::string line =
          r.message + "; every rank finished its step" +
          (r.database.empty() ? std::string() : " and " + r.database + " holds what was recorded");
      if (r.info.leader && !rt::reportRankStop(line)) std::cerr << line << std::endl;
      if (r.info.leader && f.json) printJson(r);  // what was recorded, as a finished run's line
      return 128 + r.stop_signal;
    }
    if (!r.info.leader) return 0;
    if (!f.quiet) printDone(r);
    if (f.json) printJson(r);
    return 0;
  } catch (const trainscope::UserError& e) {
    printError(e.what());
    return recordOwnFailure(f, 2, e.what());
  } catch (const trainscope::OutOfMemory& e) {
    printError(e.what());
    if (!rt::isRankProcess()) noteLeftoverShards(f.out);
    return recordOwnFailure(f, trainscope::kExitOutOfMemory, e.what());
  } catch (const std::exception& e) {
    printError(e.what());
    if (!rt::isRankProcess()) noteLeftoverShards(f.out);
    return recordOwnFailure(f, 1, e.what());
  }
}
