// trainscope/runtime/device.h — choosing where a run executes.
#pragma once

#include <optional>
#include <string>

#include "trainscope/runconfig/config.h"

namespace trainscope::runtime {

struct DeviceChoice {
  std::string device;            // "cpu" or "cuda:0"
  std::string name;              // human name ("CPU (2 threads)", "NVIDIA H200")
  std::string notice;            // one line to print when auto fell back to the CPU, else empty
  std::optional<double> peak_tflops;  // known dense peak for the run's precision, if any
  int cuda_devices = 0;               // the GPUs this process sees (0 on the CPU)
};

// auto: the first GPU if LibTorch sees one, else the CPU with a one-line notice.
// cuda: a GPU or UserError("--device"). cpu: the CPU.
DeviceChoice chooseDevice(DeviceRequest request, Precision precision);

// The name of CUDA device `index` (CUDA builds; "cuda:N" elsewhere).
std::string cudaDeviceName(int index);

// Makes CUDA device `index` this process's current device, as Megatron-LM does for its local rank
// (megatron/training/initialize.py: torch.cuda.set_device(args.local_rank)): streams, handles and
// NCCL's device guess then follow the rank's GPU instead of GPU 0. A no-op without the CUDA path.
void setCurrentCudaDevice(int index);

}  // namespace trainscope::runtime
