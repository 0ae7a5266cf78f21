// files.cpp — safe creation and opening of files (see files.h).
#include "trainscope/common/files.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "trainscope/common/error.h"

namespace trainscope::files {
namespace {

std::string errnoText() { return std::strerror(errno); }

// An ostream's buffer over a descriptor we own (written in 64 KiB pieces).
class FdBuf : public std::streambuf {
 public:
  explicit FdBuf(int fd) : fd_(fd), buf_(1 << 16) { setp(buf_.data(), buf_.data() + buf_.size()); }
  ~FdBuf() override { sync(); }

 protected:
  int_type overflow(int_type c) override {
    if (sync() != 0) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override {
    const char* p = pbase();
    while (p < pptr()) {
      const ssize_t n = ::write(fd_, p, size_t(pptr() - p));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return -1;
      p += n;
    }
    setp(buf_.data(), buf_.data() + buf_.size());
    return 0;
  }

 private:
  int fd_;
  std::vector<char> buf_;
};

// A new file under a random name in the folder of `path`: its descriptor and name.
int makeTemp(const std::string& path, const std::string& field, std::string& temp) {
  const std::string folder = folderOf(path);
  std::string base = path.substr(path.find_last_of('/') == std::string::npos ? 0 : path.find_last_of('/') + 1);
  if (base.size() > 100) base.resize(100);
  std::string templ = folder + "/." + base + ".tmp-XXXXXX";
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back('\0');
  const int fd = ::mkstemp(name.data());
  if (fd < 0)
    throw UserError(field, "cannot create a file in " + folder + " (for " + path + "): " + errnoText(),
                    "check that the folder exists and is writable");
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  ::fchmod(fd, 0666 & ~mask);
  temp.assign(name.data());
  return fd;
}

// Replaces what checkOutput found at `path` with `temp`, closing the window between that check and the
// rename: the two entries are exchanged in one step (renameat2 RENAME_EXCHANGE), and if what came
// back is not what was checked (something was put there meanwhile), they are exchanged back and the
// output is refused: what was planted is left as it was. False when this file system cannot exchange
// (the caller renames).
bool exchangeIfUnchanged(const std::string& temp, const std::string& path, const OutputFound& found,
                         const std::string& field) {
  if (::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) != 0) return false;
  struct stat was {};
  const bool same = ::lstat(temp.c_str(), &was) == 0 && uint64_t(was.st_dev) == found.dev &&
                    uint64_t(was.st_ino) == found.ino;  // a link with --overwrite: the link itself
  if (!same) {
    const bool back = ::renameat2(AT_FDCWD, temp.c_str(), AT_FDCWD, path.c_str(), RENAME_EXCHANGE) == 0;
    if (back) ::unlink(temp.c_str());
    throw UserError(field, path + " was replaced by something else while the output was written" +
                               (back ? std::string() : " (the new file is at " + temp + ")"),
                    "check what is at the path and run again");
  }
  ::unlink(temp.c_str());
  return true;
}

}  // namespace

// Moves the finished temporary file to `path` (see Existing).
void place(const std::string& temp, const std::string& path, Existing existing, const std::string& field) {
  if (existing == Existing::Refuse) {
    if (::link(temp.c_str(), path.c_str()) != 0) {
      const int err = errno;
      ::unlink(temp.c_str());
      if (err == EEXIST)
        throw UserError(field, path + " already exists", "choose another path or pass --overwrite");
      throw UserError(field, "cannot create " + path + ": " + std::strerror(err), "choose a writable path");
    }
    ::unlink(temp.c_str());
    return;
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    ::unlink(temp.c_str());
    throw UserError(field, path + " is a directory", "name a file");
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp.c_str());
    throw UserError(field, "cannot write " + path + ": " + std::strerror(err), "choose a writable path");
  }
}

void place(const std::string& temp, const std::string& path, const OutputRule& rule) {
  OutputFound found;
  try {
    found = checkOutput(path, rule);  // again: what was planted since the first check is refused
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  if (found.existing == Existing::Replace && found.ino != 0 && exchangeIfUnchanged(temp, path, found, rule.field))
    return;
  place(temp, path, found.existing, rule.field);
}

TempFile makeTempBeside(const std::string& path, const std::string& field) {
  TempFile t;
  t.fd = makeTemp(path, field, t.path);
  return t;
}

std::string folderOf(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

AtomicFile::AtomicFile(std::string path, OutputRule rule) : path_(std::move(path)), rule_(std::move(rule)) {
  checkOutput(path_, rule_);  // refused before any work
  fd_ = makeTemp(path_, rule_.field, temp_);
  buf_ = std::make_unique<FdBuf>(fd_);
  stream_ = std::make_unique<std::ostream>(buf_.get());
}

AtomicFile::~AtomicFile() {
  stream_.reset();
  buf_.reset();
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::commit() {
  stream_->flush();
  const bool ok = stream_->good() && ::fsync(fd_) == 0;
  const int err = errno;
  stream_.reset();
  buf_.reset();
  const bool closed = ::close(fd_) == 0;
  fd_ = -1;
  if (!ok || !closed)
    throw UserError(rule_.field, "cannot write " + path_ + ": " + std::strerror(ok ? errno : err),
                    "check the free space and that the folder is writable");
  committed_ = true;  // place() removes the temporary file on failure itself
  place(temp_, path_, rule_);
}

void writeAtomically(const std::string& path, const std::string& text, const OutputRule& rule) {
  AtomicFile f(path, rule);
  f.stream() << text;
  f.commit();
}

int createFile(const std::string& path, const OutputRule& rule) {
  checkOutput(path, rule);
  std::string temp;
  const int fd = makeTemp(path, rule.field, temp);
  try {
    place(temp, path, rule);
  } catch (...) {
    ::close(fd);
    throw;
  }
  return fd;
}

void requireRegularFile(const std::string& path, const std::string& field, const std::string& fix) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw UserError(field, path + " does not exist", fix);
  if (S_ISDIR(st.st_mode)) throw UserError(field, path + " is a directory", fix);
  if (!S_ISREG(st.st_mode)) throw UserError(field, path + " is not a regular file (a FIFO, device or socket)", fix);
}

int openRegularFile(const std::string& path, const std::string& field, const std::string& fix) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) throw UserError(field, path + " does not exist", fix);
    throw UserError(field, "cannot read " + path + ": " + errnoText(), fix);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw UserError(field, path + (S_ISDIR(st.st_mode) ? " is a directory" : " is not a regular file (a FIFO, device or socket)"),
                    fix);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string readTextFile(const std::string& path, const std::string& field, const std::string& fix, int64_t cap) {
  const int fd = openRegularFile(path, field, fix);
  auto tooBig = [&] {
    ::close(fd);
    return UserError(field, path + " holds more than " + std::to_string(cap >> 20) + " MiB, more than a text input may",
                     fix);
  };
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size > cap) throw tooBig();
  std::string text;
  char buf[1 << 16];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {  // to the end: a file may grow while read
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string why = errnoText();
      ::close(fd);
      throw UserError(field, "cannot read " + path + ": " + why, fix);
    }
    text.append(buf, size_t(n));
    if (int64_t(text.size()) > cap) throw tooBig();
  }
  ::close(fd);
  return text;
}

std::string shellQuote(const std::string& s) {
  if (s.empty()) return "''";
  bool safe = true;
  for (char c : s)
    safe &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            std::strchr("@%_+=:,./-", c) != nullptr;
  if (safe) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace trainscope::files
