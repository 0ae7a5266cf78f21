// range.cpp — ScopedRange and thread numbers (see range.h).
#include "trainscope/tracer/range.h"
#include "trainscope/tracer/thread_names.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cerrno>
#include <map>
#include <mutex>

#include "trainscope/tracer/trace.h"

namespace trainscope::tracer {

namespace {
std::atomic<uint32_t> g_next_tid{0};
thread_local int32_t t_depth = 0;
thread_local uint32_t t_tid = UINT32_MAX;

// The names of numbered threads (namedThreads), filled when a thread first gets its number or is named.
std::mutex& namesMutex() {
  static std::mutex mu;
  return mu;
}
std::map<uint32_t, std::string>& threadNames() {
  static std::map<uint32_t, std::string> names;
  return names;
}

// What the OS calls the calling thread, when it is a name of its own: "main" for the process's main
// thread (whose OS name is the program's), else pthread's name unless it is the inherited program name.
std::string osThreadName() {
  if (long(syscall(SYS_gettid)) == long(getpid())) return "main";
  char name[64] = {}, process[64] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) != 0) return {};
  const std::string prog = program_invocation_short_name ? program_invocation_short_name : "";
  std::snprintf(process, sizeof process, "%.15s", prog.c_str());  // as the kernel keeps it: 15 bytes
  return std::string(name) == process ? std::string() : std::string(name);
}
}  // namespace

thread_local std::string t_name;  // nameThread's, until the thread gets its number

uint32_t threadId() {
  if (t_tid == UINT32_MAX) {
    t_tid = g_next_tid.fetch_add(1);
    std::string name = t_name.empty() ? osThreadName() : t_name;
    if (!name.empty()) {
      std::lock_guard<std::mutex> lock(namesMutex());
      threadNames()[t_tid] = std::move(name);
    }
  }
  return t_tid;
}

// A thread named before it records keeps its number for its first event (numbers stay in the order
// threads first record), and one that never records gets no number and no row.
void nameThread(const std::string& name) {
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
  t_name = name;
  if (t_tid == UINT32_MAX) return;
  std::lock_guard<std::mutex> lock(namesMutex());
  threadNames()[t_tid] = name;
}

std::vector<std::pair<uint32_t, std::string>> namedThreads() {
  std::lock_guard<std::mutex> lock(namesMutex());
  return {threadNames().begin(), threadNames().end()};
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
