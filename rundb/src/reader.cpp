// reader.cpp — RunReader (see reader.h).
#include "trainscope/rundb/reader.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <type_traits>

#include "row_io.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"

namespace trainscope::rundb {

namespace io {
std::vector<std::pair<int64_t, std::string>> loadStrings(Database& db) {
  std::vector<std::pair<int64_t, std::string>> out;
  Statement s(db, "SELECT id, value FROM strings ORDER BY id");
  while (s.step()) out.emplace_back(s.columnInt(0), s.columnText(1));
  return out;
}
}  // namespace io

namespace {

const std::string kFix = "pass a run database written by `trainscope run --out/--trace` or `trainscope import`";

template <class Row>
const char* timeColumn() {
  return std::is_same_v<Row, Counter> ? "ts_ns" : "start_ns";
}

}  // namespace

RunReader::RunReader(const std::string& path) : path_(path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw UserError("database", path + " does not exist", "check the path");
  if (S_ISDIR(st.st_mode)) throw UserError("database", path + " is a directory", kFix);
  if (!S_ISREG(st.st_mode)) throw UserError("database", path + " is not a regular file", kFix);
  if (!looksLikeSqlite(path)) throw UserError("database", path + " is not a trainscope run database (not SQLite)", kFix);
  refuseDamaged(path, "database");  // a cut-short file is said to be one, not "not a run database"
  try {
    db_ = std::make_unique<Database>(path, Database::Mode::ReadOnly);
    version_ = checkRunDatabase(*db_);
    Statement tables(*db_, "SELECT name FROM sqlite_master WHERE type = 'table'");
    while (tables.step()) tables_.insert(tables.columnText(0));
    Statement m(*db_, "SELECT key, value FROM meta");
    while (m.step()) meta_[m.columnText(0)] = m.columnText(1);
    for (auto& [id, text] : io::loadStrings(*db_)) {
      if (id >= 0 && id < int64_t(1) << 24 && size_t(id) <= strings_.size() + 4096) {
        if (size_t(id) >= strings_.size()) strings_.resize(size_t(id) + 1);
        strings_[size_t(id)] = std::move(text);
      } else {
        sparse_strings_[StringId(id)] = std::move(text);
      }
    }
  } catch (const SqliteError& e) {
    throw UserError("database", path + " is damaged or truncated (" + e.what() + ")", kFix);
  }
}

RunReader::~RunReader() = default;

void RunReader::interruptWhen(const std::atomic<bool>* flag) { db_->interruptWhen(flag); }

std::string RunReader::meta(const std::string& key, const std::string& fallback) const {
  auto it = meta_.find(key);
  return it == meta_.end() ? fallback : it->second;
}

int64_t RunReader::worldSize() const {
  const std::string v = meta("world_size", "1");
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v.c_str(), &end, 10);
  if (end == v.c_str() || *end != '\0' || errno == ERANGE || n < 1 || n > (int64_t(1) << 31))
    throw UserError("database", path_ + " has meta.world_size \"" + v + "\", not a positive rank count",
                    "repair or re-import the file");
  return n;
}

const std::string& RunReader::string(StringId id) const {
  static const std::string empty;
  if (id < strings_.size()) return strings_[id];
  auto it = sparse_strings_.find(id);
  return it == sparse_strings_.end() ? empty : it->second;
}

std::optional<StringId> RunReader::find(const std::string& text) const {
  for (size_t i = 0; i < strings_.size(); ++i)
    if (strings_[i] == text) return StringId(i);
  for (const auto& [id, v] : sparse_strings_)
    if (v == text) return id;
  return std::nullopt;
}

std::vector<int64_t> RunReader::stepRanks() {
  std::vector<int64_t> out;
  Statement s(*db_, "SELECT DISTINCT rank FROM steps ORDER BY rank");
  while (s.step()) out.push_back(s.columnInt(0));
  return out;
}

std::vector<RankInfo> RunReader::ranks() {
  std::vector<RankInfo> out;
  Statement s(*db_, io::selectAll<RankInfo>(version_) + " ORDER BY rank");
  while (s.step()) out.push_back(io::RowIo<RankInfo>::read(s));
  return out;
}

std::vector<Step> RunReader::steps(int64_t rank) {
  std::vector<Step> out;
  Statement s(*db_, io::selectAll<Step>(version_) + " WHERE rank = ? ORDER BY step");
  s.bind(1, rank);
  while (s.step()) out.push_back(io::RowIo<Step>::read(s));
  return out;
}

std::vector<Step> RunReader::steps() {
  std::vector<Step> out;
  Statement s(*db_, io::selectAll<Step>(version_) + " ORDER BY rank, step");
  while (s.step()) out.push_back(io::RowIo<Step>::read(s));
  return out;
}

template <class Row>
std::vector<Row> RunReader::events(int64_t rank, int64_t begin, int64_t end) {
  if (!hasTable(io::RowIo<Row>::kTable)) return {};  // a file older than the table: none
  const std::string t = timeColumn<Row>();
  const std::string last = std::is_same_v<Row, Counter> ? t : std::string("end_ns");
  std::string sql = io::selectAll<Row>(version_) + " WHERE rank = ?1";
  if (end != kNoEnd) sql += " AND " + t + " < ?2";
  if (begin != kAllTime) sql += " AND " + last + " >= ?3";
  sql += " ORDER BY " + t;
  Statement s(*db_, sql);
  s.bind(1, rank);
  if (end != kNoEnd) s.bind(2, end);
  if (begin != kAllTime) s.bind(3, begin);
  std::vector<Row> out;
  while (s.step()) out.push_back(io::RowIo<Row>::read(s));
  return out;
}

template <class Row>
void RunReader::forEach(const std::function<void(const Row&)>& f) {
  if (!hasTable(io::RowIo<Row>::kTable)) return;
  Statement s(*db_, io::selectAll<Row>(version_));
  while (s.step()) f(io::RowIo<Row>::read(s));
}

template <class Row>
std::vector<Row> RunReader::startingAt(int64_t rank, int64_t start_ns) {
  if (!hasTable(io::RowIo<Row>::kTable)) return {};
  Statement s(*db_, io::selectAll<Row>(version_) + " WHERE rank = ? AND " + timeColumn<Row>() + " = ?");
  s.bindFrom(1, rank, start_ns);
  std::vector<Row> out;
  while (s.step()) out.push_back(io::RowIo<Row>::read(s));
  return out;
}

template <class Row>
std::vector<Row> RunReader::startingIn(int64_t rank, int64_t begin, int64_t end) {
  if (!hasTable(io::RowIo<Row>::kTable) || end <= begin) return {};
  const std::string t = timeColumn<Row>();
  Statement s(*db_, io::selectAll<Row>(version_) + " WHERE rank = ?1 AND " + t + " >= ?2 AND " + t + " < ?3 ORDER BY " + t);
  s.bind(1, rank);
  s.bind(2, begin);
  s.bind(3, end);
  std::vector<Row> out;
  while (s.step()) out.push_back(io::RowIo<Row>::read(s));
  return out;
}

template <class Row>
void RunReader::forEachOf(int64_t rank, const std::function<void(const Row&)>& f) {
  if (!hasTable(io::RowIo<Row>::kTable)) return;
  Statement s(*db_, io::selectAll<Row>(version_) + " WHERE rank = ? ORDER BY " + timeColumn<Row>());
  s.bind(1, rank);
  while (s.step()) f(io::RowIo<Row>::read(s));
}

void RunReader::spans(const char* t, int64_t rowid_begin, int64_t rowid_end, std::vector<SpanRow>& out) {
  const std::string name = table(t).name;
  if (!hasTable(name)) return;
  // Only the columns the table has, in SpanRow's order (name, a, b, correlation, kind): a constant
  // in the SELECT still costs a VDBE op and a column call per row, and these loops read every row of
  // the file. What a table lacks keeps SpanRow's default (no name, b = 0, no correlation, kind 0).
  struct Cols {
    std::string sql;
    bool name, b, correlation, kind;
  };
  // A NULL name reads as kNoString in the SQL: one column call, not a type test and a read.
  static_assert(kNoString == 4294967295u, "the SQL below spells kNoString");
  const std::string nm = "COALESCE(name_id, 4294967295), ", corr = ", COALESCE(correlation, -1)";
  Cols c;
  if (name == "ranges" || name == "host_ops") c = {nm + "tid", true, false, false, false};
  else if (name == "gpu_annotations") c = {nm + "device, stream", true, true, false, false};
  else if (name == "api_calls") c = {nm + "tid" + corr, true, false, true, false};
  else if (name == "kernels") c = {nm + "device, stream" + corr, true, true, true, false};
  else if (name == "memcpy") c = {"device, stream" + corr + ", kind", false, true, true, true};
  else if (name == "memset") c = {"device, stream" + corr, false, true, true, false};
  else TRAINSCOPE_THROW("spans: not a span table: " + name);
  // Reading the whole file once: map it rather than copy each page through SQLite's cache (a
  // read-only connection; no effect on other connections or on writers).
  if (!mapped_) {
    db_->exec("PRAGMA mmap_size = 4294967296");
    mapped_ = true;
  }
  Statement s(*db_, "SELECT rank, start_ns, end_ns, " + c.sql + " FROM " + name + " WHERE rowid >= ? AND rowid < ?");
  s.bindFrom(1, rowid_begin, rowid_end);
  while (s.step()) {
    SpanRow r;
    r.rank = s.columnInt(0);
    r.start_ns = s.columnInt(1);
    r.end_ns = s.columnInt(2);
    int i = 3;
    if (c.name) r.name = StringId(s.columnInt(i++));
    r.a = s.columnInt(i++);
    if (c.b) r.b = s.columnInt(i++);
    if (c.correlation) r.correlation = s.columnInt(i++);
    if (c.kind) r.kind = int32_t(s.columnInt(i++));
    out.push_back(r);
  }
}

int64_t RunReader::rowBound(const char* t) {
  if (!hasTable(table(t).name)) return 0;
  Statement s(*db_, std::string("SELECT MAX(rowid) FROM ") + table(t).name);
  return s.step() && !s.columnIsNull(0) ? s.columnInt(0) : 0;
}

#define TRAINSCOPE_READER_ROW(Row)                                                     \
  template std::vector<Row> RunReader::events<Row>(int64_t, int64_t, int64_t);         \
  template void RunReader::forEachOf<Row>(int64_t, const std::function<void(const Row&)>&); \
  template std::vector<Row> RunReader::startingAt<Row>(int64_t, int64_t);                   \
  template std::vector<Row> RunReader::startingIn<Row>(int64_t, int64_t, int64_t);          \
  template void RunReader::forEach<Row>(const std::function<void(const Row&)>&);
TRAINSCOPE_READER_ROW(Range)
TRAINSCOPE_READER_ROW(GpuAnnotation)
TRAINSCOPE_READER_ROW(HostOp)
TRAINSCOPE_READER_ROW(Kernel)
TRAINSCOPE_READER_ROW(Memcpy)
TRAINSCOPE_READER_ROW(Memset)
TRAINSCOPE_READER_ROW(ApiCall)
TRAINSCOPE_READER_ROW(Counter)
TRAINSCOPE_READER_ROW(Collective)
#undef TRAINSCOPE_READER_ROW

std::vector<Collective> RunReader::collectives(std::optional<int64_t> rank) {
  std::vector<Collective> out;
  Statement s(*db_, io::selectAll<Collective>(version_) + (rank ? " WHERE rank = ?" : "") + " ORDER BY rank, start_ns");
  if (rank) s.bind(1, *rank);
  while (s.step()) out.push_back(io::RowIo<Collective>::read(s));
  return out;
}

std::vector<ThreadName> RunReader::threads() {
  std::vector<ThreadName> out;
  if (!hasTable("threads")) return out;
  Statement s(*db_, io::selectAll<ThreadName>(version_) + " ORDER BY rank, kind, device, tid");
  while (s.step()) out.push_back(io::RowIo<ThreadName>::read(s));
  return out;
}

std::vector<Drop> RunReader::drops() {
  std::vector<Drop> out;
  Statement s(*db_, io::selectAll<Drop>(version_) + " ORDER BY rank, source");
  while (s.step()) out.push_back(io::RowIo<Drop>::read(s));
  return out;
}

std::vector<WeightDigest> RunReader::weightDigest() {
  std::vector<WeightDigest> out;
  Statement s(*db_, io::selectAll<WeightDigest>(version_) + " ORDER BY name");
  while (s.step()) out.push_back(io::RowIo<WeightDigest>::read(s));
  return out;
}

std::vector<ExpertLoad> RunReader::expertLoad() {
  std::vector<ExpertLoad> out;
  if (!hasTable("expert_load")) return out;
  Statement s(*db_, io::selectAll<ExpertLoad>(version_) + " ORDER BY step, layer, rank, expert");
  while (s.step()) out.push_back(io::RowIo<ExpertLoad>::read(s));
  return out;
}

std::vector<Checkpoint> RunReader::checkpoints() {
  std::vector<Checkpoint> out;
  if (!hasTable("checkpoints")) return out;
  Statement s(*db_, io::selectAll<Checkpoint>(version_) + " ORDER BY step");
  while (s.step()) out.push_back(io::RowIo<Checkpoint>::read(s));
  return out;
}

std::vector<Fp8Scale> RunReader::fp8Scales() {
  std::vector<Fp8Scale> out;
  if (!hasTable("fp8_scales")) return out;
  Statement s(*db_, io::selectAll<Fp8Scale>(version_) + " ORDER BY step, rank, tensor, role");
  while (s.step()) out.push_back(io::RowIo<Fp8Scale>::read(s));
  return out;
}

bool RunReader::hasEvents(const char* t) {
  if (!hasTable(table(t).name)) return false;
  Statement s(*db_, std::string("SELECT 1 FROM ") + table(t).name + " LIMIT 1");
  return s.step();
}

std::optional<int64_t> RunReader::firstTime() {
  std::optional<int64_t> first;
  for (const Table& t : tables()) {
    if ((!t.events && std::string(t.name) != "steps") || !hasTable(t.name)) continue;
    for (const Column& c : t.columns) {
      if (c.role != ColumnRole::Time) continue;
      Statement s(*db_, "SELECT MIN(" + std::string(c.name) + ") FROM " + t.name);
      if (s.step() && !s.columnIsNull(0)) first = first ? std::min(*first, s.columnInt(0)) : s.columnInt(0);
      break;  // the first time column of a table is its start
    }
  }
  return first;
}

std::vector<Step> readSteps(const std::string& path, int64_t rank) { return RunReader(path).steps(rank); }
std::map<std::string, std::string> readMeta(const std::string& path) { return RunReader(path).meta(); }

}  // namespace trainscope::rundb
