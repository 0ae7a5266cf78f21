// study_copy.cpp — see study_copy.h and removeStaleStudyCopies in study.h.
#include "study_copy.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/owner_marker.h"
#include "trainscope/tuner/study.h"

namespace trainscope::tuner {

using rundb::Database;

namespace {

// A private copy being read (Study(path), readStudy, isStudy): `trainscope-study-XXXXXX` in $TMPDIR,
// its marker (common/owner_marker.h) written first. Removed with what SQLite made in it.
constexpr const char* kCopyPrefix = "trainscope-study-";
constexpr const char* kCopyMarker = ".trainscope-reading";
constexpr const char* kCopyFormat = "trainscope-study-copy";
constexpr const char* kCopyFiles[] = {"study.db", "study.db-wal", "study.db-shm", "study.db-journal", kCopyMarker};

std::string tempRoot() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

}  // namespace

void removeCopy(const std::string& dir) {
  if (dir.empty()) return;
  for (const char* f : kCopyFiles) ::unlink((dir + "/" + f).c_str());
  ::rmdir(dir.c_str());
}

static void copyInto(const std::string& from, const std::string& to) {
  const int in = files::openRegularFile(from, "study", "check that the study can be read");
  // `to` is in a folder of our own (mkdtemp): O_EXCL | O_NOFOLLOW as a matter of course.
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  bool ok = out >= 0;
  char buf[1 << 16];
  for (ssize_t n; ok && (n = ::read(in, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    for (ssize_t w = 0; ok && w < n;) {
      const ssize_t k = ::write(out, buf + w, size_t(n - w));
      ok = k > 0;
      w += k;
    }
  }
  ::close(in);
  if (out >= 0) ::close(out);
  if (!ok)
    throw UserError("study", "cannot copy " + from + " to read it: " + std::strerror(errno),
                    "set TMPDIR to a writable folder with room for the study");
}

// Opens a study for reading, writing nothing into it or beside it. SQLite reads a WAL study's -wal
// through its -shm: where a killed tune left a -wal with writes but no -shm, and the folder cannot
// be written (read-only storage, another user's folder), the -shm cannot be made and an immutable
// open would skip the -wal (the study's last trials, or all of it). The study and its -wal are then
// copied into a private folder and read there.
std::unique_ptr<Database> openForReading(const std::string& path, std::string& copy_dir) {
  struct stat wal {
  }, shm{};
  const bool wal_writes = ::stat((path + "-wal").c_str(), &wal) == 0 && wal.st_size > 32;
  const bool has_shm = ::stat((path + "-shm").c_str(), &shm) == 0;
  if (!wal_writes || has_shm || ::access(files::folderOf(path).c_str(), W_OK) == 0)
    return std::make_unique<Database>(path, Database::Mode::ReadOnly);
  removeStaleStudyCopies();
  std::string templ = tempRoot() + "/" + kCopyPrefix + "XXXXXX";
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back('\0');
  if (!::mkdtemp(name.data()))
    throw UserError("study",
                    path + "-wal needs a -shm file to be read, and neither its folder nor " + std::string(name.data()) +
                        " is writable: " + std::strerror(errno),
                    "set TMPDIR to a writable folder");
  copy_dir = name.data();
  try {
    owner::writeMarker(copy_dir + "/" + kCopyMarker, kCopyFormat, "study.db", "study");
    copyInto(path, copy_dir + "/study.db");
    copyInto(path + "-wal", copy_dir + "/study.db-wal");
    return std::make_unique<Database>(copy_dir + "/study.db", Database::Mode::ReadOnly);
  } catch (...) {
    removeCopy(copy_dir);
    copy_dir.clear();
    throw;
  }
}

std::vector<std::string> removeStaleStudyCopies() {
  std::vector<std::string> removed;
  const std::string root = tempRoot();
  const int rfd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (rfd < 0) return removed;
  std::vector<std::string> names;
  if (DIR* d = ::fdopendir(::dup(rfd))) {
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      const size_t k = std::strlen(kCopyPrefix);
      if (n.size() == k + 6 && n.compare(0, k, kCopyPrefix) == 0 &&
          std::all_of(n.begin() + long(k), n.end(), [](char ch) { return std::isalnum(static_cast<unsigned char>(ch)); }))
        names.push_back(n);
    }
    ::closedir(d);
  }
  for (const std::string& n : names) {
    struct stat st {}, again{};
    if (::fstatat(rfd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
      continue;  // a link, a file, another user's
    const int fd = ::openat(rfd, n.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    const owner::Marker m = ::fstat(fd, &again) == 0 && again.st_ino == st.st_ino && again.st_dev == st.st_dev
                                ? owner::readMarker(fd, kCopyMarker, kCopyFormat) : owner::Marker{};
    if (m.valid && m.for_name == "study.db" && !m.writer_alive) {
      for (const char* f : kCopyFiles) {  // only a copy's own names, each relative to the folder opened once
        struct stat fs {};
        if (::fstatat(fd, f, &fs, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(fs.st_mode)) ::unlinkat(fd, f, 0);
      }
      if (::unlinkat(rfd, n.c_str(), AT_REMOVEDIR) == 0) removed.push_back(root + "/" + n);  // only when empty
    }
    ::close(fd);
  }
  ::close(rfd);
  return removed;
}

}  // namespace trainscope::tuner
