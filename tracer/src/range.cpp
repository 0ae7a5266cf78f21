// range.cpp — ScopedRange and thread numbers (see range.h).
#include "trainscope/tracer/range.h"
#include "trainscope/tracer/thread_names.h"

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cerrno>
#include <fstream>
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

// OS thread ids → numbers (namesMutex): `own`, the numbers threads took themselves (threadId);
// `foreign`, numbers given by another thread's records (threadIdOf) that the thread has not yet taken,
// by (os id or not, id).
std::map<int64_t, uint32_t>& ownNumbers() {
  static std::map<int64_t, uint32_t> m;
  return m;
}
std::map<std::pair<bool, int64_t>, uint32_t>& foreignNumbers() {
  static std::map<std::pair<bool, int64_t>, uint32_t> m;
  return m;
}

// A thread name unless it is the program's, which threads inherit (as the kernel keeps it: 15 bytes).
std::string ownName(const std::string& name) {
  char process[64] = {};
  const std::string prog = program_invocation_short_name ? program_invocation_short_name : "";
  std::snprintf(process, sizeof process, "%.15s", prog.c_str());
  return name == process ? std::string() : name;
}

// What the OS calls the calling thread, when it is a name of its own: "main" for the process's main
// thread (whose OS name is the program's), else pthread's name unless it is the inherited program name.
std::string osThreadName() {
  if (long(syscall(SYS_gettid)) == long(getpid())) return "main";
  char name[64] = {};
  if (pthread_getname_np(pthread_self(), name, sizeof name) != 0) return {};
  return ownName(name);
}

// The same for another thread of this process, by its OS id ("" when it has none or is gone).
std::string osThreadName(int64_t os_tid) {
  if (os_tid == int64_t(getpid())) return "main";
  std::ifstream comm("/proc/self/task/" + std::to_string(os_tid) + "/comm");
  std::string name;
  if (!comm || !std::getline(comm, name)) return {};
  return ownName(name);
}
}  // namespace

thread_local std::string t_name;  // nameThread's, until the thread gets its number

uint32_t threadId() {
  if (t_tid == UINT32_MAX) {
    const int64_t os_tid = int64_t(syscall(SYS_gettid));
    std::string name = t_name.empty() ? osThreadName() : t_name;
    std::lock_guard<std::mutex> lock(namesMutex());
    // The number another thread's records gave it (its CUDA calls seen by CUPTI first), else a new one.
    auto given = foreignNumbers().find({true, os_tid});
    if (given != foreignNumbers().end()) {
      t_tid = given->second;
      foreignNumbers().erase(given);
    } else {
      t_tid = g_next_tid.fetch_add(1);
    }
    ownNumbers()[os_tid] = t_tid;
    if (!name.empty()) threadNames()[t_tid] = std::move(name);
  }
  return t_tid;
}

uint32_t threadIdOf(int64_t id, bool os_tid, const std::string& fallback) {
  std::lock_guard<std::mutex> lock(namesMutex());
  if (os_tid)
    if (auto own = ownNumbers().find(id); own != ownNumbers().end()) return own->second;
  auto [it, added] = foreignNumbers().try_emplace({os_tid, id}, 0);
  if (!added) return it->second;
  it->second = g_next_tid.fetch_add(1);
  const std::string name = os_tid ? osThreadName(id) : std::string();
  threadNames()[it->second] = name.empty() ? fallback : name;
  return it->second;
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
