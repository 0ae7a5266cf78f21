// util.h — helpers shared by the runtime tests (LibTorch tensors, a tiny config).
#pragma once

#include <ATen/ATen.h>

#include <string>
#include <vector>

#include "trainscope/runconfig/config.h"
#include "trainscope/runtime/device.h"
#include "trainscope/runtime/trainer.h"
#include "../common/cli.h"

namespace trainscope::testing {

// The tiny workload on the CPU, fp32, constant learning rate, no clipping, one core lane:
// deterministic and fast. (With several lanes the measured activation peak depends on how the
// lanes' forward passes overlap in time; the CoreLanes tests set lanes themselves.)
inline runtime::TrainConfig tinyConfig(int64_t mbs = 4, int64_t ga = 1, int64_t seq = 32) {
  runtime::TrainConfig c;
  c.workload = "tiny";
  c.seq = seq;
  c.mbs = mbs;
  c.ga = ga;
  c.steps = 20;
  c.device = runtime::DeviceRequest::CPU;
  c.min_lr_ratio = 1.0;
  c.clip = 0.0;
  c.lr = 1e-3;
  c.cpu_lanes = 1;
  runtime::resolve(c);
  return c;
}

inline runtime::DeviceChoice cpu() {
  return runtime::chooseDevice(runtime::DeviceRequest::CPU, runtime::Precision::FP32);
}

// ||a - b|| / max(||b||, tiny): the norm-wise relative error used by every numerical test.
inline double relErr(const at::Tensor& a, const at::Tensor& b) {
  at::Tensor x = a.detach().to(at::kDouble), y = b.detach().to(at::kDouble);
  return (x - y).norm().item<double>() / std::max(y.norm().item<double>(), 1e-30);
}

inline double maxRelErr(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, relErr(a[i], b[i]));
  return m;
}

inline std::vector<at::Tensor> snapshot(const std::vector<at::Tensor>& ts) {
  std::vector<at::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone());
  return out;
}


}  // namespace trainscope::testing
