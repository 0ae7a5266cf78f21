// store.cpp — RunStore: creating, locking, writing and closing a run database (see store.h).
#include "trainscope/rundb/store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "row_io.h"
#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"

namespace trainscope::rundb {
namespace {

constexpr int kRowsPerInsert = 64;  // rows per multi-row INSERT: cuts SQLite's per-statement cost

std::string hostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

std::string folderOf(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? "." : parent;
}

}  // namespace

PathCheck inspectPath(const std::string& path) {
  PathCheck c;
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) {
      c.kind = PathCheck::Kind::Other;
      c.what = std::string("unreadable (") + std::strerror(errno) + ")";
    }
    return c;
  }
  c.kind = PathCheck::Kind::Other;
  if (S_ISDIR(st.st_mode)) c.what = "a directory";
  else if (S_ISLNK(st.st_mode)) c.what = "a symbolic link";
  else if (!S_ISREG(st.st_mode)) c.what = "not a regular file (a device, FIFO or socket)";
  else if (st.st_size == 0) c.kind = PathCheck::Kind::Empty;  // no data to lose (an older run killed at creation)
  else if (!looksLikeSqlite(path)) c.what = "not a trainscope run database";
  else if (const std::string why = sqliteDamage(path); !why.empty()) c.what = "a damaged SQLite file (" + why + ")";
  if (!c.what.empty() || c.kind == PathCheck::Kind::Empty) return c;
  // Note: this opens and closes a descriptor on the file. A process must not do so on a database it
  // has open through SQLite itself (POSIX locks are per process); RunStore never inspects its own.
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK) c.locked = true;
    close(fd);
  }
  try {
    Database db(path, Database::Mode::ReadOnly);
    checkRunDatabase(db);
    c.kind = PathCheck::Kind::RunDatabase;
    Statement s(db, "SELECT value FROM meta WHERE key = 'writer_pid'");
    if (s.step()) c.writer_pid = std::atoll(s.columnText(0).c_str());
  } catch (const std::exception&) {
    c.what = "a SQLite file that is not a trainscope run database";
  }
  return c;
}

files::OutputRule runDatabaseRule(const std::string& field, bool overwrite, std::vector<std::string> inputs) {
  files::OutputRule r;
  r.field = field;
  r.inputs = std::move(inputs);
  r.overwrite = overwrite;
  r.kind = "trainscope run database";
  r.earlier = [](int fd, const std::string& path) {
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_size == 0) return true;  // no data to lose (a run killed at creation)
    return inspectPath(path).kind == PathCheck::Kind::RunDatabase;
  };
  r.only_earlier = true;             // never someone else's file, even with --overwrite
  r.earlier_needs_overwrite = true;  // and an earlier run only with --overwrite
  r.sqlite = true;
  return r;
}

PathCheck checkWritable(const std::string& path, bool overwrite, const std::string& field,
                        const std::vector<std::string>& inputs) {
  files::checkOutput(path, runDatabaseRule(field, overwrite, inputs));  // the one rule of every output
  const PathCheck c = inspectPath(path);
  if (c.kind == PathCheck::Kind::RunDatabase && c.locked)
    throw UserError(field, path + " is being written by another trainscope process" +
                               (c.writer_pid ? " (pid " + std::to_string(c.writer_pid) + ")" : std::string()),
                    "wait for it to finish or choose another path");
  const std::string folder = folderOf(path);
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec))
    throw UserError(field, "the folder " + folder + " of " + path + " does not exist", "create it first");
  if (access(folder.c_str(), W_OK) != 0)
    throw UserError(field, "the folder " + folder + " of " + path + " is not writable", "choose a writable folder");
  // access() says yes to root everywhere, also where nothing can be created (sysfs, a read-only
  // mount): create a file of our own there and remove it, so that the answer comes before any rank
  // starts.
  const std::string probe = folder + "/.trainscope-probe-" + std::to_string(getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0 && errno != EEXIST)
    throw UserError(field, "cannot create files in " + folder + " (for " + path + "): " + std::strerror(errno),
                    "choose a writable folder");
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
  return c;
}

void removeRunDatabase(const std::string& path, const std::string& field) {
  checkWritable(path, true, field);
  for (const char* suffix : {"-wal", "-shm", ""}) {
    const std::string p = path + suffix;
    struct stat st {};
    if (lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) unlink(p.c_str());
  }
}

RunStore::RunStore(const std::string& path, const Options& o) : path_(path) {
  // Refuses what is not ours, a locked run, a missing folder.
  const PathCheck found = checkWritable(path, o.overwrite, o.field, o.inputs);
  // The new database is made complete (schema, meta) under a random name beside the path, locked,
  // and only then put at the path: a run killed at any moment leaves either nothing or a run
  // database there, never an empty or half-made file.
  const files::TempFile temp = files::makeTempBeside(path, o.field);
  lock_fd_ = temp.fd;
  flock(lock_fd_, LOCK_EX | LOCK_NB);  // a file we just created: nobody else can hold it
  try {
    Database made(temp.path, Database::Mode::Create);
    if (o.bulk) made.exec("PRAGMA page_size=65536;");
    createSchema(made);
    Statement m(made, "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)");
    for (const auto& [k, v] : {std::pair<std::string, std::string>{"schema_version", std::to_string(kSchemaVersion)},
                               {"writer_pid", std::to_string(getpid())},
                               {"writer_host", hostName()}}) {
      m.bind(1, k);
      m.bind(2, v);
      m.step();
      m.reset();
    }
  } catch (...) {
    ::unlink(temp.path.c_str());
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw;
  }
  // Replacing: hold the old file's lock while its -wal/-shm are removed and the new file takes its
  // name, and check that the path still names it — a writer that raced us may have replaced it
  // already, and its new file is not ours to replace.
  int old_fd = -1;
  if (found.kind == PathCheck::Kind::RunDatabase || found.kind == PathCheck::Kind::Empty) {
    old_fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    struct stat held {}, now {};
    if (old_fd < 0 || flock(old_fd, LOCK_EX | LOCK_NB) != 0 || fstat(old_fd, &held) != 0 ||
        lstat(path.c_str(), &now) != 0 || held.st_ino != now.st_ino || held.st_dev != now.st_dev) {
      if (old_fd >= 0) ::close(old_fd);
      ::unlink(temp.path.c_str());
      ::close(lock_fd_);
      lock_fd_ = -1;
      throw UserError(o.field, path + " is being written or replaced by another trainscope process",
                      "wait for it to finish or choose another path");
    }
    for (const char* suffix : {"-wal", "-shm", "-journal"}) {  // the old database's: they must not meet the new one
      const std::string p = path + suffix;
      struct stat st {};
      if (lstat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode)) unlink(p.c_str());
    }
  }
  try {
    // link(2) for a new path: of two writers started at once, exactly one takes it.
    files::place(temp.path, path, old_fd >= 0 ? files::Existing::Replace : files::Existing::Refuse, o.field);
  } catch (...) {
    if (old_fd >= 0) ::close(old_fd);
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw;
  }
  if (old_fd >= 0) ::close(old_fd);  // the replaced file's lock, now that ours holds the path
  db_ = std::make_unique<Database>(path, Database::Mode::ReadWrite);
  if (o.bulk)  // written in big sequential batches and rebuilt if lost: no fsync
    db_->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=OFF; PRAGMA cache_size=-65536;");
  else
    db_->exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;");
  strings_loaded_ = true;  // a new file has no strings yet
}

RunStore::~RunStore() {
  try {
    close();
  } catch (...) {
  }
}

void RunStore::close() {
  if (!db_) return;
  if (in_tx_) rollback();
  statements_.clear();
  std::exception_ptr failure;
  try {
    db_->exec("PRAGMA wal_checkpoint(TRUNCATE); PRAGMA journal_mode=DELETE;");
  } catch (...) {
    failure = std::current_exception();
  }
  db_.reset();
  if (lock_fd_ >= 0) ::close(lock_fd_);
  lock_fd_ = -1;
  if (failure) std::rethrow_exception(failure);
}

Statement& RunStore::cached(const std::string& sql) {
  auto& s = statements_[sql];
  if (!s) s = std::make_unique<Statement>(*db_, sql);
  return *s;
}

void RunStore::setMeta(const std::string& key, const std::string& value) {
  cached(insertSql(table("meta"), 1, "INSERT OR REPLACE")).exec(key, value);
}

void RunStore::appendStep(const Step& r) {
  Statement& s = cached(insertSql(table("steps"), 1, "INSERT OR REPLACE"));
  io::RowIo<Step>::bind(s, 1, r);
  s.run();  // autocommit outside a batch: each step is durable on its own
}

void RunStore::putRank(const RankInfo& r) {
  Statement& s = cached(insertSql(table("ranks"), 1, "INSERT OR REPLACE"));
  io::RowIo<RankInfo>::bind(s, 1, r);
  s.run();
}

void RunStore::appendCollectives(const std::vector<Collective>& rows) {
  begin();
  put(rows);
  commit();
}

void RunStore::appendExpertLoad(const std::vector<ExpertLoad>& rows) {
  Statement& s = cached(insertSql(table("expert_load"), 1, "INSERT OR REPLACE"));
  begin();
  try {
    for (const ExpertLoad& r : rows) {
      io::RowIo<ExpertLoad>::bind(s, 1, r);
      s.run();
    }
    commit();
  } catch (...) {
    rollback();  // none of the step's rows, rather than some
    throw;
  }
}

void RunStore::appendCheckpoint(const Checkpoint& row) {
  Statement& s = cached(insertSql(table("checkpoints"), 1, "INSERT OR REPLACE"));
  begin();
  try {
    io::RowIo<Checkpoint>::bind(s, 1, row);
    s.run();
    commit();
  } catch (...) {
    rollback();
    throw;
  }
}

void RunStore::appendFp8Scales(const std::vector<Fp8Scale>& rows) {
  Statement& s = cached(insertSql(table("fp8_scales"), 1, "INSERT OR REPLACE"));
  begin();
  try {
    for (const Fp8Scale& r : rows) {
      io::RowIo<Fp8Scale>::bind(s, 1, r);
      s.run();
    }
    commit();
  } catch (...) {
    rollback();
    throw;
  }
}

void RunStore::writeWeightDigest(const std::vector<WeightDigest>& digest) {
  begin();
  Statement& s = cached(insertSql(table("weight_digest"), 1, "INSERT OR REPLACE"));
  for (const auto& d : digest) {
    io::RowIo<WeightDigest>::bind(s, 1, d);
    s.run();
  }
  commit();
}

void RunStore::begin() {
  db_->exec("BEGIN");
  in_tx_ = true;
}

void RunStore::commit() {
  db_->exec("COMMIT");
  in_tx_ = false;
}

void RunStore::rollback() {
  in_tx_ = false;
  try {
    db_->exec("ROLLBACK");
  } catch (...) {
  }
}

void RunStore::putStrings(const std::vector<std::pair<StringId, std::string>>& strings) {
  Statement& s = cached(insertSql(table("strings"), 1, "INSERT OR REPLACE"));
  for (const auto& [id, v] : strings) s.exec(id, v);
}

StringId RunStore::intern(std::string_view v) {
  if (!strings_loaded_) {
    for (auto& [id, text] : io::loadStrings(*db_)) {
      interned_.emplace(std::move(text), StringId(id));
      next_string_ = std::max(next_string_, StringId(id + 1));
    }
    strings_loaded_ = true;
  }
  auto it = interned_.find(std::string(v));
  if (it != interned_.end()) return it->second;
  const StringId id = next_string_++;
  interned_.emplace(std::string(v), id);
  cached(insertSql(table("strings"))).exec(id, v);
  return id;
}

template <class Row>
void RunStore::putRows(const std::vector<Row>& rows) {
  const Table& t = table(io::RowIo<Row>::kTable);
  const int n = int(t.columns.size());
  size_t i = 0;
  if (rows.size() >= size_t(kRowsPerInsert)) {
    Statement& many = cached(insertSql(t, kRowsPerInsert));
    for (; i + kRowsPerInsert <= rows.size(); i += kRowsPerInsert) {
      for (int k = 0; k < kRowsPerInsert; ++k) io::RowIo<Row>::bind(many, 1 + n * k, rows[i + k]);
      many.run();
    }
  }
  if (i == rows.size()) return;
  Statement& one = cached(insertSql(t));
  for (; i < rows.size(); ++i) {
    io::RowIo<Row>::bind(one, 1, rows[i]);
    one.run();
  }
}

void RunStore::put(const std::vector<Range>& r) { putRows(r); }
void RunStore::put(const std::vector<GpuAnnotation>& r) { putRows(r); }
void RunStore::put(const std::vector<ThreadName>& r) { putRows(r); }
void RunStore::put(const std::vector<HostOp>& r) { putRows(r); }
void RunStore::put(const std::vector<Kernel>& r) { putRows(r); }
void RunStore::put(const std::vector<Memcpy>& r) { putRows(r); }
void RunStore::put(const std::vector<Memset>& r) { putRows(r); }
void RunStore::put(const std::vector<ApiCall>& r) { putRows(r); }
void RunStore::put(const std::vector<Counter>& r) { putRows(r); }
void RunStore::put(const std::vector<Collective>& r) { putRows(r); }
void RunStore::put(const std::vector<Drop>& r) {
  // Drop counts are per (rank, source): replaced, never duplicated; few rows, one at a time.
  Statement& s = cached(insertSql(table("drops"), 1, "INSERT OR REPLACE"));
  for (const auto& d : r) {
    io::RowIo<Drop>::bind(s, 1, d);
    s.run();
  }
}

void RunStore::createIndexes() { rundb::createIndexes(*db_); }

}  // namespace trainscope::rundb
