// cpu_ops.cpp — see cpu_ops.h.
#include "cpu/cpu_ops.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "cpu/blas.h"
#include "cpu/cpu_kernels.h"
#include "cpu/gemm_avx512.h"
#include "cpu/intraop.h"

namespace trainscope::runtime::cpu_ops {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kBlock = 32;  // query rows per block

// One head of one sequence: where its q, k, v, y (and their gradients) start, and the strides.
struct Head {
  const float* q;
  const float* k;
  const float* v;
  int64_t ld_qkv;  // (h + 2·kv)·HS
  int64_t T, HS;
  int64_t window = 0;  // sliding window: query t sees keys (t - window, t]; 0: all of [0, t]
  float slope = 0;     // ALiBi: score(t, j) += slope·(j - t); 0: none
  // The keys a block of queries [r0, r0 + rows) sees: [first, r0 + rows); of row t: [lo, t].
  int64_t firstKey(int64_t r0) const { return window > 0 ? std::max<int64_t>(0, r0 - window + 1) : 0; }
};

// ALiBi on one score row of query t whose element jj is key k0 + jj, for keys [k0 + lo, k0 + hi).
void addAlibi(float* row, float slope, int64_t t, int64_t k0, int64_t lo, int64_t hi) {
  if (slope == 0) return;
  for (int64_t jj = lo; jj < hi; ++jj) row[jj] += slope * float(k0 + jj - t);
}

// C (m, n) = alpha · op(A) · B + beta · C, all row-major: the one GEMM form the attention needs once
// K and V are transposed per head. The hand-written kernel where AVX-512 exists, else the BLAS.
void gemm(bool trans_a, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  if (kernels::handGemmsAvailable())
    kernels::gemmSmall(m, n, k, alpha, a, trans_a ? 1 : lda, trans_a ? lda : 1, b, ldb, beta, c, ldc);
  else
    blas::sgemm(trans_a, false, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// xt (HS, T) = x (T, HS; row stride ld)ᵀ, in 16-row strips so that each output row gets 16
// contiguous floats at a time.
void transpose(const float* x, int64_t ld, int64_t T, int64_t HS, float* xt) {
  constexpr int64_t kStrip = 16;
  for (int64_t t0 = 0; t0 < T; t0 += kStrip) {
    const int64_t n = std::min(kStrip, T - t0);
    for (int64_t d = 0; d < HS; ++d)
      for (int64_t t = 0; t < n; ++t) xt[d * T + t0 + t] = x[(t0 + t) * ld + d];
  }
}

// Forward of one head: y (T, HS; row stride ld_y) and lse (T). kt: its K head transposed (HS, T),
// shared by the query heads of its group.
void headForward(const Head& h, float scale, float* y, int64_t ld_y, float* lse, float* s, const float* kt) {
  for (int64_t r0 = 0; r0 < h.T; r0 += kBlock) {
    // causal: keys [k0, k0 + n) (k0 = 0 without a window)
    const int64_t rows = std::min(kBlock, h.T - r0), k0 = h.firstKey(r0), n = r0 + rows - k0;
    // S = scale · Q_blk K^T   (rows, n)
    gemm(false, rows, n, h.HS, scale, h.q + r0 * h.ld_qkv, h.ld_qkv, kt + k0, h.T, 0.0f, s, n);
    for (int64_t i = 0; i < rows; ++i) {
      float* row = s + i * n;
      const int64_t t = r0 + i, lo = h.firstKey(t) - k0, hi = t + 1 - k0;  // keys lo..t of the block's
      addAlibi(row, h.slope, t, k0, lo, hi);
      const float m = kernels::maxOf(row + lo, hi - lo);
      const float sum = kernels::expShiftSum(row + lo, row + lo, hi - lo, m);
      kernels::scale(row + lo, hi - lo, 1.0f / sum);                      // P
      std::fill(row, row + lo, 0.0f);
      std::fill(row + hi, row + n, 0.0f);
      lse[t] = m + std::log(sum);
    }
    // Y_blk = P V   (rows, HS)
    gemm(false, rows, h.HS, n, 1.0f, s, n, h.v + k0 * h.ld_qkv, h.ld_qkv, 0.0f, y + r0 * ld_y, ld_y);
  }
}

// Backward of one head. dq, dk, dv: (T, HS) with row stride ld_qkv, written here (no zeroing needed):
// blocks go last to first, and the last block's keys are all T rows, so the first head of a K/V
// group (`first`) initialises dK and dV (beta = 0) there and everything after adds to them: the
// group's query heads sum their gradients onto their one K/V head. kt, vt: K and V transposed (HS, T).
void headBackward(const Head& h, float scale, const float* y, const float* dy, int64_t ld_y, const float* lse,
                  float* dq, float* dk, float* dv, float* p, float* ds, float* drow, const float* kt,
                  const float* vt, bool first) {
  for (int64_t t = 0; t < h.T; ++t) drow[t] = kernels::dot(dy + t * ld_y, y + t * ld_y, h.HS);  // rowsum(dY∘Y)
  const int64_t last = (h.T - 1) / kBlock * kBlock;
  if (first && h.window > 0)  // with a window the last block does not see every key: start from zero
    for (int64_t t = 0; t < h.T; ++t) {
      std::fill(dk + t * h.ld_qkv, dk + t * h.ld_qkv + h.HS, 0.0f);
      std::fill(dv + t * h.ld_qkv, dv + t * h.ld_qkv + h.HS, 0.0f);
    }
  for (int64_t r0 = last; r0 >= 0; r0 -= kBlock) {
    const int64_t rows = std::min(kBlock, h.T - r0), k0 = h.firstKey(r0), n = r0 + rows - k0;
    const float beta = first && r0 == last && h.window == 0 ? 0.0f : 1.0f;
    const float* dy_blk = dy + r0 * ld_y;
    float* dk_blk = dk + k0 * h.ld_qkv;
    float* dv_blk = dv + k0 * h.ld_qkv;
    // P = exp(scale · Q_blk K^T - lse), recomputed   (rows, n)
    gemm(false, rows, n, h.HS, scale, h.q + r0 * h.ld_qkv, h.ld_qkv, kt + k0, h.T, 0.0f, p, n);
    for (int64_t i = 0; i < rows; ++i) {
      float* row = p + i * n;
      const int64_t t = r0 + i, lo = h.firstKey(t) - k0, hi = t + 1 - k0;
      addAlibi(row, h.slope, t, k0, lo, hi);
      kernels::expShiftSum(row + lo, row + lo, hi - lo, lse[t]);
      std::fill(row, row + lo, 0.0f);
      std::fill(row + hi, row + n, 0.0f);
    }
    // dV += P^T dY_blk   (n, HS)
    gemm(true, n, h.HS, rows, 1.0f, p, n, dy_blk, ld_y, beta, dv_blk, h.ld_qkv);
    // dP = dY_blk V^T   (rows, n), then dS = P ∘ (dP - rowsum(dY∘Y))
    gemm(false, rows, n, h.HS, 1.0f, dy_blk, ld_y, vt + k0, h.T, 0.0f, ds, n);
    for (int64_t i = 0; i < rows; ++i) kernels::softmaxBackwardRow(ds + i * n, p + i * n, n, drow[r0 + i]);
    // dQ_blk = scale · dS K   (rows, HS);  dK += scale · dS^T Q_blk   (n, HS)
    gemm(false, rows, h.HS, n, scale, ds, n, h.k + k0 * h.ld_qkv, h.ld_qkv, 0.0f, dq + r0 * h.ld_qkv, h.ld_qkv);
    gemm(true, n, h.HS, rows, scale, ds, n, h.q + r0 * h.ld_qkv, h.ld_qkv, beta, dk_blk, h.ld_qkv);
  }
}

// Query head hd of sequence b in qkv (B, T, (H + 2·KV)·HS) = [q heads; k heads; v heads]: its K/V
// head is hd / (H/KV).
Head headOf(const float* qkv, int64_t b, int64_t hd, int64_t T, int64_t H, int64_t KV, int64_t HS,
            const ScoreBias& bias) {
  const int64_t ld = (H + 2 * KV) * HS, g = hd / (H / KV);
  const float* base = qkv + b * T * ld;
  const float slope = bias.slopes.empty() ? 0.0f : float(bias.slopes[size_t(hd)]);
  return Head{base + hd * HS, base + (H + g) * HS, base + (H + KV + g) * HS, ld, T, HS, bias.window, slope};
}

struct CausalAttention : public torch::autograd::Function<CausalAttention> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& qkv, int64_t n_head, int64_t n_kv,
                            const ScoreBias& bias) {
    const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv), C = n_head * HS;
    const float scale = 1.0f / std::sqrt(float(HS));
    at::Tensor y = at::empty({B, T, C}, qkv.options());                 // (B, T, C)
    at::Tensor lse = at::empty({B, n_head, T}, qkv.options());          // (B, NH, T)
    const float* in = qkv.data_ptr<float>();
    float* out = y.data_ptr<float>();
    float* l = lse.data_ptr<float>();
    // One K/V group per task, as in the backward: K is transposed once for its group of query heads.
    const int64_t group = n_head / n_kv;
    intraop::parallelFor(0, B * n_kv, 1, [&](int64_t begin, int64_t end) {
      blas::SequentialScope sequential;
      std::vector<float> s(static_cast<size_t>(kBlock * T)), kt(static_cast<size_t>(HS * T));
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / n_kv, g = i % n_kv;
        const Head first = headOf(in, b, g * group, T, n_head, n_kv, HS, bias);
        transpose(first.k, first.ld_qkv, T, HS, kt.data());
        for (int64_t hd = g * group; hd < (g + 1) * group; ++hd)
          headForward(headOf(in, b, hd, T, n_head, n_kv, HS, bias), scale, out + b * T * C + hd * HS, C,
                      l + (b * n_head + hd) * T, s.data(), kt.data());
      }
    });
    ctx->save_for_backward({qkv, y, lse});
    ctx->saved_data["n_head"] = n_head;
    ctx->saved_data["n_kv"] = n_kv;
    ctx->saved_data["window"] = bias.window;
    ctx->saved_data["slopes"] = bias.slopes;
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &qkv = saved[0], &y = saved[1], &lse = saved[2];
    const int64_t n_head = ctx->saved_data["n_head"].toInt(), n_kv = ctx->saved_data["n_kv"].toInt();
    const ScoreBias bias{ctx->saved_data["window"].toInt(), ctx->saved_data["slopes"].toDoubleVector()};
    const int64_t B = qkv.size(0), T = qkv.size(1), HS = qkv.size(2) / (n_head + 2 * n_kv), C = n_head * HS;
    const int64_t group = n_head / n_kv, ld = (n_head + 2 * n_kv) * HS;
    const float scale = 1.0f / std::sqrt(float(HS));
    at::Tensor dy = grad_out[0].contiguous();                           // (B, T, C)
    at::Tensor dqkv = at::empty_like(qkv);                              // (B, T, (h + 2kv)·HS), all written
    const float* in = qkv.data_ptr<float>();
    const float* yp = y.data_ptr<float>();
    const float* dyp = dy.data_ptr<float>();
    const float* l = lse.data_ptr<float>();
    float* d = dqkv.data_ptr<float>();
    // One K/V group (its K/V head and the query heads that read it) per task: dK and dV sum over the
    // group without a race, and K and V are transposed once for the group.
    intraop::parallelFor(0, B * n_kv, 1, [&](int64_t begin, int64_t end) {
      blas::SequentialScope sequential;
      std::vector<float> p(static_cast<size_t>(kBlock * T)), ds(static_cast<size_t>(kBlock * T)), drow(static_cast<size_t>(T));
      std::vector<float> kt(static_cast<size_t>(HS * T)), vt(static_cast<size_t>(HS * T));
      for (int64_t i = begin; i < end; ++i) {
        const int64_t b = i / n_kv, g = i % n_kv;
        const Head first = headOf(in, b, g * group, T, n_head, n_kv, HS, bias);
        transpose(first.k, first.ld_qkv, T, HS, kt.data());
        transpose(first.v, first.ld_qkv, T, HS, vt.data());
        float* row0 = d + b * T * ld;
        float* dk = row0 + (n_head + g) * HS;
        float* dv = row0 + (n_head + n_kv + g) * HS;
        for (int64_t j = 0; j < group; ++j) {
          const int64_t hd = g * group + j, yo = b * T * C + hd * HS;
          headBackward(headOf(in, b, hd, T, n_head, n_kv, HS, bias), scale, yp + yo, dyp + yo, C, l + (b * n_head + hd) * T,
                       row0 + hd * HS, dk, dv, p.data(), ds.data(), drow.data(), kt.data(), vt.data(), j == 0);
        }
      }
    });
    return {dqkv, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

struct GeluTanh : public torch::autograd::Function<GeluTanh> {
  static constexpr int64_t kGrain = 16384;
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x) {
    at::Tensor y = at::empty_like(x);
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    intraop::parallelFor(0, x.numel(), kGrain, [&](int64_t b, int64_t e) { kernels::geluTanh(xp + b, yp + b, e - b); });
    ctx->save_for_backward({x});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    at::Tensor dy = grad_out[0].contiguous();
    at::Tensor dx = at::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* dyp = dy.data_ptr<float>();
    float* dxp = dx.data_ptr<float>();
    intraop::parallelFor(0, x.numel(), kGrain,
                     [&](int64_t b, int64_t e) { kernels::geluTanhBackward(xp + b, dyp + b, dxp + b, e - b); });
    return {dx};
  }
};

}  // namespace

bool usable(const at::Tensor& t) {
  static const bool disabled = [] {
    const char* v = std::getenv("TRAINSCOPE_DISABLE_CPU_KERNELS");
    return v && std::string(v) == "1";
  }();
  return !disabled && t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

bool attentionUsable(const at::Tensor& qkv) {
  return usable(qkv) && (kernels::handGemmsAvailable() || blas::available());
}

at::Tensor causalAttention(const at::Tensor& qkv, int64_t n_head, int64_t n_kv_head, const ScoreBias& bias) {
  return CausalAttention::apply(qkv, n_head, n_kv_head > 0 ? n_kv_head : n_head, bias);
}

at::Tensor causalAttention(const at::Tensor& qkv, int64_t n_head, int64_t n_kv_head, int64_t window) {
  return causalAttention(qkv, n_head, n_kv_head, ScoreBias{window, {}});
}

at::Tensor geluTanh(const at::Tensor& x) { return GeluTanh::apply(x); }

double softmaxCrossEntropyInPlace(const at::Tensor& logits, const at::Tensor& targets) {
  const int64_t R = logits.size(0), V = logits.size(1);
  at::Tensor t = targets.to(at::kLong).contiguous();
  const int64_t* tp = t.data_ptr<int64_t>();
  float* base = logits.data_ptr<float>();
  std::vector<double> row_loss(static_cast<size_t>(R));
  intraop::parallelFor(0, R, 8, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = base + r * V;
      const int64_t target = tp[r];
      const float target_logit = row[target];
      const float m = kernels::maxOf(row, V);
      const float sum = kernels::expShiftSum(row, row, V, m);              // row = exp(x - m)
      row_loss[size_t(r)] = double(m) + std::log(double(sum)) - double(target_logit);
      kernels::scale(row, V, 1.0f / sum);                                  // softmax
      row[target] -= 1.0f;                                                 // - onehot
    }
  });
  double loss = 0;
  for (double l : row_loss) loss += l;
  return loss;
}

}  // namespace trainscope::runtime::cpu_ops
