// trainscope/models/framework_profile.h — what a training framework adds to the GPU time model
// beyond its kernel list (layer_ops.h): the host thread's cost (per op, per collective call, per
// module hook, per micro-batch), its attention kernel's rate against FlashAttention-2's, and how it
// issues the data-parallel collectives (the bytes a gradient is reduced in, the parameter gathers it
// keeps in flight, whether its reductions overlap the backward). docs/time-model.md, "Framework
// profiles", gives each constant's source or what it was fitted to.
//
// Every constant is a number of the cluster file's "frameworks" object:
//   "frameworks": {"fsdp": {"host_op_s": 4e-5, "hook_s": 3e-5}, ...}
// A constant the file leaves out takes the built-in default (builtinProfile). `trainscope calibrate`
// fits them by the paths "frameworks.<name>.<key>" (profileConstants lists them with their bounds).
#pragma once

#include <string>
#include <vector>

namespace trainscope::models {

// Whose kernels (layer_ops.h also declares it): this runtime, Megatron-LM as the published runs used
// it, PyTorch FSDP (a Hugging Face / Composer / Accelerate model under FullyShardedDataParallel) or
// DeepSpeed ZeRO.
enum class Framework { Trainscope, Megatron, Fsdp, Deepspeed };

struct FrameworkProfile {
  // The host thread (the step is the longer of the GPU stream and this, per micro-batch).
  double host_op_s = -1;           // forward op issued from Python (module call, dispatch, launch); < 0: the cluster's dispatch_s
  double host_backward_op_s = -1;  // backward op issued by the autograd engine (C++); < 0: the cluster's dispatch_s
  double ops_forward = 25, ops_backward = 50;  // ops a transformer layer issues per micro-batch
  double host_collective_s = 0;    // a collective call's host cost (process group, NCCL enqueue)
  double hook_s = 0;               // one module hook (FSDP/ZeRO-3's pre/post forward and backward)
  double hooks_per_layer = 0;      // module hooks a layer runs per micro-batch (each pass's pre and post)
  double module_hooks_from_zero = 1;  // the lowest ZeRO stage whose runs have those module hooks
  double grad_hooks = 0;           // 1: under ZeRO every parameter tensor's gradient runs one hook (hook_s)
  double host_micro_batch_s = 0;   // fixed host work per micro-batch (data, loss, schedule, syncs)
  // DeepSpeed's per-stage host work per parameter tensor (gpu_time.h zeroStepHostSeconds): a gradient
  // copied into a reduce bucket (ZeRO 1: once a step; 2 and 3: every micro-batch), and ZeRO 0's
  // per-tensor all-reduce copies, clipping and optimizer loop at the step boundary.
  double grad_bucket_s = 0;
  double zero0_step_tensor_s = 0;
  // Attention: the framework's fused attention kernel's rate over FlashAttention-2's (flashEfficiency).
  double flash_forward_scale = 1, flash_backward_scale = 1;
  // Data parallelism.
  double reduce_bytes = 0;         // bytes a gradient element is reduced in (0: the plan's rule, gradBytes)
  double prefetch_depth = 1;       // ZeRO-3 parameter gathers in flight ahead of the layer computing
  double overlap_reduce = 1;       // share of the reduction the backward could hide that it hides (1: all; 0: issued after it)
  // ZeRO-3's gathers and reduce-scatters overlapped with a layer's compute take this share of its rate
  // (NCCL's kernels hold SMs and HBM bandwidth while they run; zeroLayerSeconds).
  double overlap_slowdown = 0;
};

// The built-in profile of a framework (its constants' sources in framework_profile.cpp).
FrameworkProfile builtinProfile(Framework f);
const char* frameworkKey(Framework f);                 // "trainscope" | "megatron" | "fsdp" | "deepspeed"
const std::vector<Framework>& allFrameworks();

// One fittable constant of a profile: its key in "frameworks.<name>", bounds, what it is, its member.
struct ProfileConstant {
  const char* key;
  double lower, upper;
  const char* what;
  double FrameworkProfile::*member;
};
const std::vector<ProfileConstant>& profileConstants();
// Every fittable constant of every framework as its cluster-file path ("frameworks.fsdp.hook_s"),
// for calibrate's fitParams() (fit_params.cpp's "physics:" block appends one FitParam per entry, its
// ref `c.mutableProfile(framework).*member`).
struct ProfilePath {
  std::string path;
  double lower, upper;
  std::string what;
  Framework framework;
  double FrameworkProfile::*member;
};
std::vector<ProfilePath> profilePaths();

// `base` with the keys of one framework's JSON object (its text) set; an unknown key, a non-number
// or one outside its bounds is a UserError naming "<field>.<key>".
FrameworkProfile parseProfile(const std::string& object_json, const FrameworkProfile& base, const std::string& field);

}  // namespace trainscope::models
