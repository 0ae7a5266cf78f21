// device.cpp — device selection and known peak FLOP/s.
#include "trainscope/runtime/device.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>

#include "trainscope/common/error.h"
#include "trainscope/runtime/launch.h"

namespace trainscope::runtime {
namespace {

int cudaDeviceCount(std::string* why) {
  try {
    if (!at::detail::getCUDAHooks().hasCUDA()) {
      *why = "no CUDA driver or device";
      return 0;
    }
    return at::detail::getCUDAHooks().deviceCount();
  } catch (const std::exception& e) {
    *why = withoutLibraryBacktrace(e.what());
    return 0;
  }
}

// Dense peak TFLOP/s from the vendors' data sheets (SXM parts). fp32 is the non-tensor-core rate,
// since LibTorch does not use TF32 for fp32 matmuls by default. fp8: the dense FP8 tensor-core rate
// (NVIDIA's H100/H200 and L40S data sheets, half their "with sparsity" figures); 0 on parts without
// FP8 tensor cores (Ampere and older).
struct PeakRow { const char* key; double bf16, fp16, fp32, fp8; };
const PeakRow* knownPart(const std::string& name) {
  // First match wins, so the more specific names come first. 0 = the part has no such unit.
  static const PeakRow rows[] = {{"H200", 989.4, 989.4, 66.9, 1978.9},      {"H100 PCIe", 756.0, 756.0, 51.2, 1513.0},
                                 {"H100 NVL", 835.0, 835.0, 60.0, 1670.5}, {"H100", 989.4, 989.4, 66.9, 1978.9},
                                 {"A100", 312.0, 312.0, 19.5, 0.0},        {"L40S", 362.1, 362.1, 91.6, 733.0},
                                 {"A10G", 70.0, 70.0, 31.2, 0.0},          {"A10", 125.0, 125.0, 31.2, 0.0},
                                 {"V100", 0.0, 125.0, 15.7, 0.0}};
  for (const PeakRow& r : rows)
    if (name.find(r.key) != std::string::npos) return &r;
  return nullptr;
}

std::optional<double> knownPeak(const std::string& name, Precision p) {
  const PeakRow* r = knownPart(name);
  if (!r) return std::nullopt;
  const double v = p == Precision::FP32 ? r->fp32 : p == Precision::BF16 ? r->bf16 : p == Precision::FP8 ? r->fp8 : r->fp16;
  return v > 0 ? std::optional<double>(v) : std::nullopt;
}

}  // namespace

DeviceChoice chooseDevice(DeviceRequest request, Precision precision) {
  DeviceChoice c;
  std::string why;
  if (request != DeviceRequest::CPU) {
    const int n = cudaDeviceCount(&why);
    if (n > 0) {
      c.device = "cuda:0";
      c.cuda_devices = n;
      c.name = cudaDeviceName(0);
      // fp8: MFU against the bf16 peak, as predict reports it (most FLOPs of a step are not FP8's).
      c.peak_tflops = knownPeak(c.name, precision == Precision::FP8 ? Precision::BF16 : precision);
      if (precision == Precision::FP8 && knownPart(c.name) && !knownPeak(c.name, Precision::FP8))
        throw UserError("--precision", "fp8 needs FP8 tensor cores (Hopper, Ada or newer); " + c.name + " has none",
                        "pass --precision bf16, or run on an H100/H200/L40S");
      return c;
    }
    if (request == DeviceRequest::CUDA)
      throw UserError("--device", "cuda was requested but " + why, "run on a machine with a GPU or pass --device cpu");
    c.notice = "notice: no usable GPU (" + why + "); running on the CPU";
  }
  c.device = "cpu";
  c.name = "CPU (" + std::to_string(at::get_num_threads()) + " threads)";
  return c;
}

#ifndef TRAINSCOPE_HAVE_CUDA_PROPS
std::string cudaDeviceName(int index) { return "cuda:" + std::to_string(index); }
void setCurrentCudaDevice(int) {}
#endif

}  // namespace trainscope::runtime
