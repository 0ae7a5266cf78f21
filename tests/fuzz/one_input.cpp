// one_input.cpp — see one_input.h. Inputs are written to a scratch folder of this process's own
// (under TMPDIR, else /tmp; scripts/fuzz points TMPDIR at /dev/shm), removed when the process exits.
#include "one_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <type_traits>

#include "trainscope/common/error.h"
#include "trainscope/rundb/import.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/rundb/report.h"
#include "trainscope/rundb/schema.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/summary.h"

namespace trainscope::fuzz {
namespace {

namespace fs = std::filesystem;
namespace db = trainscope::rundb;

// How many ranks of one input are read row by row: enough to reach every query, bounded so that an
// input naming thousands of ranks costs what a small one does.
constexpr size_t kRanksRead = 4;

// Plain storage, not a static std::string: such a string, still being made when the exit handler
// was registered, would be destroyed before that handler runs.
char g_scratch[4096];

const char* scratchDir() {
  if (!g_scratch[0]) {
    const char* tmp = std::getenv("TMPDIR");
    const fs::path d = fs::path(tmp && *tmp ? tmp : "/tmp") / ("trainscope-fuzz-" + std::to_string(getpid()));
    fs::create_directories(d);
    std::snprintf(g_scratch, sizeof(g_scratch), "%s", d.c_str());
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(g_scratch, ec);
    });
  }
  return g_scratch;
}

std::string writeInput(const char* name, const uint8_t* data, size_t size) {
  const std::string path = std::string(scratchDir()) + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  out.close();
  if (!out) std::abort();  // the harness, not the code under test, failed: stop loudly
  return path;
}

// Every name a row carries, resolved the way report and export resolve them.
size_t touchNames(const db::RunReader& rd, db::StringId a, db::StringId b = db::kNoString) {
  return rd.string(a).size() + (b == db::kNoString ? 0 : rd.string(b).size());
}

template <class Row>
size_t readEvents(db::RunReader& rd, int64_t rank, int64_t begin, int64_t end) {
  size_t n = 0;
  for (const Row& r : rd.events<Row>(rank)) {
    if constexpr (std::is_same_v<Row, db::Range>) n += touchNames(rd, r.name, r.domain);
    else if constexpr (std::is_same_v<Row, db::HostOp>) n += touchNames(rd, r.name, r.shapes);
    else if constexpr (std::is_same_v<Row, db::Kernel> || std::is_same_v<Row, db::ApiCall> ||
                       std::is_same_v<Row, db::Counter>)
      n += touchNames(rd, r.name);
    else n += 1;
  }
  n += rd.events<Row>(rank, begin, end).size();
  rd.forEach<Row>([&](const Row&) { ++n; });
  return n;
}

void readAll(db::RunReader& rd) {
  size_t n = rd.meta().size() + rd.meta("workload").size() + rd.string(0).size() + rd.find("step").has_value();
  try {
    n += size_t(rd.worldSize());
  } catch (const UserError&) {
    // a bad meta.world_size is reported; the rest of the file is still read
  }
  std::set<int64_t> ranks;
  for (int64_t r : rd.stepRanks()) ranks.insert(r);
  for (const db::RankInfo& r : rd.ranks()) ranks.insert(r.rank);
  n += rd.steps().size();
  const std::optional<int64_t> first = rd.firstTime();
  const int64_t begin = first.value_or(0);
  // A window of one millisecond from the first event (saturated, as the viewer's would be).
  const int64_t end = begin > db::kNoEnd - 1000000 ? db::kNoEnd - 1 : begin + 1000000;
  size_t visited = 0;
  for (int64_t r : ranks) {
    if (visited++ == kRanksRead) break;
    n += rd.steps(r).size();
    n += readEvents<db::Range>(rd, r, begin, end) + readEvents<db::HostOp>(rd, r, begin, end) +
         readEvents<db::Kernel>(rd, r, begin, end) + readEvents<db::Memcpy>(rd, r, begin, end) +
         readEvents<db::Memset>(rd, r, begin, end) + readEvents<db::ApiCall>(rd, r, begin, end) +
         readEvents<db::Counter>(rd, r, begin, end) + readEvents<db::Collective>(rd, r, begin, end);
    n += rd.collectives(r).size();
  }
  for (const db::Collective& c : rd.collectives()) n += c.algbw() > 0 && c.busbw() > 0;
  n += rd.drops().size() + rd.weightDigest().size();
  for (const db::Table& t : db::tables())
    if (t.events) n += rd.hasEvents(t.name);
  for (int64_t skip : {0, 1}) n += db::summaryJson(db::summarize(rd, skip)).size();
  if (n == size_t(-1)) std::abort();  // keeps the reads from being optimised away
}

}  // namespace

Outcome importOneInput(const uint8_t* data, size_t size) {
  const std::string in = writeInput("trace", data, size);
  try {
    db::importTraces({in}, std::string(scratchDir()) + "/import.db", true);
  } catch (const UserError&) {
    return Outcome::Rejected;
  }
  return Outcome::Accepted;
}

Outcome readOneInput(const uint8_t* data, size_t size) {
  const std::string path = writeInput("run.db", data, size);
  try {
    db::RunReader rd(path);
    readAll(rd);
    // The report: the summary and more (top ops, collectives, the import's counts in meta), as text and JSON.
    const db::Report r = db::computeReport(path, 5);
    if (db::formatReport(r).size() + db::reportJson(r).size() == size_t(-1)) std::abort();
  } catch (const UserError&) {
    return Outcome::Rejected;
  } catch (const db::SqliteError&) {
    return Outcome::Rejected;
  }
  return Outcome::Accepted;
}

}  // namespace trainscope::fuzz
