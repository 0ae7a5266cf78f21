// export_torchtitan.cpp — a configuration as torchtitan's train.py overrides (export.h).
//
// torchtitan 0.3 builds its config from a registry function (--module llama3 --config
// llama3_debugmodel) and takes dotted overrides of its dataclasses after it (config/configs.py:
// TrainingConfig, ParallelismConfig; the optimizer's fields). DP is FSDP2: ZeRO-3 shards over the
// data-parallel ranks (data_parallel_shard_degree, parameters resharded after forward), ZeRO-2 the
// same without resharding (fsdp_reshard_after_forward never), no ZeRO replicates
// (data_parallel_replicate_degree). Gradient accumulation is torchtitan's global_batch_size /
// (local_batch_size x dp): local_batch_size is the micro-batch. Checked by torchtitan 0.3.0's own
// ConfigManager in tests/exports/torchtitan_parser_test.py.
#include <sstream>
#include <string>

#include "trainscope/tuner/export.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::tuner {

namespace rt = trainscope::runconfig;

namespace {

// torchtitan makes ceil(n_layer / layers_per_stage) stages (pipeline_parallel.py,
// _get_pipeline_metadata) and splits the layers over them with the earlier stages taking the
// remainder, as this runtime does: the ceiling of n / (pp·v) gives pp·v stages whenever any value
// does (126 layers over 16: 8, where the floor's 7 made 18 stages, which torchtitan refuses).
int64_t torchtitanLayersPerStage(const rt::TrainConfig& c, std::vector<std::string>& notes) {
  const int64_t n = c.model.n_layer, stages = c.pp * c.virtual_stages, per = (n + stages - 1) / stages;
  if ((n + per - 1) / per != stages)
    notes.push_back("torchtitan's layers_per_stage cannot split " + std::to_string(n) + " layers into " +
                    std::to_string(stages) + " stages (" + std::to_string(per) + " a stage makes " +
                    std::to_string((n + per - 1) / per) + "), and it refuses the job: choose a pipeline size "
                    "whose stages the layers fill");
  return per;
}

// torchtitan builds the model its --module/--config registry function names; these flags set none of
// its shape. torchtitan 0.3's registry has Llama 3 configs llama3_8b, llama3_70b and llama3_405b
// (models/llama3/config_registry.py; the flavors' shapes in models/llama3/__init__.py: untied, no
// biases, vocabulary 128256, RoPE theta 500000 with Llama 3.1's scaling, factor 8, low/high 1/4,
// original 8192) and no Mistral, Qwen2, Mixtral or Qwen2-MoE model: the note names the config of this
// workload's shape, or says there is none, so the job's model is not taken for the one priced.
std::string torchtitanModelNote(const workloads::Workload& w) {
  struct Flavor {
    const char* config;
    int64_t C, L, NH, KV, F;
  };
  static const Flavor kFlavors[] = {{"llama3_8b", 4096, 32, 32, 8, 14336},
                                    {"llama3_70b", 8192, 80, 64, 8, 28672},
                                    {"llama3_405b", 16384, 126, 128, 8, 53248}};
  const bool llama_like = w.norm == workloads::Norm::RMSNorm && w.mlp == workloads::Mlp::SwiGLU &&
                          w.positions == workloads::Positions::Rope && !w.isMoe() && !w.tie_embeddings &&
                          !w.qkv_bias && !w.proj_bias && !w.mlp_bias && w.sliding_window == 0 &&
                          w.vocab_size == 128256 && w.headSize() * w.n_head == w.n_embd;
  for (const Flavor& f : kFlavors) {
    if (!llama_like || w.n_embd != f.C || w.n_layer != f.L || w.n_head != f.NH || w.kvHeads() != f.KV ||
        w.ffnHidden() != f.F)
      continue;
    const workloads::RopeScaling& r = w.rope_scaling;
    const bool same_rope = w.rope_theta == 500000 && r.factor == 8 && r.low_freq_factor == 1 &&
                           r.high_freq_factor == 4 && r.original_max_position_embeddings == 8192;
    return std::string("the model is the one torchtitan's --module llama3 --config ") + f.config +
           " builds (these flags set none of its shape): its layers are this workload's" +
           (same_rope ? "" : ", but its RoPE is Llama 3.1's (theta 500000, scaling factor 8), not this workload's");
  }
  return "these flags set no model: torchtitan builds the one its --module/--config registry function names, and "
         "torchtitan 0.3 has no config of this workload's shape (its Llama 3 configs are llama3_8b, llama3_70b and "
         "llama3_405b; it has no Mistral, Qwen2, Mixtral or Qwen2-MoE model): the job would train another model";
}

}  // namespace

ExportResult torchtitanFlags(const rt::TrainConfig& c) {
  ExportResult r;
  r.notes.push_back(torchtitanModelNote(c.model));
  std::ostringstream o;
  const bool shard = c.zero >= rt::ZeroStage::Gradients && c.dp > 1;
  o << "--training.local_batch_size " << c.mbs << " --training.global_batch_size " << c.global_batch
    << " --training.seq_len " << c.seq << " --training.steps " << c.steps << " --training.max_norm " << c.clip
    << " --training.mixed_precision_param "
    << (c.precision == rt::Precision::BF16 || c.precision == rt::Precision::FP8 ? "bfloat16" : "float32")
    << " --parallelism.data_parallel_replicate_degree " << (shard ? 1 : c.dp)
    << " --parallelism.data_parallel_shard_degree " << (shard ? c.dp : 1)
    << " --parallelism.fsdp_reshard_after_forward "
    << (c.zero == rt::ZeroStage::Gradients ? "never" : "default") << " --parallelism.tensor_parallel_degree " << c.tp
    << " --parallelism.pipeline_parallel_degree " << c.pp << " --parallelism.context_parallel_degree " << c.cp
    << " --parallelism.expert_parallel_degree " << c.ep;
  // torchtitan's experts borrow their ranks from the dense region: dp_shard x cp x tp = efsdp x ep
  // (ParallelismConfig.expert_parallel_degree); replicated data parallelism lends none.
  if (c.ep > 1 && (shard ? c.dp : 1) * c.cp * c.tp % c.ep != 0)
    r.notes.push_back("torchtitan's expert parallelism takes its ranks from the sharded data-parallel (FSDP), CP and TP "
                      "ranks: ep " + std::to_string(c.ep) + " does not divide dp_shard x cp x tp = " +
                      std::to_string((shard ? c.dp : 1) * c.cp * c.tp) + ", which torchtitan refuses (use ZeRO-2/3 here)");
  if (c.pp > 1) {
    // The layers split evenly over pp x virtual stages, as this runtime (and the Megatron-LM export)
    // splits them: without layers_per_stage torchtitan runs 2 stages a rank under an interleaved
    // schedule and gives the first and last stage one layer less (its *_stage_less_layers, 1).
    o << " --parallelism.pipeline_parallel_microbatch_size " << c.mbs << " --parallelism.pipeline_parallel_schedule "
      << (c.virtual_stages > 1 ? "Interleaved1F1B" : c.pp_schedule == rt::PipelineSchedule::GPipe ? "GPipe" : "1F1B")
      << " --parallelism.pipeline_parallel_layers_per_stage " << torchtitanLayersPerStage(c, r.notes)
      << " --parallelism.pipeline_parallel_first_stage_less_layers 0"
      << " --parallelism.pipeline_parallel_last_stage_less_layers 0";
  }
  if (c.precision == rt::Precision::FP8)
    r.notes.push_back("fp8 is torchtitan's Float8 converter (torchao, components/quantization/float8.py) of the registry "
                      "config, not a flag: choose a config with it (these flags set bf16 parameters)");
  if (c.tp > 1 && !c.sequence_parallel)
    r.notes.push_back("torchtitan's TP always shards the sequence (sequence parallelism) between blocks");
  if (c.zero == rt::ZeroStage::OptimizerStates && c.dp > 1)
    r.notes.push_back("ZeRO-1 has no torchtitan form (FSDP2 shards parameters too): replicated here");
  if (c.ckpt != rt::Checkpointing::None)
    r.notes.push_back(std::string("activation checkpointing (") + (c.ckpt == rt::Checkpointing::Full ? "full" : "selective") +
                      ") is the registry config's activation_checkpoint policy: choose the config with it");
  // torchtitan 0.3's optimizer config is a list of parameter groups, each with its optimizer's kwargs
  // (OptimizersContainer.Config.param_groups); the registry configs have one catch-all AdamW group
  // (default_adamw), whose kwargs these set. (There is no --optimizer.lr: its parser refuses it.)
  // The schedule: linear warm-up, then cosine to lr x min_lr_ratio at the last step, as this runtime's.
  if (c.optimizer != rt::OptimizerKind::AdamW)
    r.notes.push_back(std::string("torchtitan's registry configs run AdamW; this run's ") + toString(c.optimizer) +
                      " is not in these flags (its kwargs are AdamW's)");
  const std::string kw = " --optimizer.param_groups.0.optimizer_kwargs.";
  o << kw << "lr " << c.lr << kw << "betas " << c.beta1 << " " << c.beta2 << kw << "eps " << c.eps << kw
    << "weight_decay " << c.weight_decay << " --lr_scheduler.warmup_steps " << c.warmup
    << " --lr_scheduler.decay_type cosine --lr_scheduler.min_lr_factor " << c.min_lr_ratio << "\n";
  r.text = o.str();
  return r;
}

}  // namespace trainscope::tuner
