// checkpoint.cpp — custom autograd functions that recompute in backward (see checkpoint.h).
#include "model/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

#include "model/fp8.h"
#include "trainscope/tracer/range.h"

namespace trainscope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local bool t_recomputing = false;

struct RecomputeScope {
  bool saved = std::exchange(t_recomputing, true);
  ~RecomputeScope() { t_recomputing = saved; }
};

// Re-runs `recompute` on detached copies of the saved inputs with grad enabled, and returns the
// gradients of the inputs. Index 0 of the result is the (undefined) grad of the n_head argument.
template <class Recompute>
variable_list recomputeAndDifferentiate(AutogradContext* ctx, const variable_list& grad_out, Recompute recompute) {
  variable_list saved = ctx->get_saved_variables();
  variable_list inputs;
  inputs.reserve(saved.size());
  for (const auto& t : saved) inputs.push_back(t.detach().requires_grad_(t.requires_grad()));
  at::Tensor out;
  {
    TRAINSCOPE_RANGE(tracer::names::kRecompute);
    c10::AutoGradMode enable(true);
    RecomputeScope scope;
    fp8::AliasScope fp8_weights(inputs, saved);  // the copies run the originals' FP8 linears
    out = recompute(inputs);
  }
  variable_list wrt;
  std::vector<size_t> wrt_index;
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].requires_grad()) {
      wrt.push_back(inputs[i]);
      wrt_index.push_back(i);
    }
  variable_list grads = torch::autograd::grad({out}, wrt, {grad_out[0]}, /*retain_graph=*/false,
                                              /*create_graph=*/false, /*allow_unused=*/true);
  variable_list result(1 + inputs.size());
  for (size_t j = 0; j < wrt.size(); ++j) result[1 + wrt_index[j]] = grads[j];
  return result;
}

// The block's description travels through autograd's saved_data field by field (IValues).
void saveArch(AutogradContext* ctx, const BlockArch& a) {
  auto& d = ctx->saved_data;
  d["rms"] = a.rms_norm, d["eps"] = a.norm_eps, d["qkv_b"] = a.qkv_bias, d["proj_b"] = a.proj_bias;
  d["mlp_b"] = a.mlp_bias, d["rope"] = a.rope, d["theta"] = a.rope_theta, d["swiglu"] = a.swiglu;
  d["rs_f"] = a.rope_scaling.factor, d["rs_lo"] = a.rope_scaling.low_freq_factor;
  d["rs_hi"] = a.rope_scaling.high_freq_factor, d["rs_ctx"] = a.rope_scaling.original_max_position_embeddings;
  d["heads"] = a.n_head, d["kv"] = a.n_kv_head, d["hd"] = a.head_dim, d["win"] = a.window;
  d["win_from"] = a.window_from_layer, d["alibi"] = a.alibi;
}
BlockArch loadArch(AutogradContext* ctx) {
  auto& d = ctx->saved_data;
  BlockArch a;
  a.rms_norm = d["rms"].toBool(), a.norm_eps = d["eps"].toDouble(), a.qkv_bias = d["qkv_b"].toBool();
  a.proj_bias = d["proj_b"].toBool(), a.mlp_bias = d["mlp_b"].toBool(), a.rope = d["rope"].toBool();
  a.rope_theta = d["theta"].toDouble(), a.swiglu = d["swiglu"].toBool();
  a.rope_scaling.factor = d["rs_f"].toDouble(), a.rope_scaling.low_freq_factor = d["rs_lo"].toDouble();
  a.rope_scaling.high_freq_factor = d["rs_hi"].toDouble();
  a.rope_scaling.original_max_position_embeddings = d["rs_ctx"].toInt();
  a.n_head = d["heads"].toInt(), a.n_kv_head = d["kv"].toInt(), a.head_dim = d["hd"].toInt();
  a.window = d["win"].toInt(), a.window_from_layer = d["win_from"].toInt(), a.alibi = d["alibi"].toBool();
  return a;
}

struct BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
  // inputs = [x, the block's weights (BlockKind::count of them)]; tp is a BlockContext* that outlives the
  // step; kind packs BlockKind's moe, shared expert and layer; arch points at the block's BlockArch
  // (read in forward only: it is saved field by field).
  static at::Tensor forward(AutogradContext* ctx, int64_t n_head, int64_t tp, int64_t kind, int64_t arch,
                            at::TensorList inputs) {
    ctx->saved_data["n_head"] = n_head;
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["kind"] = kind;
    const BlockArch& a = *reinterpret_cast<const BlockArch*>(arch);
    saveArch(ctx, a);
    ctx->save_for_backward(inputs.vec());
    return detail::blockForward(BlockWeights::fromFlat(&inputs[1], unpack(kind, a)), inputs[0], n_head, false,
                                *reinterpret_cast<const BlockContext*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const int64_t n_head = ctx->saved_data["n_head"].toInt();
    const auto& tp = *reinterpret_cast<const BlockContext*>(ctx->saved_data["tp"].toInt());
    const BlockKind kind = unpack(ctx->saved_data["kind"].toInt(), loadArch(ctx));
    variable_list g = recomputeAndDifferentiate(ctx, grad_out, [&](const variable_list& in) {
      return detail::blockForward(BlockWeights::fromFlat(&in[1], kind), in[0], n_head, false, tp);
    });
    g.insert(g.begin() + 1, {at::Tensor(), at::Tensor(), at::Tensor()});  // the tp, kind and arch arguments
    return g;
  }
  static int64_t pack(const BlockKind& k) {
    return (k.layer + 1) * 8 + (k.moe ? 1 : 0) + (k.shared_expert ? 2 : 0) + (k.shared_gate ? 4 : 0);
  }
  static BlockKind unpack(int64_t v, const BlockArch& a) { return {(v & 1) != 0, (v & 2) != 0, v / 8 - 1, a, (v & 4) != 0}; }
};

struct AttentionCheckpoint : public torch::autograd::Function<AttentionCheckpoint> {
  static at::Tensor forward(AutogradContext* ctx, int64_t n_head, int64_t n_kv, const cpu_ops::ScoreBias& bias,
                            at::TensorList inputs) {
    ctx->saved_data["n_head"] = n_head;
    ctx->saved_data["n_kv"] = n_kv;
    ctx->saved_data["window"] = bias.window;
    ctx->saved_data["slopes"] = bias.slopes;
    ctx->save_for_backward(inputs.vec());
    return detail::attentionCore(inputs[0], n_head, n_kv, bias);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const int64_t n_head = ctx->saved_data["n_head"].toInt(), n_kv = ctx->saved_data["n_kv"].toInt();
    const cpu_ops::ScoreBias bias{ctx->saved_data["window"].toInt(), ctx->saved_data["slopes"].toDoubleVector()};
    variable_list g = recomputeAndDifferentiate(
        ctx, grad_out, [&](const variable_list& in) { return detail::attentionCore(in[0], n_head, n_kv, bias); });
    g.insert(g.begin() + 1, {at::Tensor(), at::Tensor()});  // the n_kv and bias arguments
    return g;
  }
};

}  // namespace

at::Tensor checkpointBlock(const BlockWeights& p, const at::Tensor& x, int64_t n_head, const BlockContext& tp) {
  std::vector<at::Tensor> in = p.flat();
  in.insert(in.begin(), x);  // [x, the block's weights]
  return BlockCheckpoint::apply(n_head, reinterpret_cast<int64_t>(&tp), BlockCheckpoint::pack(p.kind()),
                                reinterpret_cast<int64_t>(&p.arch), at::TensorList(in));
}

bool inRecompute() { return t_recomputing; }

at::Tensor checkpointAttention(const at::Tensor& qkv, int64_t n_head, int64_t n_kv, const cpu_ops::ScoreBias& bias) {
  std::vector<at::Tensor> in{qkv};
  return AttentionCheckpoint::apply(n_head, n_kv, bias, at::TensorList(in));
}

}  // namespace trainscope::runtime
