// temp_folders.cpp — see temp_folders.h.
#include "state/temp_folders.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"

namespace trainscope::runtime {
namespace {

constexpr const char* kMarkerFormat = "trainscope-checkpoint-temp";

std::string hostName() {
  char buf[256] = {};
  ::gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string bootId() {
  std::ifstream f("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(f, id);
  return id;
}

// Field 22 of /proc/PID/stat (the process's start, clock ticks after boot); -1 when there is none.
long long startTime(long long pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return -1;
  std::istringstream in(text.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22; ++i)
    if (!(in >> field)) return -1;
  try {
    return std::stoll(field);
  } catch (const std::exception&) {
    return -1;
  }
}

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

// The marker of the folder open at fd, when it is a regular file of this user's (else null).
nlohmann::json markerAt(int fd) {
  const int m = ::openat(fd, kTempMarker, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (m < 0) return nullptr;
  struct stat st {};
  std::string text;
  if (::fstat(m, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && st.st_size < 4096) {
    text.resize(size_t(st.st_size));
    if (::read(m, text.data(), text.size()) != ssize_t(text.size())) text.clear();
  }
  ::close(m);
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (j.is_object() && j.value("format", "") == kMarkerFormat) return j;
  } catch (const nlohmann::json::exception&) {
  }
  return nullptr;
}

// Whether the marker's writer may still be running (anything not provably gone counts as alive).
bool writerAlive(const nlohmann::json& m) {
  try {
    if (m.at("host").get<std::string>() != hostName()) return true;  // not ours to check
    if (m.at("boot_id").get<std::string>() != bootId()) return false;
    const long long pid = m.at("pid").get<long long>(), start = m.at("start_time").get<long long>();
    if (pid == ::getpid()) return startTime(pid) == start;
    const long long now = startTime(pid);
    return now >= 0 && now == start;
  } catch (const nlohmann::json::exception&) {
    return true;
  }
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
  nlohmann::json m = {{"format", kMarkerFormat}, {"for", baseName(dir)}, {"host", hostName()},
                      {"pid", static_cast<long long>(::getpid())}, {"start_time", startTime(::getpid())},
                      {"boot_id", bootId()}, {"uid", static_cast<long long>(::geteuid())}};
  const std::string path = tmp + "/" + kTempMarker, text = m.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError("--save", "could not create " + path + ": " + std::strerror(errno), "check the folder");
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw UserError("--save", "could not write " + path + ": " + std::strerror(errno), "check the disk's free space");
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
    const nlohmann::json m = ::fstat(fd, &again) == 0 && again.st_ino == st.st_ino && again.st_dev == st.st_dev
                                 ? markerAt(fd) : nlohmann::json();
    ::close(fd);
    if (m.is_null() || m.value("for", "") != base || writerAlive(m)) continue;
    const std::string path = parent + "/" + name;
    if (removeCheckpointFiles(path, st.st_dev, st.st_ino)) removed.push_back(path);
  }
  ::close(pfd);
  return removed;
}

}  // namespace trainscope::runtime
