// import.cpp — Kineto JSON and Nsight Systems SQLite into the run database (see import.h).
#include "trainscope/tracer/import.h"

#include <zlib.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/tracer/run_store.h"
#include "trainscope/tracer/schema.h"
#include "trainscope/tracer/sqlite.h"

namespace trainscope::tracer {
namespace {

std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError("import", "cannot read " + path, "check the path");
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

std::string gunzip(const std::string& data, const std::string& path) {
  z_stream z{};
  if (inflateInit2(&z, 15 + 32) != Z_OK) throw UserError("import", "zlib init failed for " + path, "");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = static_cast<uInt>(data.size());
  std::string out;
  char buf[1 << 16];
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
  inflateEnd(&z);
  return out;
}

// Interns strings into the run database (ids shared by every imported file).
class Strings {
 public:
  explicit Strings(Database& db) : ins_(db, "INSERT INTO strings(id, value) VALUES (?, ?)") {
    Statement s(db, "SELECT id, value FROM strings");
    while (s.step()) ids_[s.columnText(1)] = s.columnInt(0), next_ = std::max(next_, s.columnInt(0) + 1);
  }
  int64_t operator()(const std::string& v) {
    auto it = ids_.find(v);
    if (it != ids_.end()) return it->second;
    ins_.bind(1, next_);
    ins_.bind(2, v);
    ins_.run();
    ids_[v] = next_;
    return next_++;
  }

 private:
  Statement ins_;
  std::map<std::string, int64_t> ids_;
  int64_t next_ = 0;
};

struct Sink {
  Database& db;
  Strings str{db};
  Statement op{db, "INSERT INTO host_ops VALUES (?,?,?,?,?,?,?)"};
  Statement range{db, "INSERT INTO ranges VALUES (?,?,?,?,?,?,?,?)"};
  Statement kernel{db, "INSERT INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,NULL)"};
  Statement api{db, "INSERT INTO api_calls VALUES (?,?,?,?,?,?,?)"};
  Statement memcpy{db, "INSERT INTO memcpy VALUES (?,?,?,?,?,?,?,?)"};
  Statement memset{db, "INSERT INTO memset VALUES (?,?,?,?,?,?,?,?)"};
  Statement step{db, "INSERT OR REPLACE INTO steps(rank, step, skipped, tokens, start_ns, step_time_ns) VALUES (?,?,0,0,?,?)"};
  Statement rank{db, "INSERT OR REPLACE INTO ranks(rank, host, pid, device, clock_offset_ns) VALUES (?,?,?,?,0)"};
  ImportStats st;
};

int memcpyKind(const std::string& name) {
  static const std::pair<const char*, MemcpyKind> kinds[] = {{"HtoD", MemcpyKind::HtoD}, {"DtoH", MemcpyKind::DtoH},
                                                             {"DtoD", MemcpyKind::DtoD}, {"HtoH", MemcpyKind::HtoH},
                                                             {"PtoP", MemcpyKind::PtoP}};
  for (const auto& [k, v] : kinds)
    if (name.find(k) != std::string::npos) return int(v);
  return int(MemcpyKind::Unknown);
}

int64_t stepNumber(const std::string& name) {
  static const std::regex re(R"(^ProfilerStep#(\d+)$)");
  std::smatch m;
  if (std::regex_match(name, m, re)) return std::stoll(m[1]);
  return -1;
}

void importKineto(Sink& s, const std::string& text, const std::string& path, int default_rank) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError("import", path + " is not valid JSON: " + e.what(), "pass a PyTorch profiler trace (.json or .json.gz)");
  }
  if (!j.is_object() || !j.contains("traceEvents") || !j["traceEvents"].is_array())
    throw UserError("import", path + " has no traceEvents array", "pass a PyTorch profiler (Kineto) trace");
  int64_t rank = default_rank;
  if (j.contains("distributedInfo") && j["distributedInfo"].is_object() && j["distributedInfo"].contains("rank"))
    rank = j["distributedInfo"]["rank"].get<int64_t>();
  const int64_t base = j.value("baseTimeNanoseconds", int64_t(0));
  auto ns = [&](const nlohmann::json& us) { return base + int64_t(std::llround(us.get<double>() * 1000.0)); };
  const int64_t domain = s.str("kineto");
  int64_t steps_seen = 0, t_min = INT64_MAX, t_max = INT64_MIN;
  for (const auto& e : j["traceEvents"]) {
    if (!e.is_object() || e.value("ph", "") != "X" || !e.contains("ts") || !e.contains("dur")) continue;
    const std::string cat = e.value("cat", ""), name = e.value("name", "");
    const int64_t b = ns(e["ts"]), en = b + int64_t(std::llround(e["dur"].get<double>() * 1000.0));
    t_min = std::min(t_min, b), t_max = std::max(t_max, en);
    const nlohmann::json args = e.value("args", nlohmann::json::object());
    const int64_t tid = e.contains("tid") && e["tid"].is_number() ? e["tid"].get<int64_t>() : 0;
    const int64_t corr = args.value("correlation", int64_t(-1));
    if (cat == "cpu_op") {
      s.op.bind(1, rank), s.op.bind(2, tid), s.op.bind(3, b), s.op.bind(4, en), s.op.bind(5, s.str(name));
      s.op.bind(6, args.value("Sequence number", int64_t(-1)));
      if (args.contains("Input Dims")) s.op.bind(7, s.str(args["Input Dims"].dump()));
      else s.op.bindNull(7);
      s.op.run();
      ++s.st.host_ops;
    } else if (cat == "user_annotation" || cat == "gpu_user_annotation") {
      const int64_t k = stepNumber(name);
      if (k >= 0 && cat == "user_annotation") {
        s.step.bind(1, rank), s.step.bind(2, k), s.step.bind(3, b), s.step.bind(4, en - b);
        s.step.run();
        ++steps_seen;
      }
      s.range.bind(1, rank), s.range.bind(2, tid), s.range.bind(3, b), s.range.bind(4, en), s.range.bind(5, s.str(name));
      s.range.bind(6, domain), s.range.bind(7, int64_t(0)), s.range.bind(8, int64_t(RangeKind::StartEnd));
      s.range.run();
      ++s.st.ranges;
    } else if (cat == "kernel") {
      auto dim = [&](const char* key, int i) {
        return args.contains(key) && args[key].is_array() && int(args[key].size()) > i ? args[key][i].get<int64_t>()
                                                                                        : int64_t(0);
      };
      s.kernel.bind(1, rank), s.kernel.bind(2, args.value("device", int64_t(0)));
      s.kernel.bind(3, args.value("stream", tid)), s.kernel.bind(4, b), s.kernel.bind(5, en), s.kernel.bind(6, corr);
      s.kernel.bind(7, s.str(name));
      for (int i = 0; i < 3; ++i) s.kernel.bind(8 + i, dim("grid", i)), s.kernel.bind(11 + i, dim("block", i));
      s.kernel.bind(14, args.value("registers per thread", int64_t(0)));
      s.kernel.bind(15, args.value("shared memory", int64_t(0)));
      s.kernel.run();
      ++s.st.kernels;
    } else if (cat == "cuda_runtime" || cat == "cuda_driver") {
      s.api.bind(1, rank), s.api.bind(2, tid), s.api.bind(3, b), s.api.bind(4, en), s.api.bind(5, corr);
      s.api.bind(6, s.str(name)), s.api.bind(7, int64_t(cat == "cuda_driver" ? ApiKind::Driver : ApiKind::Runtime));
      s.api.run();
      ++s.st.api_calls;
    } else if (cat == "gpu_memcpy") {
      s.memcpy.bind(1, rank), s.memcpy.bind(2, args.value("device", int64_t(0))), s.memcpy.bind(3, args.value("stream", tid));
      s.memcpy.bind(4, b), s.memcpy.bind(5, en), s.memcpy.bind(6, corr), s.memcpy.bind(7, int64_t(memcpyKind(name)));
      s.memcpy.bind(8, args.value("bytes", int64_t(0)));
      s.memcpy.run();
      ++s.st.memcpy;
    } else if (cat == "gpu_memset") {
      s.memset.bind(1, rank), s.memset.bind(2, args.value("device", int64_t(0))), s.memset.bind(3, args.value("stream", tid));
      s.memset.bind(4, b), s.memset.bind(5, en), s.memset.bind(6, corr), s.memset.bind(7, args.value("bytes", int64_t(0)));
      s.memset.bind(8, int64_t(0));
      s.memset.run();
      ++s.st.memset;
    }
  }
  if (steps_seen == 0 && t_min < t_max) {  // no ProfilerStep: the whole trace is one step
    s.step.bind(1, rank), s.step.bind(2, int64_t(0)), s.step.bind(3, t_min), s.step.bind(4, t_max - t_min);
    s.step.run();
    steps_seen = 1;
  }
  s.st.steps += steps_seen;
  s.rank.bind(1, rank), s.rank.bind(2, std::string()), s.rank.bind(3, int64_t(0)), s.rank.bind(4, std::string("kineto"));
  s.rank.run();
}

void importNsys(Sink& s, const std::string& path, int rank) {
  Database in(path, Database::Mode::ReadOnly);
  if (!in.tableExists("StringIds"))
    throw UserError("import", path + " is SQLite but not an Nsight Systems export (no StringIds table)",
                    "export with `nsys export --type sqlite`");
  std::map<int64_t, std::string> strings;
  {
    Statement q(in, "SELECT id, value FROM StringIds");
    while (q.step()) strings[q.columnInt(0)] = q.columnText(1);
  }
  auto name = [&](int64_t id) { return s.str(strings.count(id) ? strings[id] : "<unknown>"); };
  const int64_t domain = s.str("nsys");
  int64_t steps_seen = 0, t_min = INT64_MAX, t_max = INT64_MIN;
  if (in.tableExists("CUPTI_ACTIVITY_KIND_KERNEL")) {
    Statement q(in, "SELECT start, end, deviceId, streamId, correlationId, COALESCE(demangledName, shortName), gridX, "
                    "gridY, gridZ, blockX, blockY, blockZ, registersPerThread, "
                    "COALESCE(staticSharedMemory, 0) + COALESCE(dynamicSharedMemory, 0) FROM CUPTI_ACTIVITY_KIND_KERNEL");
    while (q.step()) {
      s.kernel.bind(1, int64_t(rank)), s.kernel.bind(2, q.columnInt(2)), s.kernel.bind(3, q.columnInt(3));
      s.kernel.bind(4, q.columnInt(0)), s.kernel.bind(5, q.columnInt(1)), s.kernel.bind(6, q.columnInt(4));
      s.kernel.bind(7, name(q.columnInt(5)));
      for (int i = 0; i < 6; ++i) s.kernel.bind(8 + i, q.columnInt(6 + i));
      s.kernel.bind(14, q.columnInt(12)), s.kernel.bind(15, q.columnInt(13));
      s.kernel.run();
      t_min = std::min(t_min, q.columnInt(0)), t_max = std::max(t_max, q.columnInt(1));
      ++s.st.kernels;
    }
  }
  if (in.tableExists("CUPTI_ACTIVITY_KIND_RUNTIME")) {
    Statement q(in, "SELECT start, end, globalTid, correlationId, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME");
    while (q.step()) {
      s.api.bind(1, int64_t(rank)), s.api.bind(2, q.columnInt(2) & 0xFFFFFF), s.api.bind(3, q.columnInt(0));
      s.api.bind(4, q.columnInt(1)), s.api.bind(5, q.columnInt(3)), s.api.bind(6, name(q.columnInt(4)));
      s.api.bind(7, int64_t(ApiKind::Runtime));
      s.api.run();
      ++s.st.api_calls;
    }
  }
  if (in.tableExists("CUPTI_ACTIVITY_KIND_MEMCPY")) {
    Statement q(in, "SELECT start, end, deviceId, streamId, correlationId, copyKind, bytes FROM CUPTI_ACTIVITY_KIND_MEMCPY");
    while (q.step()) {
      s.memcpy.bind(1, int64_t(rank)), s.memcpy.bind(2, q.columnInt(2)), s.memcpy.bind(3, q.columnInt(3));
      s.memcpy.bind(4, q.columnInt(0)), s.memcpy.bind(5, q.columnInt(1)), s.memcpy.bind(6, q.columnInt(4));
      s.memcpy.bind(7, q.columnInt(5)), s.memcpy.bind(8, q.columnInt(6));
      s.memcpy.run();
      ++s.st.memcpy;
    }
  }
  if (in.tableExists("CUPTI_ACTIVITY_KIND_MEMSET")) {
    Statement q(in, "SELECT start, end, deviceId, streamId, correlationId, bytes, value FROM CUPTI_ACTIVITY_KIND_MEMSET");
    while (q.step()) {
      s.memset.bind(1, int64_t(rank)), s.memset.bind(2, q.columnInt(2)), s.memset.bind(3, q.columnInt(3));
      s.memset.bind(4, q.columnInt(0)), s.memset.bind(5, q.columnInt(1)), s.memset.bind(6, q.columnInt(4));
      s.memset.bind(7, q.columnInt(5)), s.memset.bind(8, q.columnInt(6));
      s.memset.run();
      ++s.st.memset;
    }
  }
  if (in.tableExists("NVTX_EVENTS")) {
    // eventType 59: push/pop range, 60: start/end range (Nsight Systems' NvtxEventType).
    Statement q(in, "SELECT start, end, globalTid, COALESCE(text, (SELECT value FROM StringIds WHERE id = textId)), "
                    "eventType FROM NVTX_EVENTS WHERE end IS NOT NULL AND eventType IN (59, 60)");
    int64_t k = 0;
    while (q.step()) {
      const std::string label = q.columnText(3);
      int64_t n = stepNumber(label);
      if (label == "step") n = k++;
      if (n >= 0) {
        s.step.bind(1, int64_t(rank)), s.step.bind(2, n), s.step.bind(3, q.columnInt(0));
        s.step.bind(4, q.columnInt(1) - q.columnInt(0));
        s.step.run();
        ++steps_seen;
      }
      s.range.bind(1, int64_t(rank)), s.range.bind(2, q.columnInt(2) & 0xFFFFFF), s.range.bind(3, q.columnInt(0));
      s.range.bind(4, q.columnInt(1)), s.range.bind(5, s.str(label)), s.range.bind(6, domain), s.range.bind(7, int64_t(0));
      s.range.bind(8, int64_t(q.columnInt(4) == 59 ? RangeKind::PushPop : RangeKind::StartEnd));
      s.range.run();
      ++s.st.ranges;
    }
  }
  if (steps_seen == 0 && t_min < t_max) {
    s.step.bind(1, int64_t(rank)), s.step.bind(2, int64_t(0)), s.step.bind(3, t_min), s.step.bind(4, t_max - t_min);
    s.step.run();
    steps_seen = 1;
  }
  s.st.steps += steps_seen;
  s.rank.bind(1, int64_t(rank)), s.rank.bind(2, std::string()), s.rank.bind(3, int64_t(0)), s.rank.bind(4, std::string("nsys"));
  s.rank.run();
}

}  // namespace

ImportStats importTraces(const std::vector<std::string>& inputs, const std::string& out_db, bool overwrite) {
  if (inputs.empty()) throw UserError("import", "no input files", "pass one trace per rank");
  for (const auto& p : inputs)
    if (!std::filesystem::exists(p)) throw UserError("import", p + " does not exist", "check the path");
  if (std::filesystem::exists(out_db) && !overwrite)
    throw UserError("-o", out_db + " already exists", "choose another path or pass --overwrite");
  // Built under a temporary name and renamed at the end: a failed import leaves nothing behind.
  const std::string partial = out_db + ".partial";
  struct Cleanup {
    std::string path;
    bool keep = false;
    ~Cleanup() {
      if (!keep)
        for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path + suffix);
    }
  } cleanup{partial};
  ImportStats stats;
  {
  RunStore store(partial, true);  // schema, meta.schema_version
  store.setMeta("world_size", std::to_string(inputs.size()));
  store.setMeta("source", "import");
  Database db(partial, Database::Mode::ReadWrite);
  Transaction tx(db);
  Sink s{db};
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& p = inputs[i];
    const std::string head = readAll(p).substr(0, 16);
    if (head.rfind("SQLite format 3", 0) == 0) {
      importNsys(s, p, int(i));
    } else {
      std::string text = readAll(p);
      if (text.size() >= 2 && uint8_t(text[0]) == 0x1f && uint8_t(text[1]) == 0x8b) text = gunzip(text, p);
      try {
        importKineto(s, text, p, int(i));
      } catch (const nlohmann::json::exception& e) {  // a field of the wrong type
        throw UserError("import", p + " has an unexpected value: " + e.what(), "pass a PyTorch profiler (Kineto) trace");
      }
    }
    ++s.st.files;
  }
  tx.commit();
  createIndexes(db);
  stats = s.st;
  }
  for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(out_db + suffix);
  std::filesystem::rename(partial, out_db);
  cleanup.keep = true;
  return stats;
}

}  // namespace trainscope::tracer
