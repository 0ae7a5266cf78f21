// op_source.cpp — see op_source.h.
#include "train/op_source.h"

#include <ATen/record_function.h>

#include <atomic>
#include <sstream>

#include "trainscope/tracer/trace.h"

namespace trainscope::runtime {
namespace {

// RecordFunction takes plain function pointers: the running source's tracer is reached through
// this one slot, set by start() and cleared by stop().
struct Active {
  tracer::Tracer* tracer = nullptr;
  bool shapes = false;
};
std::atomic<Active*> g_active{nullptr};

struct Start : at::ObserverContext {
  int64_t ns = 0;
  rundb::StringId shapes = rundb::kNoString;
};

std::string shapesOf(const at::RecordFunction& fn) {
  std::ostringstream s;
  s << "[";
  bool first = true;
  for (const c10::IValue& v : fn.inputs()) {
    if (!first) s << ", ";
    first = false;
    if (v.isTensor() && v.toTensor().defined()) {
      s << "[";
      const auto sizes = v.toTensor().sizes();
      for (size_t i = 0; i < sizes.size(); ++i) s << (i ? "," : "") << sizes[i];
      s << "]";
    } else {
      s << "_";
    }
  }
  s << "]";
  return s.str();
}

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction& fn) {
  Active* a = g_active.load(std::memory_order_acquire);
  if (!a) return nullptr;
  auto c = std::make_unique<Start>();
  // Inputs are valid here and only here (LibTorch asserts when they are read at the end).
  if (a->shapes) c->shapes = a->tracer->intern(shapesOf(fn));
  c->ns = tracer::nowNs();
  return c;
}

void onEnd(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  Active* a = g_active.load(std::memory_order_acquire);
  if (!a || !ctx) return;
  const auto* s = static_cast<Start*>(ctx);
  a->tracer->record(tracer::OpEvent{s->ns, tracer::nowNs(), a->tracer->intern(fn.name()), tracer::threadId(),
                                    fn.seqNr(), s->shapes});
}

}  // namespace

bool OpSource::start(tracer::Tracer& t, std::string* why) {
  Active* expected = nullptr;
  auto* a = new Active{&t, shapes_};
  if (!g_active.compare_exchange_strong(expected, a)) {
    delete a;
    *why = "another LibTorch op source is already recording in this process";
    return false;
  }
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&onStart, &onEnd)
                                      .needsInputs(shapes_)
                                      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
  running_ = true;
  return true;
}

void OpSource::stop() {
  if (!running_) return;
  running_ = false;
  at::removeCallback(handle_);
  // Callbacks still running on other threads finish with the old slot; it is retired, not freed,
  // so that none of them reads freed memory (one small object per traced run).
  g_active.store(nullptr, std::memory_order_release);
}

}  // namespace trainscope::runtime
