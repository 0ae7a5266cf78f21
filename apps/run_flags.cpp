// run_flags.cpp — see run_flags.h.
#include "run_flags.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <sys/stat.h>

#include "trainscope/common/error.h"

namespace trainscope::apps {

namespace rt = trainscope::runtime;

void addRunFlags(CLI::App* run, RunFlags& f) {
  rt::TrainConfig& c = f.cfg;
  run->add_option("--config", f.config_file,
                  "a config JSON (the \"config\" object of `run --json`, or the whole line); flags on the command line override it");
  run->add_option("--workload", c.workload, "workload name (workloads/*.json) or a JSON path (also HF GPT-2 config.json)")
      ->capture_default_str();
  run->add_option("--seq", c.seq, "sequence length T (default: the workload's n_positions, at most 1024)");
  run->add_option("--mbs", c.mbs, "micro-batch size in sequences")->capture_default_str();
  run->add_option("--gbs", f.gbs, "global batch in sequences (= mbs x ga x dp)");
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
  run->add_option("--seed", f.seed, "weight initialisation and synthetic data (0 to 2^64-1; default 1337)");
  run->add_option("--data", c.data, "synthetic | path to a uint16 token file (nanoGPT / llm.c layout)")
      ->capture_default_str();
  run->add_option("--device", f.device, "auto|cpu|cuda")->capture_default_str();
  run->add_option("--out", f.out.out, "run database (SQLite) to write");
  run->add_flag("--overwrite", f.out.overwrite, "replace --out if it is an earlier run database");
  run->add_option("--trace", f.out.trace, "record a trace into this run database (implies --out)");
  run->add_option("--trace-level", f.out.trace_level, "steps|ranges|ops|all")->capture_default_str();
  run->add_flag("--trace-shapes", f.out.trace_shapes, "record LibTorch op input shapes (ops level)");
  run->add_option("--peak-tflops", f.peak, "device peak dense TFLOP/s for MFU/HFU");
  run->add_option("--threads", c.threads, "intra-op CPU threads (0: LibTorch default)");
  run->add_option("--cpu-lanes", c.cpu_lanes,
                  "CPU: run each micro-batch as N one-core lanes in parallel (0: auto = one per thread, 1: off)")
      ->capture_default_str();
  run->add_flag("--json", f.json, "print one JSON summary line at the end");
  run->add_option("--mem-limit", f.mem_limit,
                  "CPU: bytes tensors may hold per rank (e.g. 2G); an allocation past it ends the run out of memory (exit 3)");
  run->add_flag("--oversubscribe", f.oversubscribe, "allow --threads and --nproc beyond 4x this machine's cores");
  run->add_flag("--skip-memory-check", f.skip_memory_check,
                "start even when the memory model says the run cannot fit the memory available");
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
  run->add_option("--inject-failure", c.inject_failure,
                  "testing: RANK:STEP[:throw|segv|hang|oom] makes that rank fail at that step; \"merge\" makes the "
                  "trace merge fail, \"close\" the run database's close (as on a full disk)");
  run->add_flag("-q,--quiet", f.quiet, "no per-step lines");
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
  if (!f.mem_limit.empty()) c.mem_limit = rt::parseBytes(f.mem_limit, "--mem-limit");
  if (f.skip_memory_check) c.memory_check = false;
  if (f.oversubscribe) c.oversubscribe = true;
  if (!f.seed.empty()) {
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(f.seed.c_str(), &end, 10);
    if (f.seed[0] == '-' || f.seed[0] == '+' || *end != '\0' || end == f.seed.c_str() || errno == ERANGE)
      throw UserError("--seed", "\"" + f.seed + "\" is not an integer from 0 to 18446744073709551615", "pass e.g. --seed 1337");
    c.seed = v;
  }
  return c;
}

std::vector<std::string> expandConfigFlag(const std::vector<std::string>& argv) {
  std::vector<std::string> out;
  for (size_t i = 0; i + 1 < argv.size(); ++i)  // "--lr ''" would otherwise read as 0
    if (argv[i].rfind("--", 0) == 0 && argv[i].size() > 2 && argv[i + 1].empty())
      throw UserError(argv[i], "is empty", "give it a value");
  for (size_t i = 0; i < argv.size(); ++i) {
    std::string file;
    if (argv[i] == "--config") {
      if (i + 1 >= argv.size()) throw UserError("--config", "needs a file", "pass --config FILE.json");
      file = argv[++i];
    } else if (argv[i].rfind("--config=", 0) == 0) {
      file = argv[i].substr(9);
    } else {
      out.push_back(argv[i]);
      continue;
    }
    struct stat st {};
    if (stat(file.c_str(), &st) != 0) throw UserError("--config", file + " does not exist", "check the path");
    if (!S_ISREG(st.st_mode)) throw UserError("--config", file + " is not a regular file", "pass a JSON file");
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    // The config's flags go first: flags written after them on the command line win.
    std::vector<std::string> flags = rt::toArgs(rt::fromJson(text.str(), file));
    // A batch split given on the command line replaces the config's (gbs and ga are one choice).
    bool user_batch = false;
    for (const auto& a : argv)
      for (const char* f : {"--gbs", "--ga"})
        if (a == f || a.rfind(std::string(f) + "=", 0) == 0) user_batch = true;
    if (user_batch)
      for (size_t k = 0; k + 1 < flags.size(); ++k)
        if (flags[k] == "--gbs" || flags[k] == "--ga") flags.erase(flags.begin() + long(k), flags.begin() + long(k) + 2);
    const size_t at = out.size() >= 2 ? 2 : out.size();  // after "<exe> run"
    out.insert(out.begin() + long(at), flags.begin(), flags.end());
  }
  return out;
}

}  // namespace trainscope::apps
