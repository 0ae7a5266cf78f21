// temp_folders.cpp — see temp_folders.h.
#include "state/temp_folders.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/common/owner_marker.h"

namespace trainscope::runtime {
namespace {

constexpr const char* kMarkerFormat = "trainscope-checkpoint-temp";

// Entries of the folder open at fd (without . and ..); fd stays open.
std::vector<std::string> entriesAt(int fd) {
  std::vector<std::string> out;
  const int dup = ::dup(fd);
  if (dup < 0) return out;
  DIR* d = ::fdopendir(dup);
  if (!d) {
    ::close(dup);
    return out;
  }
  while (dirent* e = ::readdir(d))
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) out.push_back(e->d_name);
  ::closedir(d);
  return out;
}

bool endsWith(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}

bool isTempName(const std::string& name, const std::string& base) {
  const std::string prefix = "." + base + ".tmp-";
  if (name.size() != prefix.size() + 6 || name.compare(0, prefix.size(), prefix) != 0) return false;
  for (size_t i = prefix.size(); i < name.size(); ++i)
    if (!std::isalnum(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

bool checkpointFile(const std::string& e) {
  return (e.rfind("model", 0) == 0 && (endsWith(e, ".safetensors") || e == "model.safetensors.index.json")) ||
         e == "config.json";
}

}  // namespace

std::string baseName(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t s = p.rfind('/');
  return s == std::string::npos ? p : p.substr(s + 1);
}

std::string parentOf(std::string p) {
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return files::folderOf(p);
}

void writeTempMarker(const std::string& tmp, const std::string& dir) {
  owner::writeMarker(tmp + "/" + kTempMarker, kMarkerFormat, baseName(dir), "--save");
}

void removeTempMarker(const std::string& tmp) { ::unlink((tmp + "/" + kTempMarker).c_str()); }

bool removeCheckpointFiles(const std::string& path, unsigned long long dev, unsigned long long ino) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || (ino != 0 && (st.st_dev != dev || st.st_ino != ino))) {
    ::close(fd);
    return false;
  }
  const int sd = ::openat(fd, "trainscope", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (sd >= 0) {
    for (const std::string& e : entriesAt(sd))
      if (e == "state.json" || (e.rfind("optimizer", 0) == 0 && endsWith(e, ".safetensors"))) ::unlinkat(sd, e.c_str(), 0);
    ::close(sd);
    ::unlinkat(fd, "trainscope", AT_REMOVEDIR);  // only when empty
  }
  for (const std::string& e : entriesAt(fd)) {
    struct stat es {};
    if (checkpointFile(e) && ::fstatat(fd, e.c_str(), &es, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(es.st_mode))
      ::unlinkat(fd, e.c_str(), 0);  // a link of that name is removed itself, never what it points to
  }
  ::unlinkat(fd, kTempMarker, 0);  // last: until the folder is emptied it stays provably ours
  const bool empty = entriesAt(fd).empty();
  ::close(fd);
  return empty && ::rmdir(path.c_str()) == 0;
}

std::vector<std::string> removeStaleTemps(const std::string& dir) {
  std::vector<std::string> removed;
  const std::string parent = parentOf(dir), base = baseName(dir);
  const int pfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (pfd < 0) return removed;
  for (const std::string& name : entriesAt(pfd)) {
    if (!isTempName(name, base)) continue;
    struct stat st {};
    if (::fstatat(pfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != ::geteuid())
      continue;  // a link, a file, or another user's
    const int fd = ::openat(pfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat again {};
    const owner::Marker m = ::fstat(fd, &again) == 0 && again.st_ino == st.st_ino && again.st_dev == st.st_dev
                                ? owner::readMarker(fd, kTempMarker, kMarkerFormat) : owner::Marker{};
    ::close(fd);
    if (!m.valid || m.for_name != base || m.writer_alive) continue;
    const std::string path = parent + "/" + name;
    if (removeCheckpointFiles(path, st.st_dev, st.st_ino)) removed.push_back(path);
  }
  ::close(pfd);
  return removed;
}

}  // namespace trainscope::runtime
