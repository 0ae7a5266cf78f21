// host_time.cpp — the host thread's side of a micro-batch on a GPU cluster (gpu_time.h): a layer's
// framework ops, collective calls and hooks by pass, and the pass-by-pass bound of host and device
// (docs/framework-profiles.md).
#include <algorithm>

#include "gpu_time.h"
#include "trainscope/models/zero.h"

namespace trainscope::models::gpu {

using runconfig::Checkpointing;

double hostOpSeconds(double profile_s, const Cluster& c) { return profile_s >= 0 ? profile_s : c.dispatch_s; }

double layerParamTensors(const workloads::Workload& w) {
  using workloads::Mlp;
  using workloads::Norm;
  const double norms = 2.0 * (w.norm == Norm::LayerNorm ? 2.0 : 1.0);
  // GPT-2's Conv1D c_attn holds Q, K and V in one tensor; the Llama family has q_proj, k_proj, v_proj.
  const double qkv = (w.positions == workloads::Positions::Learned ? 1.0 : 3.0) * (w.qkv_bias ? 2.0 : 1.0);
  const double proj = w.proj_bias ? 2.0 : 1.0;
  const double mlp = (w.mlp == Mlp::SwiGLU ? 3.0 : 2.0) * (w.mlp_bias ? 2.0 : 1.0);
  return norms + qkv + proj + mlp;
}

double modelParamTensors(const workloads::Workload& w, double layers, bool first, bool last) {
  double n = layers * layerParamTensors(w);
  if (first) n += w.positions == workloads::Positions::Learned ? 2.0 : 1.0;  // wte (and wpe)
  if (last) n += (w.norm == workloads::Norm::LayerNorm ? 2.0 : 1.0) + (w.tie_embeddings ? 0.0 : 1.0);
  return n;
}

double zeroStepHostSeconds(const Plan& p, const FrameworkProfile& fp, double tensors) {
  const int stage = runconfig::stageNumber(p.zero);
  if (stage == 0) return fp.zero0_step_tensor_s * tensors;
  const double passes = stage == 1 ? 1.0 : double(p.ga());  // bucketed on the boundary micro-batch, or each
  return fp.grad_bucket_s * tensors * passes;
}

HostPhases hostLayerPhases(const Plan& p, const Cluster& c, const FrameworkProfile& fp, double extra_forward_ops,
                           double extra_backward_ops, double param_tensors) {
  const bool full = p.ckpt == Checkpointing::Full;
  const bool sp = p.sequence_parallel, zero3 = zero::shardsParameters(p) && p.gradientGroup() > 1;
  // The layer's collective calls per micro-batch and pass: TP's (SP: 4 forward, 6 backward; else 2
  // and 2; the rerun forward's again), ZeRO-3's gather before the forward (and the rerun) and its
  // gradient reduce-scatter in the backward.
  const double tp_fwd = p.tp > 1 ? (sp ? 4.0 : 2.0) : 0.0, tp_bwd = p.tp > 1 ? (sp ? 6.0 : 2.0) : 0.0;
  const double z = zero3 ? 1.0 : 0.0;
  // Module hooks from the profile's stage on (FSDP wraps the blocks at any sharding, DeepSpeed hooks
  // submodules at ZeRO-3 only), half per pass; gradient hooks (DeepSpeed ZeRO 1-3: one per parameter
  // tensor) in the backward.
  const int stage = runconfig::stageNumber(p.zero);
  const bool zero = stage > 0;
  const double hooks = zero && stage >= fp.module_hooks_from_zero ? fp.hooks_per_layer * fp.hook_s : 0.0;
  const double grad_hooks = zero ? fp.grad_hooks * param_tensors * fp.hook_s : 0.0;
  const double op = hostOpSeconds(fp.host_op_s, c);
  HostPhases h;
  const double fwd_ops = fp.ops_forward + extra_forward_ops, bwd_ops = fp.ops_backward + extra_backward_ops;
  h.fwd = fwd_ops * op + (tp_fwd + z) * fp.host_collective_s + 0.5 * hooks;
  h.rec = full ? fwd_ops * op + (tp_fwd + z) * fp.host_collective_s + 0.5 * hooks : 0.0;
  h.bwd = bwd_ops * hostOpSeconds(fp.host_backward_op_s, c) + (tp_bwd + z) * fp.host_collective_s + 0.5 * hooks +
          grad_hooks;
  return h;
}

double hostLayerSeconds(const Plan& p, const Cluster& c, const FrameworkProfile& fp, double param_tensors) {
  const HostPhases h = hostLayerPhases(p, c, fp, 0, 0, param_tensors);
  return h.fwd + h.rec + h.bwd;
}

double phasedSeconds(const HostPhases& host, const HostPhases& device) {
  return std::max(host.fwd, device.fwd) + std::max(host.rec, device.rec) + std::max(host.bwd, device.bwd);
}

}  // namespace trainscope::models::gpu
