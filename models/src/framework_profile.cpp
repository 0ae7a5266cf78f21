// framework_profile.cpp — the built-in framework profiles and the parsing of a cluster file's
// "frameworks" object (framework_profile.h). Each default says where it comes from, or that it was
// fitted and to what (bench/predict_vs_published.py reproduces the fit's sets).
#include "trainscope/models/framework_profile.h"

#include <cmath>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/json_text.h"

namespace trainscope::models {

const char* frameworkKey(Framework f) {
  switch (f) {
    case Framework::Megatron: return "megatron";
    case Framework::Fsdp: return "fsdp";
    case Framework::Deepspeed: return "deepspeed";
    default: return "trainscope";
  }
}

const std::vector<Framework>& allFrameworks() {
  static const std::vector<Framework> all = {Framework::Trainscope, Framework::Megatron, Framework::Fsdp,
                                             Framework::Deepspeed};
  return all;
}

FrameworkProfile builtinProfile(Framework f) {
  FrameworkProfile p;  // trainscope: this runtime's host cost is the cluster's dispatch_s per op
  switch (f) {
    case Framework::Trainscope:
      break;
    case Framework::Megatron:
      // Megatron-LM (Megatron-DeepSpeed) in eager PyTorch: every op of a layer's forward is issued
      // from Python modules (ParallelTransformerLayer → ParallelAttention / ParallelMLP, the fused
      // kernels' Python wrappers), the backward by the autograd engine; 25 forward ops and 50
      // backward per layer (counted on the GPT layer). Built in: each op at the cluster's dispatch_s
      // and no other host cost; the GPU presets carry the costs fitted to vTrain's one-node runs
      // (models/clusters/*.json "frameworks"; docs/framework-profiles.md).
      p.overlap_reduce = 0;  // the published runs reduce gradients after the backward (no bucketing)
      break;
    case Framework::Fsdp:
      // PyTorch FSDP around a Hugging Face / Composer GPT block: the layer's ops from Python modules,
      // four hooks per wrapped block and micro-batch (FSDP's _pre_forward, _post_forward,
      // _pre_backward_hook, _post_backward_hook), one block prefetched ahead
      // (BackwardPrefetch.BACKWARD_PRE, limit_all_gathers), gradients reduce-scattered in fp32
      // (Composer's FSDP mixed_precision DEFAULT: reduce_dtype float32). Built in: hooks at 50 us (an
      // estimate of FSDP's Python hook bodies); the GPU presets carry the constants fitted to
      // MosaicML's MPT rows (shared/calibration/mpt-a100.json).
      p.hook_s = 50e-6;
      p.hooks_per_layer = 4;
      p.reduce_bytes = 4;
      p.prefetch_depth = 1;
      // NCCL runs a collective as one CTA per channel; its ring inside an NVSwitch A100 node takes
      // about 12 channels (NCCL's topology search at ~20 GB/s a channel for the node's ~240 GB/s), 12 of
      // 108 SMs, and streams its buffers through the same HBM: about 0.1 of an overlapped layer's rate.
      p.overlap_slowdown = 0.1;
      break;
    case Framework::Deepspeed:
      // DeepSpeed ZeRO (0.19.8). Stage 3 hooks every submodule (parameter_offload.py
      // _register_deepspeed_module: pre/post forward and pre/post backward on each of a Hugging Face
      // block's 13 modules — GPT2Block or LlamaDecoderLayer, its attention, MLP, linears, norms,
      // activation and dropouts — 13 × 4); stages 1 and 2 hook no module. Stages 1 to 3 hook every
      // parameter's gradient accumulation instead (stage_1_and_2.py create_gradient_handling_hooks,
      // made with contiguous_gradients on, its default; stage3.py create_reduce_and_remove_grad_hooks):
      // one hook per parameter tensor in the backward. Stage 0 hooks nothing. Gradients reduced in
      // the model's dtype (communication_data_type defaults to it), one prefetch bucket ahead
      // (stage3_prefetch_bucket_size), overlap_comm on. Hooks at 50 us as FSDP's until measured (a
      // CPU cluster file's fitted hook_s replaces it).
      // Per step by stage (grad_bucket_s, zero0_step_tensor_s; gpu_time.h zeroStepHostSeconds), 0
      // until a cluster file fits them: ZeRO 1-3 copy each gradient into the IPG reduce bucket
      // (stage_1_and_2.py reduce_ready_partitions_and_remove_grads → reduce_independent_p_g_buckets_and_
      // remove_grads: stage 2 on every micro-batch, stage 1 on the boundary one only; stage3.py
      // reduce_independent_p_g_buckets_and_remove_grads every micro-batch); ZeRO 0 reduces at the
      // boundary per tensor (engine.py allreduce_gradients → buffered_allreduce_fallback: split by
      // dtype, flatten, all-reduce, unflatten and copy back), clips per tensor (clip_fp32_gradients →
      // runtime/utils.py clip_grad_norm_) and steps the torch optimizer over every tensor, where
      // ZeRO 1-3 step one flat partition.
      p.hook_s = 50e-6;
      p.hooks_per_layer = 52;
      p.module_hooks_from_zero = 3;
      p.grad_hooks = 1;
      p.reduce_bytes = 2;
      p.prefetch_depth = 1;
      break;
  }
  return p;
}

const std::vector<ProfileConstant>& profileConstants() {
  using P = FrameworkProfile;
  static const std::vector<ProfileConstant> list = {
      {"host_op_s", 0, 1e-3, "host seconds per forward op issued from Python (< 0 in the file: the cluster's dispatch_s)",
       &P::host_op_s},
      {"host_backward_op_s", 0, 1e-3, "host seconds per backward op (autograd engine)", &P::host_backward_op_s},
      // up to 10 ms: a CPU FSDP unshard (Gloo's list all-gather with the flat parameter's allocation,
      // views and free) costs about 2 ms on a loaded 2-core machine (time_model.cpp addCpuFsdp).
      {"host_collective_s", 0, 1e-2, "host seconds per collective call", &P::host_collective_s},
      {"hook_s", 0, 1e-3, "host seconds per module hook", &P::hook_s},
      {"host_micro_batch_s", 0, 0.1, "fixed host seconds per micro-batch (data, loss, schedule, syncs)",
       &P::host_micro_batch_s},
      {"grad_bucket_s", 0, 1e-2, "host seconds per parameter tensor each time ZeRO 1-3 copies its gradient into a reduce bucket",
       &P::grad_bucket_s},
      {"zero0_step_tensor_s", 0, 1e-2, "host seconds per parameter tensor and optimizer step at ZeRO 0",
       &P::zero0_step_tensor_s},
      {"flash_forward_scale", 0.05, 1, "the attention kernel's forward rate over FlashAttention-2's",
       &P::flash_forward_scale},
      {"flash_backward_scale", 0.05, 1, "the attention kernel's backward rate over FlashAttention-2's",
       &P::flash_backward_scale},
      {"overlap_slowdown", 0, 0.5, "share of a layer's compute rate taken by the ZeRO-3 collectives it overlaps",
       &P::overlap_slowdown},
      {"overlap_reduce", 0, 1, "share of the gradient reduction the backward could hide that it hides (0: after it)",
       &P::overlap_reduce},
  };
  return list;
}

std::vector<ProfilePath> profilePaths() {
  std::vector<ProfilePath> out;
  for (const Framework f : allFrameworks())
    for (const ProfileConstant& k : profileConstants())
      out.push_back({std::string("frameworks.") + frameworkKey(f) + "." + k.key, k.lower, k.upper,
                     std::string(frameworkKey(f)) + ": " + k.what, f, k.member});
  return out;
}

namespace {

// Keys a profile takes that are not fitted (counts and switches), with their ranges.
struct OtherKey {
  const char* key;
  double lower, upper;
  double FrameworkProfile::*member;
};
const std::vector<OtherKey>& otherKeys() {
  using P = FrameworkProfile;
  static const std::vector<OtherKey> list = {
      {"ops_forward", 0, 1e4, &P::ops_forward},     {"ops_backward", 0, 1e4, &P::ops_backward},
      {"hooks_per_layer", 0, 1e4, &P::hooks_per_layer}, {"reduce_bytes", 0, 8, &P::reduce_bytes},
      {"prefetch_depth", 0, 64, &P::prefetch_depth},
      {"module_hooks_from_zero", 1, 3, &P::module_hooks_from_zero}, {"grad_hooks", 0, 1, &P::grad_hooks},
  };
  return list;
}

}  // namespace

FrameworkProfile parseProfile(const std::string& text, const FrameworkProfile& base, const std::string& field) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) throw UserError(field, "must be an object of constants", "see docs/framework-profiles.md");
  FrameworkProfile p = base;
  std::string known;
  for (const auto& c : profileConstants()) known += std::string(known.empty() ? "" : ", ") + c.key;
  for (const auto& c : otherKeys()) known += std::string(", ") + c.key;
  for (const auto& [k, v] : j.items()) {
    double lower = 0, upper = 0, FrameworkProfile::*member = nullptr;
    for (const auto& c : profileConstants())
      if (k == c.key) lower = c.lower, upper = c.upper, member = c.member;
    for (const auto& c : otherKeys())
      if (k == c.key) lower = c.lower, upper = c.upper, member = c.member;
    const std::string at = field + "." + k;
    if (!member) throw UserError(at, "is not a constant of a framework profile", "use " + known);
    if (!v.is_number()) throw UserError(at, "must be a number", "see docs/framework-profiles.md");
    const double x = v.get<double>();
    // host_op_s and host_backward_op_s may be negative: "the cluster's dispatch_s".
    const bool dispatch = (k == "host_op_s" || k == "host_backward_op_s") && x < 0;
    if (!std::isfinite(x) || (!dispatch && (x < lower || x > upper)))
      throw UserError(at, "is " + jsonText(v) + "; it must lie in [" + jsonText(nlohmann::json(lower)) + ", " +
                              jsonText(nlohmann::json(upper)) + "]",
                      "see docs/framework-profiles.md");
    p.*member = x;
  }
  return p;
}

}  // namespace trainscope::models
