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

}  // namespace trainscope::tracer
