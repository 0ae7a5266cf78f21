// intraop.cpp — see intraop.h. Built with -fopenmp.
#include "cpu/intraop.h"

#include <ATen/Parallel.h>

#ifndef _OPENMP
#error "intraop.cpp must be compiled with -fopenmp, or at::parallel_for runs on one thread"
#endif

namespace trainscope::runtime::intraop {

void parallelFor(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& f) {
  at::parallel_for(begin, end, grain, f);
}

}  // namespace trainscope::runtime::intraop
