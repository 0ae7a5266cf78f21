// parallel.cpp — rank layout and the launch environment.
#include "trainscope/runtime/parallel.h"

#include <cstdlib>
#include <string>

#include "trainscope/common/error.h"

namespace trainscope::runtime {

Layout Layout::make(int world, int rank, int tp, int pp, int cp) {
  if (tp < 1) throw UserError("--tp", "must be >= 1", "");
  if (pp < 1) throw UserError("--pp", "must be >= 1", "");
  if (cp < 1) throw UserError("--cp", "must be >= 1", "");
  if (world % (tp * pp * cp) != 0)
    throw UserError("--nproc", "world size " + std::to_string(world) + " is not divisible by tp*pp*cp=" +
                                   std::to_string(tp * pp * cp),
                    "use a number of ranks that is a multiple of --tp x --pp x --cp");
  Layout l;
  l.world = world;
  l.rank = rank;
  l.tp = tp;
  l.pp = pp;
  l.cp = cp;
  l.dp = world / (tp * pp * cp);
  l.tp_rank = rank % tp;
  l.cp_rank = (rank / tp) % cp;
  l.dp_rank = (rank / (tp * cp)) % l.dp;
  l.pp_rank = rank / (tp * cp * l.dp);
  return l;
}

std::vector<int> Layout::tpGroup() const {
  std::vector<int> g;
  for (int t = 0; t < tp; ++t) g.push_back(rankOf(dp_rank, t, pp_rank));
  return g;
}
std::vector<int> Layout::dpGroup() const {
  std::vector<int> g;
  for (int d = 0; d < dp; ++d) g.push_back(rankOf(d, tp_rank, pp_rank));
  return g;
}
std::vector<int> Layout::cpGroup() const {
  std::vector<int> g;
  for (int c = 0; c < cp; ++c) g.push_back(rankOf(dp_rank, tp_rank, pp_rank, c));
  return g;
}
std::vector<int> Layout::dpCpGroup() const {
  std::vector<int> g;
  for (int d = 0; d < dp; ++d)
    for (int c = 0; c < cp; ++c) g.push_back(rankOf(d, tp_rank, pp_rank, c));
  return g;
}
std::vector<int> Layout::zeroShardGroup(int shard) const {
  std::vector<int> g;
  const int first = dp_rank / shard * shard;
  for (int d = first; d < first + shard; ++d) g.push_back(rankOf(d, tp_rank, pp_rank));
  return g;
}
std::vector<int> Layout::zeroReplicaGroup(int shard) const {
  std::vector<int> g;
  for (int d = dp_rank % shard; d < dp; d += shard) g.push_back(rankOf(d, tp_rank, pp_rank));
  return g;
}
std::vector<int> Layout::ppGroup() const {
  std::vector<int> g;
  for (int p = 0; p < pp; ++p) g.push_back(rankOf(dp_rank, tp_rank, p));
  return g;
}
std::vector<int> Layout::embeddingGroup() const {
  if (pp == 1) return {rank};
  return {rankOf(dp_rank, tp_rank, 0), rankOf(dp_rank, tp_rank, pp - 1)};
}

namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return (v && *v) ? v : nullptr;
}

int envInt(const char* name, int fallback) {
  const char* v = env(name);
  if (!v) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (!end || *end != '\0') throw UserError(name, std::string("is \"") + v + "\", not an integer", "fix the launcher's environment");
  return static_cast<int>(x);
}

}  // namespace

std::vector<std::string> expandHostlist(const std::string& list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < list.size()) {
    // one entry: prefix[ranges]suffix? up to a comma outside brackets
    size_t j = i;
    int depth = 0;
    while (j < list.size() && !(list[j] == ',' && depth == 0)) {
      if (list[j] == '[') ++depth;
      if (list[j] == ']') --depth;
      ++j;
    }
    std::string item = list.substr(i, j - i);
    i = j + 1;
    size_t lb = item.find('[');
    if (lb == std::string::npos) {
      if (!item.empty()) out.push_back(item);
      continue;
    }
    size_t rb = item.find(']', lb);
    std::string prefix = item.substr(0, lb), ranges = item.substr(lb + 1, rb - lb - 1),
                suffix = rb + 1 < item.size() ? item.substr(rb + 1) : "";
    size_t k = 0;
    while (k <= ranges.size()) {
      size_t comma = ranges.find(',', k);
      if (comma == std::string::npos) comma = ranges.size();
      std::string r = ranges.substr(k, comma - k);
      k = comma + 1;
      size_t dash = r.find('-');
      if (dash == std::string::npos) {
        out.push_back(prefix + r + suffix);
      } else {
        std::string a = r.substr(0, dash), b = r.substr(dash + 1);
        for (long n = std::stol(a); n <= std::stol(b); ++n) {
          std::string num = std::to_string(n);
          while (num.size() < a.size()) num = "0" + num;  // keep zero padding
          out.push_back(prefix + num + suffix);
        }
      }
    }
  }
  return out;
}

RankEnv rankEnvFromEnvironment() {
  RankEnv e;
  if (env("RANK") && env("WORLD_SIZE")) {
    e.distributed = true;
    e.source = "torchrun";
    e.rank = envInt("RANK", 0);
    e.world = envInt("WORLD_SIZE", 1);
    e.local_rank = envInt("LOCAL_RANK", e.rank);
    e.local_world = envInt("LOCAL_WORLD_SIZE", e.world);
    if (const char* a = env("MASTER_ADDR")) e.master_addr = a;
    e.master_port = envInt("MASTER_PORT", 29500);
  } else if (env("SLURM_PROCID") && env("SLURM_NTASKS") && env("SLURM_STEP_ID")) {
    e.distributed = true;
    e.source = "slurm";
    e.rank = envInt("SLURM_PROCID", 0);
    e.world = envInt("SLURM_NTASKS", 1);
    e.local_rank = envInt("SLURM_LOCALID", 0);
    // SLURM_STEP_TASKS_PER_NODE looks like "2" or "2(x3)"; the first number is this node's count.
    if (const char* t = env("SLURM_STEP_TASKS_PER_NODE")) e.local_world = std::atoi(t);
    else e.local_world = envInt("SLURM_NTASKS_PER_NODE", e.world);
    if (const char* nodes = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_JOB_NODELIST")) {
      auto hosts = expandHostlist(nodes);
      if (!hosts.empty()) e.master_addr = hosts.front();
    }
    if (env("MASTER_ADDR")) e.master_addr = env("MASTER_ADDR");
    e.master_port = env("MASTER_PORT") ? envInt("MASTER_PORT", 29500) : 20000 + envInt("SLURM_JOB_ID", 0) % 20000;
  } else {
    e.source = "single";
  }
  if (e.world < 1 || e.rank < 0 || e.rank >= e.world)
    throw UserError("RANK", "rank " + std::to_string(e.rank) + " is outside world size " + std::to_string(e.world),
                    "fix the launcher's environment");
  return e;
}

}  // namespace trainscope::runtime
