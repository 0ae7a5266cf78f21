// trainscope/common/error.h — the error types every module throws.
//
// Two kinds, by who must act:
//   UserError    — bad input (a flag, a workload field, a data file). Names the field and the fix;
//                  the command line prints it and exits with status 2.
//   RuntimeError — something failed while running (a LibTorch call, I/O). Carries the call site.
// Programmer errors are asserts, not exceptions.
#pragma once

#include <stdexcept>
#include <cstdint>
#include <string>

namespace trainscope {

class UserError : public std::runtime_error {
 public:
  UserError(std::string field, const std::string& problem, const std::string& fix)
      : std::runtime_error(field + ": " + problem + (fix.empty() ? "" : " (fix: " + fix + ")")),
        field_(std::move(field)) {}
  const std::string& field() const { return field_; }

 private:
  std::string field_;
};

// An allocation that did not fit: the device's memory, or the per-rank --mem-limit on the CPU.
// The command line exits with kExitOutOfMemory (3), whichever device ran out.
class OutOfMemory : public std::runtime_error {
 public:
  OutOfMemory(const std::string& what, int64_t requested, int64_t in_use, int64_t limit)
      : std::runtime_error(what), requested_(requested), in_use_(in_use), limit_(limit) {}
  int64_t requested() const { return requested_; }
  int64_t inUse() const { return in_use_; }
  int64_t limit() const { return limit_; }

 private:
  int64_t requested_, in_use_, limit_;
};
inline constexpr int kExitOutOfMemory = 3;

class RuntimeError : public std::runtime_error {
 public:
  RuntimeError(const std::string& what, const char* file, int line)
      : std::runtime_error(what + " [" + file + ":" + std::to_string(line) + "]") {}
};

}  // namespace trainscope

#define TRAINSCOPE_THROW(msg) throw ::trainscope::RuntimeError((msg), __FILE__, __LINE__)
