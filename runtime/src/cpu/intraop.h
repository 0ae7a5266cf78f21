// intraop.h — at::parallel_for for the runtime's own kernels.
//
// at::parallel_for is an inline template: with LibTorch's OpenMP backend it only forks in code
// compiled with -fopenmp, and otherwise silently runs everything on the calling thread. Only
// intraop.cpp is built that way (linking the libgomp.so.1 LibTorch itself loads), so the rest of
// the runtime keeps its precompiled header and calls this instead.
#pragma once

#include <cstdint>
#include <functional>

namespace trainscope::runtime::intraop {

// f(begin, end) over [begin, end) in chunks of at least `grain`, on LibTorch's intra-op threads
// (one thread inside the core lanes, or inside another parallel region).
void parallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f);

}  // namespace trainscope::runtime::intraop
