// op_source.cpp — see op_source.h.
#include "op_source.h"

#include <ATen/record_function.h>

#include <sstream>

#include "trainscope/tracer/trace.h"

namespace trainscope::runtime {
namespace {

struct Start : at::ObserverContext {
  int64_t ns = 0;
};

tracer::Tracer* g_tracer = nullptr;
bool g_shapes = false;

std::string shapesOf(const at::RecordFunction& fn) {
  std::ostringstream s;
  s << "[";
  bool first = true;
  for (const c10::IValue& v : fn.inputs()) {
    if (!first) s << ", ";
    first = false;
    if (v.isTensor()) {
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

std::unique_ptr<at::ObserverContext> onStart(const at::RecordFunction&) {
  auto c = std::make_unique<Start>();
  c->ns = tracer::nowNs();
  return c;
}

void onEnd(const at::RecordFunction& fn, at::ObserverContext* ctx) {
  tracer::Tracer* t = g_tracer;
  if (!t || !ctx) return;
  const int64_t end = tracer::nowNs();
  const uint32_t shapes = g_shapes ? t->intern(shapesOf(fn)) : UINT32_MAX;
  t->record(tracer::OpEvent{static_cast<Start*>(ctx)->ns, end, t->intern(fn.name()), tracer::threadId(), fn.seqNr(),
                            shapes});
}

}  // namespace

OpSource::OpSource(tracer::Tracer& t, bool shapes) {
  g_tracer = &t;
  g_shapes = shapes;
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(&onStart, &onEnd)
                                      .needsInputs(shapes)
                                      .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION}));
}

OpSource::~OpSource() {
  at::removeCallback(handle_);
  g_tracer = nullptr;
}

}  // namespace trainscope::runtime
