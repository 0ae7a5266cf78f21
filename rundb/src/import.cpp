// import.cpp — importTraces: one file per rank, recognised by content (see import.h).
#include "trainscope/rundb/import.h"

#include <sys/stat.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <set>

#include <nlohmann/json.hpp>

#include "import_impl.h"
#include "trainscope/common/error.h"
#include "trainscope/rundb/sqlite.h"
#include "trainscope/rundb/store.h"

namespace trainscope::rundb {
namespace importers {

int64_t stepNumber(const std::string& name, const std::string& path) {
  static const std::regex re(R"(^ProfilerStep#(\d+)$)");
  std::smatch m;
  if (!std::regex_match(name, m, re)) return -1;
  errno = 0;
  const long long n = std::strtoll(m[1].str().c_str(), nullptr, 10);
  if (errno == ERANGE)
    throw UserError("import", path + ": step number of \"" + name + "\" is out of range", "check the trace file");
  return n;
}

Step importedStep(int64_t rank, int64_t step, int64_t start_ns, int64_t end_ns) {
  Step s;
  s.rank = rank;
  s.step = step;
  s.start_ns = start_ns;
  s.step_time_ns = end_ns - start_ns;
  return s;
}

}  // namespace importers

namespace {

std::string readAll(const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) throw UserError("import", path + " does not exist", "check the path");
  if (!S_ISREG(st.st_mode)) throw UserError("import", path + " is not a regular file", "pass one trace file per rank");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("import", "cannot read " + path, "check the path and its permissions");
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

// Every gzip member in turn (concatenated members are valid gzip).
std::string gunzip(const std::string& data, const std::string& path) {
  std::string out;
  size_t offset = 0;
  char buf[1 << 16];
  while (offset < data.size()) {
    z_stream z{};
    if (inflateInit2(&z, 15 + 16) != Z_OK) throw UserError("import", "zlib init failed for " + path, "");
    z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data() + offset));
    z.avail_in = static_cast<uInt>(data.size() - offset);
    int rc = Z_OK;
    while (rc != Z_STREAM_END) {
      z.next_out = reinterpret_cast<Bytef*>(buf);
      z.avail_out = sizeof(buf);
      rc = inflate(&z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END) {
        inflateEnd(&z);
        throw UserError("import", path + " is a damaged gzip file (zlib code " + std::to_string(rc) + ")",
                        "re-export the trace");
      }
      out.append(buf, sizeof(buf) - z.avail_out);
    }
    offset += z.total_in;
    inflateEnd(&z);
    // trailing zero padding after the last member is tolerated
    while (offset < data.size() && data[offset] == '\0') ++offset;
    if (offset + 2 <= data.size() && !(uint8_t(data[offset]) == 0x1f && uint8_t(data[offset + 1]) == 0x8b)) break;
  }
  return out;
}

}  // namespace

ImportStats importTraces(const std::vector<std::string>& inputs, const std::string& out_db, bool overwrite) {
  if (inputs.empty()) throw UserError("import", "no input files", "pass one trace per rank");
  struct stat out_st {};
  const bool out_exists = stat(out_db.c_str(), &out_st) == 0;
  for (const auto& p : inputs) {
    struct stat st {};
    if (stat(p.c_str(), &st) != 0) throw UserError("import", p + " does not exist", "check the path");
    if (out_exists && st.st_dev == out_st.st_dev && st.st_ino == out_st.st_ino)
      throw UserError("-o", out_db + " is also an input", "write the run database to a new path");
  }
  checkWritable(out_db, overwrite, "-o");
  const std::string partial = out_db + ".partial";
  struct Cleanup {
    std::string path;
    bool keep = false;
    ~Cleanup() {
      if (keep) return;
      for (const char* suffix : {"", "-wal", "-shm"}) std::remove((path + suffix).c_str());
    }
  } cleanup{partial};
  ImportStats st;
  {
    RunStore store(partial, RunStore::Options{true, "-o", true});
    store.setMeta("world_size", std::to_string(inputs.size()));
    store.setMeta("source", "import");
    store.begin();
    std::set<int64_t> ranks;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const std::string& p = inputs[i];
      int64_t rank = int64_t(i);
      if (looksLikeSqlite(p)) {
        importers::importNsys(store, st, p, rank);
      } else {
        std::string text = readAll(p);
        if (text.size() >= 2 && uint8_t(text[0]) == 0x1f && uint8_t(text[1]) == 0x8b) text = gunzip(text, p);
        try {
          rank = importers::importKineto(store, st, text, p, rank);
        } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
          throw UserError("import", p + " has an unexpected value: " + e.what(), "pass a PyTorch profiler (Kineto) trace");
        }
      }
      if (!ranks.insert(rank).second)
        throw UserError("import", p + " claims rank " + std::to_string(rank) + ", as an earlier file does",
                        "pass one trace per rank");
      ++st.files;
    }
    if (st.host_ops + st.ranges + st.kernels + st.api_calls + st.memcpy + st.memset == 0)
      throw UserError("import", "nothing was recognised in " + std::to_string(inputs.size()) +
                                    " file(s): no CPU ops, annotations, kernels, API calls or copies",
                      "pass PyTorch profiler (Kineto) traces or Nsight Systems SQLite exports");
    store.commit();
    store.createIndexes();
    store.close();
  }
  checkWritable(out_db, overwrite, "-o");  // nothing took the path meanwhile
  if (std::rename(partial.c_str(), out_db.c_str()) != 0)
    throw UserError("-o", "cannot move the finished import to " + out_db, "check the folder is writable");
  cleanup.keep = true;
  return st;
}

}  // namespace trainscope::rundb
