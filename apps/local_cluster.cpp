// local_cluster.cpp — `trainscope tune --cluster local`: measure this machine into a cluster file
// (tuner/calibrate.h), once per study. The rates come from `trainscope-train calibrate`; the
// collective α–β from a traced two-rank data-parallel run's collectives table.
#include "local_cluster.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "trainscope/common/error.h"
#include "trainscope/common/files.h"
#include "trainscope/rundb/reader.h"
#include "trainscope/tuner/calibrate.h"

namespace trainscope::apps {

namespace {

// stdout of a command; throws with the command's output when it fails.
std::string capture(const std::string& cmd, const std::string& what) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) throw UserError("--cluster local", "cannot start " + what, "");
  std::string out;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  if (status != 0)
    throw UserError("--cluster local", what + " failed (status " + std::to_string(WEXITSTATUS(status)) + "): " + out,
                    "run it by hand to see why: " + cmd);
  return out;
}

int64_t availableMemory() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  int64_t kb = 0;
  std::string unit;
  while (f >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return int64_t(4) << 30;
}

// An earlier `--cluster local` file: the JSON that tuner::localClusterJson writes (name "local",
// a description that starts "measured on ").
bool isLocalClusterFile(int fd, const std::string&) {
  std::string text;
  char buf[1 << 14];
  for (ssize_t r; (r = ::read(fd, buf, sizeof buf)) != 0 && text.size() < (size_t(1) << 20);) {
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return false;
    text.append(buf, size_t(r));
  }
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return false;
  const auto name = j.find("name"), what = j.find("description");
  return name != j.end() && *name == "local" && what != j.end() && what->is_string() &&
         what->get<std::string>().rfind("measured on ", 0) == 0;
}

}  // namespace

std::string measureLocalCluster(const std::string& study, const std::string& self_dir, int64_t mem_limit,
                                bool reuse) {
  const std::string path = study + ".cluster.json";
  struct stat st {};
  if (reuse && stat(path.c_str(), &st) == 0) {
    std::cout << "cluster: reusing the measurement in " << path << "\n";
    return path;
  }
  // Never the study (nor its -wal/-shm/-journal); an existing file only when it is an earlier
  // measurement (files::OutputRule; tune has no --overwrite). Checked before the 20 s of measuring.
  files::OutputRule rule;
  rule.field = "--cluster local";
  rule.inputs = {study};
  rule.earlier = isLocalClusterFile;
  rule.kind = "`--cluster local` measurement";
  files::checkOutput(path, rule);
  const int64_t ranks = std::max<int64_t>(1, std::min<int64_t>(64, std::thread::hardware_concurrency()));
  std::cout << "cluster: measuring this machine (matmul, memory bandwidth, collectives; about 20 s)..." << std::endl;
  using files::shellQuote;
  const std::string rates = capture(shellQuote(self_dir + "/trainscope-train") + " calibrate", "trainscope-train calibrate");
  const std::string trace = study + ".calibration.db";
  capture(shellQuote(self_dir + "/trainscope") + " run --workload small-cpu --seq 64 --mbs 2 --gbs 8 --nproc 2 --steps 6" +
              " --oversubscribe --trace " + shellQuote(trace) + " --overwrite -q",
          "the two-rank calibration run");
  rundb::RunReader reader(trace);
  // Step 0 pays one-time costs (connections, first touch): its collectives are left out.
  const auto steps = reader.steps(0);
  const int64_t from = steps.size() > 1 ? steps[1].start_ns : 0;
  std::vector<rundb::Collective> rows;
  for (const auto& c : reader.collectives())
    if (c.start_ns >= from) rows.push_back(c);
  const tuner::CollectiveFit fit = tuner::fitCollectives(rows);
  char host[256] = "this machine";
  gethostname(host, sizeof host - 1);
  const int64_t memory = mem_limit > 0 ? mem_limit : availableMemory() / ranks;
  const std::string json = tuner::localClusterJson(rates, fit, ranks, memory, host);
  // Under a random temporary name, then renamed over the path (a link planted at either name is
  // neither followed nor written through).
  files::writeAtomically(path, json + "\n", rule);
  std::printf("cluster: wrote %s (collectives: alpha %.1f us, beta %.2f GB/s over %lld samples, R^2 %.2f); "
              "reuse it with --cluster %s\n",
              path.c_str(), fit.tier.latency * 1e6, fit.tier.bandwidth / 1e9, static_cast<long long>(fit.samples),
              fit.r2, shellQuote(path).c_str());
  return path;
}

}  // namespace trainscope::apps
