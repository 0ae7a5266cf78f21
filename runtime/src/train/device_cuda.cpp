// device_cuda.cpp — CUDA device properties (built only with the CUDA path).
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAFunctions.h>

#include "trainscope/runtime/device.h"

namespace trainscope::runtime {

std::string cudaDeviceName(int index) {
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(index);
  return p ? std::string(p->name) : "cuda:" + std::to_string(index);
}

void setCurrentCudaDevice(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

}  // namespace trainscope::runtime
