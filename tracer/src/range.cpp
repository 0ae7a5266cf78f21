// range.cpp — ScopedRange and thread numbers (see range.h).
#include "trainscope/tracer/range.h"

#include <atomic>

#include "trainscope/tracer/trace.h"

namespace trainscope::tracer {

namespace {
std::atomic<uint32_t> g_next_tid{0};
thread_local int32_t t_depth = 0;
thread_local uint32_t t_tid = UINT32_MAX;
}  // namespace

uint32_t threadId() {
  if (t_tid == UINT32_MAX) t_tid = g_next_tid.fetch_add(1);
  return t_tid;
}

ScopedRange::ScopedRange(const char* name) : name_(name) {
  nvtxPush(name);
  Tracer* t = Tracer::current();
  if (t && t->enabled(TraceLevel::Ranges)) {
    tracer_ = t;
    start_ = nowNs();
  }
  ++t_depth;
}

ScopedRange::~ScopedRange() {
  --t_depth;
  nvtxPop();
  if (!tracer_) return;
  static thread_local uint64_t cached_for = 0;
  static thread_local rundb::StringId domain = 0;
  if (cached_for != tracer_->id()) {
    domain = tracer_->intern(names::kDomain);
    cached_for = tracer_->id();
  }
  tracer_->record(RangeEvent{start_, nowNs(), tracer_->intern(name_), domain, threadId(), t_depth,
                             static_cast<int32_t>(rundb::RangeKind::PushPop)});
}

}  // namespace trainscope::tracer
