// trainer.cpp — the training step (see trainer.h for the recipe).
#include "trainscope/runtime/trainer.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <chrono>
#include <cmath>
#include <limits>

#include "trainscope/runtime/data.h"
#include "trainscope/runtime/gpt.h"
#include "trainscope/runtime/memory.h"
#include "trainscope/runtime/optim.h"
#include "trainscope/workloads/flops.h"

namespace trainscope::runtime {
namespace {

int64_t nowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

int64_t bytesOf(const std::vector<at::Tensor>& ts) {
  int64_t b = 0;
  for (const auto& t : ts) b += t.nbytes();
  return b;
}

workloads::Recompute recomputeOf(Checkpointing c) {
  return c == Checkpointing::Full        ? workloads::Recompute::Full
         : c == Checkpointing::Selective ? workloads::Recompute::Selective
                                         : workloads::Recompute::None;
}

// fp16 dynamic loss scaling (as torch.cuda.amp.GradScaler): halve on overflow and skip the step;
// double after `interval` clean steps.
struct LossScaler {
  double scale = 1.0;
  int64_t interval = 2000;
  int64_t clean_steps = 0;
  void update(bool overflow) {
    if (overflow) {
      scale *= 0.5;
      clean_steps = 0;
    } else if (++clean_steps >= interval) {
      scale *= 2.0;
      clean_steps = 0;
    }
  }
};

}  // namespace

struct Trainer::Impl {
  TrainConfig cfg;
  DeviceChoice dev;
  at::Device device{at::kCPU};
  at::ScalarType compute_dtype = at::kFloat;
  std::unique_ptr<TokenSource> data;
  std::unique_ptr<MemoryMeter> memory;

  std::vector<at::Tensor> master;      // fp32 weights (the optimizer's)
  std::vector<at::Tensor> compute;     // weights forward/backward use: `master` in fp32, else copies
  std::vector<at::Tensor> main_grads;  // fp32 gradients the optimizer reads
  GptWeights compute_weights;
  std::unique_ptr<Optimizer> optimizer;
  LossScaler scaler;
  int64_t step = 0;
  bool inject_overflow = false;

  bool lowPrecision() const { return compute_dtype != at::kFloat; }

  // Forward + backward over the global batch of step `k`; gradients land in main_grads (still
  // multiplied by the loss scale). Returns the mean loss and the activation peak above baseline.
  std::pair<double, int64_t> forwardBackward(int64_t k) {
    for (auto& g : main_grads) g.zero_();
    const int64_t baseline = memory->currentBytes();
    memory->resetPeak();
    at::Tensor loss_sum = at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(device));
    const double scale = scaler.scale / double(cfg.ga_steps);
    for (int64_t m = 0; m < cfg.ga_steps; ++m) {
      Batch b = data->samples(k * cfg.global_batch + m * cfg.mbs, cfg.mbs, device);  // (mbs, T)
      at::Tensor loss = gptLoss(compute_weights, cfg.model.n_head, b.inputs, b.targets, cfg.ckpt);  // scalar
      (loss * scale).backward();
      loss_sum += loss.detach();
      if (lowPrecision()) {
        // Low-precision grads → fp32 main grads, then clear them for the next micro-batch.
        for (size_t i = 0; i < compute.size(); ++i) {
          main_grads[i].add_(compute[i].grad());
          compute[i].mutable_grad().zero_();
        }
      }
    }
    if (!lowPrecision())  // autograd accumulates in place, but re-read in case it swapped a buffer
      for (size_t i = 0; i < master.size(); ++i) main_grads[i] = master[i].grad();
    const int64_t activation = memory->peakBytes() - baseline;
    return {loss_sum.item<double>() / double(cfg.ga_steps), activation};
  }

  // Unscales main_grads in place and returns their global L2 norm (inf/nan on overflow).
  double unscaleAndNorm() {
    c10::NoGradGuard no_grad;
    if (scaler.scale != 1.0) at::_foreach_mul_(main_grads, 1.0 / scaler.scale);
    if (inject_overflow) {
      main_grads[0].view({-1})[0].fill_(std::numeric_limits<float>::infinity());
      inject_overflow = false;
    }
    std::vector<at::Tensor> norms = at::_foreach_norm(main_grads, 2);
    return at::stack(norms).norm().item<double>();
  }

  void refreshCopies() {
    if (!lowPrecision()) return;
    c10::NoGradGuard no_grad;
    for (size_t i = 0; i < master.size(); ++i) compute[i].copy_(master[i]);
  }
};

Trainer::Trainer(const TrainConfig& cfg, const DeviceChoice& dev) : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.cfg = cfg;
  s.dev = dev;
  s.device = at::Device(dev.device);
  s.memory = std::make_unique<MemoryMeter>(dev.device);
  s.compute_dtype = cfg.precision == Precision::BF16 ? at::kBFloat16
                    : cfg.precision == Precision::FP16 ? at::kHalf
                                                      : at::kFloat;
  s.data = std::make_unique<TokenSource>(cfg.data, cfg.model.vocab_size, cfg.seq, cfg.seed);

  GptWeights w = initGpt(cfg.model, cfg.seed, s.device);
  s.master = w.flat();
  if (s.lowPrecision()) {
    for (auto& p : s.master) {
      p.requires_grad_(false);
      s.compute.push_back(p.detach().to(s.compute_dtype).requires_grad_(true));
      s.main_grads.push_back(at::zeros_like(p));
    }
    // Allocate the low-precision grads up front so every micro-batch accumulates in place.
    for (auto& c : s.compute) c.mutable_grad() = at::zeros_like(c);
  } else {
    s.compute = s.master;
    for (auto& p : s.master) {
      p.mutable_grad() = at::zeros_like(p);  // autograd accumulates into it in place
      s.main_grads.push_back(p.grad());
    }
  }
  s.compute_weights = GptWeights::fromFlat(s.compute, cfg.model.n_layer);
  s.optimizer = makeOptimizer(cfg, s.master, GptWeights::decayMask(cfg.model.n_layer));
  if (cfg.precision == Precision::FP16) {
    s.scaler.scale = cfg.fp16_init_scale;
    s.scaler.interval = cfg.fp16_growth_interval;
  }
}

Trainer::~Trainer() = default;

tracer::StepRecord Trainer::step() {
  Impl& s = *impl_;
  const TrainConfig& c = s.cfg;
  tracer::StepRecord r;
  r.step = s.step;
  r.start_ns = nowNs();
  const auto t0 = std::chrono::steady_clock::now();
  r.lr = learningRate(s.step, c.steps, c.warmup, c.lr, c.min_lr_ratio);
  r.loss_scale = s.scaler.scale;

  auto [loss, activation] = s.forwardBackward(s.step);             // grads × loss scale
  const double norm = s.unscaleAndNorm();                          // grads now true gradients
  r.loss = loss;
  r.grad_norm = norm;
  r.activation_bytes = activation;
  const bool overflow = !std::isfinite(norm);
  if (c.precision == Precision::FP16) s.scaler.update(overflow);
  if (overflow) {
    // fp16: the loss scale was too high, expected now and then. fp32/bf16: a real divergence; the
    // step is skipped all the same so no inf/nan reaches the weights, and the caller reports it.
    r.skipped = true;
  } else {
    if (c.clip > 0 && norm > c.clip) {
      c10::NoGradGuard no_grad;
      at::_foreach_mul_(s.main_grads, c.clip / (norm + 1e-6));
    }
    s.optimizer->step(s.main_grads, r.lr);
    s.refreshCopies();
  }
  if (s.device.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(s.device.index());
  r.step_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();

  r.tokens = c.tokensPerStep();
  const double secs = double(r.step_time_ns) * 1e-9;
  r.tokens_per_s = double(r.tokens) / secs;
  auto f = workloads::stepFlops(c.global_batch, c.seq, c.model.n_layer, c.model.n_embd, c.model.vocab_size,
                                recomputeOf(c.ckpt));
  r.model_flops = f.model;
  r.hw_flops = f.hardware;
  std::optional<double> peak = c.peak_tflops ? c.peak_tflops : s.dev.peak_tflops;
  if (peak) {
    r.mfu = f.model / secs / (*peak * 1e12);
    r.hfu = f.hardware / secs / (*peak * 1e12);
  }
  r.peak_bytes = s.memory->peakBytes();
  r.param_bytes = bytesOf(s.master) + (s.lowPrecision() ? bytesOf(s.compute) : 0);
  r.grad_bytes = bytesOf(s.main_grads);
  if (s.lowPrecision())
    for (const auto& t : s.compute) r.grad_bytes += t.grad().nbytes();
  r.optim_bytes = s.optimizer->stateBytes();
  ++s.step;
  return r;
}

double Trainer::computeGradients(int64_t step) {
  Impl& s = *impl_;
  double loss = s.forwardBackward(step).first;
  s.unscaleAndNorm();
  return loss;
}

std::vector<at::Tensor> Trainer::masterParams() const { return impl_->master; }
std::vector<at::Tensor> Trainer::mainGrads() const { return impl_->main_grads; }
int64_t Trainer::parameterCount() const {
  int64_t n = 0;
  for (const auto& p : impl_->master) n += p.numel();
  return n;
}
int64_t Trainer::stepsDone() const { return impl_->step; }
double Trainer::lossScale() const { return impl_->scaler.scale; }
const TrainConfig& Trainer::config() const { return impl_->cfg; }
const DeviceChoice& Trainer::device() const { return impl_->dev; }
void Trainer::injectOverflowOnce() { impl_->inject_overflow = true; }

}  // namespace trainscope::runtime
