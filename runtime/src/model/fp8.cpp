// fp8.cpp — see fp8.h. The GEMMs are at::_scaled_mm, which LibTorch 2.11 runs on the CPU (any
// layout, E4M3 × E4M3 and E5M2 × E4M3) and on CUDA (sm89+: mat1 row-major, mat2 column-major,
// dimensions multiples of 16; runconfig's checkFp8 refuses workloads that break the last rule).
// Operands are laid out for CUDA's rule everywhere, so the CPU runs exactly the GPU's recipe.
#include "model/fp8.h"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

#include <algorithm>
#include <cmath>

#include "trainscope/runtime/comm.h"
#include "trainscope/runtime/gpt.h"

namespace trainscope::runtime::fp8 {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

thread_local Recipe* g_active = nullptr;

at::ScalarType formatOf(int role) { return role == GradOutput ? at::kFloat8_e5m2 : at::kFloat8_e4m3fn; }
double maxOf(int role) { return role == GradOutput ? kE5M2Max : kE4M3Max; }

// (M, K) → the same values laid out column-major (what _scaled_mm's mat2 takes on CUDA).
at::Tensor columnMajor(const at::Tensor& t) { return t.t().contiguous().t(); }

at::Tensor scalar(double v, const at::Tensor& like) {
  return at::full({}, v, at::TensorOptions().dtype(at::kFloat).device(like.device()));
}

Meta* metaOf(AutogradContext* ctx) { return reinterpret_cast<Meta*>(ctx->saved_data["meta"].toInt()); }

// y = x Wᵀ (+ b) with E4M3 operands; backward with the E5M2 output gradient (fp8.h).
struct Fp8Linear : public torch::autograd::Function<Fp8Linear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& w,
                            const std::optional<at::Tensor>& b, int64_t meta_handle) {
    Meta* meta = reinterpret_cast<Meta*>(meta_handle);
    auto [xq, sx] = quantize(x, meta, Input);   // (M, K) E4M3
    const CastWeight cw = castWeight(w, meta);  // (N, K) E4M3, once per step
    const at::Tensor& wq = cw.q;
    const double sw = cw.scale;
    at::Tensor y = at::_scaled_mm(xq, wq.t(), scalar(1.0 / sx, x), scalar(1.0 / sw, x), std::nullopt, std::nullopt,
                                  x.scalar_type());  // (M, N)
    if (b) y.add_(*b);
    // The FP8 copies are what backward needs (half the bytes of the bf16 input, as Transformer
    // Engine saves them).
    ctx->save_for_backward({xq, cw.t});  // the cached column-major copy: no bytes of its own
    ctx->saved_data["meta"] = meta_handle;
    ctx->saved_data["sx"] = sx;
    ctx->saved_data["sw"] = sw;
    ctx->saved_data["has_bias"] = b.has_value();
    ctx->saved_data["dtype"] = int64_t(x.scalar_type());
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const at::Tensor &xq = saved[0], &wt = saved[1];
    const double sx = ctx->saved_data["sx"].toDouble(), sw = ctx->saved_data["sw"].toDouble();
    const auto dtype = at::ScalarType(ctx->saved_data["dtype"].toInt());
    at::Tensor dy = grad_out[0].contiguous();                  // (M, N)
    auto [gq, sg] = quantize(dy, metaOf(ctx), GradOutput);     // (M, N) E5M2
    // dX = dY W: (M, N) · (N, K), W column-major (Transformer Engine's transpose of the FP8 weight).
    at::Tensor dx = at::_scaled_mm(gq, wt, scalar(1.0 / sg, dy), scalar(1.0 / sw, dy), std::nullopt,
                                   std::nullopt, dtype);
    // dW = dYᵀ X: (N, M) · (M, K), both transposed copies of the FP8 tensors.
    at::Tensor dw = at::_scaled_mm(gq.t().contiguous(), columnMajor(xq), scalar(1.0 / sg, dy), scalar(1.0 / sx, dy),
                                   std::nullopt, std::nullopt, dtype);
    at::Tensor db;
    if (ctx->saved_data["has_bias"].toBool()) db = dy.sum(0, false, at::kFloat).to(dtype);
    return {dx, dw, db, at::Tensor()};
  }
};

}  // namespace

const char* roleName(int role) {
  return role == Input ? "input" : role == Weight ? "weight" : "grad_output";
}

void Recipe::add(const at::Tensor& weight, const std::string& name) {
  auto m = std::make_unique<Meta>();
  m->name = name;
  metas_.push_back(m.get());
  by_impl_[weight.unsafeGetTensorImpl()] = std::move(m);
}

Meta* Recipe::find(const at::Tensor& weight) {
  auto it = by_impl_.find(weight.unsafeGetTensorImpl());
  return it == by_impl_.end() ? nullptr : it->second.get();
}

std::vector<rundb::Fp8Scale> Recipe::endStep(const std::vector<Group*>& groups, int64_t rank, int64_t step) {
  std::vector<rundb::Fp8Scale> rows;
  for (Meta* m : metas_) m->weight_q = m->weight_t = at::Tensor(), m->weight_scale = 0;  // the weights change next
  if (metas_.empty()) return rows;
  // Every amax of the step in one tensor, reduced once per group (-1: not seen this step).
  const int64_t n = int64_t(metas_.size()) * 3;
  at::Tensor device_like;
  for (Meta* m : metas_)
    for (const at::Tensor& a : m->amax)
      if (a.defined() && !device_like.defined()) device_like = a;
  if (!device_like.defined()) return rows;  // no FP8 GEMM ran (e.g. a stage without blocks)
  std::vector<at::Tensor> parts;
  parts.reserve(size_t(n));
  for (Meta* m : metas_)
    for (const at::Tensor& a : m->amax) parts.push_back(a.defined() ? a.reshape({1}) : scalar(-1.0, device_like).reshape({1}));
  at::Tensor all = at::cat(parts);
  for (Group* g : groups)
    if (g && g->size() > 1) g->allReduce(all, Reduce::Max);
  at::Tensor host = all.to(at::kCPU, at::kDouble).contiguous();
  const double* v = host.data_ptr<double>();
  for (size_t i = 0; i < metas_.size(); ++i) {
    Meta& m = *metas_[i];
    for (int r = 0; r < 3; ++r) {
      const double amax = v[i * 3 + size_t(r)];
      m.amax[r] = at::Tensor();
      if (amax < 0) continue;  // not used this step
      // Current scaling (no history yet): each call used its own amax; the row records the smallest of
      // those scales, the one of the step's amax, so that amax × scale never reads as saturated.
      const double used = m.current[r] && amax > 0 && std::isfinite(amax) ? maxOf(r) / amax : m.used_scale[r];
      m.current[r] = false;
      rows.push_back({rank, step, m.name, roleName(r), amax, used});
      if (!std::isfinite(amax)) continue;  // a non-finite step (skipped) leaves the history alone
      auto& h = m.history[r];
      h.push_back(amax);
      if (int(h.size()) > kHistory) h.erase(h.begin());
      const double top = *std::max_element(h.begin(), h.end());
      if (top > 0) m.scale[r] = maxOf(r) / top;  // all zero so far: keep the previous scale
    }
  }
  return rows;
}

int64_t Recipe::cachedWeightBytes() const {
  int64_t n = 0;
  for (const Meta* m : metas_)
    for (const at::Tensor* t : {&m->weight_q, &m->weight_t})
      if (t->defined()) n += t->numel() * int64_t(t->element_size());
  return n;
}

void registerBlockLinears(Recipe& r, const std::vector<at::Tensor>& leaves, const std::vector<ParamInfo>& info) {
  auto endsWith = [](const std::string& s, const std::string& tail) {
    return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
  };
  for (size_t i = 0; i < info.size() && i < leaves.size(); ++i)
    for (const char* tail : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
      if (!info[i].expert && endsWith(info[i].name, tail)) r.add(leaves[i], info[i].name);
}

std::vector<Group*> amaxGroups(Comm& comm) { return {&comm.dp(), &comm.tp(), &comm.cp()}; }

Recipe* active() { return g_active; }
Scope::Scope(Recipe* r) : prev_(g_active) { g_active = r; }
Scope::~Scope() { g_active = prev_; }

namespace {
struct Aliases {
  const std::vector<at::Tensor>* copies;
  const std::vector<at::Tensor>* originals;
};
thread_local const Aliases* g_aliases = nullptr;
}  // namespace

AliasScope::AliasScope(const std::vector<at::Tensor>& copies, const std::vector<at::Tensor>& originals)
    : prev_(g_aliases) {
  g_aliases = new Aliases{&copies, &originals};
}
AliasScope::~AliasScope() {
  delete g_aliases;
  g_aliases = static_cast<const Aliases*>(prev_);
}

Meta* metaFor(const at::Tensor& weight) {
  Recipe* r = g_active;
  if (!r || r->empty()) return nullptr;
  if (Meta* m = r->find(weight)) return m;
  if (const Aliases* a = g_aliases)  // a recomputation's detached copy
    for (size_t i = 0; i < a->copies->size() && i < a->originals->size(); ++i)
      if ((*a->copies)[i].unsafeGetTensorImpl() == weight.unsafeGetTensorImpl()) return r->find((*a->originals)[i]);
  return nullptr;
}

CastWeight castWeight(const at::Tensor& w, Meta* meta) {
  if (!meta->weight_q.defined() || meta->weight_q.device() != w.device()) {
    auto [q, s] = quantize(w, meta, Weight);
    meta->weight_q = q;
    meta->weight_t = columnMajor(q);  // Transformer Engine's transposed FP8 weight, for dgrad
    meta->weight_scale = s;
  }
  return {meta->weight_q, meta->weight_t, meta->weight_scale};
}

std::pair<at::Tensor, double> quantize(const at::Tensor& t, Meta* meta, int role) {
  // max |t| = max(max t, −min t), with no |t| copy of the whole tensor; NaN propagates alike.
  auto [lo, hi] = at::aminmax(t);
  at::Tensor amax = at::maximum(hi, lo.neg()).to(at::kFloat);  // 0-d
  at::Tensor& slot = meta->amax[role];
  slot = slot.defined() ? at::maximum(slot, amax) : amax;
  double s = meta->scale[role];
  if (s <= 0) {  // no history yet: scale by this tensor's own amax
    const double a = amax.item<double>();
    s = a > 0 && std::isfinite(a) ? maxOf(role) / a : 1.0;
    meta->current[role] = true;
  }
  meta->used_scale[role] = s;
  const double top = maxOf(role);
  // The saturating cast, t·s in fp32 rounded to the format, a block of rows at a time into the FP8
  // tensor: its fp32 intermediate is one block (kCastBlock elements at most), not a 4-byte copy of a
  // whole activation or gradient (Transformer Engine's fused cast has none). copy_ is the conversion
  // .to() runs, so the values are those of the one-shot cast.
  const at::Tensor src = t.contiguous();
  at::Tensor q = at::empty(src.sizes(), src.options().dtype(formatOf(role)));
  const int64_t rows = src.dim() == 0 ? 1 : src.size(0), width = rows > 0 ? src.numel() / rows : 0;
  const int64_t block = std::max<int64_t>(1, kCastBlock / std::max<int64_t>(1, width));
  for (int64_t r = 0; r < rows; r += block) {
    const int64_t n = std::min(block, rows - r);
    const at::Tensor part = src.dim() == 0 ? src : src.narrow(0, r, n);
    at::Tensor f = part.scalar_type() == at::kFloat ? part.mul(s) : part.to(at::kFloat).mul_(s);
    (src.dim() == 0 ? q : q.narrow(0, r, n)).copy_(f.clamp_(-top, top));
  }
  return {q, s};
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Meta* meta) {
  auto out_shape = x.sizes().vec();
  out_shape.back() = w.size(0);
  at::Tensor x2 = x.reshape({-1, x.size(-1)}).contiguous();  // (M, K)
  return Fp8Linear::apply(x2, w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt,
                          reinterpret_cast<int64_t>(meta))
      .view(out_shape);
}

}  // namespace trainscope::runtime::fp8
