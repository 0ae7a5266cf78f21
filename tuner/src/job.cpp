// job.cpp — an external runner's kinds, refusals and launch, made before anything runs (job.h).
#include "trainscope/tuner/job.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"
#include "trainscope/common/process.h"
#include "export_model.h"

namespace trainscope::tuner {
namespace {

namespace rt = trainscope::runconfig;

struct KindName {
  JobKind kind;
  const char* name;
};
constexpr KindName kKinds[] = {{JobKind::Trainscope, "trainscope"}, {JobKind::Hf, "hf"},
                               {JobKind::Accelerate, "accelerate"}, {JobKind::DeepSpeed, "deepspeed"},
                               {JobKind::Megatron, "megatron"},     {JobKind::Torchtitan, "torchtitan"}};

// torchrun on one machine: a free rendezvous port of its own (--standalone), W local ranks.
std::vector<std::string> torchrun(const std::string& python, int64_t world) {
  return {python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1", "--nproc_per_node",
          std::to_string(world)};
}

// torchrun on one machine at a port chosen for the trial (a static rendezvous its agent hosts there):
// for a job whose own launcher also needs to be told the port (accelerate launch, below).
std::vector<std::string> torchrunAt(const std::string& python, int64_t world, int port) {
  return {python, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc_per_node", std::to_string(world),
          "--master_addr", "127.0.0.1", "--master_port", std::to_string(port)};
}

// The Accelerate config's distributed_type is FSDP (export.cpp): ZeRO-2/3 over dp > 1.
bool fsdpLayout(const rt::TrainConfig& c) { return c.dp > 1 && c.zero >= rt::ZeroStage::Gradients; }

// The training-args file of an --runner accelerate trial: the Trainer's own FSDP fields dropped, so
// the plugin is the one Accelerate builds from the config file the job was launched with.
void withoutTrainerFsdp(ExportFile& f) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(f.text);
  j.erase("fsdp");
  j.erase("fsdp_config");
  f.text = jsonText(j, 2) + "\n";
}

void append(std::vector<std::string>& to, const std::vector<std::string>& what) {
  to.insert(to.end(), what.begin(), what.end());
}

// Intra-op threads per rank. torchrun sets OMP_NUM_THREADS to 1 when it starts more than one process
// on a node and the variable is unset (torch 2.11 torch/distributed/run.py, config_from_args); the
// deepspeed launcher leaves it unset (deepspeed 0.19.8 launcher/launch.py sets it only under
// --bind_cores_to_rank), so 2 ranks of the host's threads each oversubscribe its cores (tiny Llama
// ZeRO 0 on 2 cores: 142 ms a step, 22 ms with one thread a rank). Every launch that starts several
// ranks a node without torchrun gets torchrun's rule: the deepspeed launcher here, srun's tasks in the
// probe's sitecustomize (Slurm alone knows a node's tasks). A value in the tuner's environment is the
// user's and is kept. TRAINSCOPE_THREADS_SOURCE says who set it; each rank records it with what it
// got (the probe's rankR.threads.json, the trial's `threads` meta key).
void rankThreads(JobLaunch& L, const JobOptions& o, const rt::TrainConfig& c, bool slurm) {
  const char* user = std::getenv("OMP_NUM_THREADS");
  std::string source;
  if (user && *user) source = "user";
  else if (slurm) source = "per-node";  // the rank's sitecustomize: 1 where its node runs > 1 task
  else if (c.world <= 1) source = "none";  // one rank: torch's default, the cores
  else if (o.kind == JobKind::DeepSpeed) {
    L.env.push_back({"OMP_NUM_THREADS", "1"});
    source = "runner";
  } else if (o.kind == JobKind::Accelerate && !(o.cpu && !fsdpLayout(c))) source = "accelerate";  // its launch sets it
  else source = "torchrun";
  L.env.push_back({"TRAINSCOPE_THREADS_SOURCE", source});
}

}  // namespace

const char* jobKindNames() { return "trainscope|hf|accelerate|deepspeed|megatron|torchtitan"; }

JobKind parseJobKind(const std::string& name, const std::string& field) {
  for (const KindName& k : kKinds)
    if (name == k.name) return k.kind;
  throw UserError(field, "unknown runner \"" + name + "\"", std::string("use one of ") + jobKindNames());
}

const char* toString(JobKind k) {
  for (const KindName& x : kKinds)
    if (x.kind == k) return x.name;
  return "?";
}

std::vector<std::string> splitEntry(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char ch = text[i];
    if (quote) {
      if (ch == quote) quote = 0;
      else if (ch == '\\' && quote == '"' && i + 1 < text.size() && (text[i + 1] == '"' || text[i + 1] == '\\'))
        word += text[++i];
      else word += ch;
    } else if (ch == '\'' || ch == '"') {
      quote = ch;
      in_word = true;
    } else if (ch == '\\' && i + 1 < text.size()) {
      word += text[++i];
      in_word = true;
    } else if (ch == ' ' || ch == '\t' || ch == '\n') {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
    } else {
      word += ch;
      in_word = true;
    }
  }
  if (quote) throw UserError("--entry", std::string("an unterminated ") + quote + " quote", "close the quote");
  if (in_word) words.push_back(word);
  if (words.empty())
    throw UserError("--entry", "is empty", "name the training script and its arguments, e.g. --entry 'train.py --lr 1e-3'");
  return words;
}

std::string jobRefusal(JobKind kind, const Plan& p, bool cpu) {
  if (kind == JobKind::Trainscope) return "";
  const std::string runner = std::string("--runner ") + toString(kind);
  // Core lanes (a one-process CPU layout's threads) are trainscope's: the job threads as it does.
  switch (kind) {
    case JobKind::Hf:
    case JobKind::Accelerate:
      if (p.tp > 1 || p.pp > 1 || p.cp > 1)
        return runner + " runs data parallelism only (DDP or FSDP): tp, pp and cp are Megatron-LM's or torchtitan's";
      if (p.zero == rt::ZeroStage::OptimizerStates)
        return runner + ": ZeRO-1 is DeepSpeed's (--runner deepspeed); FSDP is ZeRO-2 (SHARD_GRAD_OP) or ZeRO-3 (FULL_SHARD)";
      if (p.ckpt == rt::Checkpointing::Selective)
        return runner + ": Transformers checkpoints whole layers (gradient_checkpointing): --ckpt none,full";
      if (p.ep > 1) return runner + " runs no expert parallelism";
      // FSDP (ZeRO-2/3) runs on GPUs, and on Gloo CPU ranks through the probe's cpu_fsdp shim
      // (Accelerate 1.15 alone keeps a CPU state MULTI_CPU and wraps DDP; trialEnvironment, docs/tuner.md).
      return "";
    case JobKind::DeepSpeed:
      if (p.tp > 1 || p.pp > 1 || p.cp > 1)
        return runner + " runs ZeRO data parallelism here: tp, pp and cp are Megatron-DeepSpeed's";
      if (p.ckpt == rt::Checkpointing::Selective)
        return runner + ": the script's model checkpoints whole layers: --ckpt none,full";
      if (p.ep > 1) return runner + " runs no expert parallelism here";
      return "";
    case JobKind::Megatron:
      return p.zero >= rt::ZeroStage::Gradients ? runner + ": ZeRO-2/3 is Megatron-FSDP's, not in these flags" : "";
    case JobKind::Torchtitan:
      if (p.pp > 1 && p.pp_schedule == rt::PipelineSchedule::GPipe && p.virtual_stages > 1)
        return runner + ": GPipe is not interleaved";
      // Its experts borrow their ranks from dp_shard x cp x tp (FSDP's, not replicated DP's).
      if (p.ep > 1 && (p.zero >= rt::ZeroStage::Gradients && p.dp > 1 ? p.dp : 1) * p.cp * p.tp % p.ep != 0)
        return runner + ": torchtitan's expert parallelism takes its ranks from the sharded data-parallel (ZeRO-2/3), "
                        "CP and TP ranks, and ep does not divide them here";
      return "";
    default:
      return "";
  }
}

Framework frameworkOf(JobKind kind) {
  switch (kind) {
    case JobKind::Hf:
    case JobKind::Accelerate:
    case JobKind::Torchtitan: return Framework::Fsdp;
    case JobKind::DeepSpeed: return Framework::Deepspeed;
    case JobKind::Megatron: return Framework::Megatron;
    default: return Framework::Trainscope;
  }
}

std::string locateProbe(const std::string& python) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw UserError("--probe", "cannot ask " + python + " for trainscope_probe", "pass --probe DIR");
  process::SpawnOptions so;
  so.argv = {python, "-c",
             "import os, trainscope_probe as p; print(os.path.dirname(os.path.dirname(os.path.abspath(p.__file__))))"};
  so.search_path = python.find('/') == std::string::npos;
  so.own_group = true;
  so.stdout_fd = fds[1];
  pid_t pid = -1;
  try {
    pid = process::spawn(so);
  } catch (const std::exception& e) {
    ::close(fds[0]);
    ::close(fds[1]);
    throw UserError("--python", python + " cannot be started: " + e.what(), "pass --python PATH");
  }
  ::close(fds[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fds[0]);
  const process::Exit end = process::wait(pid, 120, true);
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  if (end.kind != process::Exit::Exited || end.code != 0 || out.empty())
    throw UserError("--probe", python + " cannot import trainscope_probe (" + end.describe() + ")",
                    "pass --probe the repository's python/ folder, or put it on --python's PYTHONPATH");
  return out;
}

// The environment a trial's ranks start with: the probe on PYTHONPATH and its settings, the files the
// framework reads, and (rankThreads) the intra-op threads.
static void trialEnvironment(JobLaunch& L, const JobOptions& o, const runconfig::TrainConfig& c, const std::string& dir,
                             bool profile, const std::string& fault, bool slurm, int port) {
  std::string pythonpath = o.probe_root + "/trainscope_probe/site:" + o.probe_root;
  if (const char* old = std::getenv("PYTHONPATH"); old && *old) pythonpath += std::string(":") + old;
  L.env = {{"PYTHONPATH", pythonpath},
           {"PYTHONUNBUFFERED", "1"},
           {"TRAINSCOPE_PROBE_DIR", L.probe_dir},
           {"TRAINSCOPE_OUTPUT_DIR", dir + "/output"},
           {"TRAINSCOPE_OOM_EXIT", std::to_string(kExitOutOfMemory)},
           {"TRAINSCOPE_PROBE_PROFILE_STEPS", profile ? std::to_string(o.profile_steps) : "0"},
           {"TRAINSCOPE_MEM_LIMIT", o.cpu && o.mem_limit > 0 ? std::to_string(o.mem_limit) : "0"},
           {"TRAINSCOPE_PROBE_INJECT", fault == "badpath" ? "" : fault}};
  if (o.kind == JobKind::Hf || o.kind == JobKind::Accelerate)
    L.env.push_back({"TRAINSCOPE_TRAINING_ARGS", dir + "/training_args.json"});
  if (o.cpu && o.kind == JobKind::DeepSpeed) L.env.push_back({"DS_ACCELERATOR", "cpu"});
  // A CPU FSDP trial of --runner hf|accelerate: the probe lifts Accelerate's accelerator-only FSDP gate
  // in the ranks (python/trainscope_probe/cpu_fsdp.py; docs/tuner.md). GPU trials never load the shim.
  if (o.cpu && (o.kind == JobKind::Hf || o.kind == JobKind::Accelerate) && fsdpLayout(c))
    L.env.push_back({"TRAINSCOPE_PROBE_CPU_FSDP", "1"});
  // An FSDP trial of --runner hf: Accelerate 1.15's FSDP 1 plugin fills sharding_strategy from
  // FSDP_SHARDING_STRATEGY (FULL_SHARD when unset) before it reads the reshard_after_forward the Trainer
  // hands it, and prepare_model prefers sharding_strategy (accelerate/utils/dataclasses.py:1844-1852,
  // accelerator.py:1947): a SHARD_GRAD_OP candidate ran FULL_SHARD. The trial gets the variable
  // accelerate launch sets from the config file (fsdpStrategy, what the trial's accelerate.yaml says).
  if (o.kind == JobKind::Hf && fsdpLayout(c))
    if (const char* strategy = detail::fsdpStrategy(c)) L.env.push_back({"FSDP_SHARDING_STRATEGY", strategy});
  if (slurm) L.env.insert(L.env.end(), {{"TRAINSCOPE_PROBE_SLURM", "1"}, {"MASTER_PORT", std::to_string(port)}});
  rankThreads(L, o, c, slurm);
}

JobLaunch jobLaunch(const JobOptions& o, const runconfig::TrainConfig& c, const std::string& dir, bool profile,
                    const std::string& fault, int port) {
  JobLaunch L;
  const ExportTarget target{o.cpu};
  std::vector<std::string> entry = o.entry;
  if (fault == "badpath") entry[0] = dir + "/no-such-script.py";  // testing: a script that is not there
  auto add = [&](const std::string& name, ExportFormat f) {
    ExportResult r = exportConfig(c, f, target);
    L.files.push_back({name, r.text});
    for (ExportFile& extra : r.files) {
      bool have = false;
      for (const ExportFile& x : L.files) have = have || x.name == extra.name;
      if (!have) L.files.push_back(std::move(extra));
    }
  };
  const bool slurm = c.launcher == rt::Launcher::Slurm;
  const std::string id = o.slurm_name.size() > 16 ? o.slurm_name.substr(o.slurm_name.size() - 16) : "";
  if (slurm && (!validStudyId(id) || o.slurm_name != slurmStepName(id)))  // a study's step name, nothing else
    throw std::invalid_argument("jobLaunch: --launcher slurm needs the study's step name, not \"" + o.slurm_name + "\"");
  // Under --launcher slurm each rank is a task of one srun step (the job's own process group):
  // RANK/WORLD_SIZE/… come from Slurm's variables (the probe's sitecustomize, TRAINSCOPE_PROBE_SLURM).
  const std::vector<std::string> ranks =
      slurm ? std::vector<std::string>{"srun", "--ntasks=" + std::to_string(c.world), "--kill-on-bad-exit=1",
                                       "--job-name=" + o.slurm_name, "--export=ALL", o.python}
            : torchrun(o.python, c.world);
  if (port == 0 && (slurm || o.kind == JobKind::Accelerate)) try {
      port = process::freePort();
    } catch (const std::runtime_error& e) {
      throw UserError("--runner", std::string("the trial needs a rendezvous port: ") + e.what(),
                      "check that this machine can bind a TCP port on 127.0.0.1");
    }
  switch (o.kind) {
    case JobKind::Hf:
      add("training_args.json", ExportFormat::TrainingArgs);
      add("accelerate.yaml", ExportFormat::AccelerateConfig);
      L.argv = ranks;
      append(L.argv, entry);
      break;
    case JobKind::Accelerate:
      add("accelerate.yaml", ExportFormat::AccelerateConfig);
      add("training_args.json", ExportFormat::TrainingArgs);
      // FSDP comes from the launch's config file alone (accelerate launch hands its fsdp_config to the
      // ranks as FSDP_* variables; Accelerator() builds its plugin from them): the Trainer's own
      // fsdp/fsdp_config would build another plugin and take precedence (trainer.py:851-859).
      for (ExportFile& f : L.files)
        if (f.name == "training_args.json" && fsdpLayout(c)) withoutTrainerFsdp(f);
      // accelerate launch starts MULTI_CPU ranks only through mpirun: torchrun (or srun) starts them,
      // each its own launch. A launch of num_processes > 1 sets its process's MASTER_PORT to
      // --main_process_port (29500 when not given) over torchrun's, so both are handed the trial's
      // own free port: else every rank waits on a store at 29500 that nobody serves (a "hang").
      // An FSDP config (distributed_type FSDP: its use_cpu is not the --cpu flag) is launched by
      // accelerate launch itself through torch.distributed.run, num_processes ranks at that port.
      if (slurm && (!o.cpu || fsdpLayout(c)))  // one srun task per rank would each start num_processes more
        throw UserError("--launcher",
                        "--runner accelerate under slurm: accelerate launch starts this config's processes itself "
                        "(GPUs, or FSDP), one launch per node; that launch is not built",
                        "use --launcher local, or --runner hf (one srun task per rank)");
      L.argv = slurm                                       ? ranks
               : c.world > 1 && o.cpu && !fsdpLayout(c) ? torchrunAt(o.python, c.world, port)
                                                          : std::vector<std::string>{o.python};
      append(L.argv, {"-m", "accelerate.commands.launch", "--config_file", dir + "/accelerate.yaml",
                      "--main_process_port", std::to_string(port)});
      append(L.argv, entry);
      break;
    case JobKind::DeepSpeed:
      add("ds_config.json", ExportFormat::DeepSpeed);
      L.argv = slurm ? ranks
                     : std::vector<std::string>{o.python, "-m", "deepspeed.launcher.runner", "--num_nodes", "1",
                                                "--num_gpus", std::to_string(c.world)};
      append(L.argv, entry);
      append(L.argv, {"--deepspeed", dir + "/ds_config.json"});
      break;
    case JobKind::Megatron:
    case JobKind::Torchtitan: {
      // Flags after the entry (pretrain_gpt.py's arguments; torchtitan's overrides after the entry's
      // --module/--config), kept in the trial's folder as the file they were read from.
      const bool megatron = o.kind == JobKind::Megatron;
      add(megatron ? "megatron_args.txt" : "torchtitan_args.txt", megatron ? ExportFormat::Megatron : ExportFormat::Torchtitan);
      L.argv = ranks;
      append(L.argv, entry);
      std::istringstream flags(L.files.front().text);
      for (std::string w; flags >> w;) L.argv.push_back(w);
      break;
    }
    default:
      throw UserError("--runner", "trainscope's own runtime runs no external job", "pass --runner hf|accelerate|…");
  }
  L.probe_dir = dir + "/probe";
  trialEnvironment(L, o, c, dir, profile, fault, slurm, port);
  return L;
}

}  // namespace trainscope::tuner
