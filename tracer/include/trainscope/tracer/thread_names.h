// trainscope/tracer/thread_names.h — names for the threads the tracer numbers (range.h: threadId), written
// as the run database's `threads` rows when the tracer closes (trace-schema.md, `threads`).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace trainscope::tracer {

// Names the calling thread for traces ("cpu lane 0", "comm watchdog"): the name its rows get in the
// run database's `threads` table once it records, and the OS thread name (its first 15 bytes) for
// debuggers and top. It does not number the thread: one that never records has no row.
void nameThread(const std::string& name);
// Every numbered thread (threadId) with a name, by number: nameThread's, else "main" for the
// process's main thread, else its OS name when it has one of its own (not the process's, which
// threads inherit). Threads with none are left out (the viewer labels them `thread N`).
std::vector<std::pair<uint32_t, std::string>> namedThreads();

// The number (range.h: threadId) of a thread that another thread's records name — CUPTI reports the
// thread of each CUDA API call by its OS thread id (gettid) when `os_tid`, by an id of its own
// otherwise. An OS thread that already recorded has its number, so its API calls sit on its own row
// beside its ranges and ops; any other gets a new number now, which the thread itself takes when it
// first records. Named, for its `threads` row, as the OS names it ("main", or its own name, read from
// /proc) or else `fallback` ("cuda api, os tid 1234").
uint32_t threadIdOf(int64_t id, bool os_tid, const std::string& fallback);

}  // namespace trainscope::tracer
