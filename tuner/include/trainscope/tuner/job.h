// trainscope/tuner/job.h — trials that run the user's own training job (`tune --runner
// hf|accelerate|deepspeed|megatron|torchtitan --entry 'train.py ARGS…'`) instead of trainscope's
// runtime: the candidate exported in the framework's format, the job started as that framework
// starts it, measured by the probe it carries (python/trainscope_probe).
//
//   runner       exported into the trial's folder                 started as
//   hf           training_args.json (TrainingArguments; the       python -m torch.distributed.run --standalone
//                probe's sitecustomize sets its fields on the       --nproc_per_node W ENTRY…
//                script's TrainingArguments), accelerate.yaml
//   accelerate   accelerate.yaml, training_args.json              python -m accelerate.commands.launch
//                                                                   --config_file accelerate.yaml
//                                                                   --main_process_port P ENTRY… (torchrun
//                                                                   --master_port P around it for W > 1
//                                                                   on a CPU; P free, one per trial)
//   deepspeed    ds_config.json (the engine is built from it)     python -m deepspeed.launcher.runner
//                                                                   --num_gpus W ENTRY… --deepspeed ds_config.json
//   megatron     megatron_args.txt (pretrain_gpt.py's flags)      torchrun … ENTRY… FLAGS…
//   torchtitan   torchtitan_args.txt (0.3's overrides: it reads   torchrun … ENTRY… FLAGS… (ENTRY: train.py
//                no TOML; export_torchtitan.cpp)                    --module M --config C)
// (+ config.json, the model's Hugging Face config, beside each.) Under --launcher slurm (the trial's
// config's launcher) every runner's ranks are the W tasks of one `srun --ntasks=W` step, each running
// the job itself (`python ENTRY…`; accelerate: its launch, CPU only), with TRAINSCOPE_PROBE_SLURM (the
// sitecustomize sets RANK/WORLD_SIZE/… from Slurm's variables) and MASTER_PORT the trial's free port.
// The job is an argument vector, never a shell line; its own process group, killed whole on a hang.
// The probe's environment:
// TRAINSCOPE_PROBE_DIR (its rows, traces and exit records), TRAINSCOPE_PROBE_PROFILE_STEPS (profile
// trials), TRAINSCOPE_MEM_LIMIT (CPU: per rank), TRAINSCOPE_TRAINING_ARGS, and the probe's site folder
// first on PYTHONPATH. How a trial ended: the launcher's status, and each rank's own record (an
// out-of-memory exit, a fatal signal) — torchrun reports any failed rank as 1.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "trainscope/runconfig/config.h"
#include "trainscope/tuner/export.h"
#include "trainscope/tuner/space.h"
#include "trainscope/tuner/trial.h"

namespace trainscope::tuner {

enum class JobKind { Trainscope, Hf, Accelerate, DeepSpeed, Megatron, Torchtitan };

const char* jobKindNames();  // "trainscope|hf|accelerate|deepspeed|megatron|torchtitan"
JobKind parseJobKind(const std::string& name, const std::string& field = "--runner");
const char* toString(JobKind k);

struct JobOptions {
  JobKind kind = JobKind::Hf;
  std::vector<std::string> entry;  // the user's script (or module) and its arguments
  std::string python = "python3";  // the interpreter that launches it (looked up in PATH without '/')
  std::string probe_root;          // the folder holding trainscope_probe/ (its site/ goes on PYTHONPATH)
  std::string workload;            // the study's workload, recorded in each trial's run database
  int64_t mem_limit = 0;           // CPU: bytes per rank (0: none)
  bool cpu = true;                 // a CPU cluster: Gloo ranks, use_cpu, DS_ACCELERATOR=cpu
  int64_t profile_steps = 2;       // steps traced by torch.profiler in a profile trial
  std::string slurm_name;          // --launcher slurm: the name of the trial's srun step (the study's,
                                   // slurmStepName; JobTrialRunner sets it from TrialSpec::slurm_name)
};

// --entry split like a POSIX shell word list (quotes and backslashes; no expansion, no operators):
// the argument vector the job gets. Throws UserError naming --entry for an empty or unterminated one.
std::vector<std::string> splitEntry(const std::string& text);

// What `kind` cannot run of plan `p`, in a sentence ("" when it can): the candidates the study
// rejects for this runner before anything is measured. `cpu`: the trials run on Gloo CPU ranks,
// where Accelerate alone runs no FSDP; --runner hf's and accelerate's trials lift that gate (the
// probe's cpu_fsdp shim), so no runner refuses more there today.
std::string jobRefusal(JobKind kind, const Plan& p, bool cpu = false);

// The framework profile (models/framework_profile.h) a runner's trials are priced under: a Hugging
// Face Trainer or Accelerate job (DDP or FSDP) and torchtitan (FSDP2) are PyTorch eager modules →
// fsdp (its module hooks counted only when the plan shards, ZeRO-2/3); DeepSpeed → deepspeed;
// Megatron-LM → megatron; trainscope's own runtime → trainscope.
Framework frameworkOf(JobKind kind);

// One trial's launch, made before anything is started (pure: the tests read it as it is).
struct JobLaunch {
  std::vector<std::string> argv;                           // argv[0]: the interpreter
  std::vector<std::pair<std::string, std::string>> env;    // set in the job's environment
  std::vector<ExportFile> files;                           // written into the trial's folder first
  std::string probe_dir;                                   // the probe's output folder
};

// `c` resolved; `dir` the trial's folder (absolute); `fault` the test injection (crash|hang|oom|
// badpath, "" none); `profile`: the probe traces its first steps; `port` the trial's rendezvous port
// where the launch names one (accelerate: torchrun's --master_port and accelerate launch's
// --main_process_port; 0: a free one, process::freePort).
JobLaunch jobLaunch(const JobOptions& o, const runconfig::TrainConfig& c, const std::string& dir, bool profile,
                    const std::string& fault, int port = 0);

// Under --launcher slurm a trial's tasks are slurmstepd's, not the tuner's children: killing srun
// (a trial timeout, or the tuner killed with -9) leaves them running. Every srun step of a study is
// named slurmStepName(its study id) ("trainscope-study-ID"; ID 16 hex digits, random, kept in the study:
// validStudyId), the same in every run of the tuner and another for every other study, and
// cancelSlurmStep(name) ends this user's steps of that name: their tasks killed (scancel
// --signal=KILL), the job srun made cancelled, and the user's steps of that name inside allocations
// (squeue --steps) cancelled by id; then waits (bounded by wait_s) until Slurm lists none. Each Slurm
// command is bounded by timeout_s. Returns "" or what failed, in a sentence (slurm_step.cpp). A
// resumed study under --launcher slurm calls it before its first trial (tune.cpp): what the killed
// tuner left running is ended.
bool validStudyId(const std::string& id);
std::string slurmStepName(const std::string& study_id);
std::string cancelSlurmStep(const std::string& name, double timeout_s = 30, double wait_s = 60);

// The folder holding the trainscope_probe package as `python` imports it (scripts/setup installs it
// into the venv). Throws UserError naming --probe when that python cannot import it.
std::string locateProbe(const std::string& python);

// Runs each trial as the user's job (JobLaunch above), then builds its run database from the probe's
// rows and traces (rundb/import_probe.h) at spec.run.output.trace.
class JobTrialRunner : public TrialRunner {
 public:
  explicit JobTrialRunner(JobOptions o) : o_(std::move(o)) {}
  TrialRecord run(const TrialSpec& spec, TrialRecord t) override;

 private:
  JobOptions o_;
};

}  // namespace trainscope::tuner
