// comm_nccl.cpp — NCCL process groups (CUDA builds). The communicator id travels through the
// same c10d TCPStore as Gloo's rendezvous; ProcessGroupNCCL does that exchange itself.
#include "comm/comm_impl.h"

#include "trainscope/common/error.h"

#ifdef TRAINSCOPE_HAVE_NCCL_PG
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace trainscope::runtime {

c10::intrusive_ptr<c10d::Backend> makeNcclBackend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                  std::chrono::milliseconds timeout) {
#ifdef TRAINSCOPE_HAVE_NCCL_PG
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  TRAINSCOPE_THROW("this build has no NCCL process groups (configure with the CUDA path on)");
#endif
}

}  // namespace trainscope::runtime
