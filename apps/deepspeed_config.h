// deepspeed_config.h — what a user's DeepSpeed config (`predict --deepspeed-config FILE`, a
// ds_config.json) says that the models price: zero_optimization's buckets, prefetch and overlap, and
// the dtype gradients are reduced in (communication_data_type); and what must agree with the plan
// priced (the stage, the batch keys, the 16-bit mode). Every key of zero_optimization that changes the
// step's memory or time is priced, or refused when it is not DeepSpeed's default (offload, ZeRO++, …).
// docs/framework-profiles.md, "A user's DeepSpeed config".
#pragma once

#include <cstdint>
#include <string>

#include "trainscope/models/deepspeed_zero.h"
#include "trainscope/models/plan.h"
#include "trainscope/workloads/workload.h"

namespace trainscope::apps {

constexpr int64_t kDeepSpeedAuto = -1;  // a batch key written "auto": the plan's (Hugging Face fills it)

struct DeepSpeedConfigRead {
  models::DeepSpeedZero zero;  // from_config true; overlap_comm resolved (DeepSpeed's default: stage 3 only)
  double reduce_bytes = 0;     // communication_data_type: fp32 4, fp16/bf16 2; 0 when the file has none
  // The batch keys: 0 when the file has none, kDeepSpeedAuto for "auto", else the file's number.
  int64_t train_batch = 0;     // train_batch_size
  int64_t micro_batch = 0;     // train_micro_batch_size_per_gpu
  int64_t grad_accum = 0;      // gradient_accumulation_steps
  std::string precision;       // "bf16" / "fp16" when the file enables one ("enabled": true); "" otherwise
  std::string optimizer;       // optimizer.type lower-cased ("" none: the client's optimizer)
  int64_t pipeline_stages = 0; // pipeline.stages (0: none or "auto")
};

// The file at `path` for workload `w` (Hugging Face's "auto" buckets are filled from its hidden size,
// as transformers' trainer_config_finalize does) priced at ZeRO stage `zero` (a file without
// zero_optimization.stage is DeepSpeed's stage 0). Every problem is a UserError naming `field` (and the
// key) and the fix.
DeepSpeedConfigRead readDeepSpeedConfig(const std::string& path, const workloads::Workload& w, int zero,
                                        const std::string& field);

// The file's batch keys and 16-bit mode against plan `p` at --precision `precision`: DeepSpeed's
// train_batch_size = micro × ga × data-parallel ranks (runtime/config.py _set_batch_related_parameters,
// _batch_assertion) must be the plan's, and an fp8 plan is a bf16 config (Transformer Engine's FP8
// linears live in the model code). A UserError naming `field`, the key and the flag to pass otherwise.
void checkDeepSpeedPlan(const DeepSpeedConfigRead& ds, const models::Plan& p, const std::string& precision,
                        const std::string& path, const std::string& field);

}  // namespace trainscope::apps
