// trainer.cpp — the training step (see trainer.h for the recipe): the Trainer's constructor and
// step(); Trainer::Impl, the per-step work, is in trainer_impl.h and the state and checkpoint
// accessors in trainer_state.cpp. Parallel pieces: data_parallel.h (one DataParallel: DDP buckets,
// ZeRO-1/2 in grad_sync.cpp, ZeRO-3 in zero3.cpp), tensor_parallel.cpp (TP/SP collectives),
// pipeline.cpp (GPipe, 1F1B).
#include "train/trainer_impl.h"

#include <ATen/detail/CUDAHooksInterface.h>

#include <chrono>

#include "train/test_slow_rank.h"
#include "trainscope/workloads/flops.h"

namespace trainscope::runtime {
namespace {

workloads::Recompute recomputeOf(Checkpointing c) {
  return c == Checkpointing::Full        ? workloads::Recompute::Full
         : c == Checkpointing::Selective ? workloads::Recompute::Selective
                                         : workloads::Recompute::None;
}

}  // namespace

Trainer::Trainer(const TrainConfig& cfg, const DeviceChoice& dev, Comm* comm, const GptWeights* initial)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.cfg = cfg;
  s.dev = dev;
  s.device = at::Device(dev.device);
  if (!comm) {
    s.own_comm = Comm::single();
    comm = s.own_comm.get();
  }
  s.comm = comm;
  s.layout = comm->layout();
  if (s.layout.tp != cfg.tp || s.layout.pp != cfg.pp || s.layout.cp != cfg.cp)
    TRAINSCOPE_THROW("process groups were built for tp=" + std::to_string(s.layout.tp) + " pp=" +
                     std::to_string(s.layout.pp) + " cp=" + std::to_string(s.layout.cp) +
                     " but the config asks for tp=" + std::to_string(cfg.tp) + " pp=" + std::to_string(cfg.pp) +
                     " cp=" + std::to_string(cfg.cp));
  s.memory = std::make_unique<MemoryMeter>(dev.device);
  s.compute_dtype = cfg.precision == Precision::BF16 || cfg.precision == Precision::FP8 ? at::kBFloat16
                    : cfg.precision == Precision::FP16 ? at::kHalf
                                                      : at::kFloat;
  s.data = std::make_unique<TokenSource>(cfg.data, cfg.model.vocab_size, cfg.seq, cfg.seed);

  // Model: the whole model is initialised identically everywhere, then each rank keeps its part.
  s.stage = StageSpec::of(cfg.model.n_layer, s.layout.pp, s.layout.pp_rank, int(cfg.virtual_stages)).withModel(cfg.model);
  s.tp.group = s.layout.tp > 1 ? &comm->tp() : nullptr;
  s.tp.sequence_parallel = cfg.sequence_parallel;
  s.tp.vocab = cfg.model.vocab_size;
  s.tp.vocab_local = paddedVocab(cfg.model.vocab_size, s.layout.tp) / s.layout.tp;
  s.tp.vocab_begin = s.layout.tp_rank * s.tp.vocab_local;
  if (s.layout.cp > 1) {
    s.cp.group = &comm->cp();
    s.cp.positions = contextPositions(cfg.seq, s.layout.cp, s.layout.cp_rank, s.device);  // (T/CP)
    s.tp.cp = &s.cp;
  }
  GptWeights full = initial ? GptWeights() : initGpt(cfg.model, cfg.seed, at::kCPU);
  GptWeights w = initial ? shardGpt(*initial, s.stage, s.layout.tp, s.layout.tp_rank, s.device, cfg.ep,
                                    s.layout.dp_rank % cfg.ep)
                 : (s.layout.world == 1 && s.device.is_cpu())
                     ? full
                     : shardGpt(full, s.stage, s.layout.tp, s.layout.tp_rank, s.device, cfg.ep,
                                s.layout.dp_rank % cfg.ep);
  full = GptWeights();
  s.master = w.flat();
  s.info = GptWeights::info(s.stage);
  s.countReplicas();
  s.experts = std::make_unique<Experts>(cfg, *comm, s.info);
  s.tp.moe = s.experts->context();
  if (s.lowPrecision()) {
    for (auto& p : s.master) {
      p.requires_grad_(false);
      s.compute.push_back(p.detach().to(s.compute_dtype).requires_grad_(true));
    }
  } else {
    s.compute = s.master;
  }
  std::vector<bool> managed(s.master.size(), true);
  for (size_t i = 0; i < managed.size(); ++i) managed[i] = !s.experts->ownsGradient(i);  // reduced by Experts
  if (s.layout.pp > 1 && s.stage.tied && (s.stage.first || s.stage.last)) {
    s.wte_index = 0;  // flat() puts wte first (an untied head is the last stage's own: no sync)
    managed[0] = false;
  }
  s.dp = makeDataParallel(cfg, *comm, s.stage, s.master, s.compute, managed, s.compute_dtype, s.device);
  s.compute_weights = GptWeights::fromFlat(s.dp->leaves(), s.stage);
  for (int k = 0; k < s.stage.chunks(); ++k) s.chunk_weights.push_back(s.compute_weights.chunk(s.stage, k));
  if (cfg.precision == Precision::FP8) fp8::registerBlockLinears(s.fp8, s.dp->leaves(), s.info);
  s.setUpLanes();
  s.schedule = s.lanes ? Impl::Schedule::Lanes : s.layout.pp > 1 ? Impl::Schedule::Pipeline : Impl::Schedule::Plain;

  std::vector<bool> decay;  // whole tensors (experts one by one), or ZeRO-2's 1-D slices
  std::vector<at::Tensor> params = s.optimizerTensors([](const DataParallel::Shard& sh) { return sh.master; }, &decay);
  s.optimizer = makeOptimizer(cfg, params, decay);
  if (cfg.precision == Precision::FP16) {
    s.scaler.scale = cfg.fp16_init_scale;
    s.scaler.interval = cfg.fp16_growth_interval;
  }
}

Trainer::~Trainer() = default;

rundb::Step Trainer::step() {
  Impl& s = *impl_;
  const TrainConfig& c = s.cfg;
  rundb::Step r;
  r.rank = s.layout.rank;
  r.step = s.step;
  r.start_ns = tracer::nowNs();  // the clock every trace table uses
  const auto t0 = std::chrono::steady_clock::now();
  testSlowRank(s.layout.rank);  // test-only (test_slow_rank.h): inside the step's time
  r.lr = learningRate(s.step, c.steps, c.warmup, c.lr, c.min_lr_ratio);
  r.loss_scale = s.scaler.scale;

  auto [loss, activation] = s.forwardBackward(s.step);             // grads × loss scale, reduced
  s.fp8_rows = s.fp8.endStep(fp8::amaxGroups(*s.comm), s.layout.rank, s.step);
  const double norm = s.unscaleAndNorm();                          // grads now true gradients
  r.loss = loss;
  r.grad_norm = norm;
  r.activation_bytes = activation;
  const bool overflow = !std::isfinite(norm);
  if (c.precision == Precision::FP16) s.scaler.update(overflow);
  // fp16: the loss scale was too high, expected now and then. fp32/bf16: a real divergence; the
  // step is skipped all the same so no inf/nan reaches the weights, and the caller reports it.
  if (overflow) r.skipped = true;
  else s.update(r.lr, norm);
  if (s.device.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(s.device.index());
  r.step_time_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();

  r.tokens = c.tokensPerStep();
  const double secs = double(r.step_time_ns) * 1e-9;
  r.tokens_per_s = double(r.tokens) / secs;
  auto f = workloads::stepFlops(c.model, c.global_batch, c.seq, recomputeOf(c.ckpt));  // MoE: active FLOPs
  // Per-rank share of the step's FLOPs, so that MFU compares one rank's work with one device.
  r.model_flops = f.model / double(s.layout.world);
  r.hw_flops = f.hardware / double(s.layout.world);
  std::optional<double> peak = c.peak_tflops ? c.peak_tflops : s.dev.peak_tflops;
  if (peak) {
    r.mfu = r.model_flops / secs / (*peak * 1e12);
    r.hfu = r.hw_flops / secs / (*peak * 1e12);
  }
  r.peak_bytes = s.memory->peakBytes();
  r.param_bytes = bytesOf(s.master) + (s.lowPrecision() ? bytesOf(s.compute) : 0);
  // incl. any 16-bit gradient still held
  r.grad_bytes = s.dp->gradBytes() + s.laneGradBytes();
  r.optim_bytes = s.optimizer->stateBytes();
  ++s.step;
  return r;
}

double Trainer::computeGradients(int64_t step) {
  Impl& s = *impl_;
  double loss = s.forwardBackward(step).first;
  s.fp8.endStep(fp8::amaxGroups(*s.comm), s.layout.rank, step);
  s.unscaleAndNorm();
  return loss;
}

}  // namespace trainscope::runtime
