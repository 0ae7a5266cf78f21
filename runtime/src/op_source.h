// op_source.h — LibTorch operator events into the tracer, through RecordFunction callbacks
// (internal to the runtime). ATen ops and autograd backward nodes, name, thread and duration;
// input shapes only when asked (they cost a string per op).
#pragma once

#include <cstdint>

namespace trainscope::tracer {
class Tracer;
}

namespace trainscope::runtime {

class OpSource {
 public:
  OpSource(tracer::Tracer& t, bool shapes);
  ~OpSource();  // removes the callback
  OpSource(const OpSource&) = delete;
  OpSource& operator=(const OpSource&) = delete;

 private:
  uint64_t handle_ = 0;
};

}  // namespace trainscope::runtime
