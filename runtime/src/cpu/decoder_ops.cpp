// decoder_ops.cpp — see decoder_ops.h.
#include "cpu/decoder_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "cpu/cpu_kernels.h"
#include "cpu/cpu_ops.h"
#include "cpu/intraop.h"

namespace trainscope::runtime::cpu_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Rows per chunk of the weight-gradient sums: the chunks' partial sums are added in order, so dw
// does not depend on the thread count.
constexpr int64_t kRowsPerPartial = 64;

struct RmsNorm : public torch::autograd::Function<RmsNorm> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w, double eps) {
    const int64_t C = x.size(-1), R = x.numel() / C;
    at::Tensor y = at::empty_like(x), r = at::empty({R}, x.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    float* rp = r.data_ptr<float>();
    intraop::parallelFor(0, R, 16, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) rp[i] = kernels::rmsNormRow(xp + i * C, wp, yp + i * C, C, float(eps));
    });
    ctx->save_for_backward({x, w, r});
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1], &r = saved[2];
    const int64_t C = x.size(-1), R = x.numel() / C;
    at::Tensor dy = grad_out[0].contiguous();
    at::Tensor dx = at::empty_like(x);
    const int64_t parts = (R + kRowsPerPartial - 1) / kRowsPerPartial;
    at::Tensor partial = at::zeros({parts, C}, w.options());
    const float* xp = x.data_ptr<float>();
    const float* wp = w.data_ptr<float>();
    const float* dyp = dy.data_ptr<float>();
    const float* rp = r.data_ptr<float>();
    float* dxp = dx.data_ptr<float>();
    float* pp = partial.data_ptr<float>();
    intraop::parallelFor(0, parts, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k)
        for (int64_t i = k * kRowsPerPartial; i < std::min(R, (k + 1) * kRowsPerPartial); ++i)
          kernels::rmsNormBackwardRow(xp + i * C, wp, dyp + i * C, rp[i], dxp + i * C, pp + k * C, C);
    });
    at::Tensor dw = partial.narrow(0, 0, 1).clone().view({C});
    float* dwp = dw.data_ptr<float>();
    for (int64_t k = 1; k < parts; ++k)
      for (int64_t c = 0; c < C; ++c) dwp[c] += pp[k * C + c];
    return {dx, dw, at::Tensor()};
  }
};

struct RopeQkv : public torch::autograd::Function<RopeQkv> {
  // x (B·T rows of (h + 2kv)·D) → y, rotating the first h + kv heads of each row.
  static void rotate(const at::Tensor& x, at::Tensor& y, const at::Tensor& cos, const at::Tensor& sin, int64_t h,
                    int64_t kv, bool inverse) {
    const int64_t T = x.size(1), rows = x.size(0) * T, D = 2 * cos.size(1), W = (h + 2 * kv) * D;
    const float* xp = x.data_ptr<float>();
    const float* cp = cos.data_ptr<float>();
    const float* sp = sin.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    intraop::parallelFor(0, rows, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const int64_t t = i % T;
        const float* in = xp + i * W;
        float* out = yp + i * W;
        for (int64_t j = 0; j < h + kv; ++j)
          kernels::ropeRow(in + j * D, out + j * D, cp + t * (D / 2), sp + t * (D / 2), D / 2, inverse);
        std::memcpy(out + (h + kv) * D, in + (h + kv) * D, sizeof(float) * size_t(kv * D));
      }
    });
  }
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin,
                            int64_t h, int64_t kv) {
    at::Tensor y = at::empty_like(qkv);
    rotate(qkv, y, cos, sin, h, kv, false);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["h"] = h;
    ctx->saved_data["kv"] = kv;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    at::Tensor dy = grad_out[0].contiguous();
    at::Tensor dx = at::empty_like(dy);
    rotate(dy, dx, saved[0], saved[1], ctx->saved_data["h"].toInt(), ctx->saved_data["kv"].toInt(), true);
    return {dx, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct Swiglu : public torch::autograd::Function<Swiglu> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& f) {
    ctx->save_for_backward({f});
    const int64_t F2 = f.size(-1), F = F2 / 2, R = f.numel() / F2;
    std::vector<int64_t> shape = f.sizes().vec();
    shape.back() = F;
    at::Tensor y = at::empty(shape, f.options());
    const float* fp = f.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    intraop::parallelFor(0, R, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) kernels::swiglu(fp + i * F2, yp + i * F, F);
    });
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const at::Tensor f = ctx->get_saved_variables()[0];
    at::Tensor dy = grad_out[0].contiguous();
    const int64_t F2 = f.size(-1), F = F2 / 2, R = f.numel() / F2;
    at::Tensor df = at::empty_like(f);
    const float* fp = f.data_ptr<float>();
    const float* dyp = dy.data_ptr<float>();
    float* dp = df.data_ptr<float>();
    intraop::parallelFor(0, R, 8, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) kernels::swigluBackward(fp + i * F2, dyp + i * F, dp + i * F2, F);
    });
    return {df};
  }
};

}  // namespace

at::Tensor rmsNorm(const at::Tensor& x, const at::Tensor& w, double eps) {
  return usable(x) && usable(w) ? RmsNorm::apply(x, w, eps) : rmsNormReference(x, w, eps);
}

at::Tensor rmsNormReference(const at::Tensor& x, const at::Tensor& w, double eps) {
  const at::Tensor xf = x.to(at::kFloat);
  const at::Tensor y = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return w * y.to(x.scalar_type());
}

at::Tensor ropeQkv(const at::Tensor& qkv, const at::Tensor& cos, const at::Tensor& sin, int64_t n_head,
                   int64_t n_kv_head) {
  return RopeQkv::apply(qkv, cos.contiguous(), sin.contiguous(), n_head, n_kv_head);
}

at::Tensor swiglu(const at::Tensor& f) {
  if (usable(f)) return Swiglu::apply(f);
  auto gu = f.chunk(2, -1);
  return at::silu(gu[0]) * gu[1];
}

}  // namespace trainscope::runtime::cpu_ops
