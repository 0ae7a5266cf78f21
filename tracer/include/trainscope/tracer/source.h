// trainscope/tracer/source.h — one interface for everything that feeds the tracer, as Kineto's
// activity profilers share one: a name, the lowest level it records at, start and stop. The Tracer
// starts the sources its level asks for and stops them (flushing what they hold) before it closes.
//
// Sources: the LibTorch op source (runtime/src/train/op_source.cpp, `ops`), CUPTI (cupti_source.h,
// `all`, GPU only), the memory counter and the collective feed (runtime/src/train/sources.h, `ranges`).
#pragma once

#include <string>

namespace trainscope::tracer {

enum class TraceLevel { Off = 0, Steps = 1, Ranges = 2, Ops = 3, All = 4 };
TraceLevel parseTraceLevel(const std::string& s);  // throws UserError("--trace-level", ...)
const char* toString(TraceLevel l);

class Tracer;

class TraceSource {
 public:
  virtual ~TraceSource() = default;
  virtual const char* name() const = 0;
  virtual TraceLevel minLevel() const = 0;
  // Starts recording into `t`; false with the reason when this source cannot run here (no GPU):
  // the tracer then carries on without it.
  virtual bool start(Tracer& t, std::string* why) = 0;
  // Stops and hands everything still buffered to the tracer. Idempotent.
  virtual void stop() = 0;
};

}  // namespace trainscope::tracer
