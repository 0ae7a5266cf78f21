// trainscope/common/files.h — the one way trainscope creates, replaces and opens files.
//
// Every file trainscope writes goes through here, so that no path that is not ours is ever
// followed, truncated or deleted:
//   - what may be at an output's path is decided by one rule, OutputRule (checkOutput): never one of
//     the command's inputs (by device and inode, through any name or link) nor an input's SQLite
//     companion (-wal, -shm, -journal, existing or not); never a directory, FIFO, device or socket;
//     a symbolic link only with --overwrite (the link itself is replaced, never what it points to);
//     an existing regular file only with --overwrite or when it is an earlier output of the same kind
//     (OutputRule::earlier, documented per output in docs/config-reference.md, "Outputs");
//   - a new file is first created under a random name in its target's folder (mkstemp: O_EXCL, so a
//     planted link or file at a guessable name is never opened), then put in place with link(2)
//     (refuses an existing path, atomically) or rename(2) (replaces the name, never what a link at it
//     points to); the rule is checked again just before, so what was planted meanwhile is refused;
//   - inputs are checked to be regular files before they are read (a FIFO would block forever);
//   - text pasted into a shell is quoted.
// What this is not: a lock. RunStore locks run databases; studies hold their own lock (tuner).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <streambuf>
#include <string>
#include <vector>

namespace trainscope::files {

enum class Existing { Refuse, Replace };

// What a command may do at the path of one of its outputs. Errors are UserErrors naming `field`.
struct OutputRule {
  std::string field;                // the flag or key that named the path ("--screenshot", "-o")
  std::vector<std::string> inputs;  // every file the command reads: never written, nor their companions
  bool overwrite = false;           // --overwrite: any regular file (not an input) and a link itself
  // An earlier output of the same kind, given a descriptor on the regular file at the path (read
  // from offset 0) and the path: replaced without --overwrite. Null: no file is.
  std::function<bool(int fd, const std::string& path)> earlier;
  std::string kind = "file";        // what `earlier` recognises, for messages ("PNG screenshot")
  bool only_earlier = false;        // --overwrite replaces only an earlier output (run databases)
  bool earlier_needs_overwrite = false;  // an earlier output is replaced only with --overwrite
  // An SQLite database: nothing but its own may be at its -wal/-shm/-journal (a new database finds
  // none; the replaced one's regular ones are its own), and its path must fit SQLite's (512 bytes
  // as an absolute path, less room for the names made beside it).
  bool sqlite = false;
};

// What is at an output's path, as checkOutput found it.
struct OutputFound {
  Existing existing = Existing::Refuse;  // Refuse: nothing there (link(2)); Replace: rename(2) over it
  bool earlier = false;                  // it is an earlier output of the same kind
  uint64_t dev = 0, ino = 0;             // of what is replaced
};

// Throws a UserError naming rule.field unless `path` may be written under `rule` (see the top of
// this file). Also refuses a path too long for the file system (or for SQLite), and a missing folder.
OutputFound checkOutput(const std::string& path, const OutputRule& rule);

// Whether two paths name one directory entry: the same name in the same folder (however spelled),
// or, both existing, the same entry by lstat (a link is compared as a link). Two outputs of one
// command must not (`--screenshot` and `--layout`).
bool sameEntry(const std::string& a, const std::string& b);

// Recognisers for OutputRule::earlier: the file starts with `prefix` (a signature, our header).
std::function<bool(int, const std::string&)> startsWith(std::string prefix);

// A file written under a temporary name beside `path` and moved into place by commit(): readers
// see the old file or the whole new one, never a part. Destroyed without commit(), it removes only
// its own temporary file. Errors are UserErrors naming `field`.
class AtomicFile {
 public:
  // Checks `rule` at once (an error before any work), and again in commit().
  AtomicFile(std::string path, OutputRule rule);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ostream& stream() { return *stream_; }
  // Flushes, fsyncs and puts the file at `path` as the rule allows.
  void commit();
  const std::string& tempPath() const { return temp_; }

 private:
  std::string path_, temp_;
  OutputRule rule_;
  int fd_ = -1;
  std::unique_ptr<std::streambuf> buf_;
  std::unique_ptr<std::ostream> stream_;
  bool committed_ = false;
};

// The whole of `text` written to `path` through an AtomicFile.
void writeAtomically(const std::string& path, const std::string& text, const OutputRule& rule);

// A file created for writing as it grows (a log): made under a random name in the folder, then
// moved to `path` as AtomicFile::commit does, and returned open (O_WRONLY | O_CLOEXEC). The caller
// closes it.
int createFile(const std::string& path, const OutputRule& rule);

// The two halves of the above, for writers that fill the file through another library (SQLite):
// a new empty file under a random name beside `path` (its descriptor, O_RDWR | O_CLOEXEC, and name),
// and putting a finished one at `path` (removes `temp` if that fails). The rule is checked again
// first; the Existing form is for a writer that checked it itself and holds what it replaces (RunStore).
struct TempFile {
  int fd = -1;
  std::string path;
};
TempFile makeTempBeside(const std::string& path, const std::string& field);
void place(const std::string& temp, const std::string& path, const OutputRule& rule);
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
