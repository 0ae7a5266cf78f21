// run_command.cpp — `trainscope run` on one process.
#include "trainscope/runtime/run_command.h"

#include <ATen/Parallel.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <vector>
#include <iomanip>
#include <memory>
#include <ostream>
#include <sstream>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "trainscope/runtime/device.h"
#include "trainscope/runtime/trainer.h"
#include "trainscope/tracer/run_store.h"

namespace trainscope::runtime {
namespace {

std::string mib(int64_t bytes) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(1) << double(bytes) / (1024.0 * 1024.0) << " MiB";
  return s.str();
}

std::string hostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

}  // namespace

int runCommand(TrainConfig cfg, std::ostream& out, std::ostream& err) {
  resolve(cfg);
  if (cfg.threads > 0) at::set_num_threads(cfg.threads);
  DeviceChoice dev = chooseDevice(cfg.device, cfg.precision);
  if (!dev.notice.empty()) err << dev.notice << "\n";

  Trainer trainer(cfg, dev);  // checks the data before anything is written
  std::unique_ptr<tracer::RunStore> store;
  if (!cfg.out.empty()) store = std::make_unique<tracer::RunStore>(cfg.out, cfg.overwrite);
  const int64_t params = trainer.parameterCount();
  if (params != cfg.model.parameterCount()) {
    err << "error: parameter count " << params << " differs from the analytic " << cfg.model.parameterCount() << "\n";
    return 1;
  }
  if (!cfg.quiet) {
    out << "trainscope run: " << cfg.model.name << " (L=" << cfg.model.n_layer << " NH=" << cfg.model.n_head
        << " C=" << cfg.model.n_embd << " V=" << cfg.model.vocab_size << "), " << params << " parameters\n"
        << "  batch: seq " << cfg.seq << ", mbs " << cfg.mbs << " x ga " << cfg.ga_steps << " = gbs "
        << cfg.global_batch << " (" << cfg.tokensPerStep() << " tokens/step); ckpt " << toString(cfg.ckpt)
        << ", " << toString(cfg.precision) << ", " << toString(cfg.optimizer) << "\n"
        << "  device: " << dev.name << "; data: " << cfg.data << "\n";
  }
  if (store) {
    store->setMeta("config", toJson(cfg));
    store->setMeta("host", hostName());
    store->setMeta("device", dev.device);
    store->setMeta("device_name", dev.name);
    store->setMeta("parameters", std::to_string(params));
    store->setMeta("libtorch_version", TORCH_VERSION);
    store->setMeta("world_size", "1");
  }

  tracer::StepRecord last;
  std::vector<double> step_times;  // seconds, steps after the first
  double time_sum = 0, tok_sum = 0;
  int64_t peak = 0, timed = 0, skipped = 0;
  double first_loss = 0;
  int64_t nonfinite_streak = 0;
  constexpr int64_t kMaxNonFiniteSteps = 5;  // fp32/bf16: this many in a row means divergence
  for (int64_t k = 0; k < cfg.steps; ++k) {
    tracer::StepRecord r = trainer.step();
    if (store) store->appendStep(r);
    if (k == 0) first_loss = r.loss;
    if (k > 0 || cfg.steps == 1) {  // step 0 pays one-time costs; keep it out of the averages
      time_sum += double(r.step_time_ns) * 1e-9;
      step_times.push_back(double(r.step_time_ns) * 1e-9);
      tok_sum += double(r.tokens);
      ++timed;
    }
    peak = std::max(peak, r.peak_bytes);
    skipped += r.skipped;
    if (!cfg.quiet) {
      char line[320];
      std::snprintf(line, sizeof(line), "step %4lld | loss %.6f | lr %.3e | norm %.4f | %7.1f ms | %9.0f tok/s%s%s",
                    static_cast<long long>(r.step), r.loss, r.lr, r.grad_norm, double(r.step_time_ns) * 1e-6,
                    r.tokens_per_s, r.mfu ? (" | MFU " + std::to_string(*r.mfu * 100).substr(0, 5) + "%").c_str() : "",
                    !r.skipped ? "" : cfg.precision == Precision::FP16 ? " | skipped (fp16 overflow)"
                                                                       : " | skipped (non-finite gradient)");
      out << line << "\n";
    }
    last = r;
    nonfinite_streak = (r.skipped && cfg.precision != Precision::FP16) ? nonfinite_streak + 1 : 0;
    if (nonfinite_streak >= kMaxNonFiniteSteps) {
      err << "error: training diverged: the gradient norm was not finite for " << kMaxNonFiniteSteps
          << " steps in a row (last step " << r.step << "); lower --lr or use --clip"
          << (store ? "; steps so far are in " + store->path() : "") << "\n";
      return 1;
    }
  }
  const double tokens_per_s = timed ? tok_sum / time_sum : 0.0;
  std::sort(step_times.begin(), step_times.end());
  const double median_step = step_times.empty() ? 0.0 : step_times[step_times.size() / 2];
  if (!cfg.quiet) {
    out << "done: " << cfg.steps << " steps, " << std::fixed << std::setprecision(0) << tokens_per_s
        << " tokens/s; peak memory " << mib(peak) << " (params " << mib(last.param_bytes) << ", grads "
        << mib(last.grad_bytes) << ", optimizer " << mib(last.optim_bytes) << ", activations "
        << mib(last.activation_bytes) << ")\n";
    if (store) out << "run database: " << store->path() << "\n";
  }
  if (cfg.json) {
    nlohmann::json j = {{"workload", cfg.model.name}, {"parameters", params}, {"device", dev.device},
                        {"steps", cfg.steps}, {"first_loss", first_loss}, {"final_loss", last.loss},
                        {"tokens_per_s", tokens_per_s}, {"step_time_s", timed ? time_sum / double(timed) : 0.0},
                        {"step_time_median_s", median_step},
                        {"tokens_per_s_median", median_step > 0 ? double(cfg.tokensPerStep()) / median_step : 0.0},
                        {"peak_bytes", peak}, {"param_bytes", last.param_bytes}, {"grad_bytes", last.grad_bytes},
                        {"optim_bytes", last.optim_bytes}, {"activation_bytes", last.activation_bytes},
                        {"model_flops_per_step", last.model_flops}, {"hw_flops_per_step", last.hw_flops},
                        {"model_flops_per_s", timed ? last.model_flops * double(timed) / time_sum : 0.0},
                        {"skipped_steps", skipped}, {"loss_scale", trainer.lossScale()},
                        {"config", nlohmann::json::parse(toJson(cfg))}};
    // MFU/HFU over the same steps as tokens_per_s (all but the first).
    std::optional<double> peak_tflops = cfg.peak_tflops ? cfg.peak_tflops : dev.peak_tflops;
    if (peak_tflops && timed) {
      j["mfu"] = last.model_flops * double(timed) / time_sum / (*peak_tflops * 1e12);
      j["hfu"] = last.hw_flops * double(timed) / time_sum / (*peak_tflops * 1e12);
      j["peak_tflops"] = *peak_tflops;
    }
    if (store) j["out"] = store->path();
    out << j.dump() << "\n";
  }
  return 0;
}

}  // namespace trainscope::runtime
