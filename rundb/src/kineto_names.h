// kineto_names.h — Kineto's unescaped names, repaired as the trace streams in (internal to rundb;
// import.cpp's TraceStreambuf reads the file's lines through it, before folding its whitespace).
//
// Kineto (libkineto's ChromeTraceLogger, as PyTorch 2.11 ships it) writes an event's name into the
// JSON as it is, without escaping: record_function('my", "op') becomes
//     "ph": "X", "cat": "user_annotation", "name": "my", "op", "pid": 3705, "tid": 3705,
// which is not JSON. TraceStreambuf reads a quote as part of a string when what follows cannot follow
// a string (`say "hi"`), but after `my"` comes `, "op"`, which can: the whole import failed there. Kineto writes one event's header per
// line, so each line that holds `"name": "` is repaired on its own: the name's text runs from there to
// the last `", "pid": ` of the line (an activity: op, annotation, kernel, …), or to the line's last
// quote when the name ends the line (a thread's or process's name in a metadata event's args). A
// text that is already a valid JSON string is left as it is (a writer that escapes, a hand-made
// trace); else it is escaped as the literal text it is. Lines longer than kMaxLine pass unchanged
// (minified JSON is a writer that escapes). Nothing else is changed, so a parse error's byte offset
// moves only by what a repair on an earlier line added.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace trainscope::rundb::importers::kineto {

// The line with its unescaped name escaped (unchanged when it needs nothing or is not of that form).
std::string repairNameLine(const std::string& line);

// The trace's bytes, line by line through repairNameLine: `pull` appends the next raw bytes of the
// file (already inflated) to its argument and returns how many (0: the end).
class NameLines {
 public:
  static constexpr size_t kMaxLine = size_t(1) << 16;
  using Pull = std::function<size_t(std::string&)>;
  explicit NameLines(Pull pull) : pull_(std::move(pull)) {}
  // Up to `cap` bytes of the repaired text into `out`; 0 at the end.
  size_t read(char* out, size_t cap);
  int64_t repairedQuotes() const { return repaired_quotes_; }  // quotes escaped so far

 private:
  bool nextLine();  // the next line (or piece of a line past kMaxLine) into ready_; false at the end

  Pull pull_;
  std::string raw_, ready_;
  size_t raw_at_ = 0, ready_at_ = 0;  // read up to here
  bool ended_ = false, in_long_line_ = false;
  int64_t repaired_quotes_ = 0;
};

}  // namespace trainscope::rundb::importers::kineto
