// kineto_names.cpp — see kineto_names.h.
#include "kineto_names.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace trainscope::rundb::importers::kineto {

namespace {

// Whether `text` is the inside of a valid JSON string (what a writer that escapes wrote).
bool validStringBody(const std::string& text) {
  const auto j = nlohmann::json::parse("\"" + text + "\"", nullptr, false);
  return j.is_string();
}

// `text` as the inside of a JSON string: quotes, backslashes and control characters escaped.
std::string escaped(const std::string& text) {
  const std::string quoted = nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  return quoted.substr(1, quoted.size() - 2);
}

// `, "pid": X, "tid": Y,` to the line's end (X and Y without quotes, or Y one quoted word): the rest of
// an activity's header line as Kineto writes it.
bool isPidTidTail(const std::string& line, size_t at) {
  static const std::string kPid = ", \"pid\": ", kTid = ", \"tid\": ";
  if (line.compare(at, kPid.size(), kPid) != 0) return false;
  const size_t tid = line.find(kTid, at + kPid.size());
  if (tid == std::string::npos || line.find_first_of("\",", at + kPid.size()) < tid) return false;
  const size_t last = line.find_last_not_of(" \t\r\n");
  if (last == std::string::npos || last < tid + kTid.size() || line[last] != ',') return false;
  const std::string y = line.substr(tid + kTid.size(), last - tid - kTid.size());
  const bool quoted = y.size() >= 2 && y.front() == '"' && y.back() == '"';
  return !y.empty() && y.find_first_of(",") == std::string::npos &&
         (quoted ? y.find('"', 1) == y.size() - 1 : y.find('"') == std::string::npos);
}

}  // namespace

std::string repairNameLine(const std::string& line) {
  static const std::string kKey = "\"name\": \"", kPh = "\"ph\": \"";
  const size_t key = line.find(kKey);
  size_t first = line.find_first_not_of(" \t");
  if (first != std::string::npos && line[first] == '{' && key != first + 1)  // `{"ph": …` on one line
    first = line.find_first_not_of(" \t", first + 1);
  if (key == std::string::npos || first == std::string::npos) return line;
  const size_t from = key + kKey.size();
  size_t to = std::string::npos;
  if (line.compare(first, kPh.size(), kPh) == 0) {
    // An activity's header: `"ph": "X", "cat": "C", "name": "TEXT", "pid": N, "tid": N,` (its `{`
    // on the line before, as Kineto writes it, or at the line's start).
    const size_t pid = line.rfind("\", \"pid\": ");
    if (pid != std::string::npos && pid >= from && isPidTidTail(line, pid + 1)) to = pid;
  } else if (key == first) {
    // A metadata event's args: the line is `"name": "TEXT"` (no comma: the object's last member).
    const size_t last = line.find_last_not_of(" \t\r\n");
    if (last != std::string::npos && last >= from && line[last] == '"') to = last;
  }
  if (to == std::string::npos) return line;
  const std::string text = line.substr(from, to - from);
  if (text.find_first_of("\"\\") == std::string::npos || validStringBody(text)) return line;
  return line.substr(0, from) + escaped(text) + line.substr(to);
}

bool NameLines::nextLine() {
  size_t nl;
  while ((nl = raw_.find('\n', raw_at_)) == std::string::npos && raw_.size() - raw_at_ < kMaxLine && !ended_) {
    raw_.erase(0, raw_at_);  // what was read: dropped before the next piece (not per line)
    raw_at_ = 0;
    ended_ = pull_(raw_) == 0;
  }
  bool whole = !in_long_line_;
  size_t n = raw_.size() - raw_at_;
  if (nl != std::string::npos && nl - raw_at_ < kMaxLine) n = nl + 1 - raw_at_;
  else if (n >= kMaxLine) n = kMaxLine, whole = false;  // a long line: passed through in pieces
  if (n == 0) return false;
  ready_.assign(raw_, raw_at_, n);
  raw_at_ += n;
  ready_at_ = 0;
  in_long_line_ = ready_.back() != '\n' && !whole;
  if (whole && ready_.find("\"name\": \"") != std::string::npos) {
    std::string fixed = repairNameLine(ready_);
    if (fixed.size() != ready_.size()) {  // one backslash per quote escaped (torch writes no backslash)
      repaired_quotes_ += int64_t(fixed.size() - ready_.size());
      ready_ = std::move(fixed);
    }
  }
  return true;
}

size_t NameLines::read(char* out, size_t cap) {
  if (ready_at_ == ready_.size() && !nextLine()) return 0;
  const size_t n = std::min(cap, ready_.size() - ready_at_);
  ready_.copy(out, n, ready_at_);
  ready_at_ += n;
  return n;
}

}  // namespace trainscope::rundb::importers::kineto
