// deepspeed_config.h — what a user's DeepSpeed config (`predict --deepspeed-config FILE`, a
// ds_config.json) says that the models price: zero_optimization's buckets, prefetch and overlap, and
// the dtype gradients are reduced in (communication_data_type). docs/framework-profiles.md, "A
// user's DeepSpeed config".
#pragma once

#include <cstdint>
#include <string>

#include "trainscope/models/deepspeed_zero.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

struct DeepSpeedConfigRead {
  models::DeepSpeedZero zero;  // from_config true; overlap_comm resolved (DeepSpeed's default: stage 3 only)
  double reduce_bytes = 0;     // communication_data_type: fp32 4, fp16/bf16 2; 0 when the file has none
  int64_t micro_batch = 0;     // train_micro_batch_size_per_gpu; 0 when the file has none or "auto"
  std::string precision;       // "bf16" / "fp16" when the file enables one ("enabled": true); "" otherwise
};

// The file at `path` for workload `w` (Hugging Face's "auto" buckets are filled from its hidden size,
// as transformers' trainer_config_finalize does) priced at ZeRO stage `zero`. Every problem is a
// UserError naming `field` (and the key) and the fix.
DeepSpeedConfigRead readDeepSpeedConfig(const std::string& path, const workloads::Workload& w, int zero,
                                        const std::string& field);

}  // namespace trainscope::apps
