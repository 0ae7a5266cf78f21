// owner_marker.cpp — see owner_marker.h.
#include "trainscope/common/owner_marker.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"

namespace trainscope::owner {
namespace {

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

bool writerAlive(const nlohmann::json& m) {
  try {
    if (m.at("host").get<std::string>() != hostName()) return true;  // not ours to check
    if (m.at("boot_id").get<std::string>() != bootId()) return false;
    const long long pid = m.at("pid").get<long long>(), start = m.at("start_time").get<long long>();
    const long long now = startTime(pid);
    return now >= 0 && now == start;
  } catch (const nlohmann::json::exception&) {
    return true;
  }
}

}  // namespace

void writeMarker(const std::string& path, const std::string& format, const std::string& for_name,
                 const std::string& field) {
  nlohmann::json m = {{"format", format}, {"for", for_name}, {"host", hostName()},
                      {"pid", static_cast<long long>(::getpid())}, {"start_time", startTime(::getpid())},
                      {"boot_id", bootId()}, {"uid", static_cast<long long>(::geteuid())}};
  const std::string text = m.dump() + "\n";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError(field, "could not create " + path + ": " + std::strerror(errno), "check the folder");
  const bool ok = ::write(fd, text.data(), text.size()) == ssize_t(text.size()) && ::fsync(fd) == 0;
  ::close(fd);
  if (!ok) throw UserError(field, "could not write " + path + ": " + std::strerror(errno), "check the disk's free space");
}

Marker readMarker(int dir_fd, const char* name, const std::string& format) {
  Marker out;
  const int m = ::openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (m < 0) return out;
  struct stat st {};
  std::string text;
  if (::fstat(m, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid() && st.st_size < 4096) {
    text.resize(size_t(st.st_size));
    if (::read(m, text.data(), text.size()) != ssize_t(text.size())) text.clear();
  }
  ::close(m);
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object() || j.value("format", "") != format) return out;
    out.valid = true;
    out.for_name = j.value("for", "");
    out.writer_alive = writerAlive(j);
  } catch (const nlohmann::json::exception&) {
  }
  return out;
}

}  // namespace trainscope::owner
