// linear.cpp — see linear.h. Measured on the 2-core AMD EPYC (Zen 4) this project runs on, with
// torch 2.11's MKL 2024.2 and oneDNN 3.10 (GFLOP/s at the small CPU model's shapes, M = 1024):
//                      MKL      oneDNN
//   x W^T (256→768)    143–154  211
//   x W^T (256→4096)   143–155  169
//   dy W  (768→256)    156–190  211 (W^T passed as a strided view, no copy)
//   dy^T x             164–185  122–174  ← stays on MKL
// oneDNN is reached through LibTorch's own registered op mkldnn::_linear_pointwise (no oneDNN
// headers here), so it is exactly the library the wheel ships.
#include "model/linear.h"

#include "cpu/gemm_avx512.h"
#include "model/fp8.h"
#include "cpu/intraop.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstdlib>

namespace trainscope::runtime {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

using PointwiseFn = at::Tensor(const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                               std::string_view, c10::List<std::optional<at::Scalar>>,
                               std::optional<std::string_view>);

const c10::TypedOperatorHandle<PointwiseFn>* onednnOp() {
  static const c10::TypedOperatorHandle<PointwiseFn>* op = []() -> const c10::TypedOperatorHandle<PointwiseFn>* {
    const char* off = std::getenv("TRAINSCOPE_DISABLE_ONEDNN");
    if (off && std::string(off) == "1") return nullptr;
    auto handle = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", ""});
    if (!handle) return nullptr;
    static auto typed = handle->typed<PointwiseFn>();
    return &typed;
  }();
  return op;
}

using BinaryFn = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&,
                            std::string_view);

// mkldnn::_linear_pointwise.binary: X Wᵀ + B, then a binary post-op with `other` ("add").
const c10::TypedOperatorHandle<BinaryFn>* onednnBinaryOp() {
  static const c10::TypedOperatorHandle<BinaryFn>* op = []() -> const c10::TypedOperatorHandle<BinaryFn>* {
    if (!onednnOp()) return nullptr;
    auto handle = c10::Dispatcher::singleton().findSchema({"mkldnn::_linear_pointwise", "binary"});
    if (!handle) return nullptr;
    static auto typed = handle->typed<BinaryFn>();
    return &typed;
  }();
  return op;
}

bool useOnednn(const at::Tensor& x, const at::Tensor& w) {
  return x.device().is_cpu() && x.scalar_type() == at::kFloat && w.scalar_type() == at::kFloat && onednnOp();
}

// (M, K) x (N, K)^T + b → (M, N); w may be a strided view.
at::Tensor gemmNT(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (useOnednn(x, w))
    return onednnOp()->call(x, w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt, "none", c10::List<std::optional<at::Scalar>>(), std::string_view(""));
  return b.defined() ? at::addmm(b, x, w.t()) : at::mm(x, w.t());
}

}  // namespace

bool gemmTNUsable(const at::Tensor& a, const at::Tensor& b) {
  static const bool off = [] {
    const char* v = std::getenv("TRAINSCOPE_DISABLE_GEMM_TN");
    return v && std::string(v) == "1";
  }();
  auto plain = [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.dim() == 2 && t.stride(1) == 1;
  };
  return !off && kernels::handGemmsAvailable() && plain(a) && plain(b) && a.size(0) == b.size(0) && b.size(1) % 16 == 0;
}

void gemmTN(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c, bool accumulate, const at::Tensor& bias) {
  const int64_t M = a.size(0), N = a.size(1), K = b.size(1);
  const float* ap = a.data_ptr<float>();
  const float* bp = b.data_ptr<float>();
  float* cp = c.data_ptr<float>();
  float* biasp = bias.defined() ? bias.data_ptr<float>() : nullptr;
  constexpr int64_t kStrip = 8;  // the kernel's tile rows: split N on whole strips
  intraop::parallelFor(0, (N + kStrip - 1) / kStrip, 16, [&](int64_t s0, int64_t s1) {
    const int64_t n0 = s0 * kStrip, n = std::min(N, s1 * kStrip) - n0;
    kernels::gemmTN(M, n, K, ap + n0, a.stride(0), bp, b.stride(0), cp + n0 * c.stride(0), c.stride(0), accumulate,
                    biasp ? biasp + n0 : nullptr);
  });
}

namespace {

// Backward of y = x Wᵀ (+ b): dx = dy W (oneDNN), dW = dyᵀ x and db = Σ_m dy (one pass of the
// hand-written GEMM where it applies).
variable_list linearBackward(AutogradContext* ctx, const at::Tensor& grad) {
  auto saved = ctx->get_saved_variables();
  const at::Tensor &x = saved[0], &w = saved[1];
  at::Tensor dy = grad.contiguous();                          // (M, N)
  const bool has_bias = ctx->saved_data["has_bias"].toBool();
  at::Tensor dx = gemmNT(dy, w.t(), {});                      // (M, K) = dy W
  at::Tensor dw, db;
  if (gemmTNUsable(dy, x)) {                                  // (N, K) = dyᵀ x, db = Σ_m dy, one pass
    dw = at::empty({dy.size(1), x.size(1)}, x.options());
    if (has_bias) db = at::empty({dy.size(1)}, x.options());
    gemmTN(dy, x, dw, /*accumulate=*/false, db);
  } else {
    dw = at::mm(dy.t(), x);                                   // (N, K)
    if (has_bias) db = dy.sum(0);
  }
  return {dx, dw, db};
}

struct Linear : public torch::autograd::Function<Linear> {
  // The bias is optional so that "no bias" is not an (undefined) autograd input.
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& b) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["has_bias"] = b.has_value();
    return gemmNT(x, w, b.value_or(at::Tensor()));            // (M, N)
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    return linearBackward(ctx, grad_out[0]);
  }
};

// r + x Wᵀ + b in one oneDNN call (the residual add as the GEMM's post-op, no separate pass);
// the residual's gradient is dy itself.
struct LinearAdd : public torch::autograd::Function<LinearAdd> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& b, const at::Tensor& r) {
    ctx->save_for_backward({x, w});
    ctx->saved_data["has_bias"] = b.has_value();
    return onednnBinaryOp()->call(x, r, w, b, "add");          // (M, N)
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    variable_list g = linearBackward(ctx, grad_out[0]);
    g.push_back(grad_out[0]);                                  // d r = dy
    return g;
  }
};

}  // namespace

bool onednnLinearAvailable() { return onednnOp() != nullptr; }

at::Tensor mmNT(const at::Tensor& x, const at::Tensor& w) { return gemmNT(x, w, {}); }

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
  if (fp8::Meta* m = fp8::metaFor(w)) return fp8::linear(x, w, b, m);  // --precision fp8's block linears
  if (!useOnednn(x, w)) return at::linear(x, w, b);
  auto out_shape = x.sizes().vec();
  out_shape.back() = w.size(0);
  at::Tensor x2 = x.reshape({-1, x.size(-1)});               // (M, K)
  return Linear::apply(x2, w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt).view(out_shape);
}

at::Tensor linearAdd(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, const at::Tensor& residual) {
  if (fp8::Meta* m = fp8::metaFor(w)) return residual + fp8::linear(x, w, b, m);
  const bool fused = useOnednn(x, w) && onednnBinaryOp() && residual.scalar_type() == at::kFloat &&
                     residual.is_contiguous() && residual.dim() == x.dim();
  if (!fused) return residual + linear(x, w, b);
  auto out_shape = x.sizes().vec();
  out_shape.back() = w.size(0);
  at::Tensor x2 = x.reshape({-1, x.size(-1)});                // (M, K)
  at::Tensor r2 = residual.reshape({-1, w.size(0)});          // (M, N)
  return LinearAdd::apply(x2, w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt, r2).view(out_shape);
}

}  // namespace trainscope::runtime
