// sqlite.cpp — RAII over the SQLite C API; see sqlite.h.
#include "trainscope/rundb/sqlite.h"

#include <sqlite3.h>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"

namespace trainscope::rundb {
namespace {

// Statements in messages are cut short: a user needs the failing call, not a page of SQL.
std::string shortSql(const std::string& sql) {
  std::string s = sql.substr(0, 80);
  for (char& c : s)
    if (c == '\n') c = ' ';
  return sql.size() > 80 ? s + "…" : s;
}

// A write that failed for want of space: said so, with the database's path (SQLite's own text,
// "database or disk is full", names neither).
[[noreturn]] void throwDiskFull(sqlite3* db, int rc, const std::string& msg, const std::string& context) {
  const char* file = db ? sqlite3_db_filename(db, "main") : nullptr;
  throw SqliteError(rc,
                    std::string("the disk is full: cannot write ") + (file && *file ? file : "the database") +
                        " (sqlite: " + msg + ")",
                    shortSql(context), true);
}

bool diskFull(sqlite3* db, int rc) {
  return (rc & 0xff) == SQLITE_FULL || (db && (rc & 0xff) == SQLITE_IOERR && sqlite3_system_errno(db) == ENOSPC);
}

void check(sqlite3* db, int rc, const std::string& context) {
  if (rc == SQLITE_OK || rc == SQLITE_ROW || rc == SQLITE_DONE) return;
  std::string msg = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
  if (diskFull(db, db ? sqlite3_extended_errcode(db) : rc)) throwDiskFull(db, rc, msg, context);
  throw SqliteError(rc, "sqlite: " + msg + " (code " + std::to_string(rc) + ")", shortSql(context));
}

// file: URI for `path`, percent-encoding what a URI reserves.
std::string fileUri(const std::string& path, const char* query) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20) {
      char b[4];
      std::snprintf(b, sizeof(b), "%%%02X", c);
      uri += b;
    } else {
      uri += char(c);
    }
  }
  return uri + "?" + query;
}

}  // namespace

void Database::open(const std::string& target, int flags) {
  // Once per process, before SQLite initialises: no global memory statistics. With them on (the
  // default) every allocation of every connection takes one global mutex, and readers on several
  // threads (the viewer's loader) queue on it.
  static const int configured = sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
  (void)configured;
  int rc = sqlite3_open_v2(target.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw SqliteError(rc, "sqlite: cannot open " + path_ + ": " + msg);
  }
  sqlite3_busy_timeout(db_, 5000);
  sqlite3_extended_result_codes(db_, 1);
}

namespace {

// What lies beside a database file, read without opening it through SQLite (which would create the
// -wal and -shm files of a WAL database).
struct Beside {
  bool wal_mode = false;       // the header says WAL (bytes 18 and 19 are 2)
  bool wal = false;            // FILE-wal exists
  bool wal_frames = false;     // … and holds writes (more than its 32-byte header)
  bool shm = false;            // FILE-shm exists
  bool folder_writable = false;
};

Beside besideOf(const std::string& path) {
  Beside b;
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd >= 0) {
    unsigned char v[2] = {};
    b.wal_mode = ::pread(fd, v, 2, 18) == 2 && v[0] == 2 && v[1] == 2;
    ::close(fd);
  }
  struct stat st {};
  b.wal = ::stat((path + "-wal").c_str(), &st) == 0;
  b.wal_frames = b.wal && st.st_size > 32;
  b.shm = ::stat((path + "-shm").c_str(), &st) == 0;
  b.folder_writable = ::access(files::folderOf(path).c_str(), W_OK) == 0;
  return b;
}

// A killed writer's -wal without its -shm, in a folder this user cannot write: SQLite cannot read
// the -wal, and an immutable open would silently drop the rows in it. Said as a UserError, with the
// fix: it is about the file and its folder, not a failing SQLite call.
[[noreturn]] void unreadableWal(const std::string& path) {
  throw UserError("database",
                  path + "-wal holds writes not yet in " + path +
                      " (a run or study stopped before it closed the file), and reading them needs " + path +
                      "-shm, which cannot be created in a folder this user cannot write",
                  "copy " + path + " and " + path + "-wal together into a writable folder and open the copy");
}

}  // namespace

Database::Database(const std::string& path, Mode mode) : path_(path) {
  if (mode != Mode::ReadOnly) {
    open(path, mode == Mode::ReadWrite ? SQLITE_OPEN_READWRITE : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    return;
  }
  // A FIFO would block open(2) forever, and SQLite reads nothing else sensibly.
  files::requireRegularFile(path, "database", "name a trainscope run database or study");
  // Read-only, creating nothing beside the file. A WAL database opened by a plain read-only
  // connection gets a -wal and a -shm file, left behind when it closes (a reader cannot remove
  // them). So:
  //   - a rollback-journal database (every finished run): mode=ro, which writes nothing;
  //   - a WAL database whose -wal holds nothing to read and which nobody has open (a finished
  //     study): immutable, which never looks beside the file;
  //   - a WAL database with -wal and -shm (being written, or a killed writer's pair): mode=ro joins
  //     them, creating nothing;
  //   - a -wal with writes but no -shm (a killed run, or a copy without its -shm): mode=ro, and
  //     SQLite creates the -shm it needs to read the -wal — the one file a reader may leave,
  //     because the rows in the -wal are the run's last ones. Where the folder is not writable,
  //     a clear error: immutable would silently drop those rows.
  const Beside b = besideOf(path);
  const bool read_wal = b.wal_mode && b.wal && (b.wal_frames || b.shm);
  if (b.wal_mode && !read_wal) {
    open(fileUri(path, "mode=ro&immutable=1"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    return;
  }
  if (read_wal && b.wal_frames && !b.shm && !b.folder_writable) unreadableWal(path);
  open(fileUri(path, "mode=ro"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
  // A read-only connection to a WAL database needs to write -shm; on read-only storage that fails
  // at the first read. Such a file is not being written: read it as immutable.
  if (sqlite3_exec(db_, "SELECT 1 FROM sqlite_master LIMIT 1", nullptr, nullptr, nullptr) != SQLITE_OK) {
    const int rc = sqlite3_extended_errcode(db_);
    const int primary = rc & 0xff;
    if (primary == SQLITE_CANTOPEN || primary == SQLITE_READONLY || primary == SQLITE_IOERR ||
        primary == SQLITE_BUSY) {
      sqlite3_close_v2(db_);
      db_ = nullptr;
      // Immutable reads ignore the WAL: only for a file nobody is writing (RunStore holds a flock
      // for its lifetime). A live one cannot be read from here.
      const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
      const bool live = fd >= 0 && flock(fd, LOCK_SH | LOCK_NB) != 0;
      if (fd >= 0) ::close(fd);
      if (live)
        throw SqliteError(rc, "sqlite: " + path + " is being written and cannot be read from here (its folder "
                              "allows no -shm file beside it); read it when the run has finished");
      if (read_wal && b.wal_frames) unreadableWal(path);
      open(fileUri(path, "immutable=1"), SQLITE_OPEN_READONLY | SQLITE_OPEN_URI);
    }
  }
}

Database::~Database() { sqlite3_close_v2(db_); }

void Database::exec(const std::string& sql) {
  char* err = nullptr;
  int rc = sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    if (diskFull(db_, sqlite3_extended_errcode(db_))) throwDiskFull(db_, sqlite3_extended_errcode(db_), msg, sql);
    throw SqliteError(sqlite3_extended_errcode(db_), "sqlite: " + msg + " (" + path_ + ")", shortSql(sql));
  }
}

bool Database::tableExists(const std::string& name) {
  Statement s(*this, "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?");
  s.bind(1, name);
  return s.step();
}

int64_t Database::lastInsertRowid() const { return sqlite3_last_insert_rowid(db_); }

Statement::Statement(Database& db, const std::string& sql) : db_(db), sql_(sql) {
  check(db_.handle(), sqlite3_prepare_v3(db_.handle(), sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &stmt_, nullptr),
        "prepare: " + sql);
}

Statement::~Statement() { sqlite3_finalize(stmt_); }

void Statement::bind(int i, int64_t v) { check(db_.handle(), sqlite3_bind_int64(stmt_, i, v), sql_); }
void Statement::bind(int i, double v) { check(db_.handle(), sqlite3_bind_double(stmt_, i, v), sql_); }
void Statement::bind(int i, std::string_view v) {
  check(db_.handle(), sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT), sql_);
}
void Statement::bindNull(int i) { check(db_.handle(), sqlite3_bind_null(stmt_, i), sql_); }

void Database::interruptWhen(const std::atomic<bool>* flag) {
  // SQLite calls the handler every ~1000 virtual-machine instructions of a running statement.
  sqlite3_progress_handler(
      db_, flag ? 1000 : 0,
      [](void* f) -> int { return static_cast<const std::atomic<bool>*>(f)->load(std::memory_order_relaxed) ? 1 : 0; },
      const_cast<std::atomic<bool>*>(flag));
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  sqlite3_reset(stmt_);
  check(db_.handle(), rc, sql_);
  return false;
}

void Statement::reset() { check(db_.handle(), sqlite3_reset(stmt_), sql_); }

int64_t Statement::columnInt(int i) const { return sqlite3_column_int64(stmt_, i); }
double Statement::columnDouble(int i) const { return sqlite3_column_double(stmt_, i); }
std::string Statement::columnText(int i) const {
  const unsigned char* t = sqlite3_column_text(stmt_, i);
  return t ? std::string(reinterpret_cast<const char*>(t), sqlite3_column_bytes(stmt_, i)) : std::string();
}
bool Statement::columnIsNull(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
Statement::Type Statement::columnType(int i) const {
  switch (sqlite3_column_type(stmt_, i)) {
    case SQLITE_INTEGER: return Type::Integer;
    case SQLITE_FLOAT: return Type::Real;
    case SQLITE_TEXT: return Type::Text;
    case SQLITE_BLOB: return Type::Blob;
    default: return Type::Null;
  }
}
std::optional<int64_t> Statement::columnOptInt(int i) const {
  if (columnIsNull(i)) return std::nullopt;
  return columnInt(i);
}
std::optional<double> Statement::columnOptDouble(int i) const {
  if (columnIsNull(i)) return std::nullopt;
  return columnDouble(i);
}
int Statement::columnCount() const { return sqlite3_column_count(stmt_); }
std::string Statement::columnName(int i) const {
  const char* n = sqlite3_column_name(stmt_, i);
  return n ? n : "";
}
bool Statement::readOnly() const { return sqlite3_stmt_readonly(stmt_) != 0; }

Transaction::Transaction(Database& db) : db_(db) { db_.exec("BEGIN"); }
Transaction::~Transaction() {
  if (!done_) sqlite3_exec(db_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);  // never throws
}
void Transaction::commit() {
  db_.exec("COMMIT");
  done_ = true;
}

bool looksLikeSqlite(const std::string& path) {
  // O_NONBLOCK: a FIFO at `path` must not block this probe (it is then not SQLite).
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  char head[16] = {};
  const bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && ::pread(fd, head, sizeof head, 0) == ssize_t(sizeof head);
  ::close(fd);
  return ok && std::memcmp(head, "SQLite format 3", 16) == 0;
}

std::string sqliteDamage(const std::string& path) {
  if (!looksLikeSqlite(path)) return "";
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return "";
  struct stat st {};
  unsigned char h[100] = {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const ssize_t got = ::pread(fd, h, sizeof h, 0);
  ::close(fd);
  if (!stat_ok) return "";
  const auto be32 = [&](int at) {
    return uint32_t(h[at]) << 24 | uint32_t(h[at + 1]) << 16 | uint32_t(h[at + 2]) << 8 | uint32_t(h[at + 3]);
  };
  const std::string size = std::to_string(int64_t(st.st_size)) + " bytes";
  if (got < ssize_t(sizeof h)) return "it is " + size + ", shorter than SQLite's 100-byte header";
  const uint32_t page = h[16] == 0 && h[17] == 1 ? 65536u : uint32_t(h[16]) << 8 | h[17];
  if (page < 512 || page > 65536 || (page & (page - 1)) != 0) return "its SQLite header holds no valid page size";
  if (st.st_size % page != 0)
    return "it is " + size + ", not a whole number of its " + std::to_string(page) + "-byte pages";
  const uint32_t pages = be32(28);
  const int64_t want = int64_t(pages) * page;
  if (pages > 0 && be32(24) == be32(92) && st.st_size < want)
    return "it is " + size + " where its SQLite header says " + std::to_string(want) + " (" + std::to_string(pages) +
           " pages of " + std::to_string(page) + "): the file was cut short";
  return "";
}

void refuseDamaged(const std::string& path, const std::string& field, const std::string& sqlite_error) {
  std::string why = sqliteDamage(path);
  if (why.empty() && (sqlite_error.find("malformed") != std::string::npos ||
                      sqlite_error.find("(code 11)") != std::string::npos))
    why = "SQLite: " + sqlite_error;
  if (why.empty()) return;
  throw UserError(field, path + " is damaged or truncated: " + why,
                  "the file was cut short or overwritten (an interrupted copy, a full disk): restore it from a copy, "
                  "or write it again (trainscope run --out, tune --study)");
}

}  // namespace trainscope::rundb
