// import.cpp — importTraces: one file per rank, recognised by content (see import.h).
#include "trainscope/rundb/import.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <streambuf>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "import_impl.h"
#include "kineto_names.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/json_text.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"

namespace trainscope::rundb {
namespace importers {

int64_t stepNumber(const std::string& name, const std::string& path) {
  static const std::string prefix = "ProfilerStep#";
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  int64_t n = 0;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    const char c = name[i];
    if (c < '0' || c > '9') return -1;
    if (__builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, c - '0', &n))
      throw UserError("import", path + ": step number of \"" + name + "\" is out of range", "check the trace file");
  }
  return n;
}

std::string gpuModels(const std::vector<std::string>& per_device) {
  std::vector<std::pair<std::string, int>> seen;
  for (const std::string& g : per_device) {
    if (g.empty()) continue;
    auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& s) { return s.first == g; });
    if (it == seen.end()) seen.push_back({g, 1});
    else ++it->second;
  }
  std::string out;
  for (const auto& [name, n] : seen) out += (out.empty() ? "" : ", ") + (n > 1 ? std::to_string(n) + " x " : "") + name;
  return out;
}

Step importedStep(int64_t rank, int64_t step, int64_t start_ns, int64_t end_ns, const std::string& path,
                  int64_t peak_bytes) {
  Step s;
  s.peak_bytes = peak_bytes;
  s.rank = rank;
  s.step = step;
  s.start_ns = start_ns;
  if (__builtin_sub_overflow(end_ns, start_ns, &s.step_time_ns))
    throw UserError("import", path + ": step " + std::to_string(step) + " spans more than int64 nanoseconds",
                    "check the trace file");
  return s;
}

bool StepRows::add(int64_t rank, int64_t step, int64_t start_ns, int64_t end_ns, int64_t peak_bytes) {
  const auto [it, fresh] = seen_.try_emplace({rank, step}, start_ns, end_ns);
  if (!fresh) {
    if (it->second == std::make_pair(start_ns, end_ns)) return false;
    auto window = [](int64_t b, int64_t e) { return std::to_string(b) + ".." + std::to_string(e) + " ns"; };
    throw UserError("import", path_ + ": step " + std::to_string(step) + " appears twice (" +
                                  window(it->second.first, it->second.second) + " and " + window(start_ns, end_ns) + ")",
                    "a trace holds each ProfilerStep#N once: pass each profiling session's trace as its own import");
  }
  store_.appendStep(importedStep(rank, step, start_ns, end_ns, path_, peak_bytes));
  return true;
}

}  // namespace importers

namespace {

// A file read as a stream: plain, or gzip with any number of members (concatenated members are
// valid gzip; trailing zero padding is tolerated). The importer never holds the whole text.
class TraceStreambuf : public std::streambuf {
 public:
  explicit TraceStreambuf(const std::string& path) : path_(path), in_(path, std::ios::binary) {
    if (!in_) throw UserError("import", "cannot read " + path, "check the path and its permissions");
    fillRaw();
    if (raw_avail_ == 0)  // it read "not valid JSON (at byte 1: … unexpected end of input)"
      throw UserError("import", path + " is empty (0 bytes)", "the profiler wrote nothing there: re-export the trace");
    gzip_ = raw_avail_ >= 2 && uint8_t(raw_[0]) == 0x1f && uint8_t(raw_[1]) == 0x8b;
    if (gzip_) startMember();
  }
  ~TraceStreambuf() override {
    if (z_open_) inflateEnd(&z_);
  }

 protected:
  int_type underflow() override {
    if (gptr() < egptr()) return traits_type::to_int_type(*gptr());
    size_t n = 0;
    while (n == 0) {  // a piece that was all folded whitespace gives nothing: read on
      const size_t got = lines_.read(out_, sizeof out_);  // the file's lines, Kineto's names repaired
      if (got == 0 && !quote_held_) return traits_type::eof();
      if (got == 0) n = releaseQuote(clean_, 0, false);  // the text ends right after a string
      else n = clean(out_, got, clean_);
    }
    setg(clean_, clean_, clean_ + n);
    return traits_type::to_int_type(*gptr());
  }

 private:
  void fillRaw() {
    in_.read(raw_, sizeof raw_);
    raw_avail_ = size_t(in_.gcount());
    raw_pos_ = 0;
  }
  size_t plainSome() {
    if (raw_pos_ >= raw_avail_) fillRaw();
    const size_t n = raw_avail_ - raw_pos_;
    std::memcpy(out_, raw_ + raw_pos_, n);
    raw_pos_ += n;
    return n;
  }
  void startMember() {
    z_ = z_stream{};
    if (inflateInit2(&z_, 15 + 16) != Z_OK) throw UserError("import", "zlib init failed for " + path_, "");
    z_open_ = true;
  }
  size_t inflateSome() {
    while (true) {
      if (!z_open_) {  // between members: another one, padding, or the end
        while (true) {
          if (raw_pos_ >= raw_avail_) fillRaw();
          if (raw_avail_ == 0) return 0;
          if (raw_[raw_pos_] != '\0') break;
          ++raw_pos_;
        }
        if (uint8_t(raw_[raw_pos_]) != 0x1f) return 0;  // trailing garbage after a complete member: stop
        startMember();
      }
      if (raw_pos_ >= raw_avail_) fillRaw();
      if (raw_avail_ == 0)
        throw UserError("import", path_ + " is a truncated gzip file", "re-export the trace");
      z_.next_in = reinterpret_cast<Bytef*>(raw_ + raw_pos_);
      z_.avail_in = uInt(raw_avail_ - raw_pos_);
      z_.next_out = reinterpret_cast<Bytef*>(out_);
      z_.avail_out = sizeof out_;
      const int rc = inflate(&z_, Z_NO_FLUSH);
      raw_pos_ = raw_avail_ - z_.avail_in;
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        throw UserError("import", path_ + " is a damaged gzip file (zlib code " + std::to_string(rc) + ")",
                        "re-export the trace");
      if (rc == Z_STREAM_END) {
        inflateEnd(&z_);
        z_open_ = false;
      }
      const size_t n = sizeof out_ - z_.avail_out;
      if (n > 0) return n;
    }
  }

  // The text as the JSON parser gets it: whitespace outside strings folded to one space (the
  // parser keeps every byte of a run between two tokens: a 300 MB run of blanks would be held
  // whole), and bytes that are not UTF-8 inside strings replaced by '?' (a name with one bad byte
  // would otherwise reject the whole file). Strings are otherwise passed through unchanged.
  size_t clean(const char* in, size_t n, char* out) {
    size_t w = 0;
    auto flushPending = [&](bool valid) {
      if (valid)
        for (int k = 0; k < pending_n_; ++k) out[w++] = pending_[k];
      else
        out[w++] = '?';
      pending_n_ = 0;
      need_ = 0;
    };
    for (size_t i = 0; i < n; ++i) {
      const auto c = static_cast<unsigned char>(in[i]);
      if (quote_held_) {  // after a string's closing quote, JSON allows only , : } ] (after blanks)
        const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        if (space && held_n_ < int(sizeof held_)) {
          held_[held_n_++] = char(c);
          continue;
        }
        const bool closes = space || c == ',' || c == ':' || c == '}' || c == ']';
        w = releaseQuote(out, w, !closes);
      }
      if (!in_string_) {
        const bool space = c == ' ' || c == '\t' || c == '\n' || c == '\r';
        if (space && blank_) continue;
        blank_ = space;
        if (c == '"') in_string_ = true;
        out[w++] = space ? ' ' : char(c);
        continue;
      }
      if (need_ > 0) {  // inside a multi-byte sequence
        const unsigned char lo = pending_n_ == 1 ? lo_ : 0x80, hi = pending_n_ == 1 ? hi_ : 0xBF;
        if (c >= lo && c <= hi) {
          pending_[pending_n_++] = char(c);
          if (--need_ == 0) flushPending(true);
          continue;
        }
        flushPending(false);  // cut short: the lead and what followed it become one '?'; c is read anew
      }
      if (escape_) {
        escape_ = false;
        out[w++] = char(c);
      } else if (c == '\\') {
        escape_ = true;
        out[w++] = char(c);
      } else if (c == '"') {  // held until the next token shows whether it closes the string
        in_string_ = false;
        quote_held_ = true;
        held_n_ = 0;
      } else if (c < 0x80) {
        out[w++] = char(c);
      } else {
        // UTF-8 leads and the range of the byte after them (no overlong forms, no surrogates).
        lo_ = 0x80, hi_ = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) need_ = 1;
        else if (c >= 0xE0 && c <= 0xEF) need_ = 2, lo_ = c == 0xE0 ? 0xA0 : 0x80, hi_ = c == 0xED ? 0x9F : 0xBF;
        else if (c >= 0xF0 && c <= 0xF4) need_ = 3, lo_ = c == 0xF0 ? 0x90 : 0x80, hi_ = c == 0xF4 ? 0x8F : 0xBF;
        if (need_ == 0) {
          out[w++] = '?';
        } else {
          pending_[0] = char(c);
          pending_n_ = 1;
        }
      }
    }
    return w;
  }

  // Writes the held quote at out[w]: as the string's end (its blanks then fold to one), or, when
  // what follows cannot come after a string, as an escaped quote inside it (PyTorch's profiler writes
  // a name as is: record_function('say "hi"') gives "name": "say "hi"", which is not JSON), with
  // the blanks kept and the string still open.
  size_t releaseQuote(char* out, size_t w, bool literal) {
    quote_held_ = false;
    if (literal) {
      out[w++] = '\\';
      out[w++] = '"';
      for (int k = 0; k < held_n_; ++k) out[w++] = held_[k];
      in_string_ = true;
      ++repaired_quotes_;
    } else {
      out[w++] = '"';
      if (held_n_ > 0) out[w++] = ' ', blank_ = true;
    }
    held_n_ = 0;
    return w;
  }

 public:
  int64_t repairedQuotes() const { return repaired_quotes_ + lines_.repairedQuotes(); }

 private:
  std::string path_;
  std::ifstream in_;
  char raw_[1 << 16];
  size_t raw_avail_ = 0, raw_pos_ = 0;
  char out_[1 << 18];
  char clean_[(1 << 18) + 64];  // out_ plus a sequence or a held quote carried over from the previous piece
  // The raw text (plain or inflated into out_, copied out at once) line by line: a name Kineto wrote
  // unescaped with `", "` in it is escaped here, where the lines are still whole (kineto_names.h).
  importers::kineto::NameLines lines_{[this](std::string& to) {
    const size_t got = gzip_ ? inflateSome() : plainSome();
    to.append(out_, got);
    return got;
  }};
  bool in_string_ = false, escape_ = false, blank_ = false;
  bool quote_held_ = false;  // a string's closing quote, not yet written
  char held_[16] = {};       // the blanks after it (more than these: it closed the string)
  int held_n_ = 0;
  int64_t repaired_quotes_ = 0;
  char pending_[4] = {};
  int pending_n_ = 0, need_ = 0;
  unsigned char lo_ = 0x80, hi_ = 0xBF;
  bool gzip_ = false, z_open_ = false;
  z_stream z_{};
};

}  // namespace

std::string describeRefusals(const ImportStats& st) {
  auto list = [](const std::map<std::string, int64_t>& m) {
    std::string s;
    for (const auto& [what, n] : m) s += (s.empty() ? "" : "; ") + what + " ×" + std::to_string(n);
    return s;
  };
  std::string out;
  if (!st.refused_values.empty())
    out += "values of the wrong type, left out (read as absent) and counted (meta import_refused_values): " +
           list(st.refused_values) + "\n";
  for (const auto& [file, n] : st.repaired_quotes)
    out += file + ": " + std::to_string(n) +
           " quote(s) inside a string, written unescaped by the profiler (not JSON), read as part of the string\n";
  for (const auto& [file, k] : st.stop_stubs)
    out += file + ": ProfilerStep#" + std::to_string(k) +
           ", its last, holds no host event (the profiler stopped as it began): kept as a range, not a step\n";
  if (!st.ignored_device_events.empty())
    out += "device events of categories not read, left out and counted (meta import_ignored_device_events): " +
           list(st.ignored_device_events) + "\n";
  return out;
}

namespace {

// The rank of each file of an import. A file is its distributedInfo.rank, else the next rank by its
// position among the files. Several files are one rank's profiling cycles (torch.profiler's
// schedule(repeat=N) calls on_trace_ready once per cycle, and tensorboard_trace_handler writes each
// to WORKER.TIMESTAMP.pt.trace.json) when they were recorded by the same processes, have the same
// distributedInfo.rank (or none), do not overlap in time, and their ProfilerStep numbers continue
// (a new profile() session numbers its steps from 0 again: two sessions of one process are two
// ranks, as before). They are imported as that one rank. Before, a single process's cycles became
// ranks 0, 1, 2 and a distributed job's were refused.
class RankRule {
 public:
  int64_t rankOf(const importers::TraceOrigin& o, const std::string& path) {
    for (Rank& r : ranks_) {
      if (r.dist_rank != o.rank) continue;
      const std::string why = reason(r, o);
      if (why.empty()) {
        r.pids.insert(o.pids.begin(), o.pids.end());
        r.steps.insert(o.steps.begin(), o.steps.end());
        r.spans.emplace_back(o.begin_ns, o.end_ns);
        return r.rank;
      }
      // No distributedInfo and not a cycle of this one: the next rank by position — unless it is a
      // copy of this one (a trace beside its gzipped copy): the same processes, steps and span to the
      // nanosecond. Overlap alone is not enough: one process per container can give two nodes' ranks
      // the same pid.
      if (!o.rank && !sameRecording(r, o)) continue;
      const std::string claim = o.rank ? " claims rank " + std::to_string(*o.rank) + ", as " + r.path + " does, "
                                       : " names no rank (no distributedInfo), as " + r.path + " does not either, ";
      throw UserError("import", path + claim + why,
                      "pass one trace per rank (or each rank's profiling cycles), or each profiling session's traces "
                      "as their own import");
    }
    return add(o.rank.value_or(int64_t(ranks_.size())), o, path);
  }
  // For a file that is not Kineto's (an Nsight Systems export): the next rank by position.
  int64_t next(const std::string& path) { return add(int64_t(ranks_.size()), importers::TraceOrigin{}, path); }
  size_t ranks() const { return ranks_.size(); }

 private:
  struct Rank {
    int64_t rank;
    std::optional<int64_t> dist_rank;
    std::set<int64_t> pids, steps;
    std::vector<std::pair<int64_t, int64_t>> spans;
    std::string path;  // its first file
  };
  int64_t add(int64_t rank, const importers::TraceOrigin& o, const std::string& path) {
    for (const Rank& r : ranks_)
      if (r.rank == rank)
        throw UserError("import", path + " claims rank " + std::to_string(rank) + ", as an earlier file does",
                        "pass one trace per rank");
    ranks_.push_back({rank, o.rank, o.pids, o.steps, {{o.begin_ns, o.end_ns}}, path});
    return rank;
  }
  static bool sameRecording(const Rank& r, const importers::TraceOrigin& o) {
    return !o.pids.empty() && r.pids == o.pids && r.steps == o.steps && r.spans.size() == 1 &&
           r.spans[0] == std::make_pair(o.begin_ns, o.end_ns);
  }
  static bool overlapsInTheSameProcesses(const Rank& r, const importers::TraceOrigin& o) {
    if (o.pids.empty() || r.pids != o.pids) return false;
    for (const auto& [b, e] : r.spans)
      if (o.begin_ns <= e && b <= o.end_ns) return true;
    return false;
  }
  // Why a file is not another profiling cycle of rank `r` ("" when it is one).
  static std::string reason(const Rank& r, const importers::TraceOrigin& o) {
    if (o.pids.empty() || r.pids != o.pids) return "but was recorded by other processes (pids " + pids(o.pids) + " and " + pids(r.pids) + ")";
    if (overlapsInTheSameProcesses(r, o))
      return "and was recorded by the same processes (pids " + pids(o.pids) + ") at overlapping times: they are not two "
             "profiling cycles" + std::string(o.rank ? "" : " nor two ranks: the same events' span and steps (a copy of one trace?)");
    if (o.steps.empty() || r.steps.empty()) return "and holds no ProfilerStep#N to tell a profiling cycle by";
    for (int64_t k : o.steps)
      if (r.steps.count(k))
        return "and both hold ProfilerStep#" + std::to_string(k) + ": two profiling sessions, not two cycles of one";
    return "";
  }
  static std::string pids(const std::set<int64_t>& v) {
    std::string s;
    for (int64_t p : v) s += (s.empty() ? "" : ",") + std::to_string(p);
    return s.empty() ? "none" : s;
  }
  std::vector<Rank> ranks_;
};

// A folder passed as a trace (tensorboard_trace_handler's log directory): the files to pass instead.
std::string folderHint(const std::string& dir) {
  std::map<std::string, int> by_suffix;  // ".pt.trace.json.gz" → how many
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    for (const char* suffix : {".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".sqlite"})
      if (name.size() > std::strlen(suffix) && name.compare(name.size() - std::strlen(suffix), std::string::npos, suffix) == 0) {
        ++by_suffix[suffix];
        break;
      }
  }
  if (ec) return "pass one trace file per rank (the folder cannot be listed: " + ec.message() + ")";
  if (by_suffix.empty()) return "pass one trace file per rank (it holds no .json, .json.gz or .sqlite file)";
  const auto most = std::max_element(by_suffix.begin(), by_suffix.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  const std::string slash = !dir.empty() && dir.back() == '/' ? "" : "/";
  return "pass the trace files in it, one per rank or each rank's profiling cycles: " + dir + slash + "*" + most->first +
         " (" + std::to_string(most->second) + " there)";
}

int64_t recognised(const ImportStats& st) {
  return st.host_ops + st.ranges + st.gpu_annotations + st.kernels + st.api_calls + st.memcpy + st.memset;
}

// The inputs as passed: none, a missing path, a folder (the files in it named), a file twice (a.json
// a.json, or a link to it: without distributedInfo it became a second, identical rank) are refused.
void refuseBadInputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) throw UserError("import", "no input files", "pass one trace per rank");
  std::map<std::pair<dev_t, ino_t>, std::string> seen;
  for (const auto& p : inputs) {
    struct stat st {};
    if (stat(p.c_str(), &st) != 0) throw UserError("import", p + " does not exist", "check the path");
    if (S_ISDIR(st.st_mode)) throw UserError("import", p + " is a directory", folderHint(p));
    const auto [it, fresh] = seen.try_emplace({st.st_dev, st.st_ino}, p);
    if (!fresh && S_ISREG(st.st_mode))
      throw UserError("import", p + " is passed twice" + (it->second == p ? "" : " (" + it->second + " is the same file)"),
                      "pass each trace once");
  }
}

}  // namespace

namespace {

// An import that recorded nothing, or only the step the profiler's stop cut, is refused saying why.
void refuseNothingImported(const ImportStats& st, const std::vector<std::string>& inputs) {
  if (recognised(st) == 0)  // one file: named (it read "nothing was recognised in 1 file(s)")
    throw UserError("import", "nothing was recognised in " + (inputs.size() == 1 ? inputs[0] : std::to_string(inputs.size()) + " files") +
                                  ": no CPU ops, annotations, kernels, API calls or copies",
                    "pass PyTorch profiler (Kineto) traces or Nsight Systems SQLite exports");
  if (st.steps == 0 && !st.stop_stubs.empty()) {  // only what the stop cut: a trace overwritten by its cut cycle
    const auto& [file, k] = *st.stop_stubs.begin();
    throw UserError("import", file + " holds no step but ProfilerStep#" + std::to_string(k) +
                                  ", which the profiler's stop cut as it began: no work was recorded in it",
                    "a schedule() without repeat= begins a new cycle after each, and an on_trace_ready that writes "
                    "one fixed path keeps only the last, cut one: pass repeat=1, or a path per cycle "
                    "(tensorboard_trace_handler), and import the cycles' files");
  }
}

}  // namespace

ImportStats importTraces(const std::vector<std::string>& inputs, const std::string& out_db, bool overwrite) {
  refuseBadInputs(inputs);
  checkWritable(out_db, overwrite, "-o", inputs);  // never an input (nor its -wal/-shm/-journal)
  // Built under a random name beside the output and renamed at the end: a failed import leaves
  // nothing behind, and only a file this import created is ever removed.
  std::string partial;
  {
    files::TempFile t = files::makeTempBeside(out_db, "-o");
    ::close(t.fd);
    ::unlink(t.path.c_str());  // RunStore takes the name with link(2): refused if anyone took it meanwhile
    partial = t.path;
  }
  struct Cleanup {
    std::string path;
    bool armed = false;  // set once the store made the file: it is ours
    ~Cleanup() {
      if (!armed) return;
      for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
    }
  } cleanup{partial};
  ImportStats st;
  {
    RunStore store(partial, RunStore::Options{false, "-o", true});
    cleanup.armed = true;
    store.setMeta("source", "import");
    store.begin();
    RankRule rule;
    importers::StepRows steps(store, "");
    importers::KinetoShared shared;
    nlohmann::json sources = nlohmann::json::array();  // meta import_files: each file, its format and rank
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string& p = inputs[i];
      int64_t rank = -1;
      files::requireRegularFile(p, "import", "pass one trace file per rank");  // before opening: a FIFO blocks
      const char* format = looksLikeSqlite(p) ? "nsys" : "kineto";
      const int64_t before = recognised(st);
      if (std::string(format) == "nsys") {
        try {
          rank = rule.next(p);
          importers::importNsys(store, st, p, rank);
        } catch (const SqliteError& e) {  // a damaged export (writes to the new database do not fail here)
          throw UserError("import", p + " cannot be read as an Nsight Systems export (" + e.what() + ")",
                          "re-export it with `nsys export --type sqlite`");
        }
      } else {
        TraceStreambuf buf(p);
        std::istream text(&buf);
        try {
          rank = importers::importKineto(store, st, text, p,
                                         [&](const importers::TraceOrigin& o) { return rule.rankOf(o, p); }, steps, shared);
          if (buf.repairedQuotes() > 0) st.repaired_quotes[p] += buf.repairedQuotes();
        } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
          throw UserError("import", p + " has an unexpected value: " + e.what(), "pass a PyTorch profiler (Kineto) trace");
        }
      }
      // A file with nothing in it this import reads (another tool's Chrome trace beside the ranks'
      // files) was an empty rank of the run, silently.
      if (inputs.size() > 1 && recognised(st) == before)
        throw UserError("import", "nothing was recognised in " + p + ": no CPU ops, annotations, kernels, API calls or copies",
                        std::string(format) == "nsys" ? "pass Nsight Systems SQLite exports with their events"
                                                      : "pass PyTorch profiler (Kineto) traces, one per rank");
      sources.push_back({{"file", p}, {"format", format}, {"rank", rank}});
      if (st.gpus.count(rank)) sources.back()["gpu"] = st.gpus[rank];
      ++st.files;
    }
    importers::finishKineto(store, st, shared);
    store.setMeta("world_size", std::to_string(rule.ranks()));
    refuseNothingImported(st, inputs);
    auto counts = [](const std::map<std::string, int64_t>& m) {  // a category's bytes that are not UTF-8: U+FFFD
      return jsonText(nlohmann::json(m));
    };
    store.setMeta("import_files", jsonText(sources));
    if (!st.refused_values.empty()) store.setMeta("import_refused_values", counts(st.refused_values));
    if (st.device_clocked_collectives) store.setMeta("collectives_clock", "device");
    if (!st.ignored_device_events.empty()) store.setMeta("import_ignored_device_events", counts(st.ignored_device_events));
    if (!st.repaired_quotes.empty()) store.setMeta("import_repaired_quotes", counts(st.repaired_quotes));
    store.commit();
    store.createIndexes();
    store.close();
  }
  const PathCheck replaced = checkWritable(out_db, overwrite, "-o", inputs);  // nothing took the path meanwhile
  if (replaced.kind != PathCheck::Kind::Missing)  // the replaced database's own files must not meet the new one
    for (const char* suffix : {"-wal", "-shm", "-journal"}) {
      struct stat st {};
      const std::string side = out_db + suffix;
      if (lstat(side.c_str(), &st) == 0 && S_ISREG(st.st_mode)) ::unlink(side.c_str());
    }
  // link(2) onto a free path (refused if anyone took it since), rename(2) over the database checked above.
  files::place(partial, out_db, replaced.kind == PathCheck::Kind::Missing ? files::Existing::Refuse : files::Existing::Replace,
               "-o");
  cleanup.armed = false;
  return st;
}

}  // namespace trainscope::rundb
