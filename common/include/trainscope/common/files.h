// trainscope/common/files.h — the one way trainscope creates, replaces and opens files.
//
// Every file trainscope writes goes through here, so that no path that is not ours is ever
// followed, truncated or deleted:
//   - a new file is first created under a random name in its target's folder (mkstemp: O_EXCL, so a
//     planted link or file at a guessable name is never opened), then put in place with link(2)
//     (refuses an existing path, atomically) or rename(2) (replaces the name, never what a link at it
//     points to: a symbolic or hard link planted at the target is replaced, its target untouched);
//   - inputs are checked to be regular files before they are read (a FIFO would block forever);
//   - text pasted into a shell is quoted.
// What this is not: a lock. RunStore locks run databases; studies hold their own lock (tuner).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>

namespace trainscope::files {

enum class Existing { Refuse, Replace };

// A file written under a temporary name beside `path` and moved into place by commit(): readers
// see the old file or the whole new one, never a part. Destroyed without commit(), it removes only
// its own temporary file. Errors are UserErrors naming `field`.
class AtomicFile {
 public:
  AtomicFile(std::string path, std::string field);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ostream& stream() { return *stream_; }
  // Flushes, fsyncs and puts the file at `path`. Existing::Refuse: fails if anything is there.
  // Existing::Replace: a regular file, symbolic link or nothing may be there (not a directory).
  void commit(Existing existing);
  const std::string& tempPath() const { return temp_; }

 private:
  std::string path_, field_, temp_;
  int fd_ = -1;
  std::unique_ptr<std::streambuf> buf_;
  std::unique_ptr<std::ostream> stream_;
  bool committed_ = false;
};

// The whole of `text` written to `path` through an AtomicFile.
void writeAtomically(const std::string& path, const std::string& text, Existing existing, const std::string& field);

// A file created for writing as it grows (a log): made under a random name in the folder, then
// moved to `path` as AtomicFile::commit does, and returned open (O_WRONLY | O_CLOEXEC). The caller
// closes it.
int createFile(const std::string& path, Existing existing, const std::string& field);

// The two halves of the above, for writers that fill the file through another library (SQLite):
// a new empty file under a random name beside `path` (its descriptor, O_RDWR | O_CLOEXEC, and name),
// and putting a finished one at `path` (removes `temp` if that fails).
struct TempFile {
  int fd = -1;
  std::string path;
};
TempFile makeTempBeside(const std::string& path, const std::string& field);
void place(const std::string& temp, const std::string& path, Existing existing, const std::string& field);

// Throws a UserError naming `field` unless `path` is a regular file (after links): a FIFO, device,
// socket or folder is refused before anything opens it.
void requireRegularFile(const std::string& path, const std::string& field, const std::string& fix);

// Opens `path` for reading without blocking on a FIFO, and refuses anything but a regular file.
// Returns the descriptor (O_RDONLY | O_CLOEXEC, blocking). The caller closes it.
int openRegularFile(const std::string& path, const std::string& field, const std::string& fix);

// The most a text input (a workload, cluster, config, batch, script or notes file) may hold: past
// it the input is refused rather than read into memory.
inline constexpr int64_t kTextInputCap = int64_t(64) << 20;

// The whole of a text input: opened through openRegularFile (a FIFO, device, socket or folder is
// refused at once, never waited on or read without end) and refused, naming `field`, when it holds
// more than `cap` bytes.
std::string readTextFile(const std::string& path, const std::string& field, const std::string& fix,
                         int64_t cap = kTextInputCap);

// `s` as one POSIX shell word: bare when it holds only safe characters, else in single quotes.
std::string shellQuote(const std::string& s);

// The folder a path lives in ("." for a bare name).
std::string folderOf(const std::string& path);

}  // namespace trainscope::files
