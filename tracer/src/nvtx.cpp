// nvtx.cpp — the one wrapper around NVTX. NVTX3 is header-only and costs a few ns per call when no
// tool is attached; in builds without the CUDA path these are no-ops.
#include "trainscope/tracer/range.h"

#ifdef TRAINSCOPE_HAVE_NVTX
#include <nvtx3/nvToolsExt.h>
#endif

namespace trainscope::tracer {

#ifdef TRAINSCOPE_HAVE_NVTX
void nvtxPush(const char* name) { nvtxRangePushA(name); }
void nvtxPop() { nvtxRangePop(); }
#else
void nvtxPush(const char*) {}
void nvtxPop() {}
#endif

}  // namespace trainscope::tracer
