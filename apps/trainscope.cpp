// trainscope — the command line: run | tune | report | export | import.
// Thin: parses flags with CLI11 and calls the libraries. Bad input exits 2 with a message that names
// the flag and the fix; a failure while running exits 1.
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "trainscope/common/error.h"
#include "trainscope/runtime/config.h"
#include "trainscope/runtime/launch.h"
#include "trainscope/tracer/chrome.h"
#include "trainscope/tracer/import.h"
#include "trainscope/tracer/report.h"
#include "trainscope/tracer/sqlite.h"
#include "trainscope/runtime/run_command.h"

namespace rt = trainscope::runtime;

namespace {

struct RunFlags {
  rt::TrainConfig cfg;
  std::string ckpt = "none", precision = "fp32", optimizer = "adamw", device = "auto";
  std::string schedule = "1f1b", launcher = "local";
  int64_t gbs = 0, ga = 0;
  double peak = 0;
};

void addRunFlags(CLI::App* run, RunFlags& f) {
  rt::TrainConfig& c = f.cfg;
  run->add_option("--workload", c.workload, "workload name (workloads/*.json) or a JSON path (also HF GPT-2 config.json)")
      ->capture_default_str();
  run->add_option("--seq", c.seq, "sequence length T (default: the workload's n_positions, at most 1024)");
  run->add_option("--mbs", c.mbs, "micro-batch size in sequences")->capture_default_str();
  run->add_option("--gbs", f.gbs, "global batch in sequences (= mbs x ga)");
  run->add_option("--ga", f.ga, "gradient-accumulation steps");
  run->add_option("--steps", c.steps, "optimizer steps")->capture_default_str();
  run->add_option("--ckpt", f.ckpt, "activation checkpointing: none|selective|full")->capture_default_str();
  run->add_option("--precision", f.precision, "fp32|bf16|fp16")->capture_default_str();
  run->add_option("--optimizer", f.optimizer, "adamw|adafactor|adam8bit|sgd")->capture_default_str();
  run->add_option("--lr", c.lr, "peak learning rate")->capture_default_str();
  run->add_option("--min-lr-ratio", c.min_lr_ratio, "cosine decays to lr x this")->capture_default_str();
  run->add_option("--warmup", c.warmup, "linear warm-up steps")->capture_default_str();
  run->add_option("--clip", c.clip, "gradient global-norm clip (0: off)")->capture_default_str();
  run->add_option("--weight-decay", c.weight_decay, "decoupled weight decay on matrices")->capture_default_str();
  run->add_option("--beta1", c.beta1)->capture_default_str();
  run->add_option("--beta2", c.beta2)->capture_default_str();
  run->add_option("--eps", c.eps)->capture_default_str();
  run->add_option("--momentum", c.momentum, "SGD momentum")->capture_default_str();
  run->add_option("--adam8bit-block", c.adam8bit_block, "8-bit Adam quantisation block")->capture_default_str();
  run->add_option("--fp16-init-scale", c.fp16_init_scale, "initial fp16 loss scale")->capture_default_str();
  run->add_option("--fp16-growth-interval", c.fp16_growth_interval, "clean steps before the fp16 scale doubles")
      ->capture_default_str();
  run->add_option("--seed", c.seed)->capture_default_str();
  run->add_option("--data", c.data, "synthetic | path to a uint16 token file (nanoGPT / llm.c layout)")
      ->capture_default_str();
  run->add_option("--device", f.device, "auto|cpu|cuda")->capture_default_str();
  run->add_option("--out", c.out, "run database (SQLite) to write");
  run->add_flag("--overwrite", c.overwrite, "replace --out if it exists");
  run->add_option("--trace", c.trace, "record a trace into this run database (implies --out)");
  run->add_option("--trace-level", c.trace_level, "steps|ranges|ops|all")->capture_default_str();
  run->add_flag("--trace-shapes", c.trace_shapes, "record LibTorch op input shapes (ops level)");
  run->add_option("--peak-tflops", f.peak, "device peak dense TFLOP/s for MFU/HFU");
  run->add_option("--threads", c.threads, "intra-op CPU threads (0: LibTorch default)");
  run->add_option("--cpu-lanes", c.cpu_lanes,
                  "CPU: run each micro-batch as N one-core lanes in parallel (0: auto = one per thread, 1: off)")
      ->capture_default_str();
  run->add_flag("--json", c.json, "print one JSON summary line at the end");
  // parallelism
  run->add_option("--nproc", c.nproc, "ranks to start (world = dp x tp x pp)")->capture_default_str();
  run->add_option("--launcher", f.launcher, "local|slurm (slurm: under srun)")->capture_default_str();
  run->add_option("--tp", c.tp, "tensor-parallel degree")->capture_default_str();
  run->add_option("--pp", c.pp, "pipeline-parallel degree")->capture_default_str();
  run->add_flag("--sequence-parallel", c.sequence_parallel, "shard LayerNorm/dropout regions along the sequence (needs --tp > 1)");
  run->add_option("--zero", c.zero, "1: shard optimizer state over data-parallel ranks (ZeRO-1)")->capture_default_str();
  run->add_option("--pp-schedule", f.schedule, "gpipe|1f1b")->capture_default_str();
  run->add_option("--local-sgd", c.local_sgd, "H > 0: no gradient all-reduce; average weights every H steps")
      ->capture_default_str();
  run->add_option("--bucket-mb", c.bucket_mb, "data-parallel all-reduce bucket size (MiB)")->capture_default_str();
  run->add_option("--rendezvous-timeout", c.rendezvous_timeout_s, "seconds to wait for every rank to join")
      ->capture_default_str();
  run->add_option("--collective-timeout", c.collective_timeout_s, "seconds before a stuck collective fails")
      ->capture_default_str();
  run->add_option("--inject-failure", c.inject_failure, "testing: RANK:STEP makes that rank fail at that step");
  run->add_flag("-q,--quiet", c.quiet, "no per-step lines");
}

rt::TrainConfig finish(RunFlags& f, CLI::App* run) {
  rt::TrainConfig c = f.cfg;
  c.ckpt = rt::parseCheckpointing(f.ckpt);
  c.precision = rt::parsePrecision(f.precision);
  c.optimizer = rt::parseOptimizer(f.optimizer);
  c.device = rt::parseDevice(f.device);
  c.pp_schedule = rt::parseSchedule(f.schedule);
  c.launcher = rt::parseLauncher(f.launcher);
  if (run->count("--gbs")) c.gbs = f.gbs;
  if (run->count("--ga")) c.ga = f.ga;
  if (run->count("--peak-tflops")) c.peak_tflops = f.peak;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"trainscope — find the fastest way to train a GPT that fits, and show why"};
  // A flag given twice takes its last value, so scripts can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.require_subcommand(1);
  RunFlags run_flags;
  CLI::App* run = app.add_subcommand("run", "train a GPT and record per-step metrics");
  addRunFlags(run, run_flags);
  app.add_subcommand("tune", "not available yet in this build")->allow_extras();
  std::vector<std::string> import_files;
  std::string import_out;
  bool import_overwrite = false;
  CLI::App* imp = app.add_subcommand("import", "PyTorch profiler (Kineto) JSON[.gz] or Nsight Systems SQLite → run database");
  imp->add_option("files", import_files, "one trace per rank")->required();
  imp->add_option("-o,--out", import_out, "run database to write")->required();
  imp->add_flag("--overwrite", import_overwrite, "replace --out if it exists");
  std::string report_path;
  bool report_json = false;
  int report_top = 15;
  CLI::App* report = app.add_subcommand("report", "summarise a run database: step times, compute/comm/idle, top ops, collectives");
  report->add_option("db", report_path, "run database")->required();
  report->add_flag("--json", report_json, "one JSON object instead of text");
  report->add_option("--top", report_top, "how many ops to list")->capture_default_str();
  std::string export_path, chrome_path;
  CLI::App* exp = app.add_subcommand("export", "convert a run database for other tools");
  exp->add_option("db", export_path, "run database")->required();
  exp->add_option("--chrome", chrome_path, "write Chrome trace JSON (Perfetto, chrome://tracing)")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << "error: " << e.what() << " (fix: see `trainscope " << (run->parsed() ? "run " : "") << "--help`)\n";
    return 2;
  }
  try {
    if (run->parsed()) {
      rt::TrainConfig cfg = finish(run_flags, run);
      if (rt::isRankProcess()) return rt::runCommand(cfg, std::cout, std::cerr);
      if (cfg.nproc > 1 || cfg.launcher == rt::Launcher::Slurm) {
        rt::validateBeforeLaunch(cfg);  // bad input is reported once, before any rank starts
        rt::LaunchOptions lo;
        lo.nproc = cfg.nproc;
        lo.argv.assign(argv, argv + argc);
        return cfg.launcher == rt::Launcher::Slurm ? rt::launchSlurm(lo, std::cerr) : rt::launchLocal(lo, std::cerr);
      }
      return rt::runCommand(cfg, std::cout, std::cerr);
    }
    if (report->parsed()) {
      auto r = trainscope::tracer::computeReport(report_path, report_top);
      std::cout << (report_json ? trainscope::tracer::reportJson(r) + "\n" : trainscope::tracer::formatReport(r));
      return 0;
    }
    if (exp->parsed()) {
      auto st = trainscope::tracer::exportChrome(export_path, chrome_path);
      std::cout << "wrote " << chrome_path << ": " << st.complete_events << " events, " << st.counter_events
                << " counter samples, " << st.flow_pairs << " launch flows\n";
      return 0;
    }
    if (imp->parsed()) {
      auto st = trainscope::tracer::importTraces(import_files, import_out, import_overwrite);
      std::cout << "imported " << st.files << " file(s) into " << import_out << ": " << st.kernels << " kernels, "
                << st.api_calls << " API calls, " << st.host_ops << " host ops, " << st.ranges << " ranges, "
                << st.memcpy << " memcpy, " << st.memset << " memset, " << st.steps << " steps\n";
      return 0;
    }
    for (const char* name : {"tune"})
      if (app.got_subcommand(name)) {
        std::cerr << "error: `trainscope " << name << "` is not implemented in this build yet\n";
        return 2;
      }
  } catch (const trainscope::tracer::SqliteError& e) {
    // Reading a database the user named: bad input. Writing one during a run: a failure.
    const bool reading = report->parsed() || exp->parsed() || imp->parsed();
    std::cerr << "error: " << e.what()
              << (reading ? " (fix: pass a trainscope run database; it may be truncated or corrupted)" : "") << "\n";
    if (!reading) rt::reportRankError(e.what());
    return reading ? 2 : 1;
  } catch (const trainscope::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    rt::reportRankError(e.what());
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    rt::reportRankError(e.what());
    return 1;
  }
  return 0;
}
