// sources.h — the runtime's own trace sources (internal; tracer::TraceSource, `ranges` level):
//   MemorySource    — allocated bytes as a counter, sampled by the trainer at the points where the
//                     step's memory changes most (after each forward, backward and update);
//   CollectiveFeed  — every collective of this rank's process groups (op, group, bytes, times),
//                     drained from the CollectiveLog after each step and when the source stops.
// The LibTorch op source is op_source.h; CUPTI is tracer/cupti_source.h.
#pragma once

#include <atomic>
#include <cstdint>

#include "trainscope/runtime/comm.h"
#include "trainscope/tracer/trace.h"

namespace trainscope::runtime {

class MemorySource final : public tracer::TraceSource {
 public:
  const char* name() const override { return "memory"; }
  tracer::TraceLevel minLevel() const override { return tracer::TraceLevel::Ranges; }
  bool start(tracer::Tracer& t, std::string* why) override;
  void stop() override;
  // Records `bytes` on the running memory source of this process, if any (cheap when none runs).
  static void sample(int64_t bytes);

 private:
  tracer::Tracer* tracer_ = nullptr;
  rundb::StringId name_ = 0;
};

class CollectiveFeed final : public tracer::TraceSource {
 public:
  explicit CollectiveFeed(CollectiveLog& log) : log_(log) {}
  const char* name() const override { return "collectives"; }
  tracer::TraceLevel minLevel() const override { return tracer::TraceLevel::Ranges; }
  bool start(tracer::Tracer& t, std::string*) override {
    tracer_ = &t;
    return true;
  }
  void stop() override {
    drain();
    tracer_ = nullptr;
  }
  void drain() {
    if (!tracer_) return;
    for (auto& c : log_.take()) tracer_->record(std::move(c));
  }

 private:
  CollectiveLog& log_;
  tracer::Tracer* tracer_ = nullptr;
};

}  // namespace trainscope::runtime
