// op_source.h — LibTorch operator events into the tracer, through RecordFunction callbacks
// (internal to the runtime; a tracer::TraceSource at the `ops` level). ATen ops and autograd
// backward nodes: name, thread, duration, autograd sequence number; input shapes only when asked
// (they cost a string per op). Shapes are taken in the start callback, the only place where
// RecordFunction's inputs are valid.
#pragma once

#include <cstdint>

#include "trainscope/tracer/source.h"

namespace trainscope::runtime {

class OpSource final : public tracer::TraceSource {
 public:
  explicit OpSource(bool shapes) : shapes_(shapes) {}
  ~OpSource() override { stop(); }

  const char* name() const override { return "libtorch-ops"; }
  tracer::TraceLevel minLevel() const override { return tracer::TraceLevel::Ops; }
  bool start(tracer::Tracer& t, std::string* why) override;  // one op source at a time per process
  void stop() override;

 private:
  bool shapes_;
  uint64_t handle_ = 0;
  bool running_ = false;
};

}  // namespace trainscope::runtime
