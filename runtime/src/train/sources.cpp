// sources.cpp — see sources.h.
#include "train/sources.h"

namespace trainscope::runtime {
namespace {
std::atomic<MemorySource*> g_memory{nullptr};
}  // namespace

bool MemorySource::start(tracer::Tracer& t, std::string* why) {
  tracer_ = &t;
  name_ = t.intern(tracer::names::kMemoryCounter);
  MemorySource* expected = nullptr;
  if (!g_memory.compare_exchange_strong(expected, this)) {
    *why = "another memory source is already recording in this process";
    return false;
  }
  return true;
}

void MemorySource::stop() {
  MemorySource* self = this;
  g_memory.compare_exchange_strong(self, nullptr);
}

void MemorySource::sample(int64_t bytes) {
  MemorySource* s = g_memory.load(std::memory_order_acquire);
  if (s) s->tracer_->record(tracer::CounterEvent{tracer::nowNs(), s->name_, double(bytes)});
}

}  // namespace trainscope::runtime
