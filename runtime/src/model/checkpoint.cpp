// checkpoint.cpp — custom autograd functions that recompute in backward (see checkpoint.h).
#include "model/checkpoint.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>

#include <utility>

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

struct BlockCheckpoint : public torch::autograd::Function<BlockCheckpoint> {
  // inputs = [x, the block's weights (BlockKind::count of them)]; tp is a BlockContext* that outlives the
  // step; kind packs BlockKind (moe, shared expert, layer).
  static at::Tensor forward(AutogradContext* ctx, int64_t n_head, int64_t tp, int64_t kind, at::TensorList inputs) {
    ctx->saved_data["n_head"] = n_head;
    ctx->saved_data["tp"] = tp;
    ctx->saved_data["kind"] = kind;
    ctx->save_for_backward(inputs.vec());
    return detail::blockForward(BlockWeights::fromFlat(&inputs[1], unpack(kind)), inputs[0], n_head, false,
                                *reinterpret_cast<const BlockContext*>(tp));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const int64_t n_head = ctx->saved_data["n_head"].toInt();
    const auto& tp = *reinterpret_cast<const BlockContext*>(ctx->saved_data["tp"].toInt());
    const BlockKind kind = unpack(ctx->saved_data["kind"].toInt());
    variable_list g = recomputeAndDifferentiate(ctx, grad_out, [&](const variable_list& in) {
      return detail::blockForward(BlockWeights::fromFlat(&in[1], kind), in[0], n_head, false, tp);
    });
    g.insert(g.begin() + 1, {at::Tensor(), at::Tensor()});  // the tp and kind arguments
    return g;
  }
  static int64_t pack(const BlockKind& k) { return (k.layer + 1) * 4 + (k.moe ? 1 : 0) + (k.shared_expert ? 2 : 0); }
  static BlockKind unpack(int64_t v) { return {(v & 1) != 0, (v & 2) != 0, v / 4 - 1}; }
};

struct AttentionCheckpoint : public torch::autograd::Function<AttentionCheckpoint> {
  static at::Tensor forward(AutogradContext* ctx, int64_t n_head, at::TensorList inputs) {
    ctx->saved_data["n_head"] = n_head;
    ctx->save_for_backward(inputs.vec());
    return detail::attentionCore(inputs[0], n_head);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const int64_t n_head = ctx->saved_data["n_head"].toInt();
    return recomputeAndDifferentiate(ctx, grad_out,
                                     [&](const variable_list& in) { return detail::attentionCore(in[0], n_head); });
  }
};

}  // namespace

at::Tensor checkpointBlock(const BlockWeights& p, const at::Tensor& x, int64_t n_head, const BlockContext& tp) {
  std::vector<at::Tensor> in = p.flat();
  in.insert(in.begin(), x);  // [x, the block's weights]
  return BlockCheckpoint::apply(n_head, reinterpret_cast<int64_t>(&tp), BlockCheckpoint::pack(p.kind()),
                                at::TensorList(in));
}

bool inRecompute() { return t_recomputing; }

at::Tensor checkpointAttention(const at::Tensor& qkv, int64_t n_head) {
  std::vector<at::Tensor> in{qkv};
  return AttentionCheckpoint::apply(n_head, at::TensorList(in));
}

}  // namespace trainscope::runtime
