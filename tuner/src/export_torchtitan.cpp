// export_torchtitan.cpp — a configuration as torchtitan's train.py overrides (export.h).
//
// torchtitan 0.3 builds its config from a registry function (--module llama3 --config
// llama3_debugmodel) and takes dotted overrides of its dataclasses after it (config/configs.py:
// TrainingConfig, ParallelismConfig; the optimizer's fields). DP is FSDP2: ZeRO-3 shards over the
// data-parallel ranks (data_parallel_shard_degree, parameters resharded after forward), ZeRO-2 the
// same without resharding (fsdp_reshard_after_forward never), no ZeRO replicates
// (data_parallel_replicate_degree). Gradient accumulation is torchtitan's global_batch_size /
// (local_batch_size x dp): local_batch_size is the micro-batch.
#include <sstream>

#include "trainscope/tuner/export.h"

namespace trainscope::tuner {

namespace rt = trainscope::runconfig;

ExportResult torchtitanFlags(const rt::TrainConfig& c) {
  ExportResult r;
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
    << " --parallelism.pipeline_parallel_degree " << c.pp << " --parallelism.context_parallel_degree " << c.cp;
  if (c.pp > 1) {
    o << " --parallelism.pipeline_parallel_microbatch_size " << c.mbs << " --parallelism.pipeline_parallel_schedule "
      << (c.virtual_stages > 1 ? "Interleaved1F1B" : c.pp_schedule == rt::PipelineSchedule::GPipe ? "GPipe" : "1F1B");
  }
  if (c.tp > 1 && !c.sequence_parallel)
    r.notes.push_back("torchtitan's TP always shards the sequence (sequence parallelism) between blocks");
  if (c.zero == rt::ZeroStage::OptimizerStates && c.dp > 1)
    r.notes.push_back("ZeRO-1 has no torchtitan form (FSDP2 shards parameters too): replicated here");
  if (c.ckpt != rt::Checkpointing::None)
    r.notes.push_back(std::string("activation checkpointing (") + (c.ckpt == rt::Checkpointing::Full ? "full" : "selective") +
                      ") is the registry config's activation_checkpoint policy: choose the config with it");
  o << " --optimizer.lr " << c.lr << " --optimizer.eps " << c.eps << " --optimizer.weight_decay " << c.weight_decay << "\n";
  r.text = o.str();
  return r;
}

}  // namespace trainscope::tuner
