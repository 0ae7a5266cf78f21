// output_rule.cpp — checkOutput: what a command may do at the path of one of its outputs (files.h).
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"

namespace trainscope::files {
namespace {

constexpr const char* kCompanions[] = {"-wal", "-shm", "-journal"};
// SQLite's unix VFS takes absolute paths of at most 512 bytes; a database's temporary name beside it
// (makeTempBeside) is up to 13 bytes longer than the path.
constexpr size_t kSqliteMaxPath = 498;

std::string baseOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Where a path names a file, independent of how it is spelled: its folder resolved, then its name.
// Empty when the folder cannot be resolved.
std::string locationOf(const std::string& path) {
  char buf[PATH_MAX];
  if (!::realpath(folderOf(path).c_str(), buf)) return {};
  const std::string folder = buf;
  return (folder == "/" ? "" : folder) + "/" + baseOf(path);
}

std::string shortened(const std::string& s) { return s.size() <= 60 ? s : s.substr(0, 40) + "…" + s.substr(s.size() - 12); }

void checkLength(const std::string& path, const OutputRule& rule) {
  size_t start = 0;
  while (start < path.size()) {
    size_t end = path.find('/', start);
    if (end == std::string::npos) end = path.size();
    if (end - start > NAME_MAX)
      throw UserError(rule.field,
                      "the path is too long: its name \"" + shortened(path.substr(start, end - start)) + "\" is " +
                          std::to_string(end - start) + " bytes, and a file name may be at most " +
                          std::to_string(NAME_MAX),
                      "choose a shorter file name");
    start = end + 1;
  }
  if (path.size() >= PATH_MAX)
    throw UserError(rule.field, "the path is too long (" + std::to_string(path.size()) + " bytes; at most " +
                                    std::to_string(PATH_MAX - 1) + ")",
                    "choose a shorter path");
  if (!rule.sqlite) return;
  std::string abs = path;
  if (path[0] != '/') {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd)) abs = std::string(cwd) + "/" + path;
  }
  if (abs.size() > kSqliteMaxPath)
    throw UserError(rule.field,
                    "the path is too long for a database (" + std::to_string(abs.size()) +
                        " bytes as an absolute path; SQLite takes at most 512, and the files made beside it are "
                        "longer: at most " + std::to_string(kSqliteMaxPath) + ")",
                    "choose a shorter path, or run from a folder nearer to it");
}

// Refuses the path when it is one of the inputs or an input's companion (existing or not).
void checkNotAnInput(const std::string& path, const OutputRule& rule, const struct stat* target) {
  const std::string where = locationOf(path);
  for (const std::string& in : rule.inputs) {
    if (in.empty()) continue;
    for (const char* suffix : {"", "-wal", "-shm", "-journal"}) {
      const std::string name = in + suffix;
      struct stat st {};
      bool same = target && ::stat(name.c_str(), &st) == 0 && st.st_dev == target->st_dev && st.st_ino == target->st_ino;
      if (!same && !where.empty()) same = locationOf(name) == where;
      if (!same) continue;
      if (*suffix == '\0')
        throw UserError(rule.field, path + " is the input " + in + " itself (this command reads it)",
                        "name a new file: an output never replaces an input");
      throw UserError(rule.field,
                      path + " is " + name + ", SQLite's " + std::string(suffix + 1) + " file of the input " + in,
                      "name a new file: an output never replaces an input or the files SQLite keeps beside it");
    }
  }
}

// A database's companions: none may be there for a new database (a stale -wal would be read into it,
// a link written through); for one replaced, only its own regular files.
void checkCompanions(const std::string& path, const OutputRule& rule, bool replacing) {
  for (const char* suffix : kCompanions) {
    const std::string side = path + suffix;
    struct stat st {};
    if (::lstat(side.c_str(), &st) != 0) continue;
    if (!replacing)
      throw UserError(rule.field,
                      side + " exists beside the new database " + path +
                          (S_ISREG(st.st_mode) ? " (left by a database that was there)" : " (and is not a regular file)") +
                          "; SQLite would use it",
                      "remove " + side + ", or choose another path");
    if (!S_ISREG(st.st_mode))
      throw UserError(rule.field, side + " is " + (S_ISLNK(st.st_mode) ? "a symbolic link" : "not a regular file") +
                                      ", where SQLite keeps a file of " + path,
                      "remove " + side + ", or choose another path");
  }
}

}  // namespace

bool sameEntry(const std::string& a, const std::string& b) {
  const std::string la = locationOf(a);
  if (!la.empty() && la == locationOf(b)) return true;
  struct stat sa {}, sb {};
  return ::lstat(a.c_str(), &sa) == 0 && ::lstat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
         sa.st_ino == sb.st_ino;
}

std::function<bool(int, const std::string&)> startsWith(std::string prefix) {
  return [prefix = std::move(prefix)](int fd, const std::string&) {
    std::string head(prefix.size(), '\0');
    size_t got = 0;
    while (got < head.size()) {
      const ssize_t n = ::pread(fd, head.data() + got, head.size() - got, off_t(got));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      got += size_t(n);
    }
    return got == head.size() && head == prefix;
  };
}

OutputFound checkOutput(const std::string& path, const OutputRule& rule) {
  if (path.find_first_not_of(" \t\n\r\f\v") == std::string::npos)
    throw UserError(rule.field, "is empty", "name the file to write");
  checkLength(path, rule);
  const std::string folder = folderOf(path);
  struct stat fst {};
  if (::stat(folder.c_str(), &fst) != 0 || !S_ISDIR(fst.st_mode))
    throw UserError(rule.field, "the folder " + folder + " of " + path + " does not exist", "create it first");
  struct stat ls {}, ts {};
  const bool exists = ::lstat(path.c_str(), &ls) == 0;
  if (!exists && errno != ENOENT)
    throw UserError(rule.field, "cannot use " + path + ": " + std::strerror(errno), "choose another path");
  const bool target = exists && ::stat(path.c_str(), &ts) == 0;
  checkNotAnInput(path, rule, target ? &ts : nullptr);
  OutputFound found;
  if (!exists) {
    if (rule.sqlite) checkCompanions(path, rule, false);
    return found;
  }
  found.existing = Existing::Replace;
  found.dev = uint64_t(ls.st_dev);
  found.ino = uint64_t(ls.st_ino);
  if (S_ISDIR(ls.st_mode)) throw UserError(rule.field, path + " is a directory", "name a file");
  if (S_ISLNK(ls.st_mode)) {
    if (rule.only_earlier)
      throw UserError(rule.field, path + " is a symbolic link; only an earlier " + rule.kind + " is replaced",
                      "choose another path");
    if (!rule.overwrite)
      throw UserError(rule.field, path + " is a symbolic link",
                      "name a new file, or pass --overwrite to replace the link itself (never what it points to)");
    if (rule.sqlite) checkCompanions(path, rule, true);
    return found;
  }
  if (!S_ISREG(ls.st_mode))
    throw UserError(rule.field, path + " exists and is not a regular file (a FIFO, device or socket)",
                    "name a new file");
  if (rule.earlier) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    struct stat st {};
    found.earlier = fd >= 0 && ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_ino == ls.st_ino &&
                    rule.earlier(fd, path);
    if (fd >= 0) ::close(fd);
  }
  if (found.earlier) {
    if (rule.earlier_needs_overwrite && !rule.overwrite)
      throw UserError(rule.field, path + " already exists", "choose another path or pass --overwrite");
  } else if (rule.only_earlier) {
    throw UserError(rule.field, path + " exists and is not a " + rule.kind + "; only an earlier one is replaced",
                    "choose another path");
  } else if (!rule.overwrite) {
    throw UserError(rule.field,
                    path + " already exists" + (rule.earlier ? " and is not an earlier " + rule.kind : std::string()),
                    "name a new file, or pass --overwrite to replace it");
  }
  if (rule.sqlite) checkCompanions(path, rule, true);
  return found;
}

}  // namespace trainscope::files
